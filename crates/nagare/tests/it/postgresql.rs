//! The postgresql output against a real PostgreSQL 15 (one server per test
//! run, common/pg_server.rs), rows read back with psql: columns and jsonb
//! by content and count; stored once through the ledger: a chunk re-sent
//! from a file buffer, by two processes at once, and nagare killed with
//! SIGKILL under acked load (every acked event once); a restart of
//! PostgreSQL mid-load (nothing lost, nothing doubled); a row of a wrong
//! type rejected with its reason while the others are stored; a missing
//! table, a ledger that cannot be made and a wrong password named in the
//! log.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::pg_server::{shared_postgres, PgServer, PASSWORD, TLS_USER, USER};
use crate::common::sql::*;
use crate::common::*;

/// A table with the columns the tests fill (no unique key: the ledger
/// makes a chunk stored once).
fn create_table(pg: &PgServer, table: &str) {
    pg.psql(&format!(
        "CREATE TABLE {table} (id bigserial, chunk_id text NOT NULL, position integer NOT NULL, \
         time timestamptz, tag text, seq bigint, message text, rec jsonb); \
         GRANT ALL ON {table} TO {USER}; GRANT ALL ON SEQUENCE {table}_id_seq TO {USER};"
    ));
}

/// A postgresql output of `**` into `table`, with the chunk id and
/// position in their columns.
fn pg_output(pg: &PgServer, table: &str, extra: &str, buffer: &str) -> String {
    format!(
        r#"[[output]]
type = "postgresql"
match = "**"
connection = "{}"
password = "{PASSWORD}"
table = "{table}"
columns = {{ seq = "seq", message = "message" }}
record_column = "rec"
tag_column = "tag"
chunk_id_column = "chunk_id"
position_column = "position"
timeout = "5s"
{extra}
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
retry_max_interval = "500ms"
{buffer}
"#,
        pg.connection()
    )
}

/// The seqs stored in `table`, in order.
fn seqs(pg: &PgServer, table: &str) -> Vec<u64> {
    pg.psql(&format!("SELECT seq FROM {table} ORDER BY seq"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// The ledger's rows for `table`: (chunks, rows).
fn ledger_of(pg: &PgServer, table: &str) -> (u64, u64) {
    let r = pg.psql(&format!(
        "SELECT count(*), coalesce(sum(rows), 0) FROM nagare_chunks WHERE target = '{table}'"
    ));
    let (a, b) = r.trim().split_once('|').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn output_copies_columns_and_jsonb_rows_by_content() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_content";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let (d, port) = start_forward_daemon(dir.path(), &pg_output(&pg, table, "", ""));
    let n = 3000;
    let mut s = Sender::tcp(port);
    s.send_seqs("app.web", n, 250);
    // Awkward text survives COPY's escaping: tab, newline, backslash, quote, UTF-8.
    let odd = "tab\there\nnew line \\ back \"quoted\" 日本語\r";
    let mut e = Vec::new();
    nagare_forward::write_entry(
        &mut e,
        nagare_forward::EventTime::new(1_700_000_000, 123_456_000),
        &record(n, odd),
    );
    let mut f = Vec::new();
    nagare_forward::encode_packed_forward(
        &mut f,
        "app.odd",
        &e,
        1,
        None,
        nagare_forward::Compression::None,
    )
    .unwrap();
    s.raw(&f);
    wait_until(WAIT, "every row in PostgreSQL", || pg.count(table) == n + 1);
    assert_exact_seqs(&seqs(&pg, table), n + 1);
    // Columns and the jsonb record agree with what was sent.
    let wrong = pg.psql(&format!(
        "SELECT count(*) FROM {table} WHERE seq < {n} AND (message <> 'event number ' || seq \
         OR rec->>'message' <> message OR (rec->>'seq')::bigint <> seq OR tag <> 'app.web' \
         OR length(chunk_id) <> 32 OR time < now() - interval '5 minutes')"
    ));
    assert_eq!(wrong.trim(), "0");
    let row = pg.psql(&format!(
        "SELECT tag, message = rec->>'message', extract(epoch from time)::numeric(20,6) FROM {table} WHERE seq = {n}"
    ));
    assert_eq!(row.trim(), "app.odd|t|1700000000.123456");
    let msg = pg.psql(&format!("SELECT message FROM {table} WHERE seq = {n}"));
    assert_eq!(msg.trim_end_matches('\n'), odd);
    // Positions in a chunk run 0.. without gaps.
    let bad_positions = pg.psql(&format!(
        "SELECT count(*) FROM (SELECT chunk_id, count(*) c, max(position) m FROM {table} GROUP BY chunk_id) x WHERE m <> c - 1"
    ));
    assert_eq!(bad_positions.trim(), "0");
    // The ledger holds one row a chunk: the chunk ids of the table, their rows.
    let (chunks, rows) = ledger_of(&pg, table);
    let table_chunks = pg.psql(&format!("SELECT count(DISTINCT chunk_id) FROM {table}"));
    assert_eq!(chunks.to_string(), table_chunks.trim());
    assert_eq!(rows, n + 1);
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// A chunk sent twice (the same chunk files of a file buffer flushed
/// again, as after a kill -9 between the COMMIT and the chunk's removal),
/// first by two processes at once (one transaction waits on the other's
/// ledger key, then skips), then once more: stored once.
#[test]
fn a_chunk_resent_from_a_file_buffer_is_stored_once() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_once";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let buf = dir.path().join("buf");
    let file_buffer = |b: &std::path::Path| {
        format!(
            "type = \"file\"\npath = \"{}\"\nchunk_limit_records = 100\n",
            b.display()
        )
    };
    // PostgreSQL unreachable (a closed port): the chunks wait in the
    // file buffer, kept aside before any flush.
    let down = pg_output(&pg, table, "", &file_buffer(&buf)).replace(
        &format!("port={}", pg.port),
        &format!("port={}", free_port()),
    );
    let n = 2000;
    let saved = buffer_before_any_flush(dir.path(), &down, &buf, "app.once", n);
    // Two processes with the same chunk files flush them at once.
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (buf_a, buf_b) = (dir_a.path().join("buf"), dir_b.path().join("buf"));
    restore_buffer(&saved, &buf_a);
    restore_buffer(&saved, &buf_b);
    let (a, _) = start_forward_daemon(
        dir_a.path(),
        &pg_output(&pg, table, "", &file_buffer(&buf_a)),
    );
    let (b, _) = start_forward_daemon(
        dir_b.path(),
        &pg_output(&pg, table, "", &file_buffer(&buf_b)),
    );
    a.wait_metric("events_out_total", "postgresql#0", n);
    b.wait_metric("events_out_total", "postgresql#0", n);
    assert_exact_seqs(&seqs(&pg, table), n);
    let skipped = |d: &Daemon| d.stderr().matches("chunk already stored").count();
    assert_eq!(
        skipped(&a) + skipped(&b),
        20,
        "each of the 20 chunks copied by one process and skipped by the other"
    );
    drop((a, b));
    // The same chunk files once more: nothing is added.
    restore_buffer(&saved, &buf);
    let (d, _) = start_forward_daemon(dir.path(), &pg_output(&pg, table, "", &file_buffer(&buf)));
    d.wait_metric("events_out_total", "postgresql#0", n);
    assert_exact_seqs(&seqs(&pg, table), n);
    assert_eq!(ledger_of(&pg, table), (20, n));
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// nagare killed with SIGKILL under acked load, with a file buffer and
/// four flush workers: after a restart every acked event is in the table
/// once (chunks committed before the kill but still in the buffer are
/// found in the ledger and not copied again).
#[test]
fn kill_9_under_acked_load_stores_every_acked_event_once() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_kill";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        "{}{}",
        forward_input(port),
        pg_output(
            &pg,
            table,
            "",
            &format!(
                "type = \"file\"\npath = \"{}\"\nchunk_limit_records = 300\nflush_thread_count = 4\n",
                dir.path().join("buf").display()
            )
        )
    );
    let mut d = Daemon::start(dir.path(), "nagare", &cfg, None);
    d.wait_port(port);
    let acked = Arc::new(Mutex::new(0u64));
    let acked2 = acked.clone();
    let load = std::thread::spawn(move || {
        let mut s = Sender::tcp(port);
        for f in 0u64.. {
            let (a, b) = (f * 50, f * 50 + 50);
            s.packed("app.kill", a..b, Some(format!("k{f}").as_bytes()));
            match s.read_msg() {
                Ok(_) => *acked2.lock().unwrap() = b,
                Err(_) => return, // nagare died: unacked frames are the sender's
            }
        }
    });
    wait_until(WAIT, "acked events, some of them stored", || {
        *acked.lock().unwrap() >= 8000 && pg.count(table) > 0
    });
    d.signal(libc::SIGKILL);
    d.wait_exit(WAIT);
    load.join().unwrap();
    let acked = *acked.lock().unwrap();
    let at_kill = pg.count(table);
    let mut d = Daemon::start(dir.path(), "nagare", &cfg, None);
    d.wait_port(port);
    wait_until(Duration::from_secs(60), "every acked event stored", || {
        pg.count(table) >= acked
    });
    let all = seqs(&pg, table);
    let (lost, dups) = lost_and_duplicated(&all, acked);
    assert!(
        lost.is_empty(),
        "acked events lost: {:?}",
        &lost[..lost.len().min(20)]
    );
    assert_eq!(dups, 0, "duplicates ({at_kill} rows at the kill)");
    eprintln!(
        "kill -9: {acked} acked, {at_kill} stored at the kill, {} after, 0 lost, 0 duplicated, {} chunk(s) found in the ledger",
        all.len(),
        d.stderr().matches("chunk already stored").count()
    );
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// PostgreSQL restarted while events stream in: the chunks that failed are
/// retried, none is lost and none stored twice.
#[test]
fn a_restart_of_postgresql_mid_load_loses_and_doubles_nothing() {
    let Some(server) = shared_postgres() else {
        return;
    };
    // The restart would break the other tests' writes: this one alone.
    #[allow(clippy::readonly_write_lock)]
    let pg = server.write().unwrap();
    let table = "pg_restart";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let (d, port) = start_forward_daemon(dir.path(), &pg_output(&pg, table, "", ""));
    let n = 20_000;
    let mut s = Sender::tcp(port);
    s.send_seqs("app.restart", n / 2, 100);
    wait_until(WAIT, "some rows before the restart", || pg.count(table) > 0);
    pg.stop();
    for a in (n / 2..n).step_by(100) {
        s.packed("app.restart", a..a + 100, None);
    }
    pg.start();
    wait_until(
        Duration::from_secs(60),
        "every row after the restart",
        || pg.count(table) >= n,
    );
    assert_exact_seqs(&seqs(&pg, table), n);
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// A value PostgreSQL refuses (text in a bigint column) rejects that row
/// alone, with the server's reason in the dead letters' `.reasons`; the
/// other rows of its chunk are stored, and the ledger counts them.
#[test]
fn a_row_of_a_wrong_type_is_rejected_with_its_reason_and_the_rest_stored() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_badrow";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let buf = dir.path().join("buf");
    let (d, port) = start_forward_daemon(
        dir.path(),
        &pg_output(
            &pg,
            table,
            "",
            &format!("type = \"file\"\npath = \"{}\"\n", buf.display()),
        ),
    );
    let mut s = Sender::tcp(port);
    s.raw(&frame(
        "app.bad",
        &records_with_two_of_a_wrong_type(),
        nagare_forward::EventTime::now(),
    ));
    let _ = s.read_ack();
    wait_until(WAIT, "the good rows", || pg.count(table) == 8);
    assert_eq!(seqs(&pg, table), vec![0, 1, 2, 4, 5, 6, 8, 9]);
    let lines = wait_reasons(&buf.join("dead-letters"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("3\tinvalid_text_representation: "),
        "{lines:?}"
    );
    assert!(lines[0].contains("not-a-number-3"), "{lines:?}");
    assert!(lines[1].starts_with("7\t"), "{lines:?}");
    assert_eq!(ledger_of(&pg, table), (1, 8));
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// A table that does not exist is named in the log at start (the check
/// in the background) and at the flush.
#[test]
fn a_missing_table_is_named_in_the_log() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (d, port) = start_forward_daemon(dir.path(), &pg_output(&pg, "no_such_table", "", ""));
    let line = d.wait_log("relation \"no_such_table\" does not exist");
    assert!(line.contains("table \"no_such_table\""), "{line}");
    send_acked_to(port, "app.missing", 0..5);
    // The flush is refused for the same reason, and says so again.
    wait_until(WAIT, "the flush naming the missing table", || {
        d.stderr()
            .lines()
            .filter(|l| l.contains("relation \"no_such_table\" does not exist"))
            .count()
            >= 2
    });
}

/// A ledger that cannot be made (its schema does not exist) is named in
/// the log with the statement that makes it; the events wait in the
/// buffer and are stored once the schema is there.
#[test]
fn a_ledger_that_cannot_be_made_is_named_and_the_events_kept() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_ledger";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let cfg = pg_output(&pg, table, "ledger_table = \"ledger_s.chunks\"", "");
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    send_acked_to(port, "app.ledger", 0..100);
    let line = d.wait_log("ledger table \"ledger_s.chunks\"");
    assert!(
        line.contains("schema \"ledger_s\" does not exist")
            && line.contains("CREATE TABLE IF NOT EXISTS \"ledger_s\".\"chunks\""),
        "{line}"
    );
    wait_until(WAIT, "the flush retried", || {
        d.metric("retries_total", "postgresql#0") >= 2
    });
    assert_eq!(pg.count(table), 0);
    assert_eq!(d.metric("secondary_events_total", "postgresql#0"), 0);
    pg.psql(&format!(
        "CREATE SCHEMA ledger_s; GRANT ALL ON SCHEMA ledger_s TO {USER};"
    ));
    wait_until(WAIT, "the kept events stored", || pg.count(table) == 100);
    assert_exact_seqs(&seqs(&pg, table), 100);
    let ledger = pg.psql("SELECT count(*), sum(rows) FROM ledger_s.chunks");
    assert_eq!(ledger.trim(), "1|100");
    drop(d);
    pg.psql(&format!("DROP TABLE {table}; DROP SCHEMA ledger_s CASCADE"));
}

/// A wrong password: the log says so, the events stay in the buffer and
/// are stored once the server takes the password.
#[test]
fn a_wrong_password_is_logged_and_the_events_kept() {
    let Some(server) = shared_postgres() else {
        return;
    };
    // Changing the role's password would break the other tests' logins.
    #[allow(clippy::readonly_write_lock)]
    let pg = server.write().unwrap();
    let table = "pg_password";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let cfg = pg_output(&pg, table, "", "").replace(PASSWORD, "wrong-pw");
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    send_acked_to(port, "app.pw", 0..100);
    d.wait_log("password authentication failed for user \"nagare\"");
    assert_eq!(pg.count(table), 0);
    pg.psql(&format!("ALTER ROLE {USER} PASSWORD 'wrong-pw'"));
    wait_until(WAIT, "the kept events stored", || pg.count(table) == 100);
    pg.psql(&format!("ALTER ROLE {USER} PASSWORD '{PASSWORD}'"));
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// examples/postgresql.toml, as docs/outputs-storage-sql.md shows it, runs:
/// pointed at the test server (the password from PGPASSWORD), its rows
/// arrive with their columns and the record as jsonb, and its ledger
/// (made by the output) holds the chunk.
#[test]
fn the_documented_example_config_stores_rows() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let (example, create) = documented_example("postgresql.toml");
    pg.psql(&format!(
        "DROP TABLE IF EXISTS logs; {create}; GRANT ALL ON logs TO {USER};"
    ));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = example
        .replace("127.0.0.1:24224", &format!("127.0.0.1:{port}"))
        .replace("port=5432", &format!("port={}", pg.port))
        .replace(
            "/tmp/nagare-example/postgresql-buffer",
            &dir.path().join("buf").display().to_string(),
        );
    let mut d = Daemon::start_with_env(
        dir.path(),
        "example",
        &config,
        None,
        &[("PGPASSWORD", PASSWORD)],
    );
    d.wait_port(port);
    let records: Vec<Vec<u8>> = (0..100u64)
        .map(|i| mp(serde_json::json!({"host": "web-1", "message": message_for(i), "seq": i})))
        .collect();
    let mut s = Sender::tcp(port);
    s.raw(&frame("app", &records, nagare_forward::EventTime::now()));
    wait_until(WAIT, "the example's rows", || pg.count("logs") == 100);
    let wrong = pg.psql(
        "SELECT count(*) FROM logs WHERE host <> 'web-1' OR tag <> 'app' \
         OR message <> 'event number ' || (record->>'seq') OR record->>'host' <> 'web-1'",
    );
    assert_eq!(wrong.trim(), "0");
    assert_eq!(ledger_of(&pg, "logs"), (1, 100));
    drop(d);
    pg.psql("DROP TABLE logs");
}

/// Over TLS (the project's rustls client, the server's certificate checked
/// against the test CA): the role may log in over TLS only, so the rows
/// arriving show the connection was encrypted.
#[test]
fn output_writes_over_tls_checking_the_server_certificate() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_tls";
    create_table(&pg, table);
    pg.psql(&format!(
        "GRANT ALL ON {table} TO {TLS_USER}; GRANT ALL ON SEQUENCE {table}_id_seq TO {TLS_USER};"
    ));
    let dir = tempfile::tempdir().unwrap();
    // A ledger of its own: the role may not write the others' ledger.
    let cfg = pg_output(&pg, table, "ledger_table = \"pg_tls_chunks\"", "")
        .replace(&format!("user={USER}"), &format!("user={TLS_USER}"))
        + &format!("[output.tls]\nca = {:?}\n", pg.ca);
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    send_acked_to(port, "app.tls", 0..300);
    wait_until(WAIT, "the rows sent over TLS", || pg.count(table) == 300);
    assert_exact_seqs(&seqs(&pg, table), 300);
    drop(d);
    // Without [output.tls] the same role is refused by the server.
    let plain =
        pg_output(&pg, table, "", "").replace(&format!("user={USER}"), &format!("user={TLS_USER}"));
    let dir2 = tempfile::tempdir().unwrap();
    let (d, _) = start_forward_daemon(dir2.path(), &plain);
    d.wait_log("no encryption");
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// A "server" that reads a part of the startup and closes: the chunk is
/// retried on new connections, nothing refused, the error names the peer.
#[test]
fn a_server_closing_mid_startup_gets_the_chunk_again() {
    if crate::common::pg_server::skip_without_postgres() {
        return;
    }
    let (lport, conns) = closing_server(16);
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"[[output]]
type = "postgresql"
match = "**"
connection = "host=127.0.0.1 port={lport} user=x dbname=y"
table = "t"
record_column = "r"
timeout = "2s"
[output.buffer]
flush_interval = "50ms"
retry_wait = "50ms"
retry_max_interval = "200ms"
"#
    );
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    send_acked_to(port, "app.cut", 0..50);
    wait_connections(&conns, 4);
    d.wait_log(&format!("PostgreSQL at 127.0.0.1:{lport}"));
    assert_eq!(d.metric("secondary_events_total", "postgresql#0"), 0);
    assert_eq!(d.metric("events_out_total", "postgresql#0"), 0);
}
