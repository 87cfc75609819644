//! `postgresql`: writes each chunk into a PostgreSQL table with `COPY …
//! FROM STDIN` (text format), in one transaction per chunk, the rows
//! streamed to the server as they are rendered.
//!
//! Stored once: with `ledger_table` (default "nagare_chunks") each
//! transaction first inserts the chunk's key (its id, stable across
//! retries and, with a file buffer, restarts; and the position of its
//! first row copied) into that ledger with `ON CONFLICT DO NOTHING`, then
//! COPYs the rows straight into the target. A key already there means the
//! chunk was committed before (a retry after a lost answer, a re-send
//! after kill -9): the transaction is rolled back and the chunk counts as
//! written. A second transaction with the same key (another flush worker
//! or process re-sending the chunk at once) waits on the first one's key
//! and then finds it (skips) or not (copies). One ledger row a chunk, no
//! index entry and no second pass a row.
//!
//! A row PostgreSQL refuses (a value that is not of its column's type)
//! fails the whole COPY; the error's context names the line, so that row
//! is rejected with the server's reason and the rest is copied again, in a
//! new transaction (one round trip per bad row).
//!
//! Connections: `connection` (a libpq connection string or URL) with the
//! parts it leaves out from PGHOST, PGPORT, PGUSER, PGPASSWORD,
//! PGDATABASE and PGSSLMODE, as psql does. TLS is this project's rustls
//! client (net/tls.rs) plugged into tokio-postgres' `TlsConnect`.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::SinkExt;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output, PartialWrite};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record::{entries, field_text};
use nagare_core::units::Dur;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Mutex;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{ChannelBinding, NoTls, TlsConnect};
use tokio_postgres::SimpleQueryMessage;

use crate::buffer::Chunk;
use crate::net::tls::{Buffered, TlsClient, TlsOptions};

/// The `postgresql` output.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PostgresqlOutputConfig {
    /// The server and database, as a libpq connection string
    /// ("host=db port=5432 user=logs dbname=logs") or URL
    /// ("postgresql://logs@db:5432/logs"). What it leaves out is taken from
    /// PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE, then
    /// libpq's defaults (localhost, 5432, user "postgres", database = user).
    #[serde(default)]
    pub connection: String,
    /// The password (default: the connection string's, then PGPASSWORD).
    #[serde(default)]
    pub password: Option<String>,
    /// The table, "name" or "schema.name". Required.
    pub table: String,
    /// Columns filled from record fields: `{ column = "field" }`. A string
    /// field is written as it is, any other value as its JSON text (which
    /// PostgreSQL reads into integer, boolean, json/jsonb … columns); a
    /// missing or nil field is NULL.
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    /// A column (jsonb, json or text) that takes the whole record as JSON
    /// (default: none).
    #[serde(default)]
    pub record_column: Option<String>,
    /// The column (timestamptz) that takes the event time (default "time";
    /// "" writes none).
    #[serde_inline_default("time".into())]
    pub time_column: String,
    /// The column (text) that takes the tag (default: none).
    #[serde(default)]
    pub tag_column: Option<String>,
    /// The ledger that makes a chunk stored once: a table of one row per
    /// chunk written (its id and first position, the target table, the
    /// rows, when), inserted in the same transaction as the chunk's COPY;
    /// a chunk already in it is not copied again. "name" or
    /// "schema.name", created when missing (default "nagare_chunks"); ""
    /// turns stored-once off (a plain COPY: a chunk sent twice is stored
    /// twice).
    #[serde_inline_default("nagare_chunks".into())]
    pub ledger_table: String,
    /// A column (text or uuid) that takes the chunk's id, 32 hex digits
    /// (default: none). Not needed for stored-once (the ledger does it):
    /// it tells which chunk a row came in.
    #[serde(default)]
    pub chunk_id_column: Option<String>,
    /// A column (integer) that takes the entry's position in its chunk
    /// (default: none).
    #[serde(default)]
    pub position_column: Option<String>,
    /// Connecting, and writing a chunk, may take this long before the chunk
    /// is retried (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub timeout: Dur,
    /// TLS to the server (`[output.tls]`; see docs/tls.md). Without it,
    /// sslmode "require" (in the connection or PGSSLMODE) is refused at
    /// start; with it, TLS is required unless sslmode says "prefer".
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

impl OutputPlugin for PostgresqlOutputConfig {
    const TYPE: &'static str = "postgresql";
    const DOC: &'static str = "Writes each chunk into a PostgreSQL table with COPY in one transaction; columns from record fields or the record as jsonb; a chunk sent twice is stored once through a ledger table of the chunks written (see [Outputs to storage](outputs-storage-sql.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        let mut pg = pg_config(&self.connection, &|k| std::env::var(k).ok())?;
        if let Some(p) = &self.password {
            pg.password(p.as_str());
        }
        pg.connect_timeout(self.timeout.0);
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        match (&tls, pg.get_ssl_mode()) {
            (None, SslMode::Require) => {
                return Err(OptionError::new(
                    "tls",
                    "sslmode=require (in `connection` or PGSSLMODE) needs [output.tls]",
                ))
            }
            (None, _) => {
                pg.ssl_mode(SslMode::Disable);
            }
            (Some(_), SslMode::Prefer) if self.connection.contains("sslmode") => {}
            (Some(_), _) => {
                pg.ssl_mode(SslMode::Require);
            }
        }
        if self.table.is_empty() {
            return Err(OptionError::new("table", "must name a table"));
        }
        if self.ledger_table == self.table {
            return Err(OptionError::new(
                "ledger_table",
                "must be a table of its own, not `table`",
            ));
        }
        let mut cols: Vec<(String, Column)> = Vec::new();
        for (col, field) in &self.columns {
            cols.push((col.clone(), Column::Field(field.clone())));
        }
        let mut add = |name: &Option<String>, c: Column| {
            if let Some(n) = name.as_ref().filter(|n| !n.is_empty()) {
                cols.push((n.clone(), c));
            }
        };
        add(&self.record_column, Column::Record);
        add(&Some(self.time_column.clone()), Column::Time);
        add(&self.tag_column, Column::Tag);
        add(&self.chunk_id_column, Column::ChunkId);
        add(&self.position_column, Column::Position);
        if !cols
            .iter()
            .any(|(_, c)| matches!(c, Column::Field(_) | Column::Record))
        {
            return Err(OptionError::new(
                "columns",
                "set `columns` ({ column = \"field\" }) or `record_column`: nothing of the records would be written",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (c, _) in &cols {
            if !seen.insert(c.as_str()) {
                return Err(OptionError::new(
                    "columns",
                    format!("column {c:?} is given twice"),
                ));
            }
        }
        let table = quote_table(&self.table);
        let list = cols
            .iter()
            .map(|(c, _)| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ");
        let ledger = (!self.ledger_table.is_empty()).then(|| Ledger::new(&self.ledger_table));
        Ok(Arc::new(PostgresqlOutput {
            name: cx.name.clone(),
            copy: format!("COPY {table} ({list}) FROM STDIN"),
            check: format!("SELECT {list} FROM {table} LIMIT 0"),
            target: literal(&self.table),
            cols,
            ledger,
            ledger_ready: AtomicBool::new(false),
            pg,
            tls,
            timeout: self.timeout.0,
            idle: Mutex::new(Vec::new()),
            cfg: self,
        }))
    }
}

/// What a column is filled from.
#[derive(Debug, Clone)]
enum Column {
    Field(String),
    Record,
    Time,
    Tag,
    ChunkId,
    Position,
}

/// The ledger table's statements.
struct Ledger {
    /// The name as written in the options (for messages).
    name: String,
    /// Quoted for SQL.
    quoted: String,
    /// `CREATE TABLE IF NOT EXISTS …`.
    create: String,
    /// Whether it exists: `SELECT to_regclass(…) IS NOT NULL`.
    exists: String,
}

impl Ledger {
    fn new(name: &str) -> Ledger {
        let quoted = quote_table(name);
        Ledger {
            name: name.to_string(),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {quoted} (chunk_id text NOT NULL, position integer NOT NULL, \
                 target text NOT NULL, rows integer NOT NULL, stored_at timestamptz NOT NULL DEFAULT now(), \
                 PRIMARY KEY (chunk_id, position))"
            ),
            exists: format!("SELECT to_regclass({}) IS NOT NULL", literal(&quoted)),
            quoted,
        }
    }
}

/// Rows rendered before a piece of the COPY goes to the server: the
/// server parses a piece while the next one is rendered.
const PIECE: usize = 256 << 10;

struct PostgresqlOutput {
    name: String,
    cfg: PostgresqlOutputConfig,
    cols: Vec<(String, Column)>,
    /// `COPY <table> (<columns>) FROM STDIN`.
    copy: String,
    /// `SELECT <columns> FROM <table> LIMIT 0` (the check at start).
    check: String,
    /// The table's name as an SQL literal (the ledger's `target`).
    target: String,
    ledger: Option<Ledger>,
    /// The ledger was found or made (checked again after an error).
    ledger_ready: AtomicBool,
    pg: tokio_postgres::Config,
    tls: Option<Arc<TlsClient>>,
    timeout: Duration,
    /// Open connections not in use (one per concurrent flush).
    idle: Mutex<Vec<tokio_postgres::Client>>,
}

/// Why a write failed.
enum Failure {
    /// Rows the server names as bad: (index in the rows sent, reason).
    Row(u32, String),
    /// The chunk as a whole.
    Chunk(FlushError),
}

/// Where in a transaction an error came.
enum Step {
    /// Finding, making or writing the ledger.
    Ledger(tokio_postgres::Error),
    /// The COPY and the rest of the transaction.
    Copy(tokio_postgres::Error),
}

#[async_trait]
impl Output for PostgresqlOutput {
    fn start(&self) {
        // Checks the table and columns (and finds or makes the ledger) at
        // start, so a typo shows in the log at once and not at the first
        // flush; the daemon does not wait for it (the server may be down
        // now and up later).
        let pg = self.pg.clone();
        let tls = self.tls.clone();
        let check = self.check.clone();
        let name = self.name.clone();
        let table = self.cfg.table.clone();
        let timeout = self.timeout;
        let ledger = self
            .ledger
            .as_ref()
            .map(|l| (l.name.clone(), l.exists.clone(), l.create.clone()));
        tokio::spawn(async move {
            let client = match connect(&pg, &tls, timeout).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(output = %name, "PostgreSQL not reachable at start (chunks wait for it): {e}");
                    return;
                }
            };
            if let Err(e) = client.batch_execute(&check).await {
                tracing::error!(output = %name, "table {table:?}: {}", describe(&e));
            }
            if let Some((ledger, exists, create)) = ledger {
                if let Err(e) = ensure_ledger(&client, &exists, &create).await {
                    tracing::error!(output = %name, "{}", ledger_error(&ledger, &create, &e));
                }
            }
        });
    }

    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut rejected: Vec<(u32, String)> = Vec::new();
        // The chunk's entries to copy, ascending.
        let mut rows: Vec<u32> = (0..chunk.count).collect();
        while !rows.is_empty() {
            match self.write_once(chunk, &rows).await {
                Ok(()) => break,
                Err(Failure::Row(line, reason)) => {
                    if (line as usize) < rows.len() {
                        rejected.push((rows.remove(line as usize), reason));
                    } else {
                        // A line we did not send: the chunk as a whole.
                        return Err(FlushError::Permanent(reason));
                    }
                }
                Err(Failure::Chunk(e)) => {
                    if rejected.is_empty() {
                        return Err(e);
                    }
                    // Rows found bad are rejected; the rest is retried.
                    return Err(FlushError::Partial(PartialWrite {
                        retry: rows,
                        rejected,
                        message: e.to_string(),
                    }));
                }
            }
        }
        if rejected.is_empty() {
            return Ok(());
        }
        let message = format!(
            "PostgreSQL refused {} row(s) of table {:?}",
            rejected.len(),
            self.cfg.table
        );
        Err(FlushError::Partial(PartialWrite {
            retry: Vec::new(),
            rejected,
            message,
        }))
    }
}

impl PostgresqlOutput {
    /// One row of entry `at` in COPY's text format.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        chunk: &Chunk,
        id: &str,
        at: u32,
        time: nagare_forward::EventTime,
        rec: &[u8],
    ) {
        for (n, (_, col)) in self.cols.iter().enumerate() {
            if n > 0 {
                out.push(b'\t');
            }
            match col {
                Column::Field(f) => match field_text(rec, f.as_bytes()) {
                    Some(v) => escape(out, &v),
                    None => out.extend_from_slice(b"\\N"),
                },
                Column::Record => {
                    scratch.clear();
                    nagare_core::json::write_value(scratch, rec);
                    escape(out, scratch);
                }
                Column::Time => nagare_core::event::write_rfc3339(out, time),
                Column::Tag => escape(out, chunk.tag.as_bytes()),
                Column::ChunkId => out.extend_from_slice(id.as_bytes()),
                Column::Position => {
                    out.extend_from_slice(itoa::Buffer::new().format(chunk.position(at)).as_bytes())
                }
            }
        }
        out.push(b'\n');
    }

    /// One transaction: the ledger's row (when there is a ledger), then the
    /// chunk's `rows` (indexes in the chunk, ascending, not empty) copied
    /// into the table, streamed in pieces as they are rendered.
    async fn write_once(&self, chunk: &Chunk, rows: &[u32]) -> Result<(), Failure> {
        let client = match self.idle.lock().await.pop() {
            Some(c) if !c.is_closed() => c,
            _ => connect(&self.pg, &self.tls, self.timeout)
                .await
                .map_err(|e| Failure::Chunk(FlushError::Retry(e)))?,
        };
        let id = hex::encode(chunk.id);
        let run = async {
            if let Some(l) = &self.ledger {
                if !self.ledger_ready.load(Relaxed) {
                    ensure_ledger(&client, &l.exists, &l.create)
                        .await
                        .map_err(Step::Ledger)?;
                    self.ledger_ready.store(true, Relaxed);
                }
                // The key: the chunk's id and the position of the first row
                // copied. A part of a chunk sent again after a partial write
                // has its own first position (the parts of a chunk never
                // share rows); the same part sent again, the same key.
                let first = chunk.position(rows[0]);
                let insert = format!(
                    "BEGIN; INSERT INTO {} (chunk_id, position, target, rows) VALUES ('{id}', {first}, {}, {}) ON CONFLICT DO NOTHING",
                    l.quoted,
                    self.target,
                    rows.len()
                );
                // Waits while another transaction holds the same key.
                let answer = client.simple_query(&insert).await.map_err(Step::Ledger)?;
                let inserted = answer.iter().rev().find_map(|m| match m {
                    SimpleQueryMessage::CommandComplete(n) => Some(*n),
                    _ => None,
                });
                if inserted == Some(0) {
                    client.batch_execute("ROLLBACK").await.map_err(Step::Copy)?;
                    tracing::info!(output = %self.name, chunk = %id, first,
                        "chunk already stored (in the ledger {:?}): not copied again", l.name);
                    return Ok(());
                }
            } else {
                client.batch_execute("BEGIN").await.map_err(Step::Copy)?;
            }
            let sink = client
                .copy_in::<_, Bytes>(self.copy.as_str())
                .await
                .map_err(Step::Copy)?;
            futures_util::pin_mut!(sink);
            let mut out = Vec::with_capacity(PIECE + (PIECE >> 2));
            let mut scratch = Vec::new();
            let mut want = rows.iter().copied().peekable();
            let mut i = 0u32;
            'segments: for seg in &chunk.segments {
                for (time, rec, _) in entries(seg) {
                    let at = i;
                    i += 1;
                    match want.peek() {
                        None => break 'segments,
                        Some(&w) if w != at => continue,
                        Some(_) => {
                            want.next();
                        }
                    }
                    self.row(&mut out, &mut scratch, chunk, &id, at, time, rec);
                    if out.len() >= PIECE {
                        let piece =
                            std::mem::replace(&mut out, Vec::with_capacity(PIECE + (PIECE >> 2)));
                        sink.send(Bytes::from(piece)).await.map_err(Step::Copy)?;
                    }
                }
            }
            if !out.is_empty() {
                sink.send(Bytes::from(out)).await.map_err(Step::Copy)?;
            }
            sink.finish().await.map_err(Step::Copy)?;
            client.batch_execute("COMMIT").await.map_err(Step::Copy)
        };
        let result = match tokio::time::timeout(self.timeout, run).await {
            Ok(r) => r,
            Err(_) => {
                // The connection is in an unknown state: dropped (the
                // server rolls back what it had not committed).
                return Err(Failure::Chunk(FlushError::Retry(format!(
                    "PostgreSQL: no answer within {}s",
                    self.timeout.as_secs()
                ))));
            }
        };
        match result {
            Ok(()) => {
                self.idle.lock().await.push(client);
                Ok(())
            }
            Err(step) => {
                let failure = match &step {
                    Step::Ledger(e) => {
                        // Found or made again on the next write.
                        self.ledger_ready.store(false, Relaxed);
                        let l = self.ledger.as_ref().expect("a ledger step has a ledger");
                        Failure::Chunk(FlushError::Retry(ledger_error(&l.name, &l.create, e)))
                    }
                    Step::Copy(e) => self.judge(e),
                };
                if !client.is_closed() && client.batch_execute("ROLLBACK").await.is_ok() {
                    self.idle.lock().await.push(client);
                }
                Err(failure)
            }
        }
    }

    /// What an error means for the chunk.
    fn judge(&self, e: &tokio_postgres::Error) -> Failure {
        let text = format!("table {:?}: {}", self.cfg.table, describe(e));
        let Some(db) = e.as_db_error() else {
            return Failure::Chunk(FlushError::Retry(text));
        };
        let code = db.code().code();
        // A data exception (22…) or a constraint (23…) during COPY names
        // the line: that row is bad, the others may be fine.
        if code.starts_with("22") || code.starts_with("23") {
            if let Some(line) = db.where_().and_then(copy_line) {
                return Failure::Row(
                    line - 1,
                    format!("{}: {}", code_name(db.code()), db.message()),
                );
            }
            return Failure::Chunk(FlushError::Permanent(text));
        }
        if [
            SqlState::UNDEFINED_TABLE,
            SqlState::UNDEFINED_COLUMN,
            SqlState::UNDEFINED_SCHEMA,
            SqlState::DATATYPE_MISMATCH,
            SqlState::INVALID_SCHEMA_NAME,
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::SYNTAX_ERROR,
            SqlState::WRONG_OBJECT_TYPE,
            SqlState::INVALID_COLUMN_REFERENCE,
        ]
        .contains(db.code())
        {
            return Failure::Chunk(FlushError::Permanent(text));
        }
        // Authentication (28…), shutdown (57…), resources (53…), and the
        // rest: the server may take the chunk later; it stays in the buffer.
        Failure::Chunk(FlushError::Retry(text))
    }
}

/// Finds the ledger table, or makes it. `to_regclass` first: `CREATE
/// TABLE IF NOT EXISTS` wants the right to create in the schema even when
/// the table is there.
async fn ensure_ledger(
    client: &tokio_postgres::Client,
    exists: &str,
    create: &str,
) -> Result<(), tokio_postgres::Error> {
    let found = client
        .simple_query(exists)
        .await?
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(r) if r.get(0) == Some("t")));
    if !found {
        if let Err(e) = client.batch_execute(create).await {
            // Two connections making it at once: one of them loses the
            // race on the catalog's unique key, and the table is there.
            if e.code() != Some(&SqlState::UNIQUE_VIOLATION) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// A ledger error as one line, with the statement that makes the ledger.
fn ledger_error(ledger: &str, create: &str, e: &tokio_postgres::Error) -> String {
    format!(
        "ledger table {ledger:?} (stored once; chunks wait): {}; make it with `{create}` or set ledger_table = \"\"",
        describe(e)
    )
}

/// `s` as an SQL string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The line number in a COPY error's context ("COPY t, line 3, column n: …").
fn copy_line(context: &str) -> Option<u32> {
    let rest = &context[context.find(", line ")? + 7..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok().filter(|&n| n >= 1)
}

/// The short name of an SQLSTATE for the `rejected` counter.
fn code_name(code: &SqlState) -> &'static str {
    match code.code() {
        "22P02" => "invalid_text_representation",
        "22003" => "numeric_value_out_of_range",
        "22007" => "invalid_datetime_format",
        "22008" => "datetime_field_overflow",
        "22021" => "character_not_in_repertoire",
        "22P05" => "untranslatable_character",
        "22001" => "string_data_right_truncation",
        "23502" => "not_null_violation",
        "23514" => "check_violation",
        c if c.starts_with("23") => "integrity_constraint_violation",
        _ => "data_exception",
    }
}

/// An error as one line: the server's message, detail and hint.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} ({})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                s.push_str(&format!("; {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!("; hint: {h}"));
            }
            s
        }
        None => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(inner) = src {
                s.push_str(&format!(": {inner}"));
                src = inner.source();
            }
            s
        }
    }
}

/// COPY's text format: backslash, tab, newline and carriage return
/// escaped; the runs between them copied whole.
fn escape(out: &mut Vec<u8>, v: &[u8]) {
    let mut from = 0;
    for (i, &b) in v.iter().enumerate() {
        let with: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            _ => continue,
        };
        out.extend_from_slice(&v[from..i]);
        out.extend_from_slice(with);
        from = i + 1;
    }
    out.extend_from_slice(&v[from..]);
}

/// `"name"`, with `"` doubled.
fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// "schema.table" or "table", each part quoted.
fn quote_table(s: &str) -> String {
    match s.split_once('.') {
        Some((schema, t)) => format!("{}.{}", quote_ident(schema), quote_ident(t)),
        None => quote_ident(s),
    }
}

/// The connection string with the PG* variables filling what it leaves out.
fn pg_config(
    connection: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<tokio_postgres::Config, OptionError> {
    let mut pg: tokio_postgres::Config = if connection.trim().is_empty() {
        tokio_postgres::Config::new()
    } else {
        connection.parse().map_err(|e| {
            OptionError::new(
                "connection",
                format!("not a libpq connection string or URL: {e}"),
            )
        })?
    };
    if pg.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "localhost".into());
        for h in hosts.split(',') {
            pg.host(h);
        }
    }
    if pg.get_ports().is_empty() {
        if let Some(p) = env("PGPORT") {
            for p in p.split(',') {
                pg.port(p.trim().parse().map_err(|_| {
                    OptionError::new("connection", format!("PGPORT {p:?} is not a port"))
                })?);
            }
        }
    }
    if pg.get_user().is_none() {
        pg.user(env("PGUSER").unwrap_or_else(|| "postgres".into()));
    }
    if pg.get_password().is_none() {
        if let Some(p) = env("PGPASSWORD") {
            pg.password(p);
        }
    }
    if pg.get_dbname().is_none() {
        if let Some(d) = env("PGDATABASE") {
            pg.dbname(d);
        }
    }
    if !connection.contains("sslmode") {
        if let Some(m) = env("PGSSLMODE") {
            pg.ssl_mode(match m.as_str() {
                "disable" | "allow" => SslMode::Disable,
                "prefer" => SslMode::Prefer,
                "require" | "verify-ca" | "verify-full" => SslMode::Require,
                other => {
                    return Err(OptionError::new(
                        "connection",
                        format!("PGSSLMODE {other:?}: one of disable, prefer, require, verify-ca, verify-full"),
                    ))
                }
            });
        }
    }
    if pg.get_application_name().is_none() {
        pg.application_name("nagare");
    }
    Ok(pg)
}

/// A connection to the first host that answers; its driver runs in a task.
async fn connect(
    pg: &tokio_postgres::Config,
    tls: &Option<Arc<TlsClient>>,
    timeout: Duration,
) -> Result<tokio_postgres::Client, String> {
    let ports = pg.get_ports();
    let mut last = String::from("no host");
    for (n, host) in pg.get_hosts().iter().enumerate() {
        let port = ports.get(n).or(ports.first()).copied().unwrap_or(5432);
        let attempt = async {
            match host {
                Host::Tcp(h) => {
                    let s = tokio::net::TcpStream::connect((h.as_str(), port))
                        .await
                        .map_err(|e| e.to_string())?;
                    let _ = s.set_nodelay(true);
                    let address = format!("{h}:{port}");
                    handshake(pg, s, tls, address).await
                }
                #[cfg(unix)]
                Host::Unix(dir) => {
                    let path = dir.join(format!(".s.PGSQL.{port}"));
                    let s = tokio::net::UnixStream::connect(&path)
                        .await
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    // No TLS over a local socket, as libpq.
                    handshake(pg, s, &None, String::new()).await
                }
            }
        };
        let where_ = match host {
            Host::Tcp(h) => format!("{h}:{port}"),
            #[cfg(unix)]
            Host::Unix(d) => d.display().to_string(),
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(c)) => return Ok(c),
            Ok(Err(e)) => last = format!("PostgreSQL at {where_}: {e}"),
            Err(_) => last = format!("PostgreSQL at {where_}: no connection within {timeout:?}"),
        }
    }
    Err(last)
}

/// The startup (TLS, authentication) on an open stream.
async fn handshake<S>(
    pg: &tokio_postgres::Config,
    s: S,
    tls: &Option<Arc<TlsClient>>,
    address: String,
) -> Result<tokio_postgres::Client, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let client = match tls {
        Some(t) => {
            let (client, conn) = pg
                .connect_raw(
                    s,
                    PgTls {
                        client: t.clone(),
                        address,
                    },
                )
                .await
                .map_err(|e| describe(&e))?;
            tokio::spawn(conn);
            client
        }
        None => {
            let mut plain = pg.clone();
            plain.ssl_mode(SslMode::Disable);
            let (client, conn) = plain
                .connect_raw(s, NoTls)
                .await
                .map_err(|e| describe(&e))?;
            tokio::spawn(conn);
            client
        }
    };
    Ok(client)
}

/// tokio-postgres' TLS hook on this project's rustls client.
struct PgTls {
    client: Arc<TlsClient>,
    address: String,
}

impl<S> TlsConnect<S> for PgTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = PgTlsStream<S>;
    type Error = String;
    type Future = Pin<Box<dyn Future<Output = Result<PgTlsStream<S>, String>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let s = self.client.connect(stream, &self.address).await?;
            Ok(PgTlsStream(Box::new(s)))
        })
    }
}

/// A TLS stream to the server (no channel binding: SCRAM without `-PLUS`).
struct PgTlsStream<S>(Box<tokio_rustls::client::TlsStream<Buffered<S>>>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for PgTlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for PgTlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for PgTlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_escapes() {
        let mut out = Vec::new();
        escape(&mut out, b"a\tb\nc\\d\re");
        assert_eq!(out, b"a\\tb\\nc\\\\d\\re");
    }

    #[test]
    fn copy_error_line() {
        assert_eq!(
            copy_line("COPY nagare_stage, line 3, column n: \"x\""),
            Some(3)
        );
        assert_eq!(copy_line("COPY t, line 12"), Some(12));
        assert_eq!(copy_line("SQL statement"), None);
    }

    #[test]
    fn pg_environment_fills_what_the_connection_leaves_out() {
        let env = |k: &str| {
            match k {
                "PGHOST" => Some("db.example"),
                "PGPORT" => Some("6543"),
                "PGUSER" => Some("logs"),
                "PGPASSWORD" => Some("pw"),
                "PGDATABASE" => Some("logdb"),
                _ => None,
            }
            .map(String::from)
        };
        let pg = pg_config("", &env).unwrap();
        assert_eq!(pg.get_hosts(), &[Host::Tcp("db.example".into())]);
        assert_eq!(pg.get_ports(), &[6543]);
        assert_eq!(pg.get_user(), Some("logs"));
        assert_eq!(pg.get_password(), Some(&b"pw"[..]));
        assert_eq!(pg.get_dbname(), Some("logdb"));
        let pg = pg_config("host=h port=1 user=u dbname=d", &env).unwrap();
        assert_eq!(pg.get_hosts(), &[Host::Tcp("h".into())]);
        assert_eq!(pg.get_ports(), &[1]);
        assert_eq!(pg.get_user(), Some("u"));
        assert_eq!(pg.get_dbname(), Some("d"));
        assert!(pg_config("host=h port=notaport", &env).is_err());
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_table("logs.app"), "\"logs\".\"app\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
    }
}
