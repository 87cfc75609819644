//! `s3`: writes each chunk as one object to AWS S3 or an S3-compatible
//! server (MinIO, Ceph RGW, versitygw, …), as Fluentd's out_s3, Fluent
//! Bit's out_s3 and Vector's aws_s3 do.
//!
//! The object's key comes from a template: `${tag}`, `${chunk_id}`,
//! `${hostname}`, `${ext}` and strftime fields of the chunk's first event
//! time (UTC). With `${chunk_id}` in the key (the default key has it) a
//! chunk is **stored once**: the buffer hands the same chunk, with the same
//! id and the same events, to every retry and again after a restart (a
//! file buffer keeps the id in its chunk file), so every attempt PUTs the
//! same bytes to the same key and overwrites what an earlier attempt may
//! have stored; it never adds a second object.
//!
//! The S3 protocol (SigV4, PUT, multipart uploads, the error documents)
//! is object_store's (the Apache Arrow project); its requests go over
//! net/object_http.rs (our hyper client and rustls). An object larger
//! than `part_size` is sent as a multipart upload: parts go
//! `upload_concurrency` at a time, each retried alone by object_store
//! (`request_retries`), and an upload that fails is aborted so its parts
//! do not stay stored; the retry of the chunk starts a new upload.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nagare_core::output::{FlushError, Output, OutputPlugin};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, BackoffConfig, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    RetryConfig,
};
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::{render, Format, DEFAULT_MESSAGE_KEY};
use crate::net::http_client::Endpoint;
use crate::net::object_http::ObjectConnector;
use crate::net::tls::TlsOptions;

/// How an object's bytes are compressed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum S3Compression {
    /// Not compressed.
    #[default]
    None,
    /// One gzip member (`${ext}` ends in ".gz").
    Gzip,
    /// One zstd frame (`${ext}` ends in ".zst").
    Zstd,
}

/// The smallest part S3 takes (every part but the last).
const MIN_PART: u64 = 5 << 20;
/// S3's largest number of parts in one upload.
const MAX_PARTS: usize = 10_000;

/// The `s3` output.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct S3OutputConfig {
    /// The bucket the objects go to. Required.
    pub bucket: String,
    /// The key (name) of each chunk's object. `${tag}`: the chunk's tag;
    /// `${chunk_id}`: the chunk's id (32 hex digits); `${hostname}`: this
    /// host's name; `${ext}`: ".json", ".msgpack", ".ltsv" or ".log" after the
    /// format, and ".gz" or ".zst" after the compression; strftime fields
    /// (`%Y %m %d %H %M %S` …): the chunk's first event time, UTC. Keep
    /// `${chunk_id}` in it: it makes a retried or re-sent chunk overwrite
    /// its own object instead of adding one (stored once).
    #[serde_inline_default("logs/${tag}/%Y/%m/%d/%H%M%S-${chunk_id}${ext}".into())]
    pub key: String,
    /// The server's URL for S3-compatible servers, e.g.
    /// "http://127.0.0.1:7070" or "https://minio.example:9000" (default:
    /// AWS S3 in `region`, or the environment's `AWS_ENDPOINT_URL`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The region requests are signed for (default: `AWS_REGION` or
    /// `AWS_DEFAULT_REGION` from the environment, else "us-east-1").
    #[serde(default)]
    pub region: Option<String>,
    /// Path-style requests (`ENDPOINT/BUCKET/KEY`), which most
    /// S3-compatible servers want; false: virtual-hosted style
    /// (`BUCKET.ENDPOINT/KEY`), which AWS S3 wants. Default: true with
    /// `endpoint`, false without.
    #[serde(default)]
    pub path_style: Option<bool>,
    /// The access key. With `secret_access_key`; without them the keys
    /// come from the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), then the credentials
    /// file's `profile`, then web identity, the container's or the
    /// instance's role.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// The secret of `access_key_id`.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// A session token for temporary keys.
    #[serde(default)]
    pub session_token: Option<String>,
    /// The profile read from the credentials file (default: `AWS_PROFILE`,
    /// else "default"). Written here, it wins over the environment's keys.
    #[serde(default)]
    pub profile: Option<String>,
    /// The credentials file (default: `AWS_SHARED_CREDENTIALS_FILE`, else
    /// ~/.aws/credentials).
    #[serde(default)]
    pub credentials_file: Option<String>,
    /// "json" (default: one JSON object per line, with time, tag and
    /// record), "ltsv", "msgpack" (the raw `[time, record]` entries) or
    /// "single_value" (the `message_key` field, one per line).
    #[serde(default)]
    pub format: Format,
    /// The field written by format "single_value" (default "message").
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub message_key: String,
    /// "none" (default), "gzip" or "zstd".
    #[serde(default)]
    pub compression: S3Compression,
    /// Gathers events into objects of about this size (Fluent Bit's
    /// name): it sets the buffer's `chunk_limit_size`, so one buffer chunk
    /// of this size (the events as the buffer holds them, msgpack, before
    /// formatting and compression) is one object, with one chunk id and
    /// stored once; `total_limit_size`, unless written, grows to two such
    /// chunks. Default: the buffer's `chunk_limit_size` ("2MiB").
    #[serde(default)]
    pub total_file_size: Option<Size>,
    /// An object is written at the latest this long after its first event
    /// came (Fluent Bit's name): it sets the buffer's `flush_interval`.
    /// Default: the buffer's `flush_interval` ("1s").
    #[serde(default)]
    pub upload_timeout: Option<Dur>,
    /// The storage class objects are stored in, e.g. "STANDARD_IA" or
    /// "GLACIER_IR" (default: the bucket's, STANDARD on AWS).
    #[serde(default)]
    pub storage_class: Option<String>,
    /// Objects larger than this are sent as multipart uploads in parts of
    /// this size (default "16MiB"; at least "5MiB", S3's smallest part).
    #[serde_inline_default(Size::mib(16))]
    pub part_size: Size,
    /// Parts of one multipart upload sent at once (default 4).
    #[serde_inline_default(4)]
    pub upload_concurrency: usize,
    /// A request without an answer for this long fails (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub timeout: Dur,
    /// Times one request (a PUT, a part) is sent again at once, with a
    /// short backoff, after a connection error, a timeout, a 5xx or a 429,
    /// before the chunk goes back to the buffer's retries (default 3).
    #[serde_inline_default(3)]
    pub request_retries: usize,
    /// TLS settings of an `https://` endpoint (`[output.tls]`: `ca`,
    /// `server_name`, `cert` and `key`); without it `https://` uses the
    /// system's trust store. See docs/tls.md.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

impl OutputPlugin for S3OutputConfig {
    const TYPE: &'static str = "s3";
    const DOC: &'static str = "Writes each chunk as one object (JSON lines, LTSV, msgpack or raw messages; gzip or zstd) to AWS S3 or an S3-compatible server, with multipart uploads for large chunks; a chunk's key holds its id, so a retry or a re-send after a restart overwrites its object (see [Storage outputs](outputs-storage.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        S3Output::new(self, cx).map(|o| Arc::new(o) as Arc<dyn Output>)
    }
}

struct S3Output {
    cfg: S3OutputConfig,
    store: AmazonS3,
    /// For error messages: "bucket \"b\" at http://…".
    place: String,
    hostname: String,
    ext: String,
}

impl S3Output {
    fn new(cfg: S3OutputConfig, cx: &mut BuildContext) -> Result<S3Output, OptionError> {
        if cfg.bucket.is_empty() {
            return Err(OptionError::new("bucket", "must not be empty"));
        }
        check_key(&cfg.key, cx)?;
        if cfg.part_size.0 < MIN_PART {
            return Err(OptionError::new(
                "part_size",
                format!(
                    "{} is below 5MiB, the smallest part S3 takes",
                    cfg.part_size
                ),
            ));
        }
        if let Some(size) = cfg.total_file_size {
            if size.0 == 0 {
                return Err(OptionError::new(
                    "total_file_size",
                    "must be more than 0, e.g. \"100MiB\"",
                ));
            }
            cx.chunk_shape.chunk_limit_size = Some(("total_file_size".into(), size));
        }
        if let Some(every) = cfg.upload_timeout {
            if every.0.is_zero() {
                return Err(OptionError::new(
                    "upload_timeout",
                    "must be more than 0, e.g. \"10m\"",
                ));
            }
            cx.chunk_shape.flush_interval = Some(("upload_timeout".into(), every));
        }
        if cfg.upload_concurrency == 0 {
            return Err(OptionError::new("upload_concurrency", "must be at least 1"));
        }
        if let Some(c) = &cfg.storage_class {
            if c.is_empty() || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(OptionError::new(
                    "storage_class",
                    format!("{c:?} is not a storage class name (e.g. STANDARD_IA)"),
                ));
            }
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let endpoint = cfg
            .endpoint
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_S3"))
            .or_else(|| env("AWS_ENDPOINT_URL"));
        let region = cfg
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".into());
        let path_style = cfg.path_style.unwrap_or(endpoint.is_some());

        let (keys, from) = credentials(&cfg)?;
        // Without keys of ours, object_store reads the environment itself:
        // web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN), the
        // container's credentials URI, then the instance's metadata.
        let base = match &keys {
            Some(_) => AmazonS3Builder::new(),
            None => AmazonS3Builder::from_env(),
        };
        let mut b = base
            .with_bucket_name(&cfg.bucket)
            .with_region(&region)
            .with_virtual_hosted_style_request(!path_style)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(5),
                    base: 2.0,
                },
                max_retries: cfg.request_retries,
                retry_timeout: cfg.timeout.0 * (cfg.request_retries as u32 + 1),
            });
        let tls = match &endpoint {
            Some(url) => {
                let e = Endpoint::parse("endpoint", url)?;
                if e.path != "/" {
                    return Err(OptionError::new(
                        "endpoint",
                        format!("{url:?}: write the server's URL only (no path); the bucket is `bucket`"),
                    ));
                }
                let tls = e.tls(cfg.tls.as_ref(), cx)?;
                let url = url.trim_end_matches('/');
                // object_store's virtual-hosted style takes the endpoint as
                // the bucket's own URL: put the bucket in front of the host.
                let base = if path_style {
                    url.to_string()
                } else {
                    let (scheme, host) = url.split_once("://").expect("parsed above");
                    format!("{scheme}://{}.{host}", cfg.bucket)
                };
                b = b.with_endpoint(base).with_allow_http(!e.https);
                tls
            }
            None => crate::net::tls::TlsClient::build(
                Some(cfg.tls.as_ref().unwrap_or(&TlsOptions::default())),
                cx,
            )?,
        };
        let place = format!(
            "bucket {:?} at {}",
            cfg.bucket,
            endpoint.as_deref().unwrap_or("AWS S3")
        );
        if let Some(k) = keys {
            b = b
                .with_access_key_id(k.access_key_id)
                .with_secret_access_key(k.secret_access_key);
            if let Some(t) = k.session_token {
                b = b.with_token(t);
            }
        }
        tracing::debug!(output = %cx.name, %place, credentials = %from, "s3 output");
        let store = b
            .with_http_connector(ObjectConnector::new(tls, cfg.timeout.0))
            .build()
            .map_err(|e| OptionError::new("bucket", format!("{place}: {e}")))?;
        let ext = ext(cfg.format, cfg.compression);
        Ok(S3Output {
            store,
            place,
            hostname: gethostname::gethostname().to_string_lossy().into_owned(),
            ext,
            cfg,
        })
    }

    /// The object key of `chunk`.
    fn key(&self, chunk: &Chunk) -> Result<String, FlushError> {
        let secs = chunk.entries().next().map_or(0, |(t, _, _)| t.secs);
        render_key(
            &self.cfg.key,
            &chunk.tag,
            &chunk.id_hex(),
            &self.hostname,
            &self.ext,
            secs,
        )
        .map_err(FlushError::Permanent)
    }

    /// The chunk's events in the format, compressed.
    fn body(&self, chunk: &Chunk) -> Result<Vec<u8>, FlushError> {
        let mut text = Vec::with_capacity(chunk.len + chunk.len / 2);
        render(self.cfg.format, &self.cfg.message_key, chunk, &mut text);
        let compressed = match self.cfg.compression {
            S3Compression::None => return Ok(text),
            S3Compression::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(
                    Vec::with_capacity(text.len() / 4),
                    flate2::Compression::default(),
                );
                gz.write_all(&text).and_then(|()| gz.finish())
            }
            S3Compression::Zstd => zstd::bulk::compress(&text, 3),
        };
        compressed.map_err(|e| FlushError::Retry(format!("{:?}: {e}", self.cfg.compression)))
    }

    fn attributes(&self) -> Attributes {
        let mut a = Attributes::new();
        let content_type = match self.cfg.compression {
            S3Compression::Gzip => "application/gzip",
            S3Compression::Zstd => "application/zstd",
            S3Compression::None => match self.cfg.format {
                Format::Json => "application/x-ndjson",
                Format::Msgpack => "application/msgpack",
                Format::Ltsv | Format::SingleValue => "text/plain; charset=utf-8",
            },
        };
        a.insert(Attribute::ContentType, content_type.into());
        if let Some(c) = &self.cfg.storage_class {
            a.insert(Attribute::StorageClass, c.clone().into());
        }
        a
    }

    async fn put(&self, path: &ObjectPath, body: Vec<u8>) -> Result<(), FlushError> {
        let part = self.cfg.part_size.0 as usize;
        if body.len() <= part {
            let opts = PutOptions {
                attributes: self.attributes(),
                ..Default::default()
            };
            self.store
                .put_opts(path, PutPayload::from(body), opts)
                .await
                .map(|_| ())
                .map_err(|e| self.judge(path, e))
        } else {
            self.put_multipart(path, body).await
        }
    }

    /// Sends `body` in parts, `upload_concurrency` at a time; aborts the
    /// upload when a part or the completion fails.
    async fn put_multipart(&self, path: &ObjectPath, body: Vec<u8>) -> Result<(), FlushError> {
        let body = bytes::Bytes::from(body);
        // Parts grow past part_size only for objects over 10,000 parts.
        let part = (self.cfg.part_size.0 as usize).max(body.len().div_ceil(MAX_PARTS));
        let opts = PutMultipartOptions {
            attributes: self.attributes(),
            ..Default::default()
        };
        let mut upload = self
            .store
            .put_multipart_opts(path, opts)
            .await
            .map_err(|e| self.judge(path, e))?;
        let mut running = tokio::task::JoinSet::new();
        let mut failed = None;
        for start in (0..body.len()).step_by(part) {
            let piece = body.slice(start..(start + part).min(body.len()));
            running.spawn(upload.put_part(PutPayload::from(piece)));
            while running.len() >= self.cfg.upload_concurrency {
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
        if let Err(e) = result {
            let why = self.judge(path, e);
            // The parts sent so far are stored (and billed) until aborted.
            if let Err(a) = upload.abort().await {
                tracing::warn!(output = "s3", place = %self.place, key = %path, error = %a,
                    "cannot abort the failed multipart upload; its parts stay stored until a lifecycle rule removes them");
            }
            return Err(why);
        }
        Ok(())
    }

    /// Retry or Permanent, and a message naming the bucket, the server
    /// and what it said.
    fn judge(&self, path: &ObjectPath, e: object_store::Error) -> FlushError {
        let text = e.to_string();
        let code = between(&text, "<Code>", "</Code>");
        let message = between(&text, "<Message>", "</Message>");
        let status = status_of(&text);
        let said = match (code, message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c.to_string(),
            _ => text.clone(),
        };
        let place = &self.place;
        let what = match (code, &e) {
            (Some("NoSuchBucket"), _) => format!(
                "{place}: the bucket does not exist (NoSuchBucket); events are kept and retried until it is created"
            ),
            (_, object_store::Error::PermissionDenied { .. })
            | (_, object_store::Error::Unauthenticated { .. }) => format!(
                "{place}: access denied writing {path} ({said}): check access_key_id and secret_access_key (or the environment's or the credentials file's keys) and the bucket's policy; events are kept and retried"
            ),
            _ => format!("{place}: writing {path}: {said}"),
        };
        if permanent(status, code) {
            FlushError::Permanent(what)
        } else {
            FlushError::Retry(what)
        }
    }
}

#[async_trait]
impl Output for S3Output {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let key = self.key(chunk)?;
        let path = ObjectPath::from(key.as_str());
        let body = self.body(chunk)?;
        self.put(&path, body).await
    }
}

/// Whether an answer means the chunk can never be stored as it is: a 400
/// (or 411, 413, 414) about the request itself. Everything else is
/// retried: connection errors, timeouts, 5xx (a full disk is 507 or 500),
/// 429, 403 and 401 (wrong keys, fixed by a reload), 404 (no such bucket)
/// and the 400s that are about time or credentials.
fn permanent(status: Option<u16>, code: Option<&str>) -> bool {
    const RETRIED_400: &[&str] = &[
        "RequestTimeout",
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidToken",
        "AuthorizationHeaderMalformed",
        "RequestTimeTooSkewed",
        "IncompleteBody",
        "SlowDown",
    ];
    match status {
        Some(400) => !code.is_some_and(|c| RETRIED_400.contains(&c)),
        Some(411 | 413 | 414) => true,
        _ => false,
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
fn ext(format: Format, compression: S3Compression) -> String {
    let f = match format {
        Format::Json => ".json",
        Format::Msgpack => ".msgpack",
        Format::Ltsv => ".ltsv",
        Format::SingleValue => ".log",
    };
    let c = match compression {
        S3Compression::None => "",
        S3Compression::Gzip => ".gz",
        S3Compression::Zstd => ".zst",
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

/// Access keys.
#[derive(Debug, PartialEq)]
struct Keys {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

/// The keys to sign with and where they came from: the config, then (a
/// profile written in the config first) the environment, then the
/// credentials file; None leaves it to object_store (web identity, the
/// container's or the instance's role).
fn credentials(cfg: &S3OutputConfig) -> Result<(Option<Keys>, String), OptionError> {
    match (&cfg.access_key_id, &cfg.secret_access_key) {
        (Some(id), Some(secret)) => {
            return Ok((
                Some(Keys {
                    access_key_id: id.clone(),
                    secret_access_key: secret.clone(),
                    session_token: cfg.session_token.clone(),
                }),
                "the config".into(),
            ))
        }
        (Some(_), None) => {
            return Err(OptionError::new(
                "access_key_id",
                "set `secret_access_key` too",
            ))
        }
        (None, Some(_)) => {
            return Err(OptionError::new(
                "secret_access_key",
                "set `access_key_id` too",
            ))
        }
        (None, None) => {}
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let from_env = || {
        Some(Keys {
            access_key_id: env("AWS_ACCESS_KEY_ID")?,
            secret_access_key: env("AWS_SECRET_ACCESS_KEY")?,
            session_token: env("AWS_SESSION_TOKEN"),
        })
    };
    if cfg.profile.is_none() {
        if let Some(k) = from_env() {
            return Ok((Some(k), "the environment (AWS_ACCESS_KEY_ID)".into()));
        }
    }
    let file = cfg
        .credentials_file
        .clone()
        .or_else(|| env("AWS_SHARED_CREDENTIALS_FILE"))
        .or_else(|| env("HOME").map(|h| format!("{h}/.aws/credentials")));
    let profile = cfg
        .profile
        .clone()
        .or_else(|| env("AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    if let Some(file) = file {
        match std::fs::read_to_string(&file) {
            Ok(text) => match profile_keys(&text, &profile) {
                Ok(Some(k)) => {
                    return Ok((Some(k), format!("{file} (profile {profile:?})")));
                }
                Ok(None) if cfg.profile.is_some() => {
                    return Err(OptionError::new(
                        "profile",
                        format!("{file} has no profile {profile:?} with aws_access_key_id and aws_secret_access_key"),
                    ))
                }
                Ok(None) => {}
                Err(e) => return Err(OptionError::new("credentials_file", format!("{file}: {e}"))),
            },
            Err(e) if cfg.credentials_file.is_some() || cfg.profile.is_some() => {
                return Err(OptionError::new(
                    "credentials_file",
                    format!("cannot read {file}: {e}"),
                ))
            }
            Err(_) => {}
        }
    }
    Ok((
        None,
        "object_store's chain (web identity, container or instance role)".into(),
    ))
}

/// The keys of `profile` in an AWS credentials file (INI: `[profile]`,
/// `name = value`, `#` and `;` comments). Err names a line it cannot read.
fn profile_keys(text: &str, profile: &str) -> Result<Option<Keys>, String> {
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let name = name
                .strip_suffix(']')
                .ok_or_else(|| format!("line {}: a section without its closing ]", n + 1))?;
            in_profile = name.trim() == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line {}: expected name = value", n + 1))?;
        let v = Some(v.trim().to_string());
        match k.trim() {
            "aws_access_key_id" => id = v,
            "aws_secret_access_key" => secret = v,
            "aws_session_token" => token = v,
            _ => {}
        }
    }
    Ok(match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => Some(Keys {
            access_key_id,
            secret_access_key,
            session_token: token,
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_from_the_template() {
        let k = render_key(
            "logs/${tag}/%Y/%m/%d/%H%M%S-${chunk_id}${ext}",
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
    fn credentials_file_profiles() {
        let text = "# c\n[default]\naws_access_key_id = A\naws_secret_access_key=S\n\n[other]\naws_access_key_id = B\naws_secret_access_key = T\naws_session_token = X\n";
        assert_eq!(
            profile_keys(text, "other").unwrap(),
            Some(Keys {
                access_key_id: "B".into(),
                secret_access_key: "T".into(),
                session_token: Some("X".into())
            })
        );
        assert_eq!(
            profile_keys(text, "default")
                .unwrap()
                .unwrap()
                .access_key_id,
            "A"
        );
        assert_eq!(profile_keys(text, "none").unwrap(), None);
        assert!(profile_keys("[x\n", "x").unwrap_err().contains("line 1"));
    }

    #[test]
    fn what_is_permanent() {
        assert!(!permanent(Some(403), Some("SignatureDoesNotMatch")));
        assert!(!permanent(Some(404), Some("NoSuchBucket")));
        assert!(!permanent(Some(500), None));
        assert!(!permanent(None, None));
        assert!(!permanent(Some(400), Some("RequestTimeout")));
        assert!(permanent(Some(400), Some("InvalidStorageClass")));
        assert!(permanent(Some(413), None));
        assert_eq!(
            status_of("Server returned non-2xx status code: 403 Forbidden: <Error>"),
            Some(403)
        );
    }
}
