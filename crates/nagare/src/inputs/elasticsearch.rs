//! `elasticsearch`: the Elasticsearch `_bulk` API, so that what already
//! sends to Elasticsearch (Beats' `output.elasticsearch`, Fluent Bit's and
//! Fluentd's es outputs, Logstash, the clients' `helpers.bulk`) can send to
//! nagare instead, as Fluent Bit's in_elasticsearch.
//!
//! - `POST /_bulk` and `POST /<index>/_bulk` (PUT too): NDJSON, an action
//!   line and, for `index` and `create`, the document. Each document
//!   becomes one event whose record is the document as sent; its tag is
//!   the `tag` option with `${index}` replaced by the document's index (the
//!   action's `_index`, else the path's). `update` and `delete` are
//!   answered with an error item (nagare keeps no documents to change).
//! - The answer has one item per action, in order, as Elasticsearch's
//!   (`{"took":..,"errors":..,"items":[{"create":{"_index":..,"_id":..,
//!   "status":201,..}}]}`); a document that is not a JSON object is an
//!   error item (400, `mapper_parsing_exception`), the rest are taken. A
//!   malformed action line refuses the whole request (400), as
//!   Elasticsearch does.
//! - While a matched output's buffer is full the request is answered 429
//!   (`es_rejected_execution_exception`): Beats and the clients' bulk
//!   helpers send it again later. Nothing of a refused request was taken.
//! - The requests clients make before they send: `GET /` (the version
//!   they check, option `version`), `HEAD /`, `GET /_license` and
//!   `GET /_xpack` (Beats look there), and template, pipeline and policy
//!   calls (`/_index_template/..`, `/_template/..`, `/_ilm/policy/..`),
//!   answered as if each already existed or was stored, so setup succeeds
//!   and nothing is kept. Every answer carries `X-Elastic-Product:
//!   Elasticsearch`, which Elastic's 8.x clients check.
//!
//! The listener (keep-alive, limits, bearer/basic auth, gzip/zstd,
//! `ack = "delivered"`) is http_listener.rs, shared with the `http` input.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Response, StatusCode};
use nagare_core::json::write_string;
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::inputs::common::http_listener::{
    self, http_listener_options, Answered, Body, Decode, Events, Reject,
};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::{Parser, ParserConfig, ParserType};

http_listener_options!(
    ElasticsearchInputConfig {
        /// The tag of the events; `${index}` is replaced by each document's
        /// index (default "es.${index}"; a tag without `${index}` puts every
        /// document under that one tag).
        #[serde_inline_default("es.${index}".into())]
        tag: String,
        /// The document field that gives the event time (RFC 3339 or epoch
        /// seconds); it stays in the record. A document without it, or whose
        /// value is not a time, gets the time of arrival (default
        /// "@timestamp", as Beats and Logstash write it; "" for arrival
        /// time always).
        #[serde_inline_default("@timestamp".into())]
        time_key: String,
        /// Add the document's index to its record under this field (default:
        /// not added).
        #[serde(default)]
        index_key: Option<String>,
        /// Add the document's `_id` (the one sent, or the one nagare gave it)
        /// to its record under this field (default: not added).
        #[serde(default)]
        id_key: Option<String>,
        /// The Elasticsearch version `GET /` reports. Beats refuse a server
        /// older than themselves and Elastic's clients one of another major
        /// version; raise it for newer senders (default "8.17.0").
        #[serde_inline_default("8.17.0".into())]
        version: String,
    }
);

impl InputPlugin for ElasticsearchInputConfig {
    const TYPE: &'static str = "elasticsearch";
    const DOC: &'static str = "Receives documents sent to the Elasticsearch `_bulk` API (Beats, Fluent Bit, Fluentd, Logstash, Elastic's and OpenSearch's clients): each `index`/`create` document becomes an event tagged from its index, answered per item; 429 while buffers are full (see [Migrating senders](migration-senders.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let tls = self.listener().check(cx)?;
        check_tag(&self.tag.replace(INDEX, "index"))
            .map_err(|e| OptionError::new("tag", format!("{:?}: {e}", self.tag)))?;
        for (key, v) in [("index_key", &self.index_key), ("id_key", &self.id_key)] {
            if v.as_deref() == Some("") {
                return Err(OptionError::new(key, "must name a field"));
            }
        }
        let mut parts = self.version.split('.');
        let numeric = parts.clone().count() == 3 && parts.all(|p| p.parse::<u32>().is_ok());
        if !numeric {
            return Err(OptionError::new(
                "version",
                format!("{:?} is not a version MAJOR.MINOR.PATCH", self.version),
            ));
        }
        Ok(Box::new(EsInput { cfg: self, tls }))
    }
}

/// What `tag` replaces with the document's index.
const INDEX: &str = "${index}";

/// A tag is dotted words: no spaces, slashes or control characters.
fn check_tag(t: &str) -> Result<(), String> {
    if t.is_empty() {
        return Err("a tag must not be empty".into());
    }
    match t
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == '/')
    {
        Some(c) => Err(format!("not a tag: it holds {c:?}")),
        None => Ok(()),
    }
}

/// A built elasticsearch input: its options and its TLS files, loaded.
struct EsInput {
    cfg: ElasticsearchInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for EsInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let decode = Arc::new(EsDecode::new(&self.cfg)?);
        http_listener::start(
            &cx.name,
            <ElasticsearchInputConfig as InputPlugin>::TYPE,
            self.cfg.listener(),
            self.tls,
            decode,
            cx.router,
            cx.stats,
            cx.shutdown,
        )
        .await
    }
}

/// How requests become events and answers.
pub struct EsDecode {
    tag: String,
    /// The json parser with `time_key` (kept in the record).
    timed: Parser,
    /// The json parser without it: a document whose time_key is not a time.
    plain: Parser,
    index_key: Option<String>,
    id_key: Option<String>,
    /// The body of `GET /`.
    root: Bytes,
    /// Makes the ids of documents sent without one unique.
    ids: IdMaker,
    /// The last answer's size per KiB of its request's body: the next
    /// answer's first allocation (growing it by doubling was 3 % of the
    /// input's CPU at 100-byte documents, whose answer outweighs them).
    answer_per_kib: AtomicUsize,
}

impl EsDecode {
    /// The decoder of `cfg`'s input (public for the fuzz target and bench).
    pub fn new(cfg: &ElasticsearchInputConfig) -> anyhow::Result<EsDecode> {
        let parser = |time_key: Option<String>| {
            Parser::new(&ParserConfig {
                kind: ParserType::Json,
                time_key,
                keep_time_key: true,
                ..ParserConfig::default()
            })
        };
        let time_key = (!cfg.time_key.is_empty()).then(|| cfg.time_key.clone());
        let root = serde_json::json!({
            "name": "nagare",
            "cluster_name": "nagare",
            "cluster_uuid": "nagare-elasticsearch-input",
            "version": {
                "number": cfg.version,
                "build_flavor": "default",
                "build_type": "nagare",
                "build_hash": "0000000000000000000000000000000000000000",
                "build_date": "2024-01-01T00:00:00.000000000Z",
                "build_snapshot": false,
                "lucene_version": "9.12.0",
                "minimum_wire_compatibility_version": "7.17.0",
                "minimum_index_compatibility_version": "7.0.0",
            },
            "tagline": "You Know, for Search",
        });
        Ok(EsDecode {
            tag: cfg.tag.clone(),
            timed: parser(time_key)?,
            plain: parser(None)?,
            index_key: cfg.index_key.clone(),
            id_key: cfg.id_key.clone(),
            root: Bytes::from(root.to_string()),
            ids: IdMaker::new(),
            answer_per_kib: AtomicUsize::new(128),
        })
    }

    fn tag_of(&self, index: &str) -> String {
        self.tag.replace(INDEX, index)
    }
}

/// Ids for documents sent without one: 20 characters, as Elasticsearch's,
/// unique in this process and unlikely to repeat across restarts (the
/// first 8 are the start time).
struct IdMaker {
    /// 8 hex digits of the start time.
    prefix: [u8; 8],
    next: AtomicU64,
}

/// Ids a request takes from the shared counter at a time: one atomic add
/// per id, its cache line moving between the cores, was 5 % of the
/// input's CPU at 100-byte documents (perf).
const ID_BLOCK: u64 = 256;

const HEX: &[u8; 16] = b"0123456789abcdef";

impl IdMaker {
    fn new() -> IdMaker {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let start = (start >> 20) & 0xffff_ffff;
        let mut prefix = [0u8; 8];
        for (i, b) in prefix.iter_mut().enumerate() {
            *b = HEX[(start >> (28 - 4 * i)) as usize & 15];
        }
        IdMaker {
            prefix,
            next: AtomicU64::new(0),
        }
    }

    /// The next `ID_BLOCK` counter values, for one request.
    fn block(&self) -> std::ops::Range<u64> {
        let first = self.next.fetch_add(ID_BLOCK, Ordering::Relaxed);
        first..first + ID_BLOCK
    }

    /// The id of counter value `n`: the prefix, then 12 hex digits of `n`.
    /// Written by hand, not by `format!`: it is made for every document
    /// sent without an id (Beats send none), and `format!` and its String
    /// cost 15 % of the input's CPU (perf, docs/benchmarks/receivers.md).
    fn make(&self, n: u64) -> [u8; 20] {
        let n = n & 0xffff_ffff_ffff;
        let mut out = [0u8; 20];
        out[..8].copy_from_slice(&self.prefix);
        for (i, b) in out[8..].iter_mut().enumerate() {
            *b = HEX[(n >> (44 - 4 * i)) as usize & 15];
        }
        out
    }
}

/// The action lines clients send (`{"create":{"_index":"logs"}}`, with
/// `_id` and other keys of string values, none escaped) read without serde:
/// serde's derive made action lines a fifth of the input's CPU. None for
/// any other line, which serde then reads (and refuses with its message).
fn quick_action(line: &[u8]) -> Option<(Op, Option<&str>, Option<&str>)> {
    let mut r = Scan { b: line, i: 0 };
    r.byte(b'{')?;
    let op = match r.bytes()? {
        b"index" => Op::Index,
        b"create" => Op::Create,
        b"update" => Op::Update,
        b"delete" => Op::Delete,
        _ => return None,
    };
    r.byte(b':')?;
    r.byte(b'{')?;
    let (mut index, mut id) = (None, None);
    if !r.next_is(b'}') {
        loop {
            let key = r.bytes()?;
            r.byte(b':')?;
            let value = r.string()?;
            if key == b"_index" || key == b"_id" {
                let slot = if key == b"_index" {
                    &mut index
                } else {
                    &mut id
                };
                if slot.is_some() {
                    // A duplicate key: serde's error names it.
                    return None;
                }
                *slot = Some(value);
            } else if std::str::from_utf8(key).is_err() {
                // Other keys (routing, pipeline, ...) are ignored, as Meta
                // does, but a key that is not UTF-8 is serde's to refuse.
                return None;
            }
            if !r.next_is(b',') {
                break;
            }
            r.i += 1;
        }
    }
    r.byte(b'}')?;
    r.byte(b'}')?;
    r.skip_ws();
    (r.i == r.b.len()).then_some((op, index, id))
}

/// A cursor over one action line for quick_action.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn skip_ws(&mut self) {
        while matches!(self.b.get(self.i), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    fn next_is(&mut self, c: u8) -> bool {
        self.skip_ws();
        self.b.get(self.i) == Some(&c)
    }

    fn byte(&mut self, c: u8) -> Option<()> {
        self.next_is(c).then(|| self.i += 1)
    }

    /// A string without escapes or control characters, as bytes (a key:
    /// compared with ASCII names, no UTF-8 check needed).
    fn bytes(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        let rest = &self.b[self.i..];
        // A byte loop, not memchr: these strings are a few bytes long.
        let end = rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if rest[end] != b'"' {
            return None;
        }
        self.i += end + 1;
        Some(&rest[..end])
    }

    /// A string without escapes or control characters (a value).
    fn string(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
}

/// The one key of an action line, e.g. `{"index":{"_index":"logs"}}`.
#[derive(Deserialize)]
struct ActionLine<'a> {
    #[serde(borrow)]
    index: Option<Meta<'a>>,
    #[serde(borrow)]
    create: Option<Meta<'a>>,
    #[serde(borrow)]
    update: Option<Meta<'a>>,
    #[serde(borrow)]
    delete: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(rename = "_index", borrow)]
    index: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "_id", borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Index,
    Create,
    Update,
    Delete,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Index => "index",
            Op::Create => "create",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// An action read, waiting for its document line; its `_index` and `_id`
/// are in `Bulk::action_index` and `Bulk::action_id` when it has them.
struct Pending {
    op: Op,
    index: bool,
    id: bool,
}

/// The request being decoded: the events by tag and the answer's items.
struct Bulk<'d> {
    d: &'d EsDecode,
    /// The index of the path (`/<index>/_bulk`).
    path_index: Option<String>,
    now: EventTime,
    batches: Vec<Events>,
    /// The batch the last document went to, and its index.
    last: Option<(String, usize)>,
    items: Vec<u8>,
    errors: bool,
    pending: Option<Pending>,
    /// The pending action's `_index` and `_id`, in Strings kept for the
    /// whole request (a String made per document was 3 % of the input's
    /// CPU at 100-byte documents).
    action_index: String,
    action_id: String,
    /// Ids for documents sent without one, taken from `EsDecode::ids`.
    ids: std::ops::Range<u64>,
    /// The answer's item for a stored document up to its `_id`
    /// (`{"create":{"_index":"logs","_id":`), for `ok_head_op` and the
    /// index of `last` (None when `last` changes).
    ok_head: Vec<u8>,
    ok_head_op: Option<Op>,
    /// Lines read (for error messages).
    line: usize,
    size_hint: usize,
}

impl Bulk<'_> {
    /// A stored document's item; its id is `made` (no escaping needed)
    /// or the one sent.
    fn item_ok(&mut self, op: Op, index: &str, id: &[u8], made: bool) {
        if self.ok_head_op != Some(op) {
            self.ok_head.clear();
            write_item_head(&mut self.ok_head, op, index);
            self.ok_head_op = Some(op);
        }
        if self.items.len() > ANSWER_HEAD {
            self.items.push(b',');
        }
        self.items.extend_from_slice(&self.ok_head);
        if made {
            self.items.push(b'"');
            self.items.extend_from_slice(id);
            self.items.push(b'"');
        } else {
            write_string(&mut self.items, id);
        }
        // Elasticsearch's fields for a stored document; clients read
        // `status` (and `result`), the rest is there for ones that expect it.
        self.items.extend_from_slice(
            b",\"_version\":1,\"result\":\"created\",\"_shards\":{\"total\":1,\"successful\":1,\"failed\":0},\"_seq_no\":0,\"_primary_term\":1,\"status\":201}}",
        );
    }

    fn item_error(&mut self, op: Op, index: &str, id: Option<&str>, kind: &str, reason: &str) {
        self.errors = true;
        self.item_head(op, index, id);
        self.items
            .extend_from_slice(b",\"status\":400,\"error\":{\"type\":");
        write_string(&mut self.items, kind.as_bytes());
        self.items.extend_from_slice(b",\"reason\":");
        write_string(&mut self.items, reason.as_bytes());
        self.items.extend_from_slice(b"}}}");
    }

    fn item_head(&mut self, op: Op, index: &str, id: Option<&str>) {
        if self.items.len() > ANSWER_HEAD {
            self.items.push(b',');
        }
        write_item_head(&mut self.items, op, index);
        match id {
            Some(id) => write_string(&mut self.items, id.as_bytes()),
            None => self.items.extend_from_slice(b"null"),
        }
    }

    /// One line of the body (without its newline).
    fn line(&mut self, line: &[u8]) -> Result<(), Reject> {
        self.line += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match self.pending.take() {
            None => {
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    return Ok(());
                }
                self.action(line)
            }
            Some(p) => {
                self.document(p, line);
                Ok(())
            }
        }
    }

    fn action(&mut self, line: &[u8]) -> Result<(), Reject> {
        let n = self.line;
        let malformed = |why: String| {
            Reject::bad(format!(
                "Malformed action/metadata line [{n}]: {why} (expected one of [create, delete, index, update])"
            ))
        };
        let (op, index, id) = match quick_action(line) {
            Some(quick) => quick,
            None => {
                let (op, meta) = self.slow_action(line, malformed)?;
                // Not borrowed from the line: these are rare.
                let (index, id) = (
                    meta.index.map(Cow::into_owned),
                    meta.id.map(Cow::into_owned),
                );
                return self.pending(op, index.as_deref(), id.as_deref());
            }
        };
        self.pending(op, index, id)
    }

    /// Keeps an action read for its document line.
    fn pending(&mut self, op: Op, index: Option<&str>, id: Option<&str>) -> Result<(), Reject> {
        if op == Op::Delete {
            // No document line follows a delete.
            let index = index
                .or(self.path_index.as_deref())
                .unwrap_or("")
                .to_owned();
            self.item_error(
                op,
                &index,
                id,
                "illegal_argument_exception",
                "nagare's elasticsearch input takes index and create actions only",
            );
            return Ok(());
        }
        self.action_index.clear();
        self.action_index.push_str(index.unwrap_or(""));
        self.action_id.clear();
        self.action_id.push_str(id.unwrap_or(""));
        self.pending = Some(Pending {
            op,
            index: index.is_some(),
            id: id.is_some(),
        });
        Ok(())
    }

    /// An action line that quick_action does not take, read by serde.
    fn slow_action<'l>(
        &self,
        line: &'l [u8],
        malformed: impl Fn(String) -> Reject,
    ) -> Result<(Op, Meta<'l>), Reject> {
        let a: ActionLine = serde_json::from_slice(line).map_err(|e| malformed(e.to_string()))?;
        let mut found = [
            (Op::Index, a.index),
            (Op::Create, a.create),
            (Op::Update, a.update),
            (Op::Delete, a.delete),
        ]
        .into_iter()
        .filter_map(|(op, m)| m.map(|m| (op, m)));
        let Some((op, meta)) = found.next() else {
            return Err(malformed("no action".into()));
        };
        if found.next().is_some() {
            return Err(malformed("more than one action on one line".into()));
        }
        Ok((op, meta))
    }

    fn document(&mut self, p: Pending, doc: &[u8]) {
        // Taken out of self for the call, which writes to the rest of it.
        let index = std::mem::take(&mut self.action_index);
        let id = std::mem::take(&mut self.action_id);
        let path_index = self.path_index.take();
        let index_of = if p.index {
            Some(index.as_str())
        } else {
            path_index.as_deref()
        };
        self.stored(p.op, index_of, p.id.then_some(id.as_str()), doc);
        self.action_index = index;
        self.action_id = id;
        self.path_index = path_index;
    }

    /// A document line: its event added to its index's batch, its item
    /// written.
    fn stored(&mut self, op: Op, index: Option<&str>, id: Option<&str>, doc: &[u8]) {
        let Some(index) = index else {
            self.item_error(
                op,
                "",
                id,
                "action_request_validation_exception",
                "Validation Failed: 1: index is missing;",
            );
            return;
        };
        if op == Op::Update {
            self.item_error(
                op,
                index,
                id,
                "illegal_argument_exception",
                "nagare's elasticsearch input takes index and create actions only",
            );
            return;
        }
        let b = match &self.last {
            Some((i, b)) if i == index => *b,
            _ => {
                let tag = self.d.tag_of(index);
                if let Err(e) = check_tag(&tag) {
                    let reason = format!("the tag {tag:?} of index {index:?}: {e}");
                    self.item_error(op, index, id, "invalid_index_name_exception", &reason);
                    return;
                }
                let b = match self.batches.iter().position(|e| e.tag == tag) {
                    Some(b) => b,
                    None => {
                        let cap = if self.batches.is_empty() {
                            self.size_hint
                        } else {
                            0
                        };
                        self.batches.push(Events {
                            tag,
                            entries: Vec::with_capacity(cap),
                            count: 0,
                        });
                        self.batches.len() - 1
                    }
                };
                self.last = Some((index.to_owned(), b));
                self.ok_head_op = None;
                b
            }
        };
        let made_id;
        let (id, made) = match id {
            Some(id) => (id.as_bytes(), false),
            None => {
                if self.ids.is_empty() {
                    self.ids = self.d.ids.block();
                }
                made_id = self.d.ids.make(self.ids.start);
                self.ids.start += 1;
                (&made_id[..], true)
            }
        };
        let mut extra: [(&[u8], &[u8]); 2] = [(b"", b""); 2];
        let mut n = 0;
        if let Some(k) = &self.d.index_key {
            extra[n] = (k.as_bytes(), index.as_bytes());
            n += 1;
        }
        if let Some(k) = &self.d.id_key {
            extra[n] = (k.as_bytes(), id);
            n += 1;
        }
        let out = &mut self.batches[b].entries;
        let at = out.len();
        out.push(0x92);
        out.extend_from_slice(&self.now.to_bytes());
        let mut parsed = crate::parsers::json::parse(&self.d.timed, doc, &extra[..n], out);
        if parsed.is_err() {
            // Perhaps only its time_key is not a time: the document is
            // still taken, at the time of arrival.
            out.truncate(at + 11);
            parsed = crate::parsers::json::parse(&self.d.plain, doc, &extra[..n], out);
        }
        match parsed {
            Ok(time) => {
                if let Some(t) = time {
                    out[at + 1..at + 11].copy_from_slice(&t.to_bytes());
                }
                self.batches[b].count += 1;
                self.item_ok(op, index, id, made);
            }
            Err(e) => {
                out.truncate(at);
                let reason = format!("failed to parse the document of line {}: {e}", self.line);
                let id = std::str::from_utf8(id).unwrap_or_default();
                self.item_error(op, index, Some(id), "mapper_parsing_exception", &reason);
            }
        }
    }
}

/// The start of an answer's item, up to its `_id`'s value:
/// `{"create":{"_index":"logs","_id":`.
fn write_item_head(out: &mut Vec<u8>, op: Op, index: &str) {
    out.extend_from_slice(b"{\"");
    out.extend_from_slice(op.name().as_bytes());
    out.extend_from_slice(b"\":{\"_index\":");
    write_string(out, index.as_bytes());
    out.extend_from_slice(b",\"_id\":");
}

/// Room kept before an answer's items for its head (`{"took":…,"errors":
/// false,"items":[`), so the items are not copied behind it.
const ANSWER_HEAD: usize = 64;

/// The path's index for `/<index>/_bulk`; Some(None) for `/_bulk`; None
/// for any other path.
fn bulk_path(path: &str) -> Option<Option<String>> {
    let path = path.trim_end_matches('/');
    if path == "/_bulk" {
        return Some(None);
    }
    let index = path.strip_prefix('/')?.strip_suffix("/_bulk")?;
    if index.is_empty() || index.contains('/') {
        return None;
    }
    let index = percent_encoding::percent_decode_str(index)
        .decode_utf8()
        .ok()?;
    Some(Some(index.into_owned()))
}

impl EsDecode {
    /// Decodes a `_bulk` body of the path's index; the events and the
    /// answer's body (public for the fuzz target and the benchmark).
    pub fn bulk(
        &self,
        path_index: Option<String>,
        body: &Body,
    ) -> Result<(Vec<Events>, Bytes), Reject> {
        let started = Instant::now();
        let per_kib = self.answer_per_kib.load(Ordering::Relaxed);
        let mut items =
            Vec::with_capacity(ANSWER_HEAD + 64 + body.size().saturating_mul(per_kib) / 1024);
        items.resize(ANSWER_HEAD, b' ');
        let mut bulk = Bulk {
            d: self,
            path_index,
            now: EventTime::now(),
            batches: Vec::new(),
            last: None,
            items,
            errors: false,
            pending: None,
            action_index: String::new(),
            action_id: String::new(),
            ids: 0..0,
            ok_head: Vec::new(),
            ok_head_op: None,
            line: 0,
            size_hint: body.size() + body.size() / 8,
        };
        // Lines are read where they are in the body's pieces; only a line
        // cut by a piece's end is copied.
        let mut cut = Vec::new();
        for piece in body.pieces() {
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', piece) {
                if cut.is_empty() {
                    bulk.line(&piece[start..end])?;
                } else {
                    cut.extend_from_slice(&piece[start..end]);
                    bulk.line(&cut)?;
                    cut.clear();
                }
                start = end + 1;
            }
            cut.extend_from_slice(&piece[start..]);
        }
        if !cut.is_empty() {
            // Elasticsearch wants the last line ended too; a client that
            // leaves its newline out still meant the line.
            bulk.line(&cut)?;
        }
        if let Some(p) = bulk.pending.take() {
            return Err(Reject::bad(format!(
                "the {} action of line {} has no document line after it",
                p.op.name(),
                bulk.line
            )));
        }
        if bulk.items.len() == ANSWER_HEAD {
            return Err(Reject::bad(
                "Validation Failed: 1: no requests added; the body holds no action",
            ));
        }
        if body.size() >= 4096 {
            // The next answer's room: this one's per KiB, and an eighth.
            let per_kib = (bulk.items.len() - ANSWER_HEAD) * 1024 / body.size();
            self.answer_per_kib
                .store((per_kib + per_kib / 8).clamp(16, 8192), Ordering::Relaxed);
        }
        let mut head = Vec::with_capacity(ANSWER_HEAD);
        head.extend_from_slice(b"{\"took\":");
        head.extend_from_slice(
            itoa::Buffer::new()
                .format(started.elapsed().as_millis() as u64)
                .as_bytes(),
        );
        head.extend_from_slice(if bulk.errors {
            b",\"errors\":true,\"items\":["
        } else {
            b",\"errors\":false,\"items\":["
        });
        let mut answer = bulk.items;
        let at = ANSWER_HEAD - head.len();
        answer[at..ANSWER_HEAD].copy_from_slice(&head);
        answer.extend_from_slice(b"]}");
        let answer = Bytes::from(answer).slice(at..);
        for b in &mut bulk.batches {
            // The buffer counts a batch at its length: the allocation it
            // keeps alive must be about that.
            if b.entries.capacity() > b.entries.len() + b.entries.len() / 4 + 4096 {
                b.entries.shrink_to_fit();
            }
        }
        Ok((bulk.batches, answer))
    }
}

/// A JSON answer with the header Elastic's clients check.
fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    h.insert(
        "x-elastic-product",
        HeaderValue::from_static("Elasticsearch"),
    );
    r
}

/// `GET /_license`: an active basic license (Beats read `license.type`
/// and `license.status`).
const LICENSE: &str = r#"{"license":{"status":"active","uid":"00000000-0000-0000-0000-000000000000","type":"basic","issue_date":"2024-01-01T00:00:00.000Z","issue_date_in_millis":1704067200000,"max_nodes":1000,"max_resource_units":null,"issued_to":"nagare","issuer":"elasticsearch","start_date_in_millis":-1}}"#;

/// `GET /_xpack`: the features, none enabled, and the license.
const XPACK: &str = r#"{"build":{"hash":"nagare","date":"2024-01-01T00:00:00.000Z"},"license":{"uid":"00000000-0000-0000-0000-000000000000","type":"basic","mode":"basic","status":"active"},"features":{}}"#;

impl Decode for EsDecode {
    fn tag_hint(&self, head: &Parts) -> Option<String> {
        match bulk_path(head.uri.path())? {
            Some(index) => Some(self.tag_of(&index)),
            None => (!self.tag.contains(INDEX)).then(|| self.tag.clone()),
        }
    }

    fn answer_head(&self, head: &Parts) -> Result<Option<Response<Full<Bytes>>>, Reject> {
        let path = head.uri.path().trim_end_matches('/');
        let method = &head.method;
        if (*method == Method::POST || *method == Method::PUT) && bulk_path(path).is_some() {
            return Ok(None);
        }
        if *method == Method::HEAD {
            // HEAD / (ping), HEAD /_index_template/x (exists: yes).
            return Ok(Some(json(StatusCode::OK, Bytes::new())));
        }
        if *method == Method::GET {
            let body = match path {
                "" => self.root.clone(),
                "/_license" => Bytes::from_static(LICENSE.as_bytes()),
                "/_xpack" => Bytes::from_static(XPACK.as_bytes()),
                "/_cluster/health" => Bytes::from_static(
                    br#"{"cluster_name":"nagare","status":"green","number_of_nodes":1}"#,
                ),
                "/_nodes" | "/_nodes/http" | "/_nodes/_all/http" => Bytes::from_static(
                    br#"{"_nodes":{"total":0,"successful":0,"failed":0},"cluster_name":"nagare","nodes":{}}"#,
                ),
                // Templates, pipelines, policies: found (setup then leaves
                // them alone).
                _ => Bytes::from_static(b"{}"),
            };
            return Ok(Some(json(StatusCode::OK, body)));
        }
        if *method == Method::PUT || *method == Method::POST || *method == Method::DELETE {
            // A template, pipeline or policy stored; nothing is kept.
            return Ok(Some(json(
                StatusCode::OK,
                Bytes::from_static(br#"{"acknowledged":true}"#),
            )));
        }
        Err(Reject::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} {path} is not served"),
        ))
    }

    fn takes(&self, method: &Method) -> bool {
        *method == Method::POST || *method == Method::PUT
    }

    fn decode(&self, head: &Parts, body: Body) -> Result<Vec<Events>, Reject> {
        self.decode_answered(head, body).map(|(events, _)| events)
    }

    fn decode_answered(&self, head: &Parts, body: Body) -> Result<Answered, Reject> {
        let Some(path_index) = bulk_path(head.uri.path()) else {
            return Err(Reject::new(
                StatusCode::NOT_FOUND,
                format!("{}: send documents to /_bulk", head.uri.path()),
            ));
        };
        let (events, answer) = self.bulk(path_index, &body)?;
        Ok((events, Some(json(StatusCode::OK, answer))))
    }

    /// Elasticsearch's error body.
    fn refusal(&self, status: StatusCode, message: &str) -> Response<Full<Bytes>> {
        let kind = match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                "es_rejected_execution_exception"
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "security_exception",
            StatusCode::PAYLOAD_TOO_LARGE => "content_too_long_exception",
            StatusCode::NOT_FOUND => "no_handler_found_exception",
            StatusCode::INTERNAL_SERVER_ERROR => "exception",
            _ => "illegal_argument_exception",
        };
        let mut b = Vec::with_capacity(message.len() * 2 + 128);
        b.extend_from_slice(b"{\"error\":{\"root_cause\":[{\"type\":\"");
        b.extend_from_slice(kind.as_bytes());
        b.extend_from_slice(b"\",\"reason\":");
        write_string(&mut b, message.as_bytes());
        b.extend_from_slice(b"}],\"type\":\"");
        b.extend_from_slice(kind.as_bytes());
        b.extend_from_slice(b"\",\"reason\":");
        write_string(&mut b, message.as_bytes());
        b.extend_from_slice(b"},\"status\":");
        b.extend_from_slice(itoa::Buffer::new().format(status.as_u16()).as_bytes());
        b.push(b'}');
        json(status, b)
    }

    fn busy_status(&self) -> StatusCode {
        StatusCode::TOO_MANY_REQUESTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::common::mutations;

    fn decoder(toml: &str) -> EsDecode {
        let cfg: ElasticsearchInputConfig =
            toml::from_str(&format!("bind = \"127.0.0.1:0\"\n{toml}")).unwrap();
        EsDecode::new(&cfg).unwrap()
    }

    fn records(e: &Events) -> Vec<serde_json::Value> {
        nagare_core::record::entries(&e.entries)
            .map(|(_, rec, _)| {
                let v = rmpv::decode::read_value(&mut &rec[..]).unwrap();
                serde_json::to_value(format!("{v}")).unwrap()
            })
            .collect()
    }

    #[test]
    fn bulk_items_and_tags() {
        let d = decoder("index_key = \"idx\"");
        let body = Body::from(Bytes::from_static(
            b"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"m\":1}\n{\"create\":{}}\n{\"m\":2}\n{\"delete\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"update\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"doc\":{}}\n{\"index\":{\"_index\":\"a\"}}\n[1]\n",
        ));
        let (events, answer) = d.bulk(Some("b".into()), &body).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].tag, "es.a");
        assert_eq!(events[0].count, 1);
        assert_eq!(events[1].tag, "es.b");
        let a: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(a["errors"], true);
        let items = a["items"].as_array().unwrap();
        assert_eq!(items.len(), 5);
        assert_eq!(items[0]["index"]["status"], 201);
        assert_eq!(items[0]["index"]["_id"], "1");
        assert_eq!(items[1]["create"]["_index"], "b");
        assert_eq!(items[1]["create"]["_id"].as_str().unwrap().len(), 20);
        assert_eq!(items[2]["delete"]["status"], 400);
        assert_eq!(items[3]["update"]["status"], 400);
        assert_eq!(
            items[4]["index"]["error"]["type"],
            "mapper_parsing_exception"
        );
        let recs = records(&events[0]);
        assert!(
            recs[0].as_str().unwrap().contains("\"idx\": \"a\""),
            "{recs:?}"
        );
    }

    #[test]
    fn each_item_names_its_op_index_and_id() {
        // The answer's item heads are reused while op and index repeat:
        // every change of either must show in the items.
        let d = decoder("");
        let docs = [
            ("index", "a"),
            ("index", "a"),
            ("create", "a"),
            ("create", "b"),
            ("index", "b"),
            ("index", "a"),
            ("create", "a"),
        ];
        let body: String = docs
            .iter()
            .enumerate()
            .map(|(i, (op, index))| {
                format!("{{\"{op}\":{{\"_index\":\"{index}\",\"_id\":\"i{i}\"}}}}\n{{\"n\":{i}}}\n")
            })
            .collect();
        let (events, answer) = d.bulk(None, &Body::from(Bytes::from(body))).unwrap();
        assert_eq!(events.iter().map(|e| e.count).sum::<u32>(), 7);
        let a: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(a["errors"], false);
        let items = a["items"].as_array().unwrap();
        assert_eq!(items.len(), docs.len());
        for (i, ((op, index), item)) in docs.iter().zip(items).enumerate() {
            let item = item.as_object().unwrap();
            assert_eq!(item.keys().collect::<Vec<_>>(), [op], "{i}");
            assert_eq!(item[*op]["_index"], *index, "{i}");
            assert_eq!(item[*op]["_id"], format!("i{i}"), "{i}");
            assert_eq!(item[*op]["status"], 201, "{i}");
        }
    }

    #[test]
    fn malformed_action_refuses_the_request() {
        let d = decoder("");
        for body in [
            &b"nope\n{}\n"[..],
            b"{\"index\":{}}\n",
            b"{\"x\":{}}\n{}\n",
            b"\n\n",
        ] {
            let r = d.bulk(Some("i".into()), &Body::from(Bytes::copy_from_slice(body)));
            assert!(r.is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn time_from_timestamp_or_arrival() {
        let d = decoder("");
        let body = Body::from(Bytes::from_static(
            b"{\"index\":{}}\n{\"@timestamp\":\"2024-05-01T10:00:00.5Z\",\"m\":1}\n{\"index\":{}}\n{\"@timestamp\":\"soon\"}\n",
        ));
        let (events, answer) = d.bulk(Some("i".into()), &body).unwrap();
        assert!(answer.starts_with(b"{\"took\":"));
        assert_eq!(events[0].count, 2);
        let times: Vec<EventTime> = nagare_core::record::entries(&events[0].entries)
            .map(|(t, _, _)| t)
            .collect();
        assert_eq!(times[0], EventTime::new(1714557600, 500_000_000));
        assert!(times[1].secs > 1714557600);
    }

    #[test]
    fn mutated_bodies_never_panic() {
        let d = decoder("index_key = \"i\"\nid_key = \"id\"");
        let good = b"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"m\":[1,{\"x\":null}],\"@timestamp\":\"2024-05-01T10:00:00Z\"}\n{\"delete\":{\"_id\":\"2\"}}\n{\"create\":{}}\n{\"m\":\"\\u00e9\"}\n";
        mutations(good, |b| {
            let mut body = Body::default();
            for p in b.chunks(7) {
                body.push(Bytes::copy_from_slice(p));
            }
            if let Ok((events, answer)) = d.bulk(Some("p".into()), &body) {
                assert!(serde_json::from_slice::<serde_json::Value>(&answer).is_ok());
                for e in events {
                    assert_eq!(
                        nagare_core::record::entries(&e.entries).count(),
                        e.count as usize
                    );
                }
            }
        });
    }

    #[test]
    fn quick_action_agrees_with_serde() {
        let d = decoder("");
        let lines: [&[u8]; 12] = [
            b"{\"create\":{\"_index\":\"logs\"}}",
            b" { \"index\" : { \"_index\" : \"a\" , \"_id\" : \"7\" } } \r",
            b"{\"index\":{}}",
            b"{\"delete\":{\"_id\":\"2\",\"routing\":\"r\"}}",
            b"{\"update\":{\"_index\":\"u\"}}",
            // Not taken by the quick path: serde reads (or refuses) them.
            b"{\"index\":{\"_index\":\"a\\u0062\"}}",
            b"{\"index\":{\"_index\":\"a\",\"_index\":\"b\"}}",
            b"{\"index\":{\"_index\":\"a\",\"version\":3}}",
            b"{\"index\":{}} x",
            b"{\"index\":null}",
            b"{\"search\":{}}",
            b"{\"index\":{\"_index\":\"a\"}",
        ];
        for (i, line) in lines.iter().enumerate() {
            // No document line follows a delete.
            let doc: &[u8] = if i == 3 { b"\n" } else { b"\n{\"m\":1}\n" };
            let body = Body::from(Bytes::from([*line, doc].concat()));
            let quick = quick_action(line.strip_suffix(b"\r").unwrap_or(line));
            assert_eq!(quick.is_some(), i < 5, "{}", String::from_utf8_lossy(line));
            let serde: Result<ActionLine, _> = serde_json::from_slice(line);
            if let Some((op, index, id)) = quick {
                let a = serde.unwrap();
                let (sop, meta) = [
                    (Op::Index, a.index),
                    (Op::Create, a.create),
                    (Op::Update, a.update),
                    (Op::Delete, a.delete),
                ]
                .into_iter()
                .find_map(|(op, m)| m.map(|m| (op, m)))
                .unwrap();
                assert!(op == sop);
                assert_eq!(index, meta.index.as_deref());
                assert_eq!(id, meta.id.as_deref());
            }
            // Either way the request is decoded as before: the escaped
            // index is read, the rest refused or answered item by item.
            let r = d.bulk(Some("p".into()), &body);
            match i {
                5 => assert_eq!(r.unwrap().0[0].tag, "es.ab"),
                6 | 8 | 9 | 10 | 11 => assert!(r.is_err(), "{i}"),
                _ => assert!(r.is_ok(), "{i}"),
            }
        }
    }

    #[test]
    fn made_ids_are_hex_and_distinct() {
        let ids = IdMaker::new();
        let (x, y) = (ids.block(), ids.block());
        assert_eq!(
            (x.end, y.start, y.end - y.start),
            (ID_BLOCK, ID_BLOCK, ID_BLOCK)
        );
        let (a, b) = (ids.make(x.start), ids.make(x.start + 1));
        assert_ne!(a, b);
        assert!(a
            .iter()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(&a[..8], &b[..8]);
        assert_eq!(&b[8..], b"000000000001");
        assert_eq!(&ids.make(y.start)[8..], b"000000000100");

        // Through requests: every document sent without an id gets its
        // own, past a block's end and across requests.
        let d = decoder("");
        let mut seen = std::collections::HashSet::new();
        for docs in [300, 5] {
            let body: String = (0..docs)
                .map(|i| format!("{{\"index\":{{}}}}\n{{\"n\":{i}}}\n"))
                .collect();
            let (events, answer) = d
                .bulk(Some("i".into()), &Body::from(Bytes::from(body)))
                .unwrap();
            assert_eq!(events[0].count, docs);
            let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
            for item in answer["items"].as_array().unwrap() {
                let id = item["index"]["_id"].as_str().unwrap();
                assert_eq!(id.len(), 20);
                assert_eq!(item["index"]["status"], 201);
                assert!(seen.insert(id.to_owned()), "{id} twice");
            }
        }
        assert_eq!(seen.len(), 305);
    }

    #[test]
    fn paths() {
        assert_eq!(bulk_path("/_bulk"), Some(None));
        assert_eq!(bulk_path("/logs-1/_bulk"), Some(Some("logs-1".into())));
        assert_eq!(bulk_path("/a/b/_bulk"), None);
        assert_eq!(bulk_path("/"), None);
    }
}
