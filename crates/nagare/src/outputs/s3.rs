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
//! net/object_http.rs (our hyper client and rustls). What the object
//! outputs share (key, gathering, body, the upload whole or in parts) is
//! in outputs/common/objects.rs; this file holds the options, the
//! credentials and the reading of S3's errors.

use std::sync::Arc;

use nagare_core::output::{Output, OutputPlugin};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use object_store::aws::AmazonS3Builder;
use serde::Deserialize;

use crate::formats::{Format, DEFAULT_MESSAGE_KEY};
use crate::net::http_client::Endpoint;
use crate::net::object_http::ObjectConnector;
use crate::net::tls::TlsOptions;
use crate::outputs::common::objects::{
    gather, retry_config, Layout, ObjectCompression, ObjectOutput, Refusals, Uploader, DEFAULT_KEY,
};

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
    #[serde_inline_default(DEFAULT_KEY.into())]
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
    pub compression: ObjectCompression,
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
        object_output(self, cx).map(|o| Arc::new(o) as Arc<dyn Output>)
    }
}

/// The 400s that are about time or credentials: retried.
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

/// The output as configured: layout, uploader and wording for its refusals.
fn object_output(cfg: S3OutputConfig, cx: &mut BuildContext) -> Result<ObjectOutput, OptionError> {
    if cfg.bucket.is_empty() {
        return Err(OptionError::new("bucket", "must not be empty"));
    }
    let layout = Layout::new(&cfg.key, cfg.format, &cfg.message_key, cfg.compression, cx)?;
    if cfg.part_size.0 < MIN_PART {
        return Err(OptionError::new(
            "part_size",
            format!(
                "{} is below 5MiB, the smallest part S3 takes",
                cfg.part_size
            ),
        ));
    }
    gather(
        cx,
        cfg.total_file_size,
        cfg.upload_timeout,
        cfg.upload_concurrency,
    )?;
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
        .with_retry(retry_config(cfg.request_retries, cfg.timeout.0));
    let tls = match &endpoint {
        Some(url) => {
            let e = Endpoint::parse("endpoint", url)?;
            if e.path != "/" {
                return Err(OptionError::new(
                    "endpoint",
                    format!(
                        "{url:?}: write the server's URL only (no path); the bucket is `bucket`"
                    ),
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
    let attributes = Uploader::attributes(&layout, cfg.storage_class.as_deref());
    Ok(ObjectOutput {
        layout,
        uploader: Uploader {
            store: Arc::new(store),
            part_size: cfg.part_size.0 as usize,
            max_parts: MAX_PARTS,
            concurrency: cfg.upload_concurrency,
            attributes,
            output: "s3",
            place,
        },
        refusals: Refusals {
            missing: ("NoSuchBucket", "the bucket does not exist"),
            credentials: "access_key_id and secret_access_key (or the environment's or the credentials file's keys) and the bucket's policy",
            retried_400: RETRIED_400,
        },
    })
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
}
