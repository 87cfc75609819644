//! What the tests of the SQL outputs (postgresql.rs, clickhouse.rs) share:
//! frames of given records, the rows of a wrong type, a file buffer filled
//! while the server is unreachable and kept aside (to flush the same chunk
//! files again), the dead letters' reasons, the documented example and its
//! table, and a "server" that closes after a few bytes.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use super::{send_acked_to, start_forward_daemon, wait_until, WAIT};

/// A msgpack record of a JSON value.
pub fn mp(v: serde_json::Value) -> Vec<u8> {
    let mut o = Vec::new();
    nagare_core::json::msgpack_from_json(&v, &mut o);
    o
}

/// One PackedForward frame of the given msgpack records, all at time `t`,
/// asking for an ack.
pub fn frame(tag: &str, records: &[Vec<u8>], t: nagare_forward::EventTime) -> Vec<u8> {
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
        Some(b"sql-frame"),
        nagare_forward::Compression::None,
    )
    .unwrap();
    f
}

/// Ten records `{seq, message}` of which rows 3 and 7 have a text seq
/// ("not-a-number-3"): a value a number column refuses.
pub fn records_with_two_of_a_wrong_type() -> Vec<Vec<u8>> {
    (0..10u64)
        .map(|i| {
            let seq = if i == 3 || i == 7 {
                serde_json::json!(format!("not-a-number-{i}"))
            } else {
                serde_json::json!(i)
            };
            mp(serde_json::json!({"seq": seq, "message": super::message_for(i)}))
        })
        .collect()
}

/// Every file under `dir`.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Copies the folder `from` into `to` (made).
pub fn copy_dir(from: &Path, to: &Path) {
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

/// The lines of the dead letters' `.reasons` file under `letters`, once
/// one is written.
pub fn wait_reasons(letters: &Path) -> Vec<String> {
    let find = || {
        files_under(letters)
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "reasons"))
    };
    wait_until(WAIT, "the dead letters' reasons", || find().is_some());
    let text = std::fs::read_to_string(find().unwrap()).unwrap();
    text.lines().map(String::from).collect()
}

/// Chunk files of `n` events (seq 0..n, tag `tag`) as the file buffer
/// `buf` of the output in `unreachable` (a config whose server does not
/// answer) holds them before any flush: acked into it, nagare killed
/// (SIGKILL), and the buffer copied to `<dir>/saved`, returned. Flushing
/// these files again is what a re-send after a kill -9 between the
/// server's commit and the chunk's removal does.
pub fn buffer_before_any_flush(
    dir: &Path,
    unreachable: &str,
    buf: &Path,
    tag: &str,
    n: u64,
) -> PathBuf {
    let (mut d, port) = start_forward_daemon(dir, unreachable);
    send_acked_to(port, tag, 0..n);
    d.signal(libc::SIGKILL);
    let _ = d.wait_exit(WAIT);
    drop(d);
    let saved = dir.join("saved");
    copy_dir(buf, &saved);
    saved
}

/// Puts the chunk files kept aside by [`buffer_before_any_flush`] back
/// as `buf`.
pub fn restore_buffer(saved: &Path, buf: &Path) {
    let _ = std::fs::remove_dir_all(buf);
    copy_dir(saved, buf);
}

/// examples/`file` as docs/outputs-storage-sql.md shows it (asserted),
/// and the table its comment makes (the `#  ` lines from the one with
/// CREATE TABLE), as one statement.
pub fn documented_example(file: &str) -> (String, String) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let example = std::fs::read_to_string(format!("{root}/examples/{file}")).unwrap();
    let doc = std::fs::read_to_string(format!("{root}/docs/outputs-storage-sql.md")).unwrap();
    assert!(
        doc.contains(&example),
        "the docs show examples/{file} as it is"
    );
    let create: String = example
        .lines()
        .skip_while(|l| !l.contains("CREATE TABLE"))
        .take_while(|l| l.starts_with("#  "))
        .map(|l| l.trim_start_matches('#'))
        .collect();
    (example, create.trim().trim_end_matches(';').to_string())
}

/// A "server" on a free loopback port that reads up to `read` bytes of
/// each connection and closes it; and the count of connections taken.
pub fn closing_server(read: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            c.fetch_add(1, SeqCst);
            let mut b = vec![0u8; read];
            let _ = s.read(&mut b);
        }
    });
    (port, conns)
}

/// Waits until the closing server took `n` connections (the chunk tried
/// again on new ones).
pub fn wait_connections(conns: &AtomicUsize, n: usize) {
    wait_until(WAIT, "the chunk tried again", || conns.load(SeqCst) >= n);
}
