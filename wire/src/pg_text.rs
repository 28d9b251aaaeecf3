//! The one rule for text Postgres can't store.
//!
//! Postgres `text` and `jsonb` cannot hold U+0000: a string carrying it makes
//! the whole statement fail (`unsupported Unicode escape sequence`, or
//! `invalid byte sequence` for text). Where the text comes from decides what
//! happens to it:
//! - from a tenant (an API request body): refused, naming the field
//!   ([`find_nul`]), so nothing is half-written and the client can fix it;
//! - from a model, a tool server or a machine: made storable ([`make_storable`],
//!   U+0000 becomes U+FFFD) before it is saved, never a failure — refusing
//!   would lose a result that is already in hand (and paid for).

use std::borrow::Cow;

use serde_json::Value;

/// What U+0000 becomes in text that must be saved: the Unicode replacement
/// character, which says "a character was here that could not be kept".
pub const REPLACEMENT: char = '\u{FFFD}';

/// The path of the first string or object key in `value` that holds U+0000,
/// as `field.sub[2].name` (`(root)` for a bare string); `None` when the value
/// is storable. Object keys are checked too: Postgres rejects them alike.
pub fn find_nul(value: &Value) -> Option<String> {
    let mut path = String::new();
    find_nul_at(value, &mut path).then(|| {
        if path.is_empty() {
            "(root)".to_owned()
        } else {
            path
        }
    })
}

fn find_nul_at(value: &Value, path: &mut String) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = find_nul_at(item, path);
            if !found {
                path.truncate(len);
            }
            found
        }),
        Value::Object(map) => map.iter().any(|(key, item)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key.replace('\0', "\\u0000"));
            let found = key.contains('\0') || find_nul_at(item, path);
            if !found {
                path.truncate(len);
            }
            found
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `s` with every U+0000 replaced by [`REPLACEMENT`]; borrowed when there is
/// none (the common case costs one scan and no allocation).
pub fn storable_str(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', &REPLACEMENT.to_string()))
    } else {
        Cow::Borrowed(s)
    }
}

/// Replace U+0000 in place in every string and object key of `value`.
pub fn make_storable(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(fixed) = storable_str(s) {
                *s = fixed;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(make_storable),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let entries = std::mem::take(map);
                for (key, item) in entries {
                    map.insert(storable_str(&key).into_owned(), item);
                }
            }
            map.values_mut().for_each(make_storable);
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn find_nul_names_the_field_path() {
        assert_eq!(find_nul(&json!({"a": "ok", "b": [1, "x"]})), None);
        assert_eq!(
            find_nul(&json!({"metadata": {"note": "a\u{0}b"}})).as_deref(),
            Some("metadata.note")
        );
        assert_eq!(
            find_nul(&json!({"tools": [{"type": "custom"}, {"name": "\u{0}"}]})).as_deref(),
            Some("tools[1].name")
        );
        assert_eq!(find_nul(&json!("\u{0}")).as_deref(), Some("(root)"));
        assert_eq!(
            find_nul(&json!({"meta": {"k\u{0}": 1}})).as_deref(),
            Some("meta.k\\u0000")
        );
    }

    #[test]
    fn make_storable_replaces_every_nul_in_strings_and_keys() {
        let mut value = json!({"text": "a\u{0}b", "list": ["\u{0}"], "k\u{0}": {"n": 1}});
        make_storable(&mut value);
        assert_eq!(find_nul(&value), None);
        assert_eq!(value["text"], "a\u{FFFD}b");
        assert_eq!(value["list"][0], "\u{FFFD}");
        assert_eq!(value["k\u{FFFD}"]["n"], 1);
    }

    #[test]
    fn storable_str_borrows_clean_text() {
        assert!(matches!(storable_str("clean"), Cow::Borrowed("clean")));
        assert_eq!(storable_str("x\u{0}"), "x\u{FFFD}");
    }
}
