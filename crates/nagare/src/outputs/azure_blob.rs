//! `azure_blob`: writes each chunk as one block blob to Azure Blob Storage
//! (or Azurite, its emulator), as Fluent Bit's out_azure_blob and Fluentd's
//! fluent-plugin-azure-storage-append-blob do, but one blob per chunk
//! rather than appends to a shared blob: an append cannot be made twice
//! without storing its events twice, a Put Blob to the chunk's own name
//! can (stored once, as for `s3`; see outputs/common/objects.rs).
//!
//! The Blob service protocol (SharedKey and SAS signing, Put Blob, Put
//! Block and Put Block List, the error documents) is object_store's (the
//! Apache Arrow project, feature "azure-base": no reqwest); its requests go
//! over net/object_http.rs (our hyper client and rustls), as the s3
//! output's do. This file holds the options, the credentials and the
//! reading of the Blob service's errors.

use std::sync::Arc;

use nagare_core::output::{Output, OutputPlugin};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use serde::Deserialize;

use crate::formats::{Format, DEFAULT_MESSAGE_KEY};
use crate::net::http_client::Endpoint;
use crate::net::object_http::ObjectConnector;
use crate::net::tls::TlsOptions;
use crate::outputs::common::objects::{
    gather, retry_config, Layout, ObjectCompression, ObjectOutput, Refusals, Uploader, DEFAULT_KEY,
};

/// The smallest block this output sends (the service takes smaller ones;
/// smaller blocks only mean more requests).
const MIN_PART: u64 = 1 << 20;
/// The Blob service's largest number of blocks in one blob.
const MAX_PARTS: usize = 50_000;
/// Its largest block.
const MAX_PART: u64 = 4000 << 20;

/// The `azure_blob` output.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AzureBlobOutputConfig {
    /// The container the blobs go to. Required.
    pub container: String,
    /// The storage account's name (default: `AZURE_STORAGE_ACCOUNT_NAME`
    /// from the environment). Required one way or the other.
    #[serde(default)]
    pub account: Option<String>,
    /// The account's Blob service URL, e.g.
    /// "http://127.0.0.1:10000/devstoreaccount1" for Azurite (its
    /// path-style URL, with the account's name as the path) (default:
    /// "https://ACCOUNT.blob.core.windows.net", or the environment's
    /// `AZURE_STORAGE_ENDPOINT`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The account's access key (base64), which signs every request
    /// (SharedKey). Without it or `sas_token`, the credentials come from
    /// the environment (`AZURE_STORAGE_ACCOUNT_KEY`,
    /// `AZURE_STORAGE_SAS_TOKEN`, `AZURE_CLIENT_ID` with
    /// `AZURE_CLIENT_SECRET` and `AZURE_TENANT_ID`, workload identity's
    /// `AZURE_FEDERATED_TOKEN_FILE`), else the managed identity.
    #[serde(default)]
    pub access_key: Option<String>,
    /// A shared access signature (the query string, with or without its
    /// leading "?") instead of `access_key`; it needs the write ("w") and
    /// create ("c") permissions on the container.
    #[serde(default)]
    pub sas_token: Option<String>,
    /// The key (name) of each chunk's blob. `${tag}`: the chunk's tag;
    /// `${chunk_id}`: the chunk's id (32 hex digits); `${hostname}`: this
    /// host's name; `${ext}`: ".json", ".msgpack", ".ltsv" or ".log" after
    /// the format, and ".gz" or ".zst" after the compression; strftime
    /// fields (`%Y %m %d %H %M %S` …): the chunk's first event time, UTC.
    /// Keep `${chunk_id}` in it: it makes a retried or re-sent chunk
    /// overwrite its own blob instead of adding one (stored once).
    #[serde_inline_default(DEFAULT_KEY.into())]
    pub key: String,
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
    /// Gathers events into blobs of about this size (Fluent Bit's name):
    /// it sets the buffer's `chunk_limit_size`, so one buffer chunk of this
    /// size (the events as the buffer holds them, msgpack, before
    /// formatting and compression) is one blob, with one chunk id and
    /// stored once; `total_limit_size`, unless written, grows to two such
    /// chunks. Default: the buffer's `chunk_limit_size` ("2MiB").
    #[serde(default)]
    pub total_file_size: Option<Size>,
    /// A blob is written at the latest this long after its first event
    /// came (Fluent Bit's name): it sets the buffer's `flush_interval`.
    /// Default: the buffer's `flush_interval` ("1s").
    #[serde(default)]
    pub upload_timeout: Option<Dur>,
    /// The access tier blobs are stored in: "Hot", "Cool", "Cold" or
    /// "Archive" (default: the account's).
    #[serde(default)]
    pub access_tier: Option<String>,
    /// Blobs larger than this are sent as blocks of this size (Put Block,
    /// then Put Block List) (default "16MiB"; from "1MiB" to "4000MiB").
    #[serde_inline_default(Size::mib(16))]
    pub part_size: Size,
    /// Blocks of one blob sent at once (default 4).
    #[serde_inline_default(4)]
    pub upload_concurrency: usize,
    /// A request without an answer for this long fails (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub timeout: Dur,
    /// Times one request (a Put Blob, a block) is sent again at once, with
    /// a short backoff, after a connection error, a timeout, a 5xx or a
    /// 429, before the chunk goes back to the buffer's retries (default 3).
    #[serde_inline_default(3)]
    pub request_retries: usize,
    /// TLS settings of an `https://` endpoint (`[output.tls]`: `ca`,
    /// `server_name`, `cert` and `key`); without it `https://` uses the
    /// system's trust store. See docs/tls.md.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

impl OutputPlugin for AzureBlobOutputConfig {
    const TYPE: &'static str = "azure_blob";
    const DOC: &'static str = "Writes each chunk as one block blob (JSON lines, LTSV, msgpack or raw messages; gzip or zstd) to Azure Blob Storage or Azurite, in blocks for large chunks; a chunk's blob name holds its id, so a retry or a re-send after a restart overwrites its blob (see [Storage outputs](outputs-storage.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        object_output(self, cx).map(|o| Arc::new(o) as Arc<dyn Output>)
    }
}

/// The 400s that a reload or a retry can mend: credentials in a form the
/// service does not take, a body changed on its way.
const RETRIED_400: &[&str] = &["InvalidAuthenticationInfo", "Md5Mismatch"];

/// The output as configured: layout, uploader and wording for its refusals.
fn object_output(
    cfg: AzureBlobOutputConfig,
    cx: &mut BuildContext,
) -> Result<ObjectOutput, OptionError> {
    if cfg.container.is_empty() {
        return Err(OptionError::new("container", "must not be empty"));
    }
    let layout = Layout::new(&cfg.key, cfg.format, &cfg.message_key, cfg.compression, cx)?;
    if cfg.part_size.0 < MIN_PART || cfg.part_size.0 > MAX_PART {
        return Err(OptionError::new(
            "part_size",
            format!(
                "{} is out of range: from 1MiB to 4000MiB (the largest block the Blob service takes)",
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
    if let Some(t) = &cfg.access_tier {
        if !["Hot", "Cool", "Cold", "Archive"].contains(&t.as_str()) {
            return Err(OptionError::new(
                "access_tier",
                format!("{t:?} is not an access tier (Hot, Cool, Cold or Archive)"),
            ));
        }
    }
    if cfg.access_key.is_some() && cfg.sas_token.is_some() {
        return Err(OptionError::new(
            "sas_token",
            "set `access_key` or `sas_token`, not both",
        ));
    }
    if let Some(k) = &cfg.access_key {
        use base64::Engine as _;
        if base64::engine::general_purpose::STANDARD
            .decode(k.trim())
            .is_err()
        {
            return Err(OptionError::new(
                "access_key",
                "is not base64 (an account key is 64 bytes in base64, as the portal shows it)",
            ));
        }
    }
    // Keys in the config: nothing from the environment but the
    // account and the endpoint. Without them, object_store reads the
    // environment's AZURE_* itself (keys, SAS, a service principal,
    // workload identity), then asks the managed identity.
    let own_keys = cfg.access_key.is_some() || cfg.sas_token.is_some();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let mut b = if own_keys {
        MicrosoftAzureBuilder::new()
    } else {
        MicrosoftAzureBuilder::from_env()
    };
    let account = cfg
        .account
        .clone()
        .or_else(|| env("AZURE_STORAGE_ACCOUNT_NAME"))
        .ok_or_else(|| {
            OptionError::new(
                "account",
                "set the storage account's name here or in AZURE_STORAGE_ACCOUNT_NAME",
            )
        })?;
    let endpoint = cfg
        .endpoint
        .clone()
        .or_else(|| env("AZURE_STORAGE_ENDPOINT"));
    b = b
        .with_account(&account)
        .with_container_name(&cfg.container)
        // The endpoint is written out (Azurite's too): the emulator
        // switch would take its address from the environment instead.
        .with_use_emulator(false)
        .with_retry(retry_config(cfg.request_retries, cfg.timeout.0));
    let tls = match &endpoint {
        Some(url) => {
            let e = Endpoint::parse("endpoint", url)?;
            if e.path.contains('?') {
                return Err(OptionError::new(
                    "endpoint",
                    format!("{url:?}: write the service's URL only (no query); a SAS goes in `sas_token`"),
                ));
            }
            let tls = e.tls(cfg.tls.as_ref(), cx)?;
            b = b
                .with_endpoint(url.trim_end_matches('/').to_string())
                .with_allow_http(!e.https);
            tls
        }
        None => crate::net::tls::TlsClient::build(
            Some(cfg.tls.as_ref().unwrap_or(&TlsOptions::default())),
            cx,
        )?,
    };
    if let Some(k) = &cfg.access_key {
        b = b.with_access_key(k.trim());
    }
    if let Some(s) = &cfg.sas_token {
        b = b.with_config(AzureConfigKey::SasKey, s.trim().trim_start_matches('?'));
    }
    let place = format!(
        "container {:?} at {}",
        cfg.container,
        endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"))
    );
    tracing::debug!(output = %cx.name, %place, "azure_blob output");
    let store = b
        .with_http_connector(ObjectConnector::new(tls, cfg.timeout.0))
        .build()
        .map_err(|e| OptionError::new("container", format!("{place}: {e}")))?;
    let attributes = Uploader::attributes(&layout, cfg.access_tier.as_deref());
    Ok(ObjectOutput {
        layout,
        uploader: Uploader {
            store: Arc::new(store),
            part_size: cfg.part_size.0 as usize,
            max_parts: MAX_PARTS,
            concurrency: cfg.upload_concurrency,
            attributes,
            output: "azure_blob",
            place,
        },
        refusals: Refusals {
            missing: ("ContainerNotFound", "the container does not exist"),
            credentials: "account and access_key or sas_token (or the environment's AZURE_* credentials) and their permissions",
            retried_400: RETRIED_400,
        },
    })
}
