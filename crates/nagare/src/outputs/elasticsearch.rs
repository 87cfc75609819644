//! `elasticsearch`: writes each chunk to Elasticsearch or OpenSearch with
//! the `_bulk` API (one type for both: they speak the same `_bulk`), and
//! reads the answer item by item.
//!
//! The NDJSON body is written straight from the chunk's msgpack entries
//! (formats/logstash.rs writes each document; nothing is decoded into JSON
//! values). Each document gets an `_id` derived from the chunk id and the
//! entry's position in the whole chunk (or a record field, `id_key`), so a
//! chunk sent again — after a timeout, a crash with a file buffer, or as
//! the part left after a partial write — overwrites its documents (`index`)
//! or is answered 409 for them, which counts as delivered (`create`).
//!
//! Outcomes per item (the `items` of the answer): 2xx delivered; 429 and
//! 5xx retried alone by the buffer (`FlushError::Partial`); any other 4xx
//! refused for good with "type: reason" (secondary output or dead letters,
//! counted per reason). A whole request is judged by the rules every HTTP
//! output shares (http_client.rs: 413 cut in halves and sent again;
//! 401/403, 429, 5xx and connection errors retried); a 2xx that is not a
//! bulk answer is retried whole (the ids make that safe).
//!
//! The client (keep-alive, TLS, gzip, authentication) is http_client.rs.

use std::sync::Arc;

use async_trait::async_trait;
use hyper::header::{self, HeaderValue};
use hyper::StatusCode;
use nagare_core::output::{FlushError, Output, OutputPlugin};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record;
use nagare_core::units::Size;
use nagare_forward::EventTime;
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::logstash::write_json_with_time;
use crate::net::http_client::{http_client_options, HttpSender, PartSent, Undelivered};

/// The bulk action of each document.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Adds the document, or replaces the one with its `_id`.
    #[default]
    Index,
    /// Adds the document; one with its `_id` is left as it is (409,
    /// counted as delivered). Data streams take only `create`.
    Create,
}

impl BulkAction {
    fn name(self) -> &'static str {
        match self {
            BulkAction::Index => "index",
            BulkAction::Create => "create",
        }
    }
}

http_client_options!(
    /// The `elasticsearch` output.
    ElasticsearchConfig {
        /// The server's base URL, "http://HOST:9200" or "https://HOST:9200"
        /// (with a path prefix when behind a proxy, e.g.
        /// "https://proxy/es"); requests go to `<endpoint>/_bulk`.
        /// Required.
        endpoint: String,
        /// The index (or data stream) of each document: `${tag}` is the
        /// tag, `${FIELD}` a top-level record field as text (nothing when
        /// the record lacks it), and strftime fields (`%Y.%m.%d`, …) the
        /// event time in UTC, e.g. "logs-${tag}-%Y.%m.%d". Written in
        /// lower case, as the server requires. Default "nagare".
        #[serde_inline_default("nagare".into())]
        index: String,
        /// "index" (default: add or replace) or "create" (add; a document
        /// already there with the same `_id` counts as delivered). Data
        /// streams need "create".
        #[serde(default)]
        action: BulkAction,
        /// The document field the event time is written to (RFC 3339, UTC;
        /// the record's own field of that name is replaced), as Logstash
        /// does. Default "@timestamp"; "" writes no time.
        #[serde_inline_default("@timestamp".into())]
        time_key: String,
        /// The document field the tag is written to (default: none).
        #[serde(default)]
        tag_key: Option<String>,
        /// A record field whose text is the document's `_id` (default:
        /// none; the id is derived from the chunk id and the event's
        /// position, see `generate_id`). A record without it gets the
        /// derived id.
        #[serde(default)]
        id_key: Option<String>,
        /// Give each document an `_id` derived from its chunk id and
        /// position, so a chunk sent again overwrites (or, with
        /// "create", conflicts with) what it wrote before instead of
        /// adding copies. Default true; false lets the server choose ids
        /// (a retry after a lost answer may then add copies).
        #[serde_inline_default(true)]
        generate_id: bool,
        /// A record field whose text is the document's `routing` (default: none).
        #[serde(default)]
        routing_key: Option<String>,
        /// An ingest pipeline every document goes through (default: none).
        #[serde(default)]
        pipeline: Option<String>,
        /// Send `Authorization: ApiKey <api_key>`: the "encoded" value
        /// Elasticsearch's create-API-key answer gives (base64 of
        /// "id:key"). Not with `username` or `bearer_token`.
        #[serde(default)]
        api_key: Option<String>,
        /// The largest `_bulk` body (before gzip): a chunk rendered larger
        /// is sent in several requests (default "10MiB"; servers take up
        /// to `http.max_content_length`, 100MB by default, and a request
        /// answered 413 is cut in halves anyway).
        #[serde_inline_default(Size::mib(10))]
        bulk_max_size: Size,
    }
);

impl OutputPlugin for ElasticsearchConfig {
    const TYPE: &'static str = "elasticsearch";
    const DOC: &'static str = "Writes events to Elasticsearch or OpenSearch with the `_bulk` API: index names from a template (tag, record fields, event time), `_id`s derived from the chunk so a re-sent chunk adds no copies, and the answer read per item: 429/5xx items retried alone, refused items to dead letters with their reasons (see [Search stores](outputs-search.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        let mut defaults = vec![(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )];
        if let Some(key) = &self.api_key {
            if self.username.is_some() || self.bearer_token.is_some() {
                return Err(OptionError::new(
                    "api_key",
                    "set one of `api_key`, `bearer_token` or `username`/`password`",
                ));
            }
            let v = HeaderValue::try_from(format!("ApiKey {key}"))
                .map_err(|_| OptionError::new("api_key", "not valid in a header"))?;
            defaults.push((header::AUTHORIZATION, v));
        }
        let index = IndexTemplate::parse(&self.index).map_err(|m| OptionError::new("index", m))?;
        if self.bulk_max_size.0 == 0 {
            return Err(OptionError::new("bulk_max_size", "must be more than 0"));
        }
        let sender = self.http_sender("endpoint", &self.endpoint, defaults, cx)?;
        let prefix = sender
            .client()
            .endpoint()
            .path
            .trim_end_matches('/')
            .to_string();
        let mut bulk_path =
            format!("{prefix}/_bulk?filter_path=errors,items.*.status,items.*.error");
        if let Some(p) = &self.pipeline {
            if p.is_empty()
                || !p
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(OptionError::new(
                    "pipeline",
                    format!("{p:?}: a pipeline id of letters, digits, '-', '_' and '.'"),
                ));
            }
            bulk_path.push_str("&pipeline=");
            bulk_path.push_str(p);
        }
        Ok(Arc::new(ElasticsearchOutput {
            name: cx.name.clone(),
            root: format!("{prefix}/"),
            bulk_path,
            index,
            sender: Arc::new(sender),
            cfg: self,
        }))
    }
}

struct ElasticsearchOutput {
    name: String,
    cfg: ElasticsearchConfig,
    sender: Arc<HttpSender>,
    index: IndexTemplate,
    /// "<prefix>/_bulk?filter_path=…[&pipeline=…]"
    bulk_path: String,
    /// "<prefix>/": the healthcheck's GET.
    root: String,
}

#[async_trait]
impl Output for ElasticsearchOutput {
    fn start(&self) {
        let (sender, root, name) = (self.sender.clone(), self.root.clone(), self.name.clone());
        tokio::spawn(async move { healthcheck(&sender, &root, &name).await });
    }

    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let bulk = self.render(chunk);
        // Requests of at most bulk_max_size, up to request_concurrency at
        // once; one answered 413 is cut in halves (http_client.rs).
        let parts = bulk.requests(self.cfg.bulk_max_size.0 as usize);
        let action = self.cfg.action;
        self.sender
            .send_parts(
                &self.name,
                parts,
                |i| i as u32,
                |r| {
                    let bulk = &bulk;
                    async move {
                        match self.send(bulk, r.start, r.end).await {
                            Sent::Answered(items) => items_sent(action, &items, r.len()),
                            Sent::Other(p) => p,
                        }
                    }
                },
            )
            .await
            .finish(chunk.count)
    }
}

/// The answer to one `_bulk` request.
enum Sent {
    /// Each item's status and error, in the order sent.
    Answered(Vec<ItemOutcome>),
    /// Not a bulk answer: the request failed whole (Retry: connection,
    /// 429, 5xx, 401/403, a 2xx that is not a bulk answer; Reject: another
    /// 4xx), or was too large (413).
    Other(PartSent),
}

/// One item of a bulk answer.
struct ItemOutcome {
    status: u16,
    /// "type: reason (caused by type: reason)"
    error: Option<String>,
}

/// The entries of a request of `n` documents the answer's items say were
/// not taken: 429 and 5xx to retry, other 4xx refused; a `create`
/// answered 409 was written before (a chunk sent again), so delivered.
fn items_sent(action: BulkAction, items: &[ItemOutcome], n: usize) -> PartSent {
    let mut undone = Vec::new();
    for i in 0..n {
        let Some(item) = items.get(i) else {
            // An answer with fewer items than documents: the server did
            // not say what became of the rest; they are sent again.
            undone.push((
                i,
                Undelivered::Retry(
                    "the bulk answer has fewer items than the request had documents".into(),
                ),
            ));
            continue;
        };
        let why = || {
            item.error
                .clone()
                .unwrap_or_else(|| format!("status_{}: no error text", item.status))
        };
        match item.status {
            200..=299 => {}
            409 if action == BulkAction::Create => {}
            429 | 500..=599 => undone.push((
                i,
                Undelivered::Retry(format!("item answered {}: {}", item.status, why())),
            )),
            _ => undone.push((i, Undelivered::Reject(why()))),
        }
    }
    if undone.is_empty() {
        PartSent::Ok
    } else {
        PartSent::Some(undone)
    }
}

/// A chunk's `_bulk` body: for each entry, its action line and document.
struct Bulk {
    body: Vec<u8>,
    /// Where each entry's action line starts, and the body's end last.
    starts: Vec<usize>,
}

impl Bulk {
    /// Entry ranges whose bodies are at most `max` bytes (one entry at
    /// least), of about one size (http_client.rs `even_parts`).
    fn requests(&self, max: usize) -> Vec<std::ops::Range<usize>> {
        let sizes: Vec<usize> = self.starts.windows(2).map(|w| w[1] - w[0]).collect();
        crate::net::http_client::even_parts(&sizes, max)
    }
}

impl ElasticsearchOutput {
    fn render(&self, chunk: &Chunk) -> Bulk {
        use base64::Engine as _;
        use nagare_core::json::write_string;
        let mut body = Vec::with_capacity(chunk.len * 2 + chunk.count as usize * 96);
        let mut starts = Vec::with_capacity(chunk.count as usize + 1);
        let chunk_key = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(chunk.id);
        let mut names = self.index.for_chunk(&chunk.tag);
        let time_key = (!self.cfg.time_key.is_empty()).then_some(self.cfg.time_key.as_str());
        let tag_field = self.cfg.tag_key.as_deref().map(|k| (k, &*chunk.tag));
        let action = self.cfg.action.name().as_bytes();
        for (i, (time, rec, _)) in chunk.entries().enumerate() {
            starts.push(body.len());
            body.extend_from_slice(b"{\"");
            body.extend_from_slice(action);
            body.extend_from_slice(b"\":{\"_index\":");
            write_string(&mut body, names.name(time, rec).as_bytes());
            let own_id = self
                .cfg
                .id_key
                .as_deref()
                .and_then(|k| record::field_text(rec, k.as_bytes()));
            if let Some(id) = own_id {
                body.extend_from_slice(b",\"_id\":");
                write_string(&mut body, &id);
            } else if self.cfg.generate_id {
                use std::io::Write as _;
                let _ = write!(
                    body,
                    ",\"_id\":\"{chunk_key}-{}\"",
                    chunk.position(i as u32)
                );
            }
            if let Some(r) = self
                .cfg
                .routing_key
                .as_deref()
                .and_then(|k| record::field_text(rec, k.as_bytes()))
            {
                body.extend_from_slice(b",\"routing\":");
                write_string(&mut body, &r);
            }
            body.extend_from_slice(b"}}\n");
            write_json_with_time(&mut body, time_key, time, rec, tag_field);
            body.push(b'\n');
        }
        starts.push(body.len());
        Bulk { body, starts }
    }

    /// POSTs the entries a..b and reads the answer.
    async fn send(&self, bulk: &Bulk, a: usize, b: usize) -> Sent {
        let part = bulk.body[bulk.starts[a]..bulk.starts[b]].to_vec();
        let size = part.len();
        let answer = match self.sender.post(&self.bulk_path, part, &[]).await {
            Ok(answer) => answer,
            Err(FlushError::Retry(e)) => return Sent::Other(PartSent::Retry(e)),
            Err(e) => return Sent::Other(PartSent::Reject(format!("bulk_request_refused: {e}"))),
        };
        let client = self.sender.client();
        let at = &client.endpoint().authority;
        let status = answer.status;
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Sent::Other(PartSent::TooLarge(format!(
                "request_entity_too_large: {at} answered 413 to {size} bytes ({} documents)",
                b - a
            )));
        }
        if !status.is_success() {
            // 401/403, 429, 5xx: retried; other statuses refused.
            return Sent::Other(match client.judge(answer).await {
                Ok(_) => PartSent::Retry(format!("{at} answered {status}")),
                Err(FlushError::Retry(e)) => PartSent::Retry(e),
                Err(e) => PartSent::Reject(format!("bulk_request_refused: {e}")),
            });
        }
        match parse_bulk_answer(&answer.body) {
            Ok(items) => Sent::Answered(items),
            Err(e) => Sent::Other(PartSent::Retry(format!(
                "{at} answered {status} but not a bulk answer ({e}): {}",
                text_of(&answer.body)
            ))),
        }
    }
}

/// The start of an answer body, for an error message.
fn text_of(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)])
        .trim()
        .to_string()
}

#[derive(Deserialize)]
struct BulkAnswer {
    #[allow(dead_code)]
    errors: bool,
    /// Absent when `filter_path` left nothing of an empty request.
    #[serde(default)]
    items: Vec<BulkItem>,
}

/// `{"<action>": {"status": …, "error": …}}`
#[derive(Deserialize)]
struct BulkItem {
    #[serde(rename = "index", alias = "create", alias = "update", alias = "delete")]
    op: BulkItemResult,
}

#[derive(Deserialize)]
struct BulkItemResult {
    status: u16,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

fn parse_bulk_answer(body: &[u8]) -> Result<Vec<ItemOutcome>, serde_json::Error> {
    let a: BulkAnswer = serde_json::from_slice(body)?;
    Ok(a.items
        .into_iter()
        .map(|i| ItemOutcome {
            status: i.op.status,
            error: i.op.error.as_ref().map(describe_error),
        })
        .collect())
}

/// "type: reason (caused by type: reason)", from an item's `error`.
fn describe_error(e: &serde_json::Value) -> String {
    let one = |e: &serde_json::Value| -> String {
        match e {
            serde_json::Value::Object(o) => {
                let kind = o.get("type").and_then(|v| v.as_str()).unwrap_or("error");
                match o.get("reason").and_then(|v| v.as_str()) {
                    Some(r) => format!("{kind}: {r}"),
                    None => kind.to_string(),
                }
            }
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    };
    let mut text = one(e);
    if let Some(cause) = e.get("caused_by") {
        text.push_str(&format!(" (caused by {})", one(cause)));
    }
    text
}

/// Logs the server's version and cluster at start, or why it cannot be
/// reached; never holds the start-up (the events wait in the buffer).
async fn healthcheck(sender: &HttpSender, root: &str, name: &str) {
    let at = &sender.client().endpoint().authority;
    let answer = match sender.get(root).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(output = %name, error = %e,
                "elasticsearch not reachable at start; events wait in the buffer and are retried");
            return;
        }
    };
    if !answer.status.is_success() {
        tracing::warn!(output = %name, server = %at, status = %answer.status,
            answer = %text_of(&answer.body), "elasticsearch healthcheck (GET /) refused");
        return;
    }
    let v: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
    let s = |p: &str| {
        v.pointer(p)
            .and_then(|x| x.as_str())
            .unwrap_or("?")
            .to_string()
    };
    let distribution = v
        .pointer("/version/distribution")
        .and_then(|x| x.as_str())
        .unwrap_or("elasticsearch");
    tracing::info!(output = %name, server = %at, distribution, version = %s("/version/number"),
        cluster = %s("/cluster_name"), "elasticsearch reachable");
}

/// The `index` option: literal text, `${tag}`, `${FIELD}` and strftime
/// fields.
struct IndexTemplate {
    text: String,
    /// The record fields named (`${FIELD}`), in order of appearance.
    fields: Vec<String>,
    /// Has strftime fields.
    timed: bool,
}

impl IndexTemplate {
    fn parse(t: &str) -> Result<IndexTemplate, String> {
        if t.is_empty() {
            return Err("must not be empty".into());
        }
        let mut fields = Vec::new();
        let mut rest = t;
        while let Some(at) = rest.find("${") {
            let Some(end) = rest[at..].find('}') else {
                return Err(format!("{t:?}: `${{` without its `}}`"));
            };
            let name = &rest[at + 2..at + end];
            if name.is_empty() {
                return Err(format!("{t:?}: `${{}}` names no field"));
            }
            if name != "tag" && !fields.iter().any(|f| f == name) {
                fields.push(name.to_string());
            }
            rest = &rest[at + end + 1..];
        }
        let timed = t.contains('%');
        if timed {
            let mut probe = t.replace("${", "x").replace('}', "x");
            for f in &fields {
                probe = probe.replace(f.as_str(), "x");
            }
            strftime(&probe, 0).ok_or_else(|| {
                format!("{t:?} has a %-field strftime does not know (known: %Y %m %d %H …; write %% for a %)")
            })?;
        }
        Ok(IndexTemplate {
            text: t.to_string(),
            fields,
            timed,
        })
    }

    /// The names of one chunk's events.
    fn for_chunk(&self, tag: &str) -> IndexNames<'_> {
        IndexNames {
            template: self,
            base: self.text.replace("${tag}", &self.escape(tag)),
            last: None,
            name: String::new(),
        }
    }

    /// A value inserted into a strftime format: `%` doubled.
    fn escape<'a>(&self, v: &'a str) -> std::borrow::Cow<'a, str> {
        if self.timed && v.contains('%') {
            v.replace('%', "%%").into()
        } else {
            v.into()
        }
    }
}

/// Renders index names for one chunk, the last one kept while the time's
/// second stays the same (without record fields, the usual case).
struct IndexNames<'t> {
    template: &'t IndexTemplate,
    /// The template with the tag in.
    base: String,
    /// The second `name` was made for (no record fields only).
    last: Option<u32>,
    name: String,
}

impl IndexNames<'_> {
    fn name(&mut self, time: EventTime, rec: &[u8]) -> &str {
        let t = self.template;
        if t.fields.is_empty() {
            // Without record fields the name changes with the time only.
            let key = if t.timed { time.secs } else { 0 };
            if self.last != Some(key) {
                self.name = finish(&self.base, t.timed, time);
                self.last = Some(key);
            }
            return &self.name;
        }
        let mut s = self.base.clone();
        for f in &t.fields {
            let v = record::field_text(rec, f.as_bytes())
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_default();
            s = s.replace(&format!("${{{f}}}"), &t.escape(&v));
        }
        self.name = finish(&s, t.timed, time);
        &self.name
    }
}

/// The template's time fields filled in, lower case.
fn finish(s: &str, timed: bool, time: EventTime) -> String {
    let s = if timed {
        strftime(s, time.secs as i64).unwrap_or_else(|| s.to_string())
    } else {
        s.to_string()
    };
    s.to_lowercase()
}

/// `format` with the UTC time `secs`; None for a field chrono does not know.
fn strftime(format: &str, secs: i64) -> Option<String> {
    let dt = chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default();
    let mut s = String::new();
    // fmt::Write returns a bad field's error; io::Write would panic.
    std::fmt::Write::write_fmt(&mut s, format_args!("{}", dt.format(format))).ok()?;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: serde_json::Value) -> Vec<u8> {
        let mut mp = Vec::new();
        nagare_core::json::msgpack_from_json(&v, &mut mp);
        mp
    }

    #[test]
    fn index_names_from_tag_fields_and_time() {
        let t = IndexTemplate::parse("logs-${tag}-${svc}-%Y.%m.%d").unwrap();
        let mut n = t.for_chunk("App.Web");
        let day = EventTime::new(1_700_000_000, 0);
        assert_eq!(
            n.name(day, &rec(serde_json::json!({"svc": "Pay%Y"}))),
            "logs-app.web-pay%y-2023.11.14"
        );
        assert_eq!(
            n.name(day, &rec(serde_json::json!({}))),
            "logs-app.web--2023.11.14"
        );
        let t = IndexTemplate::parse("x-%Y").unwrap();
        let mut n = t.for_chunk("a");
        assert_eq!(
            n.name(EventTime::new(0, 0), &rec(serde_json::json!({}))),
            "x-1970"
        );
        assert_eq!(n.name(day, &rec(serde_json::json!({}))), "x-2023");
        let t = IndexTemplate::parse("plain").unwrap();
        let mut n = t.for_chunk("a");
        assert_eq!(n.name(day, &rec(serde_json::json!({}))), "plain");
        assert_eq!(
            n.name(EventTime::new(1, 0), &rec(serde_json::json!({}))),
            "plain"
        );
        assert!(IndexTemplate::parse("a-%Q").is_err());
        assert!(IndexTemplate::parse("a-${x").is_err());
        assert!(IndexTemplate::parse("").is_err());
    }

    #[test]
    fn items_sorted_into_delivered_retried_and_refused() {
        let answer = br#"{"errors":true,"items":[
            {"create":{"status":201}},
            {"create":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"exists"}}},
            {"create":{"status":429,"error":{"type":"es_rejected_execution_exception","reason":"queue full"}}},
            {"create":{"status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [n]","caused_by":{"type":"number_format_exception","reason":"For input string: \"x\""}}}},
            {"create":{"status":503,"error":{"type":"unavailable_shards_exception","reason":"no primary"}}}
        ]}"#;
        let items = parse_bulk_answer(answer).unwrap();
        // A request of six documents: the answer lacks the sixth item.
        let PartSent::Some(undone) = items_sent(BulkAction::Create, &items, 6) else {
            panic!("all delivered?")
        };
        let retried: Vec<usize> = undone
            .iter()
            .filter(|(_, u)| matches!(u, Undelivered::Retry(_)))
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(retried, vec![2, 4, 5]);
        let refused: Vec<(usize, &str)> = undone
            .iter()
            .filter_map(|(i, u)| match u {
                Undelivered::Reject(w) => Some((*i, w.as_str())),
                Undelivered::Retry(_) => None,
            })
            .collect();
        assert_eq!(
            refused,
            vec![(3, "mapper_parsing_exception: failed to parse field [n] (caused by number_format_exception: For input string: \"x\")")]
        );
        // With `index`, a 409 is not a delivery.
        let PartSent::Some(undone) = items_sent(BulkAction::Index, &items[..2], 2) else {
            panic!("the 409 delivered?")
        };
        assert!(matches!(undone[..], [(1, Undelivered::Reject(_))]));
        assert!(parse_bulk_answer(b"<html>busy</html>").is_err());
        assert!(
            parse_bulk_answer(br#"{"errors":false,"items":[{"index":{"status":201}}]}"#).is_ok()
        );
    }

    #[test]
    fn requests_cut_at_entry_boundaries() {
        let b = Bulk {
            body: vec![0; 100],
            starts: vec![0, 10, 20, 70, 80, 100],
        };
        assert_eq!(b.requests(1000), vec![0..5]);
        assert_eq!(b.requests(30), vec![0..2, 2..3, 3..5]);
        assert_eq!(b.requests(1), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
    }
}
