//! The postgresql output against a real PostgreSQL 15 (one server per test
//! run, common/pg_server.rs), rows read back with psql: columns and jsonb
//! by content and count; a chunk re-sent from a file buffer stored once; a
//! restart of PostgreSQL mid-load (nothing lost, nothing doubled); a row of
//! a wrong type rejected with its reason while the others are stored; a
//! missing table and a wrong password named in the log.

use std::path::Path;
use std::time::Duration;

use crate::common::pg_server::{shared_postgres, PgServer, PASSWORD, TLS_USER, USER};
use crate::common::*;

/// A table with the stored-once key, and the columns the tests fill.
fn create_table(pg: &PgServer, table: &str) {
    pg.psql(&format!(
        "CREATE TABLE {table} (id bigserial, chunk_id text NOT NULL, position integer NOT NULL, \
         time timestamptz, tag text, seq bigint, message text, rec jsonb, \
         UNIQUE (chunk_id, position)); GRANT ALL ON {table} TO {USER}; \
         GRANT ALL ON SEQUENCE {table}_id_seq TO {USER};"
    ));
}

/// A postgresql output of `tag.**` into `table`.
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
    let odd = "tab\there\nnew line \\ back \"quoted\" 日本語";
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
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

/// A chunk sent twice (the same chunk file of a file buffer flushed again,
/// as after a kill -9 between the COMMIT and the chunk's removal) is
/// stored once: the rows carry (chunk_id, position) and the unique key
/// drops the second copy.
#[test]
fn a_chunk_resent_from_a_file_buffer_is_stored_once() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_once";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let buf = dir.path().join("buf");
    let file_buffer = format!("type = \"file\"\npath = \"{}\"\n", buf.display());
    // 1. PostgreSQL unreachable (a closed port): the chunks wait in the file buffer.
    let dead = free_port();
    let down = pg_output(&pg, table, "", &file_buffer)
        .replace(&format!("port={}", pg.port), &format!("port={dead}"));
    let (mut d, port) = start_forward_daemon(dir.path(), &down);
    let n = 2000;
    send_acked_to(port, "app.once", 0..n);
    d.wait_log("PostgreSQL at 127.0.0.1");
    d.signal(libc::SIGKILL);
    let _ = d.wait_exit(WAIT);
    drop(d);
    // 2. The buffer as it was before any flush, kept aside.
    let saved = dir.path().join("saved");
    copy_dir(&buf, &saved);
    // 3. Flushed for real.
    let (d, _) = start_forward_daemon(dir.path(), &pg_output(&pg, table, "", &file_buffer));
    wait_until(WAIT, "the buffered rows in PostgreSQL", || {
        pg.count(table) == n
    });
    drop(d);
    // 4. The same chunk files once more: nothing is added.
    std::fs::remove_dir_all(&buf).unwrap();
    copy_dir(&saved, &buf);
    let (d, _) = start_forward_daemon(dir.path(), &pg_output(&pg, table, "", &file_buffer));
    d.wait_metric("events_out_total", "postgresql#0", n);
    assert_exact_seqs(&seqs(&pg, table), n);
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
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
/// other rows of its chunk are stored.
#[test]
fn a_row_of_a_wrong_type_is_rejected_with_its_reason_and_the_rest_stored() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "pg_badrow";
    create_table(&pg, table);
    let dir = tempfile::tempdir().unwrap();
    let buf = dir.path().join("buf");
    // The bad rows' seq is text: one chunk of 10 with rows 3 and 7 bad.
    let (d, port) = start_forward_daemon(
        dir.path(),
        &pg_output(
            &pg,
            table,
            "",
            &format!("type = \"file\"\npath = \"{}\"\n", buf.display()),
        ),
    );
    let mut e = Vec::new();
    let t = nagare_forward::EventTime::now();
    for i in 0..10u64 {
        let mut r = Vec::new();
        nagare_forward::msgpack::write_map_len(&mut r, 2);
        nagare_forward::msgpack::write_str(&mut r, b"seq");
        if i == 3 || i == 7 {
            nagare_forward::msgpack::write_str(&mut r, format!("not-a-number-{i}").as_bytes());
        } else {
            nagare_forward::msgpack::write_uint(&mut r, i);
        }
        nagare_forward::msgpack::write_str(&mut r, b"message");
        nagare_forward::msgpack::write_str(&mut r, message_for(i).as_bytes());
        nagare_forward::write_entry(&mut e, t, &r);
    }
    let mut f = Vec::new();
    nagare_forward::encode_packed_forward(
        &mut f,
        "app.bad",
        &e,
        10,
        Some(b"bad-1"),
        nagare_forward::Compression::None,
    )
    .unwrap();
    let mut s = Sender::tcp(port);
    s.raw(&f);
    let _ = s.read_ack();
    wait_until(WAIT, "the good rows", || pg.count(table) == 8);
    assert_eq!(seqs(&pg, table), vec![0, 1, 2, 4, 5, 6, 8, 9]);
    let letters = buf.join("dead-letters");
    wait_until(WAIT, "the dead letters' reasons", || {
        walk(&letters)
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "reasons"))
    });
    let reasons = walk(&letters)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "reasons"))
        .unwrap();
    let text = std::fs::read_to_string(reasons).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("3\tinvalid_text_representation: "),
        "{text}"
    );
    assert!(lines[0].contains("not-a-number-3"), "{text}");
    assert!(lines[1].starts_with("7\t"), "{text}");
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
/// arrive with their columns and the record as jsonb.
#[test]
fn the_documented_example_config_stores_rows() {
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let example = std::fs::read_to_string(format!("{root}/examples/postgresql.toml")).unwrap();
    let doc = std::fs::read_to_string(format!("{root}/docs/outputs-storage-sql.md")).unwrap();
    assert!(
        doc.contains(&example),
        "the docs show examples/postgresql.toml as it is"
    );
    // The table of the example's comment.
    let create: String = example
        .lines()
        .skip_while(|l| !l.contains("CREATE TABLE"))
        .take_while(|l| l.starts_with("#  "))
        .map(|l| l.trim_start_matches('#'))
        .collect();
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
    let mut s = Sender::tcp(port);
    let rec = |i: u64| {
        let mut o = Vec::new();
        nagare_core::json::msgpack_from_json(
            &serde_json::json!({"host": "web-1", "message": message_for(i), "seq": i}),
            &mut o,
        );
        o
    };
    let mut e = Vec::new();
    for i in 0..100 {
        nagare_forward::write_entry(&mut e, nagare_forward::EventTime::now(), &rec(i));
    }
    let mut f = Vec::new();
    nagare_forward::encode_packed_forward(
        &mut f,
        "app",
        &e,
        100,
        None,
        nagare_forward::Compression::None,
    )
    .unwrap();
    s.raw(&f);
    wait_until(WAIT, "the example's rows", || pg.count("logs") == 100);
    let wrong = pg.psql(
        "SELECT count(*) FROM logs WHERE host <> 'web-1' OR tag <> 'app' \
         OR message <> 'event number ' || (record->>'seq') OR record->>'host' <> 'web-1'",
    );
    assert_eq!(wrong.trim(), "0");
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
    let cfg = pg_output(&pg, table, "", "")
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
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let conns = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = conns.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut b = [0u8; 16];
            let _ = std::io::Read::read(&mut s, &mut b);
        }
    });
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
    wait_until(WAIT, "the chunk tried again", || {
        conns.load(std::sync::atomic::Ordering::SeqCst) >= 4
    });
    d.wait_log(&format!("PostgreSQL at 127.0.0.1:{lport}"));
    assert_eq!(d.metric("secondary_events_total", "postgresql#0"), 0);
    assert_eq!(d.metric("events_out_total", "postgresql#0"), 0);
}
