//! `clickhouse`: inserts each chunk into a ClickHouse table over the HTTP
//! interface, `INSERT INTO <table> FORMAT JSONEachRow`, one request per
//! chunk (one block: ClickHouse takes it whole or not at all).
//!
//! JSONEachRow is strict in older servers (18.16: a String column wants a
//! JSON string, a DateTime integer seconds), so the output reads the
//! table's columns once (`DESCRIBE TABLE`) and writes each value in the
//! form its column's type takes: a number into a String column as its
//! text, the event time as seconds into a DateTime, and only keys the
//! table has (no `input_format_skip_unknown_fields` needed).
//!
//! A row the server refuses fails the whole insert with an error that
//! names it ("(at row N)"): that row is rejected with the server's reason
//! and the others are sent again (one request per bad row). An error that
//! names no row is judged by ClickHouse's error code where the code says
//! more than the HTTP status (18.16 answers 500 to everything: a missing
//! table is refused, a wrong password is the shared 401/403 case), and
//! otherwise by the shared rules of every HTTP output (`Client::judge`:
//! 5xx and 429 retried, 401/403 retried with the events kept, another
//! status refused); a 413 cuts the chunk in halves sent apart, up to
//! `request_concurrency` at once (`HttpSender::send_parts`).
//!
//! The client (keep-alive, gzip, basic authentication, TLS) is
//! net/http_client.rs, shared with the `http` output.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use hyper::header::{HeaderName, HeaderValue};
use nagare_core::json::{write_string, write_value};
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::{entries, map_at, pair_at, str_at};
use nagare_forward::EventTime;
use tokio::sync::Mutex;

use crate::buffer::Chunk;
use crate::net::http_client::{http_client_options, Answer, HttpSender, PartSent, Undelivered};

http_client_options!(
    /// The `clickhouse` output.
    ClickhouseOutputConfig {
        /// The HTTP interface, "http://HOST:8123" or "https://HOST:8443"
        /// (with `tls`). Required.
        endpoint: String,
        /// The table, "name" or "database.name". Required.
        table: String,
        /// The database the table is in when `table` does not say (default:
        /// the user's default database).
        #[serde(default)]
        database: Option<String>,
        /// Columns filled from record fields: `{ column = "field" }`.
        /// Without it, each record field goes to the column of its name
        /// and fields the table lacks are left out.
        #[serde(default)]
        columns: BTreeMap<String, String>,
        /// A String column that takes the fields no other column took, as
        /// a JSON object (default: none, they are dropped).
        #[serde(default)]
        rest_column: Option<String>,
        /// The column that takes the event time (default "time"; "" writes
        /// none): seconds in a DateTime or integer column, seconds with
        /// nanoseconds in a Float64 or Decimal, RFC 3339 in a String.
        #[serde_inline_default("time".into())]
        time_column: String,
        /// The column that takes the tag (default: none).
        #[serde(default)]
        tag_column: Option<String>,
        /// The column that takes the chunk's id, 32 hex digits (default
        /// "chunk_id"; left out when the table has no such column). With
        /// `position_column` in a ReplacingMergeTree ordered by the two, a
        /// chunk stored twice is merged into one (see the docs).
        #[serde_inline_default("chunk_id".into())]
        chunk_id_column: String,
        /// The column that takes the entry's position in its chunk
        /// (default "position"; left out when the table has none).
        #[serde_inline_default("position".into())]
        position_column: String,
        /// ClickHouse's own user (`X-ClickHouse-User`; instead of
        /// `username`, which is sent as HTTP basic authentication).
        #[serde(default)]
        user: Option<String>,
        /// The password of `user` (`X-ClickHouse-Key`).
        #[serde(default)]
        key: Option<String>,
    }
);

impl OutputPlugin for ClickhouseOutputConfig {
    const TYPE: &'static str = "clickhouse";
    const DOC: &'static str = "Inserts each chunk into a ClickHouse table over HTTP (JSONEachRow), columns from record fields in the form each column's type takes; rows the server refuses are rejected by row with its reason, the rest stored (see [Outputs to storage](outputs-storage-sql.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.table.is_empty() {
            return Err(OptionError::new("table", "must name a table"));
        }
        let (db, table) = match (self.table.split_once('.'), &self.database) {
            (Some((d, t)), _) => (Some(d.to_string()), t.to_string()),
            (None, d) => (d.clone(), self.table.clone()),
        };
        let full = match &db {
            Some(d) => format!("{}.{}", quote_ident(d), quote_ident(&table)),
            None => quote_ident(&table),
        };
        let mut extra = Vec::new();
        if let Some(u) = &self.user {
            let v = HeaderValue::try_from(u.as_str())
                .map_err(|_| OptionError::new("user", "not valid in a header"))?;
            extra.push((HeaderName::from_static("x-clickhouse-user"), v));
        }
        if let Some(k) = &self.key {
            if self.user.is_none() {
                return Err(OptionError::new("key", "set `user` too"));
            }
            let v = HeaderValue::try_from(k.as_str())
                .map_err(|_| OptionError::new("key", "not valid in a header"))?;
            extra.push((HeaderName::from_static("x-clickhouse-key"), v));
        }
        if self.user.is_some() && self.username.is_some() {
            return Err(OptionError::new(
                "user",
                "set either `user`/`key` (ClickHouse's headers) or `username`/`password` (basic), not both",
            ));
        }
        let base = self.endpoint.trim_end_matches('/').to_string();
        let defaults = vec![(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )];
        let sender = self.http_sender("endpoint", &format!("{base}/"), defaults, cx)?;
        let path = sender.client().endpoint().path.clone();
        let prefix = if path.contains('?') { "&" } else { "?" };
        Ok(Arc::new(ClickhouseOutput(Arc::new(Inner {
            name: cx.name.clone(),
            insert_path: format!(
                "{path}{prefix}query={}",
                url_encode(&format!("INSERT INTO {full} FORMAT JSONEachRow"))
            ),
            // In the body: ClickHouse refuses a POST without a length, and
            // hyper sends none for an empty body.
            describe: format!("DESCRIBE TABLE {full} FORMAT TabSeparated"),
            describe_path: path.clone(),
            extra,
            sender,
            schema: Mutex::new(None),
            cfg: self,
        }))))
    }
}

/// How a value is written for a column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// String, FixedString, Enum, UUID, Date, IP…: a JSON string.
    Text,
    /// DateTime: integer seconds (or a string as it is).
    DateTime,
    /// Int, UInt, Float, Decimal: a JSON number.
    Number,
    /// Arrays, maps and the rest: the JSON value as it is.
    Json,
}

fn kind_of(ty: &str) -> Kind {
    let mut t = ty.trim();
    for wrap in ["Nullable(", "LowCardinality("] {
        while let Some(inner) = t.strip_prefix(wrap) {
            t = inner.strip_suffix(')').unwrap_or(inner);
        }
    }
    if t.starts_with("DateTime") {
        Kind::DateTime
    } else if t.starts_with("Int")
        || t.starts_with("UInt")
        || t.starts_with("Float")
        || t.starts_with("Decimal")
    {
        Kind::Number
    } else if t.starts_with("String")
        || t.starts_with("FixedString")
        || t.starts_with("Enum")
        || t.starts_with("UUID")
        || t.starts_with("Date")
        || t.starts_with("IPv")
    {
        Kind::Text
    } else {
        Kind::Json
    }
}

/// The table as the output writes it.
#[derive(Debug)]
struct Schema {
    /// (column, field, kind): columns from record fields.
    fields: Vec<(String, String, Kind)>,
    /// Every column of the table and its kind (for records written by name).
    all: BTreeMap<String, Kind>,
    time: Option<(String, Kind, bool)>,
    tag: Option<String>,
    chunk_id: Option<String>,
    position: Option<String>,
    rest: Option<String>,
}

struct Inner {
    name: String,
    cfg: ClickhouseOutputConfig,
    sender: HttpSender,
    extra: Vec<(HeaderName, HeaderValue)>,
    insert_path: String,
    describe: String,
    describe_path: String,
    /// Read on the first write (and again after an error).
    schema: Mutex<Option<Arc<Schema>>>,
}

/// What an insert's answer means.
enum Judged {
    Ok,
    /// The row the server names (its index in the body, 0-based), and why
    /// ("reason: text").
    Row(u32, String),
    /// 413: the body is larger than the server (or a proxy) takes.
    TooLarge(String),
    /// The rows may be taken later.
    Retry(String),
    /// The rows can never be taken so ("reason: text").
    Reject(String),
}

/// The output; its state is shared with the check at start.
struct ClickhouseOutput(Arc<Inner>);

#[async_trait]
impl Output for ClickhouseOutput {
    fn start(&self) {
        // The table and columns are checked at start in the background, so
        // a typo shows in the log at once; the daemon does not wait (the
        // server may be down now and up later).
        let inner = self.0.clone();
        tokio::spawn(async move {
            match inner.schema().await {
                Ok(_) => {}
                Err(FlushError::Permanent(e)) => tracing::error!(output = %inner.name, "{e}"),
                Err(e) => {
                    tracing::warn!(output = %inner.name, "ClickHouse not ready at start (chunks wait for it): {e}")
                }
            }
        });
    }

    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        self.0.write(chunk).await
    }
}

impl Inner {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let schema = self.schema().await?;
        // One insert (one block) for the chunk; one answered 413 is cut in
        // halves, up to request_concurrency at once (http_client.rs).
        self.sender
            .send_parts(
                &self.name,
                std::iter::once(0..chunk.count as usize),
                |i| i as u32,
                |r| {
                    let schema = &schema;
                    async move { self.insert_rows(schema, chunk, r).await }
                },
            )
            .await
            .finish(chunk.count)
    }

    /// Inserts the chunk's entries `r`: a row the server names is
    /// rejected with its reason and the others sent again.
    async fn insert_rows(&self, s: &Schema, chunk: &Chunk, r: std::ops::Range<usize>) -> PartSent {
        // (index in the chunk, reason)
        let mut rejected: Vec<(u32, String)> = Vec::new();
        let undone = |rejected: Vec<(u32, String)>, rows: &[u32], rest: Undelivered| {
            let mut list: Vec<(usize, Undelivered)> = rejected
                .into_iter()
                .map(|(i, why)| (i as usize - r.start, Undelivered::Reject(why)))
                .collect();
            for &i in rows {
                let u = match &rest {
                    Undelivered::Retry(w) => Undelivered::Retry(w.clone()),
                    Undelivered::Reject(w) => Undelivered::Reject(w.clone()),
                };
                list.push((i as usize - r.start, u));
            }
            PartSent::Some(list)
        };
        loop {
            let (body, rows) = self.body(s, chunk, r.clone(), &rejected);
            if rows.is_empty() {
                break;
            }
            match self.insert(body).await {
                Judged::Ok => break,
                Judged::Row(line, reason) => match rows.get(line as usize) {
                    Some(&i) => rejected.push((i, reason)),
                    // A row we did not send: the part as a whole.
                    None => return undone(rejected, &rows, Undelivered::Reject(reason)),
                },
                Judged::TooLarge(why) if rejected.is_empty() => return PartSent::TooLarge(why),
                Judged::TooLarge(why) | Judged::Retry(why) => {
                    if rejected.is_empty() {
                        return PartSent::Retry(why);
                    }
                    return undone(rejected, &rows, Undelivered::Retry(why));
                }
                Judged::Reject(why) => {
                    // The table may have changed: read it again next time.
                    *self.schema.lock().await = None;
                    if rejected.is_empty() {
                        return PartSent::Reject(why);
                    }
                    return undone(rejected, &rows, Undelivered::Reject(why));
                }
            }
        }
        if rejected.is_empty() {
            return PartSent::Ok;
        }
        undone(rejected, &[], Undelivered::Retry(String::new()))
    }

    /// The table's schema, read once.
    async fn schema(&self) -> Result<Arc<Schema>, FlushError> {
        let mut s = self.schema.lock().await;
        if let Some(s) = &*s {
            return Ok(s.clone());
        }
        let fresh = Arc::new(self.read_schema().await?);
        *s = Some(fresh.clone());
        Ok(fresh)
    }

    /// `DESCRIBE TABLE`, and the columns the options name checked in it.
    async fn read_schema(&self) -> Result<Schema, FlushError> {
        let answer = self
            .sender
            .post(
                &self.describe_path,
                self.describe.clone().into_bytes(),
                &self.extra,
            )
            .await?;
        if !answer.status.is_success() {
            return Err(match self.judge(answer).await {
                Judged::Reject(why) => FlushError::Permanent(why),
                Judged::Row(_, why) | Judged::TooLarge(why) | Judged::Retry(why) => {
                    FlushError::Retry(why)
                }
                Judged::Ok => FlushError::Retry("DESCRIBE TABLE: no answer".into()),
            });
        }
        let text = String::from_utf8_lossy(&answer.body);
        let all: BTreeMap<String, Kind> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split('\t');
                let name = f.next()?;
                let ty = f.next()?;
                Some((unescape_tsv(name), kind_of(ty)))
            })
            .collect();
        let missing = |c: &str| {
            FlushError::Permanent(format!(
                "table {:?} has no column {c:?} (its columns: {})",
                self.cfg.table,
                all.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        };
        let mut fields = Vec::new();
        for (col, field) in &self.cfg.columns {
            let k = *all.get(col).ok_or_else(|| missing(col))?;
            fields.push((col.clone(), field.clone(), k));
        }
        let named = |c: &Option<String>| -> Result<Option<String>, FlushError> {
            match c.as_deref().filter(|c| !c.is_empty()) {
                Some(c) if all.contains_key(c) => Ok(Some(c.to_string())),
                Some(c) => Err(missing(c)),
                None => Ok(None),
            }
        };
        let tag = named(&self.cfg.tag_column)?;
        let rest = named(&self.cfg.rest_column)?;
        // The time, chunk id and position columns have defaults: a table
        // without them simply does not get them.
        let optional = |c: &str| (!c.is_empty() && all.contains_key(c)).then(|| c.to_string());
        let time = optional(&self.cfg.time_column).map(|c| {
            let k = all[&c];
            let float = all_type_is_float(&text, &c);
            (c, k, float)
        });
        Ok(Schema {
            time,
            tag,
            rest,
            chunk_id: optional(&self.cfg.chunk_id_column),
            position: optional(&self.cfg.position_column),
            fields,
            all,
        })
    }

    /// The rows of the chunk, less the `skip` ones, as JSONEachRow; and
    /// the index in the chunk of each row written.
    fn body(
        &self,
        s: &Schema,
        chunk: &Chunk,
        range: std::ops::Range<usize>,
        skip: &[(u32, String)],
    ) -> (Vec<u8>, Vec<u32>) {
        let mut out =
            Vec::with_capacity(chunk.len * 2 * range.len() / (chunk.count as usize).max(1));
        let mut rows = Vec::with_capacity(range.len());
        let id = hex::encode(chunk.id);
        let mut scratch = Vec::new();
        let mut i = 0u32;
        for seg in &chunk.segments {
            for (time, rec, _) in entries(seg) {
                let at = i;
                i += 1;
                if !range.contains(&(at as usize)) || skip.iter().any(|(r, _)| *r == at) {
                    continue;
                }
                rows.push(at);
                self.row(&mut out, &mut scratch, s, chunk, &id, at, time, rec);
                out.push(b'\n');
            }
        }
        (out, rows)
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        s: &Schema,
        chunk: &Chunk,
        id: &str,
        at: u32,
        time: EventTime,
        rec: &[u8],
    ) {
        out.push(b'{');
        let mut first = true;
        let mut key = |out: &mut Vec<u8>, k: &str| {
            if !first {
                out.push(b',');
            }
            first = false;
            write_string(out, k.as_bytes());
            out.push(b':');
        };
        if let Some((c, k, float)) = &s.time {
            key(out, c);
            match (k, float) {
                (_, true) => {
                    let _ = std::io::Write::write_fmt(
                        out,
                        format_args!("{}.{:09}", time.secs, time.nanos.min(999_999_999)),
                    );
                }
                (Kind::Text, _) => {
                    out.push(b'"');
                    nagare_core::event::write_rfc3339(out, time);
                    out.push(b'"');
                }
                _ => out.extend_from_slice(itoa::Buffer::new().format(time.secs).as_bytes()),
            }
        }
        if let Some(c) = &s.tag {
            key(out, c);
            write_string(out, chunk.tag.as_bytes());
        }
        if let Some(c) = &s.chunk_id {
            key(out, c);
            write_string(out, id.as_bytes());
        }
        if let Some(c) = &s.position {
            key(out, c);
            out.extend_from_slice(itoa::Buffer::new().format(chunk.position(at)).as_bytes());
        }
        let taken = |c: &str| {
            s.time.as_ref().is_some_and(|t| t.0 == c)
                || s.tag.as_deref() == Some(c)
                || s.chunk_id.as_deref() == Some(c)
                || s.position.as_deref() == Some(c)
                || s.rest.as_deref() == Some(c)
        };
        // The record's fields: by the mapping, or by name.
        let mut rest: Vec<(usize, usize)> = Vec::new();
        let Some((n, mut pos)) = map_at(rec, 0) else {
            out.push(b'}');
            return;
        };
        for _ in 0..n {
            let Some(p) = pair_at(rec, pos) else { break };
            let start = pos;
            pos = p.end;
            let Some((ks, ke)) = p.key else { continue };
            let name = std::str::from_utf8(&rec[ks..ke]).unwrap_or("");
            let value = &rec[p.value..p.end];
            if value.first() == Some(&0xc0) {
                continue;
            }
            if s.fields.is_empty() {
                match s.all.get(name) {
                    Some(&k) if !taken(name) => {
                        key(out, name);
                        write_as(out, scratch, value, k);
                    }
                    _ => rest.push((start, p.end)),
                }
            } else {
                let mut used = false;
                for (col, field, k) in &s.fields {
                    if field.as_bytes() == &rec[ks..ke] {
                        key(out, col);
                        write_as(out, scratch, value, *k);
                        used = true;
                    }
                }
                if !used {
                    rest.push((start, p.end));
                }
            }
        }
        if let Some(c) = &s.rest {
            key(out, c);
            // The left fields as a JSON object, written as a JSON string.
            scratch.clear();
            scratch.push(b'{');
            let mut one = Vec::new();
            for (n, (start, end)) in rest.iter().enumerate() {
                if n > 0 {
                    scratch.push(b',');
                }
                let kp = *start;
                let Some(p) = pair_at(rec, kp) else { continue };
                if let Some((a, b)) = p.key {
                    write_string(scratch, &rec[a..b]);
                }
                scratch.push(b':');
                one.clear();
                write_value(&mut one, &rec[p.value..*end]);
                scratch.extend_from_slice(&one);
            }
            scratch.push(b'}');
            write_string(out, scratch);
        }
        out.push(b'}');
    }

    /// POSTs one insert; judges the answer.
    async fn insert(&self, body: Vec<u8>) -> Judged {
        match self.sender.post(&self.insert_path, body, &self.extra).await {
            Ok(answer) => self.judge(answer).await,
            Err(FlushError::Retry(e)) => Judged::Retry(e),
            Err(e) => Judged::Reject(format!("clickhouse_refused: {e}")),
        }
    }

    /// What an answer means: ClickHouse's own error text first (the row
    /// it names; the codes that say more than 18.16's status 500), then
    /// the shared rules of every HTTP output (`Client::judge`).
    async fn judge(&self, a: Answer) -> Judged {
        if a.status.is_success() {
            return Judged::Ok;
        }
        let client = self.sender.client();
        if a.status == hyper::StatusCode::PAYLOAD_TOO_LARGE {
            return Judged::TooLarge(format!(
                "too_large: {} answered 413",
                client.endpoint().authority
            ));
        }
        let text = String::from_utf8_lossy(&a.body);
        let text = text.trim();
        let code = text
            .strip_prefix("Code: ")
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|c| c.parse::<u32>().ok());
        let message = text
            .split_once("e.displayText() = ")
            .map_or(text, |(_, m)| m)
            .split(", e.what()")
            .next()
            .unwrap_or(text)
            .trim()
            .replace('\n', " ");
        let what = format!("table {:?}: {message}", self.cfg.table);
        // Row errors: the value of one row does not parse as its column.
        if let Some(row) = at_row(&message) {
            let name = code.map_or("clickhouse_error", code_name);
            return Judged::Row(row - 1, format!("{name}: {message}"));
        }
        let answer = match code {
            // UNKNOWN_TABLE, UNKNOWN_DATABASE, NO_SUCH_COLUMN_IN_TABLE,
            // UNKNOWN_IDENTIFIER, SYNTAX_ERROR: the chunk can never be
            // written so, whatever the status (18.16 says 500).
            Some(60 | 81 | 16 | 47 | 62) => {
                return Judged::Reject(format!("clickhouse_refused: {what}"))
            }
            // UNKNOWN_USER, WRONG_PASSWORD, READONLY, DATABASE_ACCESS_DENIED,
            // ACCESS_DENIED, AUTHENTICATION_FAILED: the credentials or the
            // user's rights, answered 500 by 18.16 and 401/403 by later
            // servers: the shared rule of a 403 (kept and retried).
            Some(192 | 193 | 164 | 291 | 497 | 516) => Answer {
                status: hyper::StatusCode::FORBIDDEN,
                ..a
            },
            _ => a,
        };
        match client.judge(answer).await {
            Ok(_) => Judged::Ok,
            Err(FlushError::Retry(e)) => Judged::Retry(format!("table {:?}: {e}", self.cfg.table)),
            Err(e) => Judged::Reject(format!(
                "clickhouse_refused: table {:?}: {e}",
                self.cfg.table
            )),
        }
    }
}

/// Whether the type of column `c` in DESCRIBE's text is a float or decimal
/// (the event time goes there with its nanoseconds).
fn all_type_is_float(describe: &str, c: &str) -> bool {
    describe.lines().any(|l| {
        let mut f = l.split('\t');
        f.next().map(unescape_tsv).as_deref() == Some(c)
            && f.next().is_some_and(|t| {
                let t = t.trim_start_matches("Nullable(");
                t.starts_with("Float") || t.starts_with("Decimal")
            })
    })
}

/// The row an error names: "… (at row 3)".
fn at_row(message: &str) -> Option<u32> {
    let rest = &message[message.rfind("(at row ")? + 8..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok().filter(|&n| n >= 1)
}

/// The name of a ClickHouse error code, for the `rejected` counter.
fn code_name(code: u32) -> &'static str {
    match code {
        6 => "cannot_parse_text",
        26 => "cannot_parse_quoted_string",
        27 => "cannot_parse_input_assertion_failed",
        38 => "cannot_parse_date",
        41 => "cannot_parse_datetime",
        69 => "argument_out_of_bound",
        70 => "cannot_convert_type",
        72 => "cannot_parse_number",
        _ => "clickhouse_error",
    }
}

/// A record value in the form a column of kind `k` takes.
fn write_as(out: &mut Vec<u8>, scratch: &mut Vec<u8>, value: &[u8], k: Kind) {
    let text = str_at(value, 0).map(|(a, b)| &value[a..b]);
    match (k, text) {
        // A string into a text column, or a string date: as it is.
        (Kind::Text | Kind::DateTime, Some(t)) => write_string(out, t),
        // Any other value into a text column: its JSON text, as a string.
        (Kind::Text, None) => {
            scratch.clear();
            write_value(scratch, value);
            write_string(out, scratch);
        }
        // A string of digits into a number column: the number.
        (Kind::Number, Some(t)) if is_number(t) => out.extend_from_slice(t),
        _ => {
            write_value(out, value);
        }
    }
}

/// Whether `t` is a JSON number.
fn is_number(t: &[u8]) -> bool {
    !t.is_empty() && serde_json::from_slice::<serde_json::Number>(t).is_ok()
}

/// `name` quoted with backquotes.
fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('\\', "\\\\").replace('`', "\\`"))
}

/// TabSeparated's escapes undone (column names are plain mostly).
fn unescape_tsv(s: &str) -> String {
    s.replace("\\t", "\t")
        .replace("\\n", "\n")
        .replace("\\\\", "\\")
}

/// Percent-encoding of a query parameter.
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_clickhouse_types() {
        assert_eq!(kind_of("String"), Kind::Text);
        assert_eq!(kind_of("Nullable(String)"), Kind::Text);
        assert_eq!(kind_of("LowCardinality(String)"), Kind::Text);
        assert_eq!(kind_of("DateTime"), Kind::DateTime);
        assert_eq!(kind_of("UInt64"), Kind::Number);
        assert_eq!(kind_of("Array(String)"), Kind::Json);
        assert_eq!(kind_of("Date"), Kind::Text);
    }

    #[test]
    fn values_take_their_columns_form() {
        let mp = |v: serde_json::Value| {
            let mut o = Vec::new();
            nagare_core::json::msgpack_from_json(&v, &mut o);
            o
        };
        let w = |v: serde_json::Value, k: Kind| {
            let (mut out, mut s) = (Vec::new(), Vec::new());
            write_as(&mut out, &mut s, &mp(v), k);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(w(serde_json::json!(5), Kind::Text), "\"5\"");
        assert_eq!(
            w(serde_json::json!({"a":1}), Kind::Text),
            "\"{\\\"a\\\":1}\""
        );
        assert_eq!(w(serde_json::json!("12"), Kind::Number), "12");
        assert_eq!(w(serde_json::json!("x"), Kind::Number), "\"x\"");
        assert_eq!(w(serde_json::json!([1, 2]), Kind::Json), "[1,2]");
    }

    #[test]
    fn the_row_an_error_names() {
        let m = "Cannot parse input: expected \" before: bad: (while read the value of key seq): (at row 2)";
        assert_eq!(at_row(m), Some(2));
        assert_eq!(at_row("Table default.nope doesn't exist."), None);
        assert_eq!(
            url_encode("INSERT INTO `t` FORMAT JSONEachRow"),
            "INSERT%20INTO%20%60t%60%20FORMAT%20JSONEachRow"
        );
    }
}
