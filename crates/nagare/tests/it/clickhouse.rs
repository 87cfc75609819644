//! The clickhouse output against a real ClickHouse (Debian's 18.16, one
//! server per test run, common/ch_server.rs), rows read back with
//! clickhouse-client: columns by name and by mapping, the rest as JSON, by
//! content and count; a row of a wrong type rejected with its reason while
//! the others are stored; a chunk re-sent from a file buffer merged into
//! one by a ReplacingMergeTree; a wrong password and a server that closes
//! mid-body keep the events.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use crate::common::ch_server::{shared_clickhouse, ChServer, PASSWORD, USER};
use crate::common::*;

fn create_table(ch: &ChServer, table: &str, engine: &str) {
    ch.query(&format!("DROP TABLE IF EXISTS {table}"));
    ch.query(&format!(
        "CREATE TABLE {table} (chunk_id String, position UInt32, time DateTime, tag String, \
         seq UInt64, message String, rest String) ENGINE = {engine} ORDER BY (chunk_id, position)"
    ));
}

fn ch_output(ch: &ChServer, table: &str, extra: &str, buffer: &str) -> String {
    format!(
        r#"[[output]]
type = "clickhouse"
match = "**"
endpoint = "http://127.0.0.1:{}"
table = "{table}"
user = "{USER}"
key = "{PASSWORD}"
tag_column = "tag"
rest_column = "rest"
compress = "gzip"
timeout = "5s"
{extra}
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
retry_max_interval = "500ms"
{buffer}
"#,
        ch.http_port
    )
}

fn seqs(ch: &ChServer, table: &str) -> Vec<u64> {
    ch.query(&format!("SELECT seq FROM {table} ORDER BY seq"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// One PackedForward frame of the given msgpack records.
fn frame(tag: &str, records: &[Vec<u8>], t: nagare_forward::EventTime) -> Vec<u8> {
    let mut e = Vec::new();
    for r in records {
        nagare_forward::write_entry(&mut e, t, r);
    }
    let mut f = Vec::new();
    nagare_forward::encode_packed_forward(
        &mut f,
        tag,
        &e,
        records.len() as u32,
        Some(b"ch-frame"),
        nagare_forward::Compression::None,
    )
    .unwrap();
    f
}

fn mp(v: serde_json::Value) -> Vec<u8> {
    let mut o = Vec::new();
    nagare_core::json::msgpack_from_json(&v, &mut o);
    o
}

#[test]
fn output_inserts_rows_by_content_with_the_rest_as_json() {
    let Some(ch) = shared_clickhouse() else {
        return;
    };
    let table = "ch_content";
    create_table(ch, table, "MergeTree");
    let dir = tempfile::tempdir().unwrap();
    let (d, port) = start_forward_daemon(dir.path(), &ch_output(ch, table, "", ""));
    let n = 3000;
    let mut s = Sender::tcp(port);
    s.send_seqs("app.web", n, 250);
    // A record with fields the table lacks, a number as message, odd text.
    let odd = mp(
        serde_json::json!({"seq": n, "message": "tab\there \"q\" \\ 日本", "host": "h1", "n": {"a": [1, 2]}}),
    );
    let num = mp(serde_json::json!({"seq": n + 1, "message": 42}));
    s.raw(&frame(
        "app.odd",
        &[odd, num],
        nagare_forward::EventTime::new(1_700_000_000, 5),
    ));
    let _ = s.read_ack();
    wait_until(WAIT, "every row in ClickHouse", || ch.count(table) == n + 2);
    assert_exact_seqs(&seqs(ch, table), n + 2);
    let wrong = ch.query(&format!(
        "SELECT count() FROM {table} WHERE seq < {n} AND (message != concat('event number ', toString(seq)) \
         OR tag != 'app.web' OR length(chunk_id) != 32 OR rest != '{{}}' OR time < now() - 300)"
    ));
    assert_eq!(wrong.trim(), "0");
    let odd_row = ch.query(&format!(
        "SELECT tag, message, rest, toUnixTimestamp(time) FROM {table} WHERE seq >= {n} ORDER BY seq"
    ));
    assert_eq!(
        odd_row,
        "app.odd\ttab\\there \"q\" \\\\ 日本\t{\"host\":\"h1\",\"n\":{\"a\":[1,2]}}\t1700000000\n\
         app.odd\t42\t{}\t1700000000\n"
    );
    drop(d);
    ch.query(&format!("DROP TABLE {table}"));
}

#[test]
fn a_mapping_names_the_columns() {
    let Some(ch) = shared_clickhouse() else {
        return;
    };
    let table = "ch_mapping";
    ch.query(&format!("DROP TABLE IF EXISTS {table}"));
    ch.query(&format!(
        "CREATE TABLE {table} (ts DateTime, n UInt64, text String) ENGINE = MergeTree ORDER BY ts"
    ));
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"[[output]]
type = "clickhouse"
match = "**"
endpoint = "http://127.0.0.1:{}/"
table = "default.{table}"
columns = {{ n = "seq", text = "message" }}
time_column = "ts"
[output.buffer]
flush_interval = "50ms"
"#,
        ch.http_port
    );
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    send_acked_to(port, "app.map", 0..500);
    wait_until(WAIT, "500 rows in the table", || ch.count(table) == 500);
    let wrong = ch.query(&format!(
        "SELECT count() FROM {table} WHERE text != concat('event number ', toString(n))"
    ));
    assert_eq!(wrong.trim(), "0");
    drop(d);
    ch.query(&format!("DROP TABLE {table}"));
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

/// A value ClickHouse refuses (text in a UInt64) fails the insert with an
/// error naming the row: that row goes to the dead letters with the reason,
/// the others are stored.
#[test]
fn a_row_of_a_wrong_type_is_rejected_with_its_reason_and_the_rest_stored() {
    let Some(ch) = shared_clickhouse() else {
        return;
    };
    let table = "ch_badrow";
    create_table(ch, table, "MergeTree");
    let dir = tempfile::tempdir().unwrap();
    let buf = dir.path().join("buf");
    let (d, port) = start_forward_daemon(
        dir.path(),
        &ch_output(
            ch,
            table,
            "",
            &format!("type = \"file\"\npath = \"{}\"\n", buf.display()),
        ),
    );
    let records: Vec<Vec<u8>> = (0..10u64)
        .map(|i| {
            let seq = if i == 3 || i == 7 {
                serde_json::json!(format!("not-a-number-{i}"))
            } else {
                serde_json::json!(i)
            };
            mp(serde_json::json!({"seq": seq, "message": message_for(i)}))
        })
        .collect();
    let mut s = Sender::tcp(port);
    s.raw(&frame(
        "app.bad",
        &records,
        nagare_forward::EventTime::now(),
    ));
    let _ = s.read_ack();
    wait_until(WAIT, "the good rows", || ch.count(table) == 8);
    assert_eq!(seqs(ch, table), vec![0, 1, 2, 4, 5, 6, 8, 9]);
    let letters = buf.join("dead-letters");
    let reasons = || {
        walk(&letters)
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "reasons"))
    };
    wait_until(WAIT, "the dead letters' reasons", || reasons().is_some());
    let text = std::fs::read_to_string(reasons().unwrap()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("3\t"), "{text}");
    assert!(
        lines[0].contains("(at row 4)") && lines[0].contains("seq"),
        "{text}"
    );
    assert!(lines[1].starts_with("7\t"), "{text}");
    drop(d);
    ch.query(&format!("DROP TABLE {table}"));
}

/// The same chunk files flushed twice (as after a kill -9 between the
/// insert and the chunk's removal): a ReplacingMergeTree ordered by
/// (chunk_id, position) keeps one row of each, as `FINAL` reads them.
#[test]
fn a_chunk_resent_from_a_file_buffer_is_stored_once_in_a_replacing_merge_tree() {
    let Some(ch) = shared_clickhouse() else {
        return;
    };
    let table = "ch_once";
    create_table(ch, table, "ReplacingMergeTree");
    let dir = tempfile::tempdir().unwrap();
    let buf = dir.path().join("buf");
    let file_buffer = format!("type = \"file\"\npath = \"{}\"\n", buf.display());
    let down = ch_output(ch, table, "", &file_buffer).replace(
        &format!("127.0.0.1:{}", ch.http_port),
        &format!("127.0.0.1:{}", free_port()),
    );
    let (mut d, port) = start_forward_daemon(dir.path(), &down);
    let n = 2000;
    send_acked_to(port, "app.once", 0..n);
    d.signal(libc::SIGKILL);
    let _ = d.wait_exit(WAIT);
    drop(d);
    let saved = dir.path().join("saved");
    copy_dir(&buf, &saved);
    let up = ch_output(ch, table, "", &file_buffer);
    let (d, _) = start_forward_daemon(dir.path(), &up);
    wait_until(WAIT, "the buffered rows", || ch.count(table) == n);
    drop(d);
    std::fs::remove_dir_all(&buf).unwrap();
    copy_dir(&saved, &buf);
    let (d, _) = start_forward_daemon(dir.path(), &up);
    d.wait_metric("events_out_total", "clickhouse#0", n);
    let once: Vec<u64> = ch
        .query(&format!("SELECT seq FROM {table} FINAL ORDER BY seq"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_exact_seqs(&once, n);
    drop(d);
    ch.query(&format!("DROP TABLE {table}"));
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

/// A wrong password and a missing table: named in the log, the events kept
/// in the buffer (the password) or refused whole (the table).
#[test]
fn a_wrong_password_and_a_missing_table_are_named_in_the_log() {
    let Some(ch) = shared_clickhouse() else {
        return;
    };
    let table = "ch_password";
    create_table(ch, table, "MergeTree");
    let dir = tempfile::tempdir().unwrap();
    let cfg = ch_output(ch, table, "", "").replace(PASSWORD, "wrong")
        + &ch_output(ch, "no_such_table", "", "")
            .replace("match = \"**\"", "match = \"missing.**\"");
    let cfg = cfg.replacen("match = \"**\"", "match = \"app.**\"", 1);
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    d.wait_log("Table default.no_such_table doesn't exist");
    send_acked_to(port, "app.pw", 0..100);
    // Retried, not refused: the log says why more than once.
    wait_until(WAIT, "the wrong password retried", || {
        d.stderr()
            .lines()
            .filter(|l| l.contains("Wrong password for user nagare"))
            .count()
            >= 2
    });
    assert_eq!(d.metric("secondary_events_total", "clickhouse#0"), 0);
    assert_eq!(ch.count(table), 0);
    drop(d);
    ch.query(&format!("DROP TABLE {table}"));
}

/// A server that reads a part of the request and closes: the chunk is
/// retried (a new connection each time), nothing refused, nagare alive.
#[test]
fn a_server_closing_mid_body_gets_the_chunk_again() {
    let Some(_) = shared_clickhouse() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let lport = listener.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            c.fetch_add(1, SeqCst);
            let mut b = [0u8; 300];
            let _ = s.read(&mut b);
            drop(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"[[output]]
type = "clickhouse"
match = "**"
endpoint = "http://127.0.0.1:{lport}"
table = "t"
timeout = "2s"
[output.buffer]
flush_interval = "50ms"
retry_wait = "50ms"
retry_max_interval = "200ms"
"#
    );
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    send_acked_to(port, "app.cut", 0..200);
    wait_until(WAIT, "the chunk tried again", || conns.load(SeqCst) >= 4);
    d.wait_log(&format!("127.0.0.1:{lport}"));
    assert_eq!(d.metric("secondary_events_total", "clickhouse#0"), 0);
    assert_eq!(d.metric("events_out_total", "clickhouse#0"), 0);
}

/// examples/clickhouse.toml, as docs/outputs-storage-sql.md shows it, runs
/// against the test server: fields by name, the others in `rest`.
#[test]
fn the_documented_example_config_inserts_rows() {
    let Some(ch) = shared_clickhouse() else {
        return;
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let example = std::fs::read_to_string(format!("{root}/examples/clickhouse.toml")).unwrap();
    let doc = std::fs::read_to_string(format!("{root}/docs/outputs-storage-sql.md")).unwrap();
    assert!(
        doc.contains(&example),
        "the docs show examples/clickhouse.toml as it is"
    );
    let create: String = example
        .lines()
        .skip_while(|l| !l.contains("CREATE TABLE"))
        .take_while(|l| l.starts_with("#  "))
        .map(|l| l.trim_start_matches('#'))
        .collect();
    ch.query("DROP TABLE IF EXISTS logs");
    ch.query(create.trim().trim_end_matches(';'));
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = example
        .replace("127.0.0.1:24224", &format!("127.0.0.1:{port}"))
        .replace("127.0.0.1:8123", &format!("127.0.0.1:{}", ch.http_port))
        .replace(
            "/tmp/nagare-example/clickhouse-buffer",
            &dir.path().join("buf").display().to_string(),
        );
    let mut d = Daemon::start(dir.path(), "example", &config, None);
    d.wait_port(port);
    let records: Vec<Vec<u8>> = (0..100u64)
        .map(|i| mp(serde_json::json!({"host": "web-1", "message": message_for(i), "seq": i})))
        .collect();
    let mut s = Sender::tcp(port);
    s.raw(&frame("app", &records, nagare_forward::EventTime::now()));
    wait_until(WAIT, "the example's rows", || ch.count("logs") == 100);
    let wrong = ch.query(
        "SELECT count() FROM logs WHERE host != 'web-1' OR tag != 'app' \
         OR message != concat('event number ', toString(visitParamExtractUInt(rest, 'seq')))",
    );
    assert_eq!(wrong.trim(), "0");
    drop(d);
    ch.query("DROP TABLE logs");
}
