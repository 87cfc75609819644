//! The object-storage outputs' shared path from a chunk to a stored object
//! (s3, azure_blob): the key template, gathering events per size and time
//! (the buffer's chunk shape), the body (a format, then gzip or zstd), and
//! the upload through object_store, whole or in parts.
//!
//! Each output keeps only what is its own: its options, its object_store
//! builder (credentials, endpoint) and how it reads its server's errors.
//!
//! **Stored once**: with `${chunk_id}` in the key (the default key has it),
//! the buffer hands the same chunk, with the same id and the same events,
//! to every retry and again after a restart (a file buffer keeps the id in
//! its chunk file), so every attempt writes the same bytes to the same key
//! and overwrites what an earlier attempt may have stored; it never adds a
//! second object.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, BackoffConfig, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    RetryConfig,
};
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::{render, Format};

/// How an object's bytes are compressed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ObjectCompression {
    /// Not compressed.
    #[default]
    None,
    /// One gzip member (`${ext}` ends in ".gz").
    Gzip,
    /// One zstd frame (`${ext}` ends in ".zst").
    Zstd,
}

/// The default key template: one object per chunk, by tag and time.
pub const DEFAULT_KEY: &str = "logs/${tag}/%Y/%m/%d/%H%M%S-${chunk_id}${ext}";

/// What names an object and what it holds: the key template, the format
/// and the compression.
pub struct Layout {
    key: String,
    format: Format,
    message_key: String,
    compression: ObjectCompression,
    hostname: String,
    ext: String,
}

impl Layout {
    /// Checks the key template (`key` is its option's name in errors).
    pub fn new(
        key: &str,
        format: Format,
        message_key: &str,
        compression: ObjectCompression,
        cx: &mut BuildContext,
    ) -> Result<Layout, OptionError> {
        check_key(key, cx)?;
        Ok(Layout {
            key: key.to_string(),
            format,
            message_key: message_key.to_string(),
            compression,
            hostname: gethostname::gethostname().to_string_lossy().into_owned(),
            ext: ext(format, compression),
        })
    }

    /// The object key of `chunk`.
    pub fn key(&self, chunk: &Chunk) -> Result<String, FlushError> {
        let secs = chunk.entries().next().map_or(0, |(t, _, _)| t.secs);
        render_key(
            &self.key,
            &chunk.tag,
            &chunk.id_hex(),
            &self.hostname,
            &self.ext,
            secs,
        )
        .map_err(FlushError::Permanent)
    }

    /// The chunk's events in the format, compressed.
    pub fn body(&self, chunk: &Chunk) -> Result<Vec<u8>, FlushError> {
        let mut text = Vec::with_capacity(chunk.len + chunk.len / 2);
        render(self.format, &self.message_key, chunk, &mut text);
        let compressed = match self.compression {
            ObjectCompression::None => return Ok(text),
            ObjectCompression::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(
                    Vec::with_capacity(text.len() / 4),
                    flate2::Compression::default(),
                );
                gz.write_all(&text).and_then(|()| gz.finish())
            }
            ObjectCompression::Zstd => zstd::bulk::compress(&text, 3),
        };
        compressed.map_err(|e| FlushError::Retry(format!("{:?}: {e}", self.compression)))
    }

    /// The Content-Type of the objects.
    pub fn content_type(&self) -> &'static str {
        match self.compression {
            ObjectCompression::Gzip => "application/gzip",
            ObjectCompression::Zstd => "application/zstd",
            ObjectCompression::None => match self.format {
                Format::Json => "application/x-ndjson",
                Format::Msgpack => "application/msgpack",
                Format::Ltsv | Format::SingleValue => "text/plain; charset=utf-8",
            },
        }
    }
}

/// Gathering: `total_file_size` sets the buffer's `chunk_limit_size` and
/// `upload_timeout` its `flush_interval`, so one object is one buffer chunk
/// (one chunk id: stored once holds for gathered objects unchanged); and
/// the parts of one upload sent at once, `upload_concurrency`, checked.
pub fn gather(
    cx: &mut BuildContext,
    total_file_size: Option<Size>,
    upload_timeout: Option<Dur>,
    upload_concurrency: usize,
) -> Result<(), OptionError> {
    if upload_concurrency == 0 {
        return Err(OptionError::new("upload_concurrency", "must be at least 1"));
    }
    if let Some(size) = total_file_size {
        if size.0 == 0 {
            return Err(OptionError::new(
                "total_file_size",
                "must be more than 0, e.g. \"100MiB\"",
            ));
        }
        cx.chunk_shape.chunk_limit_size = Some(("total_file_size".into(), size));
    }
    if let Some(every) = upload_timeout {
        if every.0.is_zero() {
            return Err(OptionError::new(
                "upload_timeout",
                "must be more than 0, e.g. \"10m\"",
            ));
        }
        cx.chunk_shape.flush_interval = Some(("upload_timeout".into(), every));
    }
    Ok(())
}

/// object_store's retries of one request: `retries` times with a short
/// backoff, each request within `timeout`.
pub fn retry_config(retries: usize, timeout: Duration) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: retries,
        retry_timeout: timeout * (retries as u32 + 1),
    }
}

/// Sends bodies to one store: whole up to `part_size`, in parts above it.
pub struct Uploader {
    pub store: Arc<dyn ObjectStore>,
    /// Bodies larger than this go up in parts of this size.
    pub part_size: usize,
    /// The server's largest number of parts in one upload: parts grow
    /// past `part_size` for bodies over it.
    pub max_parts: usize,
    /// Parts of one upload sent at once.
    pub concurrency: usize,
    /// Sent with every object (Content-Type, storage class or tier).
    pub attributes: Attributes,
    /// For the log: the output's type and "bucket \"b\" at http://…".
    pub output: &'static str,
    pub place: String,
}

impl Uploader {
    /// The attributes of `layout`'s objects, with a storage class (S3) or
    /// an access tier (Azure) when written.
    pub fn attributes(layout: &Layout, class: Option<&str>) -> Attributes {
        let mut a = Attributes::new();
        a.insert(Attribute::ContentType, layout.content_type().into());
        if let Some(c) = class {
            a.insert(Attribute::StorageClass, c.to_string().into());
        }
        a
    }

    /// Stores `body` under `path` (overwriting what is there).
    pub async fn put(&self, path: &ObjectPath, body: Vec<u8>) -> object_store::Result<()> {
        if body.len() <= self.part_size {
            let opts = PutOptions {
                attributes: self.attributes.clone(),
                ..Default::default()
            };
            self.store
                .put_opts(path, PutPayload::from(body), opts)
                .await
                .map(|_| ())
        } else {
            self.put_multipart(path, body).await
        }
    }

    /// Sends `body` in parts, `concurrency` at a time, each retried alone
    /// by object_store; aborts the upload when a part or the completion
    /// fails, so its parts do not stay stored (the chunk's retry starts a
    /// new upload of the same key).
    async fn put_multipart(&self, path: &ObjectPath, body: Vec<u8>) -> object_store::Result<()> {
        let body = bytes::Bytes::from(body);
        let part = self.part_size.max(body.len().div_ceil(self.max_parts));
        let opts = PutMultipartOptions {
            attributes: self.attributes.clone(),
            ..Default::default()
        };
        let mut upload = self.store.put_multipart_opts(path, opts).await?;
        let mut running = tokio::task::JoinSet::new();
        let mut failed = None;
        for start in (0..body.len()).step_by(part) {
            let piece = body.slice(start..(start + part).min(body.len()));
            running.spawn(upload.put_part(PutPayload::from(piece)));
            while running.len() >= self.concurrency {
                if let Some(Ok(Err(e))) = running.join_next().await {
                    failed.get_or_insert(e);
                }
            }
            if failed.is_some() {
                break;
            }
        }
        while let Some(r) = running.join_next().await {
            if let Ok(Err(e)) = r {
                failed.get_or_insert(e);
            }
        }
        let result = match failed {
            Some(e) => Err(e),
            None => upload.complete().await.map(|_| ()),
        };
        if result.is_err() {
            // The parts sent so far are stored (and billed) until aborted.
            if let Err(a) = upload.abort().await {
                tracing::warn!(output = self.output, place = %self.place, key = %path, error = %a,
                    "cannot abort the failed multipart upload; its parts stay stored until a lifecycle rule removes them");
            }
        }
        result
    }
}

/// What an object output says when its store refuses a write: its
/// server's code for a missing bucket or container, where to look when
/// the credentials are refused, and the 400s it retries.
pub struct Refusals {
    /// e.g. "NoSuchBucket", and what it means ("the bucket does not exist").
    pub missing: (&'static str, &'static str),
    /// The options (and other sources) of credentials to check.
    pub credentials: &'static str,
    /// The 400s a reload or a retry can mend (see `Said::permanent`).
    pub retried_400: &'static [&'static str],
}

/// An object-storage output: each chunk (or gathered chunk) rendered by
/// `layout` and stored at its key by `uploader`; the plugins differ only
/// in how they build these and word their refusals.
pub struct ObjectOutput {
    pub layout: Layout,
    pub uploader: Uploader,
    pub refusals: Refusals,
}

impl ObjectOutput {
    /// Retry or Permanent, and a message naming the place (bucket or
    /// container and server) and what the server said.
    fn judge(&self, path: &ObjectPath, e: object_store::Error) -> FlushError {
        let text = e.to_string();
        let said = Said::read(&text);
        let place = &self.uploader.place;
        let (missing, meaning) = self.refusals.missing;
        let what = match (said.code, &e) {
            (Some(code), _) if code == missing => format!(
                "{place}: {meaning} ({missing}); events are kept and retried until it is created"
            ),
            (_, object_store::Error::PermissionDenied { .. })
            | (_, object_store::Error::Unauthenticated { .. }) => format!(
                "{place}: access denied writing {path} ({}): check {}; events are kept and retried",
                said.text, self.refusals.credentials
            ),
            _ => format!("{place}: writing {path}: {}", said.text),
        };
        if said.permanent(self.refusals.retried_400) {
            FlushError::Permanent(what)
        } else {
            FlushError::Retry(what)
        }
    }
}

#[async_trait]
impl Output for ObjectOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let key = self.layout.key(chunk)?;
        let path = ObjectPath::from(key.as_str());
        let body = self.layout.body(chunk)?;
        self.uploader
            .put(&path, body)
            .await
            .map_err(|e| self.judge(&path, e))
    }
}

/// What a server answered, read from object_store's error text (it holds
/// the status and the error document: `<Code>`, `<Message>` in S3's and
/// Azure's XML).
pub struct Said<'a> {
    pub status: Option<u16>,
    pub code: Option<&'a str>,
    /// "Code: Message", the code alone, or the whole text.
    pub text: String,
}

impl<'a> Said<'a> {
    pub fn read(text: &'a str) -> Said<'a> {
        let code = between(text, "<Code>", "</Code>");
        let message = between(text, "<Message>", "</Message>");
        let said = match (code, message) {
            (Some(c), Some(m)) => format!("{c}: {}", m.lines().next().unwrap_or(m)),
            (Some(c), None) => c.to_string(),
            _ => text.to_string(),
        };
        Said {
            status: status_of(text),
            code,
            text: said,
        }
    }

    /// Whether the answer means the chunk can never be stored as it is: a
    /// 400 (or 411, 413, 414) about the request itself, other than the
    /// codes in `retried_400` (about time or credentials). Everything else
    /// is retried: connection errors, timeouts, 5xx (a full disk is 507
    /// or 500), 429, 403 and 401 (wrong keys, fixed by a reload), 404 (no
    /// such bucket or container).
    pub fn permanent(&self, retried_400: &[&str]) -> bool {
        match self.status {
            Some(400) => !self.code.is_some_and(|c| retried_400.contains(&c)),
            Some(411 | 413 | 414) => true,
            _ => false,
        }
    }
}

/// The HTTP status object_store's error text gives ("… status code: 403 …").
fn status_of(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    text.get(at..at + 3)?.parse().ok()
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

/// The `${ext}` of a format and compression.
fn ext(format: Format, compression: ObjectCompression) -> String {
    let f = match format {
        Format::Json => ".json",
        Format::Msgpack => ".msgpack",
        Format::Ltsv => ".ltsv",
        Format::SingleValue => ".log",
    };
    let c = match compression {
        ObjectCompression::None => "",
        ObjectCompression::Gzip => ".gz",
        ObjectCompression::Zstd => ".zst",
    };
    format!("{f}{c}")
}

const PLACEHOLDERS: &[&str] = &["${tag}", "${chunk_id}", "${hostname}", "${ext}"];

/// Checks the key template: known `${…}`, strftime fields chrono knows,
/// and a warning without `${chunk_id}`.
fn check_key(key: &str, cx: &mut BuildContext) -> Result<(), OptionError> {
    let mut rest = key;
    while let Some(i) = rest.find("${") {
        let tail = &rest[i..];
        let Some(p) = PLACEHOLDERS.iter().find(|p| tail.starts_with(**p)) else {
            let end = tail.find('}').map_or(tail.len(), |e| e + 1);
            return Err(OptionError::new(
                "key",
                format!(
                    "{:?} is not a placeholder (known: {})",
                    &tail[..end],
                    PLACEHOLDERS.join(" ")
                ),
            ));
        };
        rest = &tail[p.len()..];
    }
    render_key(key, "tag", &"0".repeat(32), "host", ".json", 0)
        .map_err(|e| OptionError::new("key", e))?;
    if render_key(key, "tag", "", "host", ".json", 0).is_ok_and(|k| k.is_empty()) {
        return Err(OptionError::new("key", "names no object (empty)"));
    }
    if !key.contains("${chunk_id}") {
        cx.warn(
            "key",
            "has no ${chunk_id}: chunks with the same tag and time overwrite each other's objects, and a retry after a partial failure cannot be told from a new chunk; keep ${chunk_id} for one object per chunk, stored once",
        );
    }
    Ok(())
}

/// The key for a chunk: placeholders first (a `%` in a tag escaped), then
/// strftime of `secs` (UTC).
fn render_key(
    template: &str,
    tag: &str,
    chunk_id: &str,
    hostname: &str,
    ext: &str,
    secs: u32,
) -> Result<String, String> {
    let esc = |s: &str| s.replace('%', "%%");
    let filled = template
        .replace("${tag}", &esc(tag))
        .replace("${chunk_id}", chunk_id)
        .replace("${hostname}", &esc(hostname))
        .replace("${ext}", &esc(ext));
    let dt = chrono::DateTime::from_timestamp(secs as i64, 0).unwrap_or_default();
    let mut out = String::new();
    // fmt::Write returns a bad field's error; io::Write would panic.
    std::fmt::Write::write_fmt(&mut out, format_args!("{}", dt.format(&filled))).map_err(|_| {
        format!("{template:?} has a %-field strftime does not know (known: %Y %m %d %H %M %S …; write %% for a %)")
    })?;
    Ok(out.trim_start_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_the_template() {
        let k = render_key(
            DEFAULT_KEY,
            "app.web",
            "00ff",
            "h",
            ".json.gz",
            1_700_000_000,
        )
        .unwrap();
        assert_eq!(k, "logs/app.web/2023/11/14/221320-00ff.json.gz");
        // A % in a tag is the tag's, not a strftime field.
        assert_eq!(
            render_key("/${tag}-${hostname}", "a%Y", "", "h%d", "", 0).unwrap(),
            "a%Y-h%d"
        );
        assert!(render_key("%Q${chunk_id}", "t", "", "", "", 0).is_err());
    }

    #[test]
    fn key_checks() {
        let mut cx = BuildContext::new("s3#0");
        assert!(check_key("a/${tag}-${chunk_id}", &mut cx).is_ok());
        assert!(cx.warnings.is_empty());
        assert!(check_key("a/${tag}", &mut cx).is_ok());
        assert_eq!(cx.warnings.len(), 1);
        let e = check_key("a/${tga}", &mut cx).unwrap_err().to_string();
        assert!(e.contains("${tga}"), "{e}");
    }

    #[test]
    fn what_the_server_said() {
        let s = Said::read("Server returned non-2xx status code: 403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code><Message>bad</Message></Error>");
        assert_eq!(s.status, Some(403));
        assert_eq!(s.code, Some("SignatureDoesNotMatch"));
        assert_eq!(s.text, "SignatureDoesNotMatch: bad");
        assert!(!s.permanent(&[]));
        let s = Said::read("status code: 400 Bad Request: <Code>RequestTimeout</Code>");
        assert!(!s.permanent(&["RequestTimeout"]));
        assert!(s.permanent(&[]));
        assert!(Said::read("status code: 413 Too Large").permanent(&[]));
        assert!(!Said::read("status code: 500 x").permanent(&[]));
        assert!(!Said::read("connection refused").permanent(&[]));
    }
}
