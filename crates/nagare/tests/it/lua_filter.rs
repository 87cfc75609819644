//! The `lua` filter end to end: the real binary between a forward sender
//! and a forward Sink, a script file or inline code; what arrives is
//! decoded and compared whole (time, record, order), and `nagare check`
//! names the file, line and key of a bad script with Lua's message.

use crate::common::*;
use nagare_forward::EventTime;
use rmpv::Value;

const SCRIPT: &str = r#"
-- One branch per `op`: each return code and the split.
function cb(tag, ts, r)
  local op = r.op
  if op == "add" then
    r.env = "prod"
    r.via = tag
    return 1, ts, r
  elseif op == "drop" then
    return -1, ts, r
  elseif op == "keep" then
    r.ignored = true -- code 0: the change is not taken
    return 0, ts, r
  elseif op == "later" then
    return 1, ts + 1, r
  elseif op == "keep_time" then
    return 2, 0, { op = op, n = #r.items }
  elseif op == "split" then
    local out = {}
    for i, item in ipairs(r.items) do
      out[i] = { seq = r.seq, item = item }
    end
    return 2, ts, out
  elseif op == "boom" then
    return 1, ts, { msg = "no " .. r.what }
  elseif op == "loop" then
    while true do end
  end
  return 0, ts, r
end
"#;

fn ev(seq: i64, op: &str) -> Value {
    m(&[("seq", seq.into()), ("op", op.into())])
}

#[test]
fn lua_adds_drops_splits_and_keeps_or_sets_the_time() {
    adds_drops_splits("");
}

/// The same script and events with a whole table per record (the default
/// gives this script lazy records: it only uses the record's fields) and
/// with `lazy_record` forced: the same events arrive.
#[test]
fn lua_whole_tables_give_the_same_events() {
    adds_drops_splits("lazy_record = false\n");
}

#[test]
fn lua_lazy_records_give_the_same_events() {
    adds_drops_splits("lazy_record = true\n");
}

fn adds_drops_splits(option: &str) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("filter.lua");
    std::fs::write(&script, SCRIPT).unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = format!(
        r#"
[[filter]]
type = "lua"
match = "app.**"
script = "{}"
call = "cb"
{option}"#,
        script.display()
    );
    let (mut d, port) = filter_daemon(dir.path(), &filters, sink.port);
    let mut s = Sender::tcp(port);
    let items = Value::Array(vec!["a".into(), "b".into(), "c".into()]);
    let with_items = |seq: i64, op: &str| {
        m(&[
            ("seq", seq.into()),
            ("op", op.into()),
            ("items", items.clone()),
        ])
    };
    let records = [
        ev(0, "add"),
        ev(1, "drop"),
        ev(2, "keep"),
        ev(3, "later"),
        with_items(4, "keep_time"),
        with_items(5, "split"),
        ev(6, "other"),
    ];
    // Two batches: the router counts drops per batch as events in minus
    // events out, so the split in the second would hide the drop.
    send_records_acked(&mut s, "app.api", &records[..4], "c1");
    send_records_acked(&mut s, "app.api", &records[4..], "c2");
    // A tag the filter does not select arrives as it was sent.
    let other = send_records_acked(&mut s, "db.slow", &records[..2], "c3");
    sink.wait_records(10);
    d.wait_metric("events_in_total", "lua#0", 7);
    let got: Vec<(EventTime, Value)> = sink
        .records()
        .into_iter()
        .filter(|(t, _, _)| t == "app.api")
        .map(|(_, t, r)| (t, r))
        .collect();
    let item = |i: &str| m(&[("seq", 5.into()), ("item", i.into())]);
    let want = vec![
        // The time given back unchanged keeps its nanoseconds.
        (
            T0,
            m(&[
                ("seq", 0.into()),
                ("op", "add".into()),
                ("env", "prod".into()),
                ("via", "app.api".into()),
            ]),
        ),
        (T0, records[2].clone()),
        // A new time from seconds as a number.
        (EventTime::new(T0.secs + 1, 0), records[3].clone()),
        // Code 2: the record replaced, the time kept.
        (T0, m(&[("op", "keep_time".into()), ("n", 3.into())])),
        (T0, item("a")),
        (T0, item("b")),
        (T0, item("c")),
        (T0, records[6].clone()),
    ];
    assert_eq!(got, want);
    assert_eq!(sink.raw_entries("db.slow"), other);
    assert_eq!(d.metric("events_out_total", "lua#0"), 8);
    assert_eq!(d.metric("dropped_events_total", "lua#0"), 1);
    assert_eq!(d.metric("errors_total", "lua#0"), 0);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.records().len(), 10, "nothing more arrived");
}

#[test]
fn lua_errors_mark_events_and_a_loop_is_stopped_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = format!(
        r#"
[[filter]]
type = "lua"
match = "**"
call = "cb"
timeout = "300ms"
code = '''{SCRIPT}'''
"#
    );
    let (mut d, port) = filter_daemon(dir.path(), &filters, sink.port);
    let mut s = Sender::tcp(port);
    let marked = |r: &Value, why: &str| {
        let mut r = r.clone();
        if let Value::Map(m) = &mut r {
            m.push(("lua_error".into(), why.into()));
        }
        r
    };
    // A runtime error marks its event; the others are filtered.
    let first = vec![ev(0, "add"), ev(1, "boom"), ev(2, "drop")];
    send_records_acked(&mut s, "app.api", &first, "c1");
    sink.wait_records(2);
    // TOML drops the newline that opens SCRIPT: line N of SCRIPT is line N in Lua.
    let line = SCRIPT.lines().position(|l| l.contains("r.what")).unwrap();
    let boom = format!("code:{line}: attempt to concatenate a nil value (field 'what')");
    assert_eq!(
        sink.records()
            .into_iter()
            .map(|(_, _, r)| r)
            .collect::<Vec<_>>(),
        vec![
            m(&[
                ("seq", 0.into()),
                ("op", "add".into()),
                ("env", "prod".into()),
                ("via", "app.api".into()),
            ]),
            marked(&first[1], &boom),
        ]
    );
    d.wait_metric("errors_total", "lua#0", 1);
    // A loop: stopped at the timeout; it and the rest of its batch are
    // kept, marked. The ack comes, so the daemon is still serving.
    let second = vec![ev(3, "other"), ev(4, "loop"), ev(5, "add"), ev(6, "drop")];
    send_records_acked(&mut s, "app.api", &second, "c2");
    sink.wait_records(6);
    let timed_out = "timed out: the batch ran longer than the filter's `timeout`";
    let got: Vec<Value> = sink.records().into_iter().map(|(_, _, r)| r).collect();
    assert_eq!(
        got[2..],
        [
            second[0].clone(),
            marked(&second[1], timed_out),
            marked(&second[2], timed_out),
            marked(&second[3], timed_out),
        ]
    );
    d.wait_metric("errors_total", "lua#0", 4);
    // Logged before the metric moved; the reader of nagare's stderr may lag.
    d.wait_log("a batch ran past the filter's timeout");
    // The next batch runs the script again.
    send_records_acked(&mut s, "app.api", &[ev(7, "add")], "c3");
    sink.wait_records(7);
    let last = sink.records().pop().unwrap().2;
    assert_eq!(field_of(&last, "env"), Some(&Value::from("prod")));
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.records().len(), 7, "nothing more arrived");
}

#[test]
fn check_names_the_line_of_bad_lua_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("bad.lua");
    std::fs::write(&bad_file, "function cb(tag, ts, r)\n  return 1, ts, r\n").unwrap();
    let base = CHECK_BASE;
    let cases = [
        (
            "[[filter]]\ntype = \"lua\"\ncall = \"cb\"\ncode = '''\nfunction cb(tag, ts, r)\n  return 1 ts, r\nend'''\n".to_string(),
            ":8: key `code`:".to_string(),
            "code:2: 'end' expected (to close 'function' at line 1) near 'ts'".to_string(),
        ),
        (
            format!("[[filter]]\ntype = \"lua\"\ncall = \"cb\"\nscript = \"{}\"\n", bad_file.display()),
            ":8: key `script`:".to_string(),
            format!(
                "{}:3: 'end' expected (to close 'function' at line 1) near <eof>",
                bad_file.display()
            ),
        ),
        (
            "[[filter]]\ntype = \"lua\"\ncall = \"filter\"\ncode = 'function cb() end'\n".to_string(),
            ":7: key `call`:".to_string(),
            "the script defines no global function `filter`".to_string(),
        ),
        (
            "[[filter]]\ntype = \"lua\"\ncall = \"cb\"\nscript = \"/nonexistent/cb.lua\"\n".to_string(),
            ":8: key `script`:".to_string(),
            "cannot read the script \"/nonexistent/cb.lua\"".to_string(),
        ),
        (
            "[[filter]]\ntype = \"lua\"\ncall = \"cb\"\n".to_string(),
            ":5:".to_string(),
            "needs `script` (a Lua file) or `code` (inline Lua)".to_string(),
        ),
        (
            "[[filter]]\ntype = \"lua\"\ncall = \"cb\"\ntimeout = \"0s\"\ncode = 'function cb() end'\n".to_string(),
            ":8: key `timeout`:".to_string(),
            "must be longer than 0s".to_string(),
        ),
    ];
    assert_check_errors(dir.path(), base, &cases);
}
