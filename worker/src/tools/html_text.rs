//! HTML to readable text for a model: a small, forgiving single-pass
//! extractor (no DOM), chosen over an HTML5 parser crate because a model
//! needs the words and the shape of the page, not a spec-exact tree.
//!
//! What it keeps: text, paragraph and line breaks, headings (`# `), list
//! items (`- `, `1. `), table cells (` | `), `<pre>` blocks (fenced, spacing
//! kept) and links as `[text](url)` (relative links resolved against the
//! page URL). What it drops: `script`, `style` and other raw-text elements,
//! comments, and page chrome that is rarely content (`nav`, `aside`,
//! `footer`, `button`, `select`, `svg`, `iframe`, elements marked `hidden` or
//! `aria-hidden="true"`). Character references are decoded.
//!
//! Malformed markup never fails: an unterminated tag or comment ends the
//! text, stray `<` are text, and `</body>` closes any dropped element left
//! open.

use reqwest::Url;

/// Elements whose content is raw text up to the matching end tag; never shown.
const RAW_TEXT_DROPPED: &[&str] = &[
    "script", "style", "noscript", "template", "iframe", "noembed", "noframes", "xmp",
];
/// Elements whose whole subtree is page chrome or not text.
const SUBTREE_DROPPED: &[&str] = &[
    "nav", "aside", "footer", "button", "select", "svg", "canvas", "object", "dialog",
];
/// Elements with no end tag.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];
/// Elements that start and end a paragraph (a blank line around them).
const PARAGRAPH: &[&str] = &[
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "dl",
    "table",
    "blockquote",
    "figure",
    "pre",
    "hr",
    "address",
    "details",
];
/// Elements that start and end a line.
const LINE: &[&str] = &[
    "div",
    "section",
    "article",
    "main",
    "header",
    "li",
    "tr",
    "dt",
    "dd",
    "figcaption",
    "summary",
    "caption",
    "form",
    "fieldset",
    "legend",
    "label",
    "textarea",
    "option",
];

/// The readable text of `html`; `base` resolves relative links.
pub(crate) fn html_to_text(html: &str, base: Option<&Url>) -> String {
    let mut writer = TextWriter::new(base);
    let bytes = html.as_bytes();
    let mut pos = 0;
    while pos < bytes.len() {
        if bytes[pos] != b'<' {
            let end = memchr_lt(bytes, pos);
            writer.text(&html[pos..end]);
            pos = end;
            continue;
        }
        let next = bytes.get(pos + 1).copied();
        match next {
            Some(b'!') if html[pos..].starts_with("<!--") => {
                pos = match html[pos + 4..].find("-->") {
                    Some(i) => pos + 4 + i + 3,
                    None => bytes.len(),
                };
            }
            Some(b'!') | Some(b'?') => {
                pos = skip_past_gt(bytes, pos);
            }
            Some(b'/') if bytes.get(pos + 2).is_some_and(u8::is_ascii_alphabetic) => {
                let (name, after_name) = tag_name(html, pos + 2);
                pos = skip_past_gt(bytes, after_name);
                writer.end_tag(&name);
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let Some(tag) = parse_start_tag(html, pos + 1) else {
                    break; // unterminated tag at the end of the input
                };
                pos = tag.end;
                if RAW_TEXT_DROPPED.contains(&tag.name.as_str()) {
                    pos = skip_raw_text(html, pos, &tag.name);
                } else if tag.name == "title" {
                    let end = find_end_tag(html, pos, "title");
                    writer.title(&html[pos..end]);
                    pos = skip_past_gt(bytes, end);
                } else {
                    writer.start_tag(&tag);
                }
            }
            _ => {
                // A '<' that starts no markup is text.
                writer.text("<");
                pos += 1;
            }
        }
    }
    writer.finish()
}

struct StartTag {
    name: String,
    attributes: Vec<(String, String)>,
    self_closing: bool,
    /// Byte offset just past the closing '>'.
    end: usize,
}

impl StartTag {
    fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn memchr_lt(bytes: &[u8], from: usize) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| b == b'<')
        .map_or(bytes.len(), |i| from + i)
}

fn skip_past_gt(bytes: &[u8], from: usize) -> usize {
    bytes[from.min(bytes.len())..]
        .iter()
        .position(|&b| b == b'>')
        .map_or(bytes.len(), |i| from + i + 1)
}

/// A lowercased tag name starting at `from`, and the offset after it.
fn tag_name(html: &str, from: usize) -> (String, usize) {
    let bytes = html.as_bytes();
    let mut end = from;
    while end < bytes.len() && !matches!(bytes[end], b'>' | b'/') && !is_space(bytes[end]) {
        end += 1;
    }
    (html[from..end].to_ascii_lowercase(), end)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// Parses a start tag whose name begins at `from`; `None` if the input ends
/// inside it.
fn parse_start_tag(html: &str, from: usize) -> Option<StartTag> {
    let bytes = html.as_bytes();
    let (name, mut pos) = tag_name(html, from);
    let mut attributes = Vec::new();
    let mut self_closing = false;
    loop {
        while pos < bytes.len() && is_space(bytes[pos]) {
            pos += 1;
        }
        match bytes.get(pos)? {
            b'>' => break,
            b'/' => {
                pos += 1;
                self_closing = bytes.get(pos) == Some(&b'>');
                continue;
            }
            _ => {}
        }
        let name_start = pos;
        // An attribute name: at least one character (a stray '=' included).
        pos += 1;
        while pos < bytes.len()
            && !is_space(bytes[pos])
            && !matches!(bytes[pos], b'=' | b'>' | b'/')
        {
            pos += 1;
        }
        let attr_name = html[name_start..pos].to_ascii_lowercase();
        while pos < bytes.len() && is_space(bytes[pos]) {
            pos += 1;
        }
        let mut value = String::new();
        if bytes.get(pos) == Some(&b'=') {
            pos += 1;
            while pos < bytes.len() && is_space(bytes[pos]) {
                pos += 1;
            }
            match bytes.get(pos)? {
                &quote @ (b'"' | b'\'') => {
                    let start = pos + 1;
                    let end = bytes[start..].iter().position(|&b| b == quote)? + start;
                    value = decode_entities(&html[start..end]);
                    pos = end + 1;
                }
                _ => {
                    let start = pos;
                    while pos < bytes.len() && !is_space(bytes[pos]) && bytes[pos] != b'>' {
                        pos += 1;
                    }
                    value = decode_entities(&html[start..pos]);
                }
            }
        }
        attributes.push((attr_name, value));
    }
    Some(StartTag {
        name,
        attributes,
        self_closing,
        end: pos + 1,
    })
}

/// The offset of `</name` (case-insensitive) at or after `from`, or the end.
fn find_end_tag(html: &str, from: usize, name: &str) -> usize {
    let bytes = html.as_bytes();
    let needle_len = name.len() + 2;
    let mut pos = from;
    while pos + needle_len <= bytes.len() {
        if bytes[pos] == b'<'
            && bytes[pos + 1] == b'/'
            && bytes[pos + 2..pos + needle_len].eq_ignore_ascii_case(name.as_bytes())
            && bytes
                .get(pos + needle_len)
                .is_none_or(|&b| is_space(b) || b == b'>' || b == b'/')
        {
            return pos;
        }
        pos += 1;
    }
    bytes.len()
}

fn skip_raw_text(html: &str, from: usize, name: &str) -> usize {
    let end = find_end_tag(html, from, name);
    skip_past_gt(html.as_bytes(), end)
}

/// Builds the output: collapses whitespace, places line and paragraph
/// breaks, and writes the markers (heading, list, cell, link).
struct TextWriter<'a> {
    base: Option<&'a Url>,
    out: String,
    title: Option<String>,
    /// Names of open elements whose subtree is dropped (innermost last).
    dropped: Vec<String>,
    /// Breaks owed before the next text: 1 = new line, 2 = blank line.
    pending_break: u8,
    pending_space: bool,
    /// Written before the next text on a fresh line (`# `, `- `, `1. `).
    line_prefix: String,
    /// Written before the next text on the same line (` | ` between cells).
    inline_prefix: &'static str,
    /// Open lists: `None` for `ul`, the next number for `ol`.
    lists: Vec<Option<u32>>,
    cells_in_row: u32,
    pre_depth: u32,
    /// The href of the open link, and whether its text has begun.
    link: Option<(String, bool)>,
}

impl<'a> TextWriter<'a> {
    fn new(base: Option<&'a Url>) -> Self {
        TextWriter {
            base,
            out: String::new(),
            title: None,
            dropped: Vec::new(),
            pending_break: 0,
            pending_space: false,
            line_prefix: String::new(),
            inline_prefix: "",
            lists: Vec::new(),
            cells_in_row: 0,
            pre_depth: 0,
            link: None,
        }
    }

    fn title(&mut self, raw: &str) {
        let title = collapse_whitespace(&decode_entities(raw));
        if self.title.is_none() && !title.is_empty() {
            self.title = Some(title);
        }
    }

    fn start_tag(&mut self, tag: &StartTag) {
        let name = tag.name.as_str();
        let is_void = VOID.contains(&name);
        if !self.dropped.is_empty() {
            if !is_void && !tag.self_closing && SUBTREE_DROPPED.contains(&name) {
                self.dropped.push(tag.name.clone());
            }
            return;
        }
        let hidden = tag.attribute("hidden").is_some()
            || tag
                .attribute("aria-hidden")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if SUBTREE_DROPPED.contains(&name) || (hidden && !is_void) {
            if !is_void && !tag.self_closing {
                self.dropped.push(tag.name.clone());
            }
            return;
        }
        match name {
            "br" => self.force_newline(),
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                self.block_break(2);
                let level = usize::from(name.as_bytes()[1] - b'0');
                self.line_prefix = format!("{} ", "#".repeat(level));
            }
            "ul" => {
                self.block_break(if self.lists.is_empty() { 2 } else { 1 });
                self.lists.push(None);
            }
            "ol" => {
                self.block_break(if self.lists.is_empty() { 2 } else { 1 });
                let start = tag
                    .attribute("start")
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(1);
                self.lists.push(Some(start));
            }
            "li" => {
                self.block_break(1);
                let indent = "  ".repeat(self.lists.len().saturating_sub(1));
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{}. ", *n - 1)
                    }
                    _ => "- ".to_string(),
                };
                self.line_prefix = format!("{indent}{marker}");
            }
            "tr" => {
                self.block_break(1);
                self.cells_in_row = 0;
            }
            "td" | "th" => {
                if self.cells_in_row > 0 {
                    self.inline_prefix = " | ";
                }
                self.cells_in_row += 1;
            }
            "pre" => {
                self.block_break(2);
                self.flush_breaks();
                self.out.push_str("```\n");
                self.pre_depth += 1;
            }
            "a" => {
                self.close_link();
                self.link = tag
                    .attribute("href")
                    .and_then(|href| self.resolve(href))
                    .map(|url| (url, false));
            }
            "img" => {
                // Alt text stands in for an image that is the only content of a link.
                let link_without_text = matches!(self.link, Some((_, false)));
                if let Some(alt) = tag.attribute("alt").filter(|_| link_without_text) {
                    self.text(alt);
                }
            }
            _ if PARAGRAPH.contains(&name) => self.block_break(2),
            _ if LINE.contains(&name) => self.block_break(1),
            _ => {}
        }
    }

    fn end_tag(&mut self, name: &str) {
        if !self.dropped.is_empty() {
            if let Some(i) = self.dropped.iter().rposition(|n| n == name) {
                self.dropped.truncate(i);
            } else if name == "body" || name == "html" {
                self.dropped.clear();
            }
            return;
        }
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                self.line_prefix.clear();
                self.block_break(2);
            }
            "ul" | "ol" => {
                self.lists.pop();
                self.line_prefix.clear();
                self.block_break(if self.lists.is_empty() { 2 } else { 1 });
            }
            "li" => {
                self.line_prefix.clear();
                self.block_break(1);
            }
            "pre" => {
                self.pre_depth = self.pre_depth.saturating_sub(1);
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                self.out.push_str("```");
                self.pending_space = false;
                self.block_break(2);
            }
            "a" => self.close_link(),
            _ if PARAGRAPH.contains(&name) => self.block_break(2),
            _ if LINE.contains(&name) => self.block_break(1),
            _ => {}
        }
    }

    fn resolve(&self, href: &str) -> Option<String> {
        let href = href.trim();
        if href.is_empty() || href.starts_with('#') {
            return None;
        }
        let url = match self.base {
            Some(base) => base.join(href).ok()?,
            None => Url::parse(href).ok()?,
        };
        matches!(url.scheme(), "http" | "https").then(|| url.to_string())
    }

    fn close_link(&mut self) {
        if let Some((url, true)) = self.link.take() {
            self.out.push_str("](");
            self.out.push_str(&url);
            self.out.push(')');
        }
    }

    fn block_break(&mut self, lines: u8) {
        if self.pre_depth > 0 {
            return;
        }
        self.pending_break = self.pending_break.max(lines);
        self.inline_prefix = "";
    }

    fn force_newline(&mut self) {
        if self.pre_depth > 0 {
            self.out.push('\n');
            return;
        }
        self.flush_breaks();
        trim_trailing_spaces(&mut self.out);
        self.out.push('\n');
        self.pending_space = false;
    }

    fn flush_breaks(&mut self) {
        if self.pending_break == 0 {
            return;
        }
        trim_trailing_spaces(&mut self.out);
        if !self.out.is_empty() {
            let have = self.out.chars().rev().take_while(|&c| c == '\n').count();
            for _ in have..usize::from(self.pending_break) {
                self.out.push('\n');
            }
        }
        self.pending_break = 0;
        self.pending_space = false;
    }

    fn text(&mut self, raw: &str) {
        if !self.dropped.is_empty() {
            return;
        }
        let text = decode_entities(raw);
        if self.pre_depth > 0 {
            // As in browsers, a newline right after `<pre>` is not content.
            let text = match self.out.ends_with("```\n") {
                true => text.strip_prefix('\n').unwrap_or(&text),
                false => &text,
            };
            self.out.push_str(text);
            return;
        }
        for c in text.chars() {
            if c.is_whitespace() {
                self.pending_space = true;
                continue;
            }
            let fresh_line =
                self.pending_break > 0 || self.out.is_empty() || self.out.ends_with('\n');
            self.flush_breaks();
            if fresh_line {
                self.out.push_str(&self.line_prefix);
                self.line_prefix.clear();
            } else if self.pending_space && self.inline_prefix.is_empty() {
                self.out.push(' ');
            }
            self.out.push_str(self.inline_prefix);
            self.inline_prefix = "";
            self.pending_space = false;
            if let Some((_, started @ false)) = &mut self.link {
                *started = true;
                self.out.push('[');
            }
            self.out.push(c);
        }
    }

    fn finish(mut self) -> String {
        self.close_link();
        let body: Vec<&str> = self.out.lines().map(str::trim_end).collect();
        let body = body.join("\n");
        let body = body.trim();
        match self.title {
            Some(title) if !body.starts_with(&format!("# {title}")) => {
                if body.is_empty() {
                    format!("# {title}")
                } else {
                    format!("# {title}\n\n{body}")
                }
            }
            _ => body.to_string(),
        }
    }
}

fn trim_trailing_spaces(out: &mut String) {
    let trimmed = out.trim_end_matches([' ', '\t']).len();
    out.truncate(trimmed);
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Decodes character references: named ones a page commonly uses, and
/// numeric ones. An unknown or unterminated reference stays as written.
pub(crate) fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // References are short; a ';' further away is not ours. The window
        // ends on a character boundary: text after a '&' may be any UTF-8.
        let window = &rest[1..floor_char_boundary(rest, 33)];
        let decoded = window
            .find(';')
            .and_then(|semi| decode_reference(&window[..semi]).map(|c| (c, semi + 2)));
        match decoded {
            Some((c, consumed)) => {
                out.push(c);
                rest = &rest[consumed..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The largest character boundary of `text` at or before `at`.
fn floor_char_boundary(text: &str, at: usize) -> usize {
    let mut end = at.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

fn decode_reference(name: &str) -> Option<char> {
    if let Some(number) = name.strip_prefix('#') {
        let code = match number.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => number.parse().ok()?,
        };
        return Some(match code {
            0 => '\u{fffd}',
            _ => char::from_u32(code).unwrap_or('\u{fffd}'),
        });
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        "shy" => '\u{ad}',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "deg" => '°',
        "plusmn" => '±',
        "times" => '×',
        "divide" => '÷',
        "micro" => 'µ',
        "para" => '¶',
        "sect" => '§',
        "middot" => '·',
        "bull" => '•',
        "hellip" => '…',
        "ndash" => '–',
        "mdash" => '—',
        "lsquo" => '‘',
        "rsquo" => '’',
        "sbquo" => '‚',
        "ldquo" => '“',
        "rdquo" => '”',
        "bdquo" => '„',
        "laquo" => '«',
        "raquo" => '»',
        "lsaquo" => '‹',
        "rsaquo" => '›',
        "euro" => '€',
        "pound" => '£',
        "yen" => '¥',
        "cent" => '¢',
        "larr" => '←',
        "rarr" => '→',
        "uarr" => '↑',
        "darr" => '↓',
        "harr" => '↔',
        "le" => '≤',
        "ge" => '≥',
        "ne" => '≠',
        "asymp" => '≈',
        "infin" => '∞',
        "minus" => '−',
        "frac12" => '½',
        "frac14" => '¼',
        "frac34" => '¾',
        "sup2" => '²',
        "sup3" => '³',
        "iexcl" => '¡',
        "iquest" => '¿',
        "zwj" => '\u{200d}',
        "zwnj" => '\u{200c}',
        "ensp" => '\u{2002}',
        "emsp" => '\u{2003}',
        "thinsp" => '\u{2009}',
        "check" => '✓',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(html: &str) -> String {
        html_to_text(
            html,
            Url::parse("https://example.com/docs/page").ok().as_ref(),
        )
    }

    #[test]
    fn drops_scripts_styles_comments_and_nav() {
        let out = text(
            "<html><head><title>T</title><style>p{color:red}</style><script>var x = '<p>';</script></head>\
             <body><nav><a href=/>Home</a></nav><!-- secret --><p>Hello <b>world</b></p>\
             <script type=module>alert(1)</script><footer>(c) us</footer></body></html>",
        );
        assert_eq!(out, "# T\n\nHello world");
    }

    #[test]
    fn keeps_structure() {
        let out = text(
            "<h1>Title</h1><p>One\n   two</p><p>Three<br>four</p>\
             <ul><li>a</li><li>b<ol><li>x</li><li>y</li></ol></li></ul>\
             <table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>\
             <pre>fn  main() {\n    x\n}</pre>",
        );
        assert_eq!(
            out,
            "# Title\n\nOne two\n\nThree\nfour\n\n- a\n- b\n  1. x\n  2. y\n\nk | v\n1 | 2\n\n```\nfn  main() {\n    x\n}\n```"
        );
    }

    #[test]
    fn links_become_markdown_with_resolved_urls() {
        let out = text(
            "<p>See <a href=\"../api?q=1&amp;r=2\">the API</a>, <a href='#top'>top</a> \
             and <a href=\"javascript:void(0)\">nothing</a>.</p>",
        );
        assert_eq!(
            out,
            "See [the API](https://example.com/api?q=1&r=2), top and nothing."
        );
    }

    #[test]
    fn decodes_entities() {
        assert_eq!(
            decode_entities("a &amp; b &lt;c&gt; &#65;&#x42; &bogus; & x &copy;"),
            "a & b <c> AB &bogus; & x ©"
        );
    }

    #[test]
    fn survives_malformed_markup() {
        assert_eq!(text("a < b and <p>c"), "a < b and\n\nc");
        assert_eq!(text("x <!-- never closed"), "x");
        assert_eq!(text("x <div class=\"unterminated"), "x");
        assert_eq!(text("<script>never closed"), "");
        assert_eq!(text("<nav>menu</div></body>after"), "after");
        assert_eq!(text("<svg/><p>kept</p>"), "kept");
        assert_eq!(
            text("<div hidden>no</div><div aria-hidden=\"true\">no</div>yes"),
            "yes"
        );
    }

    #[test]
    fn non_ascii_text_after_an_entity_is_kept() {
        // The window searched for ';' once ended inside 'о' and panicked.
        let page = "<p>Tom &amp; Jerry — популярный мультсериал &nbsp;и не только</p>";
        assert_eq!(
            text(page),
            "Tom & Jerry — популярный мультсериал и не только"
        );
        assert_eq!(decode_entities("&Ж"), "&Ж");
        assert_eq!(
            decode_entities("&aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaЖ;"),
            "&aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaЖ;"
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Text biased towards what the parser branches on: markup, entities
        /// and multi-byte characters next to them.
        fn markup() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("<".to_owned()),
                Just(">".to_owned()),
                Just("&".to_owned()),
                Just(";".to_owned()),
                Just("&#".to_owned()),
                Just("&#x".to_owned()),
                Just("<!--".to_owned()),
                Just("-->".to_owned()),
                Just("</".to_owned()),
                Just("<p>".to_owned()),
                Just("<a href=\"".to_owned()),
                Just("<title>".to_owned()),
                Just("<script>".to_owned()),
                Just("</script".to_owned()),
                Just("<li>".to_owned()),
                Just("<pre>".to_owned()),
                Just("\"".to_owned()),
                Just("'".to_owned()),
                Just("=".to_owned()),
                Just("/".to_owned()),
                Just(" ".to_owned()),
                Just("популярный".to_owned()),
                Just("😀".to_owned()),
                Just("é".to_owned()),
                any::<String>(),
            ];
            proptest::collection::vec(piece, 0..48).prop_map(|p| p.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn no_input_panics(html in markup()) {
                let _ = text(&html);
                let _ = decode_entities(&html);
            }

            #[test]
            fn arbitrary_utf8_never_panics(html in any::<String>()) {
                let _ = text(&html);
            }

            #[test]
            fn plain_text_is_kept_word_for_word(words in proptest::collection::vec("[^<&\\s]+", 0..12)) {
                let page = words.join(" ");
                prop_assert_eq!(text(&page), page);
            }
        }
    }
}
