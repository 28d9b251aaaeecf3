//! Validation of a tool call's input against the tool's declared JSON Schema.
//!
//! Models send malformed input now and then; the answer is a tool error
//! result that names what is wrong and where, so the model can fix its call
//! on the next turn. A broken schema in an agent's config is reported the
//! same way (never a panic: config comes from users). Remote `$ref`s are not
//! fetched (the crate's resolver features are off): a tool schema must be
//! self-contained.

use std::num::NonZeroUsize;
use std::sync::{Arc, LazyLock, Mutex};

use jsonschema::Validator;
use lru::LruCache;
use serde_json::Value;

/// At most this many problems are listed; one is usually enough to fix a call.
const MAX_REPORTED_ERRORS: usize = 5;
/// Each problem's text is cut to this many characters (it may quote the input).
const MAX_ERROR_CHARS: usize = 300;
/// Compiled validators kept, least recently used out first. Compiling a
/// schema (and checking it against the meta-schema) cost about as much
/// worker CPU as building the step's model request; an agent's tools are
/// the same schemas step after step.
const CACHED_VALIDATORS: NonZeroUsize = NonZeroUsize::new(128).unwrap();
/// Only schemas up to this size (as JSON text) are kept, so that what the
/// cache holds stays small whatever tenants declare (a tool schema is
/// usually well under 2 KiB); a larger one is compiled at each call.
const MAX_CACHED_SCHEMA_BYTES: usize = 8 * 1024;

/// The compiled validators, by the schema's JSON text.
static VALIDATORS: LazyLock<Mutex<LruCache<String, Arc<Validator>>>> =
    LazyLock::new(|| Mutex::new(LruCache::new(CACHED_VALIDATORS)));

/// Checks `input` against `schema`. `Err` is a message for the model, e.g.
/// `invalid input: at /items/0/count: "3" is not of type "integer"`;
/// the path is a JSON Pointer into the input (`(root)` for the input itself).
pub fn validate_input(schema: &Value, input: &Value) -> Result<(), String> {
    let validator = validator(schema)?;
    let problems: Vec<String> = validator
        .iter_errors(input)
        .take(MAX_REPORTED_ERRORS + 1)
        .map(|error| {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() { "(root)" } else { &path };
            format!("at {at}: {}", shorten(&error.to_string()))
        })
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    let more = if problems.len() > MAX_REPORTED_ERRORS {
        "; and more"
    } else {
        ""
    };
    let listed = problems
        .into_iter()
        .take(MAX_REPORTED_ERRORS)
        .collect::<Vec<_>>()
        .join("; ");
    Err(format!(
        "invalid input: {listed}{more}. Fix the input to match the tool's input_schema and call it again."
    ))
}

/// The compiled validator of `schema`, from the cache or compiled (and
/// kept when small enough). A schema that does not compile is not kept:
/// its error is rare and cheap to find again.
fn validator(schema: &Value) -> Result<Arc<Validator>, String> {
    let key = schema.to_string();
    if let Some(validator) = cached_validators().get(&key) {
        return Ok(validator.clone());
    }
    let validator = Arc::new(
        jsonschema::validator_for(schema)
            .map_err(|e| format!("the tool's input_schema is not a valid JSON Schema: {e}"))?,
    );
    if key.len() <= MAX_CACHED_SCHEMA_BYTES {
        cached_validators().put(key, validator.clone());
    }
    Ok(validator)
}

/// The cache, even if a thread panicked while holding it: its entries are
/// whole (an insert or a lookup cannot leave one half-written).
fn cached_validators() -> std::sync::MutexGuard<'static, LruCache<String, Arc<Validator>>> {
    VALIDATORS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn shorten(text: &str) -> String {
    if text.chars().count() <= MAX_ERROR_CHARS {
        return text.to_string();
    }
    let cut: String = text.chars().take(MAX_ERROR_CHARS).collect();
    format!("{cut}…")
}
