//! The clickhouse output against a real ClickHouse (Debian's 18.16, one
//! server per test run, common/ch_server.rs), rows read back with
//! clickhouse-client: columns by name and by mapping, the rest as JSON, by
//! content and count; a row of a wrong type rejected with its reason while
//! the others are stored; a chunk re-sent from a file buffer merged into
//! one by a ReplacingMergeTree; a wrong password and a server that closes
//! mid-body keep the events; a 413 cuts the chunk in halves (a scripted
//! server: ClickHouse itself does not answer 413).

use crate::common::ch_server::{shared_clickhouse, ChServer, PASSWORD, USER};
use crate::common::scripted_http::{Reply, ScriptedHttp};
use crate::common::sql::*;
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
    let mut s = Sender::tcp(port);
    s.raw(&frame(
        "app.bad",
        &records_with_two_of_a_wrong_type(),
        nagare_forward::EventTime::now(),
    ));
    let _ = s.read_ack();
    wait_until(WAIT, "the good rows", || ch.count(table) == 8);
    assert_eq!(seqs(ch, table), vec![0, 1, 2, 4, 5, 6, 8, 9]);
    let lines = wait_reasons(&buf.join("dead-letters"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("3\t"), "{lines:?}");
    assert!(
        lines[0].contains("(at row 4)") && lines[0].contains("seq"),
        "{lines:?}"
    );
    assert!(lines[1].starts_with("7\t"), "{lines:?}");
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
    let n = 2000;
    let saved = buffer_before_any_flush(dir.path(), &down, &buf, "app.once", n);
    let up = ch_output(ch, table, "", &file_buffer);
    let (d, _) = start_forward_daemon(dir.path(), &up);
    wait_until(WAIT, "the buffered rows", || ch.count(table) == n);
    drop(d);
    restore_buffer(&saved, &buf);
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
    let (lport, conns) = closing_server(300);
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
    wait_connections(&conns, 4);
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
    let (example, create) = documented_example("clickhouse.toml");
    ch.query("DROP TABLE IF EXISTS logs");
    ch.query(&create);
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

/// A 413 (from a proxy in front of ClickHouse; the server itself does not
/// answer it) cuts the chunk in halves sent apart (two at once,
/// `request_concurrency = 2`), the shared path of every HTTP output, down
/// to bodies the "server" takes: every row is inserted once.
#[test]
fn a_413_cuts_the_chunk_in_halves_each_row_inserted_once() {
    let server = ScriptedHttp::start(|_, r| {
        let body = String::from_utf8_lossy(&r.body);
        if body.starts_with("DESCRIBE TABLE") {
            return Reply::Status(200, "seq\tUInt64\t\t\nmessage\tString\t\t\n".into());
        }
        if body.lines().count() > 50 {
            Reply::Status(413, "Request Entity Too Large".into())
        } else {
            Reply::Status(200, String::new())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        r#"[[output]]
type = "clickhouse"
match = "**"
endpoint = "http://127.0.0.1:{}"
table = "t"
request_concurrency = 2
[output.buffer]
flush_interval = "200ms"
"#,
        server.port
    );
    let (d, port) = start_forward_daemon(dir.path(), &cfg);
    let records: Vec<Vec<u8>> = (0..200u64)
        .map(|i| mp(serde_json::json!({"seq": i, "message": message_for(i)})))
        .collect();
    let mut s = Sender::tcp(port);
    s.raw(&frame(
        "app.big",
        &records,
        nagare_forward::EventTime::now(),
    ));
    let _ = s.read_ack();
    d.wait_metric("events_out_total", "clickhouse#0", 200);
    let inserts: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| !r.body.starts_with(b"DESCRIBE"))
        .collect();
    // 200 rows: 413; two halves of 100: 413; four quarters of 50: taken.
    assert_eq!(inserts.len(), 7, "{} inserts", inserts.len());
    let mut stored: Vec<u64> = inserts
        .iter()
        .filter(|r| {
            r.body
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count()
                <= 50
        })
        .flat_map(|r| {
            String::from_utf8_lossy(&r.body)
                .lines()
                .map(|l| json_value(l.as_bytes())["seq"].as_u64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    stored.sort();
    assert_exact_seqs(&stored, 200);
    d.wait_log("request too large: sending it in two halves");
    assert_eq!(d.metric("secondary_events_total", "clickhouse#0"), 0);
}
