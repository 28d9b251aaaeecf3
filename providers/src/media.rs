//! The stored files a model request sends, and how their bytes get into the
//! request body.
//!
//! Saved content references a file by id ([`MediaSource::Attachment`]);
//! the step load keeps the references, and the worker loads each file the
//! request's messages reference once, as raw bytes ([`RequestFiles`]). The
//! provider's body is built as JSON with a marker string where a file's
//! base64 (or `data:` URL) goes, and [`body_bytes`] writes the base64
//! straight from the bytes into the serialized body where it meets a
//! marker. So a request holds each file twice at most, raw and encoded in
//! the body, and never as base64 strings in between; a step that sends no
//! file reads none.
//!
//! A marker is a random per-process prefix, a kind letter and the file's
//! id, and is replaced only when it is a whole JSON string: tenant text
//! cannot forge one (it cannot know the prefix) and a marker never leaves
//! the process (a file that is not loaded fails the call instead).

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};
use std::sync::LazyLock;

use base64::engine::general_purpose::STANDARD;
use base64::write::EncoderWriter;
use serde::Serialize;
use serde_json::ser::Formatter;
use serde_json::Value;
use uuid::Uuid;

use super::{media_blocks, ContentBlock, MediaSource, Message, ModelError};

/// One stored file, loaded for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFile {
    pub media_type: String,
    pub data: Vec<u8>,
}

/// The stored files one request sends, by attachment id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestFiles(HashMap<Uuid, StoredFile>);

impl RequestFiles {
    pub fn new(files: HashMap<Uuid, StoredFile>) -> Self {
        RequestFiles(files)
    }

    /// The bytes of all the files (raw, not base64).
    pub fn total_bytes(&self) -> usize {
        self.0.values().map(|f| f.data.len()).sum()
    }
}

/// The distinct stored files `messages` reference: their image and
/// document blocks, those of tool results included. What the worker loads
/// for a request.
pub fn attachment_ids(messages: &[Message]) -> Vec<Uuid> {
    fn collect(block: &ContentBlock, ids: &mut BTreeSet<Uuid>) {
        match block {
            ContentBlock::Image {
                source: MediaSource::Attachment { attachment_id, .. },
            }
            | ContentBlock::Document {
                source: MediaSource::Attachment { attachment_id, .. },
            } => {
                ids.insert(*attachment_id);
            }
            ContentBlock::ToolResult { content, .. } => {
                for inner in media_blocks(content).into_iter().flatten() {
                    collect(&inner, ids);
                }
            }
            _ => {}
        }
    }
    let mut ids = BTreeSet::new();
    for block in messages.iter().flat_map(|m| &m.content) {
        collect(block, &mut ids);
    }
    ids.into_iter().collect()
}

/// Where a marker's file goes: the bare base64 (Anthropic's `data`) or a
/// `data:` URL (the OpenAI APIs).
const BASE64: char = 'b';
const DATA_URL: char = 'u';

static MARKER_PREFIX: LazyLock<String> =
    LazyLock::new(|| format!("holdfast-file-{:032x}-", rand::random::<u128>()));

/// The string standing for file `id`'s base64 in a body being built.
pub(crate) fn base64_marker(id: Uuid) -> String {
    format!("{}{BASE64}{}", *MARKER_PREFIX, id.simple())
}

/// The string standing for file `id` as a `data:` URL.
pub(crate) fn data_url_marker(id: Uuid) -> String {
    format!("{}{DATA_URL}{}", *MARKER_PREFIX, id.simple())
}

/// `body` serialized as JSON, each marker replaced by its file from
/// `files`. A marker whose file is not there fails the call
/// (`invalid_request_error`): nothing is sent without the file it names.
pub(crate) fn body_bytes(body: &Value, files: &RequestFiles) -> Result<Vec<u8>, ModelError> {
    let capacity = files
        .0
        .values()
        .map(|f| f.data.len().div_ceil(3) * 4 + f.media_type.len() + 16)
        .sum::<usize>()
        + 4096;
    let mut out = Vec::with_capacity(capacity);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, FileFormatter { files });
    body.serialize(&mut serializer)
        .map_err(|e| ModelError::Fatal {
            error_type: "invalid_request_error".into(),
            message: format!("the request could not be built: {e}"),
        })?;
    Ok(out)
}

/// Compact JSON (the default of every other [`Formatter`] method), with
/// markers replaced by files.
/// serde_json hands a string without escapes to `write_string_fragment`
/// whole, and a marker has none.
struct FileFormatter<'a> {
    files: &'a RequestFiles,
}

impl Formatter for FileFormatter<'_> {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let Some(marked) = fragment.strip_prefix(MARKER_PREFIX.as_str()) else {
            return writer.write_all(fragment.as_bytes());
        };
        let mut chars = marked.chars();
        let kind = chars.next();
        let id = Uuid::try_parse(chars.as_str()).ok();
        let (Some(kind), Some(id)) = (kind, id) else {
            return writer.write_all(fragment.as_bytes());
        };
        let file = self
            .files
            .0
            .get(&id)
            .ok_or_else(|| io::Error::other(format!("attachment {id} is no longer stored")))?;
        if kind == DATA_URL {
            write!(writer, "data:{};base64,", file.media_type)?;
        }
        let mut encoder = EncoderWriter::new(&mut *writer, &STANDARD);
        encoder.write_all(&file.data)?;
        encoder.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_become_the_files_base64_and_data_urls() {
        let id = Uuid::now_v7();
        let files = RequestFiles::new(HashMap::from([(
            id,
            StoredFile {
                media_type: "image/png".into(),
                data: b"\x89PNG".to_vec(),
            },
        )]));
        let body =
            json!({"a": base64_marker(id), "b": [data_url_marker(id)], "c": "plain \"text\""});
        let bytes = body_bytes(&body, &files).unwrap();
        let parsed: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            parsed,
            json!({"a": "iVBORw==", "b": ["data:image/png;base64,iVBORw=="], "c": "plain \"text\""})
        );
    }

    #[test]
    fn a_marker_without_its_file_fails_and_other_text_is_left_alone() {
        let body = json!({"a": base64_marker(Uuid::now_v7())});
        assert!(body_bytes(&body, &RequestFiles::default()).is_err());
        let lookalike = json!({"a": "holdfast-file-0-b00000000000000000000000000000000"});
        let bytes = body_bytes(&lookalike, &RequestFiles::default()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), lookalike);
    }
}
