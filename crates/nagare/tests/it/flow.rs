//! Events flowing through the daemon: forward in; stdout, file, forward and
//! copy out; every input mode; acks; routing; UNIX sockets; the monitor.

use std::path::Path;

use crate::common::*;
use nagare_forward::msgpack::{
    write_array_len, write_bin_header, write_map_len, write_str, write_uint,
};
use nagare_forward::{encode_packed_forward, write_entry, Compression, EventTime};

fn file_output(matches: &str, path: &Path, extra: &str) -> String {
    format!(
        "[[output]]\ntype = \"file\"\nmatch = \"{matches}\"\npath = \"{}\"\n{extra}\n[output.buffer]\nflush_interval = \"50ms\"\n",
        path.display()
    )
}

#[test]
fn forward_to_stdout_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mon = free_port();
    let cfg = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n{}\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n[output.buffer]\nflush_interval = \"50ms\"\n",
        forward_input(port)
    );
    let mut d = Daemon::start(dir.path(), "stdout", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    // Message mode: 0..10
    for s in 0..10 {
        tx.message("mode.message", s, None);
    }
    // Forward mode: 10..110
    tx.forward("mode.forward", 10..60, None);
    tx.forward("mode.forward", 60..110, None);
    // PackedForward: 110..1110
    for k in 0..10 {
        tx.packed("mode.packed", 110 + k * 100..210 + k * 100, None);
    }
    // CompressedPackedForward (gzip): 1110..2110
    for k in 0..5 {
        tx.compressed("mode.gzip", 1110 + k * 200..1310 + k * 200, None);
    }
    // Fluent Bit 2.x entries: [[EventTime, {metadata}], record], 2110..2210
    let mut e = Vec::new();
    for s in 2110..2210u64 {
        write_array_len(&mut e, 2);
        write_array_len(&mut e, 2);
        e.extend_from_slice(&EventTime::new(1_700_000_000, s as u32).to_bytes());
        write_map_len(&mut e, 0);
        e.extend_from_slice(&record(s, &message_for(s)));
    }
    let mut f = Vec::new();
    encode_packed_forward(&mut f, "mode.fluentbit", &e, 100, None, Compression::None).unwrap();
    tx.raw(&f);
    // Integer time instead of EventTime, in Forward mode: 2210..2220
    let mut e = Vec::new();
    for s in 2210..2220u64 {
        write_array_len(&mut e, 2);
        write_uint(&mut e, 1_700_000_000 + s);
        e.extend_from_slice(&record(s, &message_for(s)));
    }
    let mut f = Vec::new();
    write_array_len(&mut f, 2);
    write_str(&mut f, b"mode.inttime");
    write_array_len(&mut f, 10);
    f.extend_from_slice(&e);
    tx.raw(&f);
    tx.finish();
    let n = 2220;

    let lines = d.wait_stdout_lines(n);
    let got = json_lines_seqs(&lines.join("\n"));
    assert_exact_seqs(&seqs(&got), n as u64);
    for (tag, s) in &got {
        let want = match s {
            0..10 => "mode.message",
            10..110 => "mode.forward",
            110..1110 => "mode.packed",
            1110..2110 => "mode.gzip",
            2110..2210 => "mode.fluentbit",
            _ => "mode.inttime",
        };
        assert_eq!(tag, want);
    }
    // Fluent Bit's EventTime inside [time, metadata] is kept to the nanosecond.
    let fb = lines
        .iter()
        .find(|l| l.contains("\"seq\":2150,"))
        .expect("seq 2150");
    assert!(
        fb.starts_with("{\"time\":\"2023-11-14T22:13:20.000002150Z\""),
        "{fb}"
    );
    let it = lines
        .iter()
        .find(|l| l.contains("\"seq\":2215,"))
        .expect("seq 2215");
    let dt = chrono::DateTime::from_timestamp(1_700_000_000 + 2215, 0).unwrap();
    assert!(
        it.starts_with(&format!(
            "{{\"time\":\"{}.000000000Z\"",
            dt.format("%Y-%m-%dT%H:%M:%S")
        )),
        "{it}"
    );
    d.wait_metric("events_in_total", "forward#0", n as u64);
    d.wait_metric("events_out_total", "stdout#0", n as u64);
    assert_eq!(d.metric("bad_input_total", "forward#0"), 0);
    assert!(d.terminate().success());
    assert_eq!(
        d.stdout().lines().count(),
        n,
        "no duplicates after shutdown"
    );
}

/// Fixed-time events so strftime paths are known.
fn fixed_entries(seqs: std::ops::Range<u64>, msg: impl Fn(u64) -> String) -> (Vec<u8>, u32) {
    let mut e = Vec::new();
    let mut n = 0;
    for s in seqs {
        write_entry(
            &mut e,
            EventTime::new(1_700_000_000, s as u32),
            &record(s, &msg(s)),
        );
        n += 1;
    }
    (e, n)
}

fn raw_line(s: u64) -> String {
    format!("raw line {s}: \"quoted\" back\\slash {{not json}} ünïcödé 日本語 ~!@#$%^&*()")
}

#[test]
fn forward_to_file_formats_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let out = dir.path().join("out");
    let cfg = format!(
        "{}\n{}\n{}\n{}",
        forward_input(port),
        file_output(
            "json.*",
            &out.join("json/${tag}/%Y/%m/%d.log"),
            "format = \"json\""
        ),
        file_output("ltsv.*", &out.join("ltsv.log"), "format = \"ltsv\""),
        file_output(
            "raw.*",
            &out.join("raw.log"),
            "format = \"single_value\"\nmessage_key = \"message\""
        ),
    );
    let mut d = Daemon::start(dir.path(), "file", &cfg, None);
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    let n = 1000u64;
    for (tag, f) in [("json.a", 0u8), ("json.b", 0), ("ltsv.x", 1), ("raw.y", 2)] {
        for k in 0..(n / 100) {
            let (e, c) = if f == 2 {
                fixed_entries(k * 100..k * 100 + 100, raw_line)
            } else {
                fixed_entries(k * 100..k * 100 + 100, message_for)
            };
            let mut fr = Vec::new();
            encode_packed_forward(&mut fr, tag, &e, c, None, Compression::None).unwrap();
            tx.raw(&fr);
        }
    }
    tx.finish();

    // ${tag} and strftime fields from the event time (2023-11-14 UTC).
    for tag in ["json.a", "json.b"] {
        let p = out.join(format!("json/{tag}/2023/11/14.log"));
        let text = wait_file_lines(&p, n as usize);
        let got = json_lines_seqs(&text);
        assert!(got.iter().all(|(t, _)| t == tag));
        assert_exact_seqs(&seqs(&got), n);
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            format!("{{\"time\":\"2023-11-14T22:13:20.000000000Z\",\"tag\":\"{tag}\",\"record\":{{\"seq\":0,\"message\":\"event number 0\"}}}}")
        );
    }
    let text = wait_file_lines(&out.join("ltsv.log"), n as usize);
    for (i, line) in text.lines().enumerate() {
        assert_eq!(
            line,
            format!(
                "time:2023-11-14T22:13:20.{i:09}Z\ttag:ltsv.x\tseq:{i}\tmessage:event number {i}"
            )
        );
    }
    assert_eq!(text.lines().count(), n as usize);
    // single_value: each line is the message field, byte for byte.
    let raw = out.join("raw.log");
    wait_file_lines(&raw, n as usize);
    let want: String = (0..n).map(|s| raw_line(s) + "\n").collect();
    assert_eq!(std::fs::read(&raw).unwrap(), want.into_bytes());
    assert!(d.terminate().success());
}

#[test]
fn forward_relay_through_a_second_nagare_to_file() {
    let dir = tempfile::tempdir().unwrap();
    let (p_a, p_b, mon_a, mon_b) = (free_port(), free_port(), free_port(), free_port());
    let out = dir.path().join("relayed.log");
    let b_cfg = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon_b}\"\n{}\n{}",
        forward_input(p_b),
        file_output("**", &out, "")
    );
    let a_cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon_a}"
{}
[[output]]
type = "forward"
match = "**"
require_ack_response = true
compress = "gzip"
[[output.server]]
address = "127.0.0.1:{p_b}"
[output.buffer]
flush_interval = "50ms"
chunk_limit_size = "64KiB"
"#,
        forward_input(p_a)
    );
    let mut b = Daemon::start(dir.path(), "b", &b_cfg, Some(mon_b));
    b.wait_port(p_b);
    let mut a = Daemon::start(dir.path(), "a", &a_cfg, Some(mon_a));
    a.wait_port(p_a);

    let n = 20_000u64;
    let mut tx = Sender::tcp(p_a);
    tx.send_seqs("relay.test", n, 250);
    tx.finish();
    let text = wait_file_lines(&out, n as usize);
    let got = json_lines_seqs(&text);
    assert!(got.iter().all(|(t, _)| t == "relay.test"));
    assert_exact_seqs(&seqs(&got), n);
    a.wait_metric("events_out_total", "forward#0", n);
    assert_eq!(a.metric("retries_total", "forward#0"), 0);
    b.wait_metric("events_in_total", "forward#0", n);
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert_eq!(read_file(&out).lines().count(), n as usize);
}

#[test]
fn ack_ids_are_echoed_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let out = dir.path().join("acked.log");
    let cfg = format!("{}\n{}", forward_input(port), file_output("**", &out, ""));
    let mut d = Daemon::start(dir.path(), "ack", &cfg, None);
    d.wait_port(port);
    let mut tx = Sender::tcp(port);

    // Fluentd's ids end in a newline.
    let id = b"Zm9vYmFyYmF6cXV4MTIzNA==\n";
    tx.packed("ack.a", 0..100, Some(id));
    assert_eq!(tx.read_ack(), ack_bytes(&mp_str(id)));
    tx.message("ack.a", 100, Some(b"msg-id"));
    assert_eq!(tx.read_ack(), ack_bytes(&mp_str(b"msg-id")));
    tx.forward("ack.a", 101..200, Some(b"fwd id \t with spaces"));
    assert_eq!(tx.read_ack(), ack_bytes(&mp_str(b"fwd id \t with spaces")));
    tx.compressed("ack.a", 200..300, Some(b"gz\n"));
    assert_eq!(tx.read_ack(), ack_bytes(&mp_str(b"gz\n")));
    // A chunk id packed as bin comes back as bin.
    let (e, c) = entries(300..400);
    let mut f = Vec::new();
    write_array_len(&mut f, 3);
    write_str(&mut f, b"ack.a");
    write_bin_header(&mut f, e.len());
    f.extend_from_slice(&e);
    write_map_len(&mut f, 2);
    write_str(&mut f, b"size");
    write_uint(&mut f, c as u64);
    write_str(&mut f, b"chunk");
    let bin_id = [0xc4, 4, 0xde, 0xad, b'\n', 0x00];
    f.extend_from_slice(&bin_id);
    tx.raw(&f);
    assert_eq!(tx.read_ack(), ack_bytes(&bin_id));
    // Several frames in one write: one ack each, in order.
    let mut many = Vec::new();
    for k in 0..5u64 {
        let (e, c) = entries(400 + k * 20..420 + k * 20);
        encode_packed_forward(
            &mut many,
            "ack.b",
            &e,
            c,
            Some(format!("m{k}\n").as_bytes()),
            Compression::None,
        )
        .unwrap();
    }
    tx.raw(&many);
    for k in 0..5 {
        assert_eq!(
            tx.read_ack(),
            ack_bytes(&mp_str(format!("m{k}\n").as_bytes()))
        );
    }
    tx.finish();
    let text = wait_file_lines(&out, 500);
    assert_exact_seqs(&seqs(&json_lines_seqs(&text)), 500);
    assert!(d.terminate().success());
}

#[test]
fn copy_fans_out_and_first_match_wins() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let o = dir.path().join("o");
    let cfg = format!(
        r#"{}
[[output]]
type = "copy"
match = "copy.**"
[[output.store]]
type = "file"
path = "{}"
[output.store.buffer]
flush_interval = "50ms"
[[output.store]]
type = "file"
path = "{}"
format = "ltsv"
[output.store.buffer]
flush_interval = "50ms"

{}
{}
{}
"#,
        forward_input(port),
        o.join("copy1.log").display(),
        o.join("copy2.log").display(),
        file_output("app.{a,b}", &o.join("ab.log"), ""),
        file_output("app.** web.*", &o.join("app.log"), ""),
        file_output("**", &o.join("rest.log"), ""),
    );
    let mut d = Daemon::start(dir.path(), "copy", &cfg, None);
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    tx.packed("copy.x", 0..300, None);
    tx.packed("copy.y.z", 300..500, None);
    // app.a and app.b match both "app.{a,b}" and "app.**": the first wins.
    tx.packed("app.a", 0..100, None);
    tx.packed("app.b", 100..200, None);
    tx.packed("app.c", 0..100, None);
    tx.packed("app.c.d", 100..200, None);
    tx.packed("app", 200..250, None);
    tx.packed("web.front", 250..300, None);
    tx.packed("web.front.deep", 0..70, None);
    tx.packed("other", 70..100, None);
    tx.finish();

    let c1 = json_lines_seqs(&wait_file_lines(&o.join("copy1.log"), 500));
    assert_exact_seqs(&seqs(&c1), 500);
    let c2 = wait_file_lines(&o.join("copy2.log"), 500);
    let c2: Vec<u64> = c2
        .lines()
        .map(|l| {
            l.split('\t')
                .find_map(|f| f.strip_prefix("seq:"))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_exact_seqs(&c2, 500);
    let ab = json_lines_seqs(&wait_file_lines(&o.join("ab.log"), 200));
    assert_exact_seqs(&seqs(&ab), 200);
    assert!(ab.iter().all(|(t, _)| t == "app.a" || t == "app.b"));
    let app = json_lines_seqs(&wait_file_lines(&o.join("app.log"), 300));
    assert_exact_seqs(&seqs(&app), 300);
    for (t, _) in &app {
        assert!(
            ["app.c", "app.c.d", "app", "web.front"].contains(&t.as_str()),
            "{t}"
        );
    }
    let rest = json_lines_seqs(&wait_file_lines(&o.join("rest.log"), 100));
    assert_exact_seqs(&seqs(&rest), 100);
    assert!(d.terminate().success());
    // Nothing more arrived after the expected counts.
    assert_eq!(read_file(&o.join("ab.log")).lines().count(), 200);
    assert_eq!(read_file(&o.join("app.log")).lines().count(), 300);
    assert_eq!(read_file(&o.join("rest.log")).lines().count(), 100);
}

#[test]
fn unix_socket_input() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nagare.sock");
    let out = dir.path().join("unix.log");
    let cfg = format!(
        "[[input]]\ntype = \"forward\"\npath = \"{}\"\n{}",
        sock.display(),
        file_output("**", &out, "")
    );
    let _d = Daemon::start(dir.path(), "unix", &cfg, None);
    wait_until(WAIT, "the UNIX socket to accept", || {
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
    });
    let mut tx = Sender::unix(&sock);
    tx.packed("unix.a", 0..500, Some(b"u1"));
    assert_eq!(tx.read_ack(), ack_bytes(&mp_str(b"u1")));
    tx.compressed("unix.a", 500..1000, None);
    tx.finish();
    let got = json_lines_seqs(&wait_file_lines(&out, 1000));
    assert_exact_seqs(&seqs(&got), 1000);
}

#[test]
fn udp_heartbeat_and_monitor_counts() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mon = free_port();
    let cfg = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n{}\n{}\n[[output]]\ntype = \"null\"\nmatch = \"**\"\n[output.buffer]\nflush_interval = \"50ms\"\n",
        forward_input(port),
        file_output("kept.**", &dir.path().join("kept.log"), "")
    );
    let mut d = Daemon::start(dir.path(), "mon", &cfg, Some(mon));
    d.wait_port(port);
    d.wait_port(mon);

    // The UDP heartbeat socket may be bound a moment after the TCP listener
    // that wait_port saw, and a datagram sent before is gone: send again, as
    // a heartbeat sender does, until an answer comes or WAIT runs out.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .unwrap();
    let mut b = [0u8; 16];
    let deadline = std::time::Instant::now() + WAIT;
    let (n, from) = loop {
        udp.send_to(b"\0", ("127.0.0.1", port)).unwrap();
        match udp.recv_from(&mut b) {
            Ok(answer) => break answer,
            Err(e) if std::time::Instant::now() < deadline => drop(e),
            Err(e) => panic!("no UDP heartbeat answer within {WAIT:?}: {e}"),
        }
    };
    assert!(n >= 1);
    assert_eq!(from.port(), port);

    let mut tx = Sender::tcp(port);
    tx.send_seqs("kept.a", 700, 100);
    tx.send_seqs("dropped.b", 300, 100);
    tx.finish();
    wait_file_lines(&dir.path().join("kept.log"), 700);
    d.wait_metric("events_out_total", "null#1", 300);
    d.wait_metric("events_out_total", "file#0", 700);
    d.wait_metric("events_in_total", "forward#0", 1000);
    assert_eq!(d.metric("connections_total", "forward#0"), 1 + 1); // wait_port probe + sender

    let (status, body) = http_get(mon, "/api/plugins");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let plugins = v["plugins"].as_array().unwrap();
    let get = |name: &str| {
        plugins
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {body}"))
            .clone()
    };
    let fin = get("forward#0");
    assert_eq!(fin["kind"], "input");
    assert_eq!(fin["type"], "forward");
    assert_eq!(fin["events_in"], 1000);
    assert_eq!(fin["events_out"], 1000);
    assert_eq!(fin["bad_input"], 0);
    let file = get("file#0");
    assert_eq!(
        (file["events_in"].as_u64(), file["events_out"].as_u64()),
        (Some(700), Some(700))
    );
    assert_eq!(file["buffer_bytes"], 0);
    assert_eq!(file["buffer_chunks"], 0);
    let null = get("null#1");
    assert_eq!(
        (null["events_in"].as_u64(), null["events_out"].as_u64()),
        (Some(300), Some(300))
    );
    let bytes_in = file["bytes_in"].as_u64().unwrap();
    assert_eq!(file["bytes_out"].as_u64().unwrap(), bytes_in);
    assert!(bytes_in > 700 * 20);
    let (status, _) = http_get(mon, "/health");
    assert_eq!(status, 200);
    assert!(d.terminate().success());
}

/// Big frames written a few KiB at a time, as a slow or small-buffered
/// client sends them: a Forward-mode frame (no header gives its length, so
/// the input learns it entry by entry) and a PackedForward frame, each
/// acked and delivered whole (every seq once), with a small frame behind each to
/// show the stream goes on.
#[test]
fn big_frames_written_in_small_pieces_arrive_whole() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let cfg = format!(
        "{}{}",
        forward_input(port),
        forward_output_to("**", sink.port)
    );
    let mut d = Daemon::start(dir.path(), "pieces", &cfg, None);
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    const N: u64 = 20_000; // about 2 MB per frame
    for (i, packed) in [false, true].into_iter().enumerate() {
        let base = i as u64 * (N + 10);
        let (e, n) = entries(base..base + N);
        let id = format!("big-{i}");
        let mut f = Vec::new();
        if packed {
            encode_packed_forward(
                &mut f,
                "big.pieces",
                &e,
                n,
                Some(id.as_bytes()),
                Compression::None,
            )
            .unwrap();
        } else {
            nagare_forward::encode_forward(&mut f, "big.pieces", &e, n, Some(id.as_bytes()));
        }
        for piece in f.chunks(4096) {
            tx.raw(piece);
        }
        assert_eq!(
            tx.read_ack(),
            ack_bytes(&mp_str(id.as_bytes())),
            "ack for {id}"
        );
        tx.packed("big.pieces", base + N..base + N + 10, None);
    }
    tx.finish();
    sink.wait_count(2 * (N as usize + 10));
    assert_exact_seqs(&sink.seqs(), 2 * (N + 10));
    assert!(d.terminate().success(), "{}", d.stderr());
}
