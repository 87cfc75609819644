//! `postgresql`: writes each chunk into a PostgreSQL table with `COPY …
//! FROM STDIN` (text format), in one transaction per chunk.
//!
//! Stored once: with `chunk_id_column` and `position_column` (the
//! default), each row carries the chunk's id (stable across retries and,
//! with a file buffer, restarts) and the entry's position in the chunk.
//! The chunk is copied into a temporary table of the session and moved
//! with `INSERT … SELECT … ON CONFLICT DO NOTHING`: with a unique key on
//! (chunk_id, position) in the target table, a chunk sent again (a retry
//! after a lost answer, a re-send after kill -9) adds nothing. Without
//! the two columns the chunk is copied straight into the table.
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
    /// The column (text or uuid) that takes the chunk's id, 32 hex digits
    /// (default "chunk_id"); with `position_column` and a unique key on
    /// the two, a chunk sent twice is stored once. "" turns that off (a
    /// plain COPY).
    #[serde_inline_default("chunk_id".into())]
    pub chunk_id_column: String,
    /// The column (integer) that takes the entry's position in its chunk
    /// (default "position"); "" turns stored-once off.
    #[serde_inline_default("position".into())]
    pub position_column: String,
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
    const DOC: &'static str = "Writes each chunk into a PostgreSQL table with COPY in one transaction; columns from record fields or the record as jsonb; a chunk sent twice is stored once through a unique (chunk_id, position) key (see [Outputs to storage](outputs-storage-sql.md)).";

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
        let stored_once = !self.chunk_id_column.is_empty() && !self.position_column.is_empty();
        if !stored_once && (self.chunk_id_column.is_empty() != self.position_column.is_empty()) {
            cx.warn(
                "chunk_id_column",
                "stored-once needs both chunk_id_column and position_column; with one of them \"\" chunks sent twice are stored twice",
            );
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
        if stored_once {
            add(&Some(self.chunk_id_column.clone()), Column::ChunkId);
            add(&Some(self.position_column.clone()), Column::Position);
        }
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
        Ok(Arc::new(PostgresqlOutput {
            name: cx.name.clone(),
            sql: Sql {
                copy_direct: format!("COPY {table} ({list}) FROM STDIN"),
                copy_stage: format!("COPY pg_temp.{STAGE} ({list}) FROM STDIN"),
                create_stage: format!(
                    "CREATE TEMP TABLE IF NOT EXISTS {STAGE} ON COMMIT DELETE ROWS AS SELECT {list} FROM {table} WITH NO DATA"
                ),
                insert: format!(
                    "INSERT INTO {table} ({list}) SELECT {list} FROM pg_temp.{STAGE} ON CONFLICT DO NOTHING"
                ),
                check: format!("SELECT {list} FROM {table} LIMIT 0"),
            },
            cols,
            stored_once,
            pg,
            tls,
            timeout: self.timeout.0,
            idle: Mutex::new(Vec::new()),
            cfg: self,
        }))
    }
}

/// The session's staging table (a temporary table: each connection has
/// its own, gone with the connection).
const STAGE: &str = "nagare_stage";

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

struct Sql {
    copy_direct: String,
    copy_stage: String,
    create_stage: String,
    insert: String,
    check: String,
}

struct PostgresqlOutput {
    name: String,
    cfg: PostgresqlOutputConfig,
    cols: Vec<(String, Column)>,
    stored_once: bool,
    sql: Sql,
    pg: tokio_postgres::Config,
    tls: Option<Arc<TlsClient>>,
    timeout: Duration,
    /// Open connections not in use (one per concurrent flush).
    idle: Mutex<Vec<tokio_postgres::Client>>,
}

/// Why a write failed.
enum Failure {
    /// Rows the server names as bad: (index in the chunk, reason).
    Row(u32, String),
    /// The chunk as a whole.
    Chunk(FlushError),
}

#[async_trait]
impl Output for PostgresqlOutput {
    fn start(&self) {
        // Checks the table and columns at start, so a typo shows in the
        // log at once and not at the first flush; the daemon does not wait
        // for it (the server may be down now and up later).
        let pg = self.pg.clone();
        let tls = self.tls.clone();
        let check = self.sql.check.clone();
        let name = self.name.clone();
        let table = self.cfg.table.clone();
        let timeout = self.timeout;
        let (chunk_id, position) = (
            self.cfg.chunk_id_column.clone(),
            self.cfg.position_column.clone(),
        );
        let unique_check = self.stored_once.then(|| {
            let mut two = [chunk_id.replace('\'', "''"), position.replace('\'', "''")];
            two.sort();
            format!(
                "SELECT count(*) FROM pg_index i WHERE i.indrelid = '{}'::regclass AND i.indisunique AND i.indnatts = 2 \
                 AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a \
                 WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) = ARRAY['{}', '{}']",
                quote_table(&table).replace('\'', "''"),
                two[0],
                two[1]
            )
        });
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
                return;
            }
            if let Some(unique) = unique_check {
                let found = client.simple_query(&unique).await.ok().and_then(|m| {
                    m.iter().find_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(|v| v != "0"),
                        _ => None,
                    })
                });
                if found == Some(false) {
                    tracing::warn!(output = %name, "table {table:?} has no unique key on ({chunk_id}, {position}): a chunk sent twice is stored twice");
                }
            }
        });
    }

    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut rejected: Vec<(u32, String)> = Vec::new();
        loop {
            let body = self.body(chunk, &rejected);
            if body.is_empty() {
                break;
            }
            let rows: Vec<u32> = (0..chunk.count)
                .filter(|i| !rejected.iter().any(|(r, _)| r == i))
                .collect();
            match self.write_once(body).await {
                Ok(()) => break,
                Err(Failure::Row(line, reason)) => match rows.get(line as usize) {
                    Some(&i) if rejected.len() < chunk.count as usize => {
                        rejected.push((i, reason));
                    }
                    // A line we did not send: the chunk as a whole.
                    _ => return Err(FlushError::Permanent(reason)),
                },
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
    /// The rows of the chunk in COPY's text format, without the `skip`
    /// entries.
    fn body(&self, chunk: &Chunk, skip: &[(u32, String)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len * 2);
        let id = hex::encode(chunk.id);
        let mut scratch = Vec::new();
        let mut i = 0u32;
        for seg in &chunk.segments {
            for (time, rec, _) in entries(seg) {
                let at = i;
                i += 1;
                if skip.iter().any(|(r, _)| *r == at) {
                    continue;
                }
                for (n, (_, col)) in self.cols.iter().enumerate() {
                    if n > 0 {
                        out.push(b'\t');
                    }
                    match col {
                        Column::Field(f) => match field_text(rec, f.as_bytes()) {
                            Some(v) => escape(&mut out, &v),
                            None => out.extend_from_slice(b"\\N"),
                        },
                        Column::Record => {
                            scratch.clear();
                            nagare_core::json::write_value(&mut scratch, rec);
                            escape(&mut out, &scratch);
                        }
                        Column::Time => nagare_core::event::write_rfc3339(&mut out, time),
                        Column::Tag => escape(&mut out, chunk.tag.as_bytes()),
                        Column::ChunkId => out.extend_from_slice(id.as_bytes()),
                        Column::Position => out.extend_from_slice(
                            itoa::Buffer::new().format(chunk.position(at)).as_bytes(),
                        ),
                    }
                }
                out.push(b'\n');
            }
        }
        out
    }

    /// One transaction: the body copied (into the stage, then moved).
    async fn write_once(&self, body: Vec<u8>) -> Result<(), Failure> {
        let (client, fresh) = match self.idle.lock().await.pop() {
            Some(c) if !c.is_closed() => (c, false),
            _ => (
                connect(&self.pg, &self.tls, self.timeout)
                    .await
                    .map_err(|e| Failure::Chunk(FlushError::Retry(e)))?,
                true,
            ),
        };
        let run = async {
            if self.stored_once && fresh {
                // Once per connection: the stage lives as long as it.
                client.batch_execute(&self.sql.create_stage).await?;
            }
            client.batch_execute("BEGIN").await?;
            let copy = if self.stored_once {
                &self.sql.copy_stage
            } else {
                &self.sql.copy_direct
            };
            let sink = client.copy_in::<_, Bytes>(copy.as_str()).await?;
            futures_util::pin_mut!(sink);
            sink.send(Bytes::from(body)).await?;
            sink.finish().await?;
            if self.stored_once {
                client.batch_execute(&self.sql.insert).await?;
            }
            client.batch_execute("COMMIT").await
        };
        let result = match tokio::time::timeout(self.timeout, run).await {
            Ok(r) => r,
            Err(_) => {
                // The connection is in an unknown state: dropped.
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
            Err(e) => {
                let failure = self.judge(&e);
                // A fresh connection whose stage was not made is not kept.
                if !fresh && !client.is_closed() && client.batch_execute("ROLLBACK").await.is_ok() {
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

/// COPY's text format: backslash, tab, newline and carriage return escaped.
fn escape(out: &mut Vec<u8>, v: &[u8]) {
    for &b in v {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
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
