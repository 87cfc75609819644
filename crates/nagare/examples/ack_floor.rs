//! The floor under any file buffer's acked throughput on this machine: a
//! forward server that does nothing but check each frame (as nagare's
//! forward input does: a server must find the chunk id), write it to a
//! file, fsync it (group commit: one fdatasync at a time covers every frame written
//! before it started, run by the connection thread that finds none running,
//! so no thread hand-off) and answer the ack. It forwards nothing, routes
//! nothing and keeps no buffer: a collector that makes an acked frame
//! durable before acking it does at least this much work per frame.
//!
//! ```sh
//! cargo run --release -p nagare --example ack_floor -- 127.0.0.1:36230 /tmp/floor sync
//! flowbench send --addr 127.0.0.1:36230 --ack --conns 4 --duration 6s
//! ```
//!
//! The last argument is `sync` (group commit before each ack), `sync-each`
//! (each connection runs its own fdatasync, several at once) or `nosync`. Used
//! by benches/durability-floor.sh; see docs/benchmarks/durability.md.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};

/// The file is written round and round: every write lands on blocks written
/// before, as the file buffer's reused chunk files do.
const FILE_SIZE: u64 = 256 << 20;

struct Log {
    file: File,
    mode: Mode,
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Group commit: one fdatasync at a time.
    Sync,
    /// Every connection runs its own fdatasync, as many at once as there are
    /// connections (the device may serve several at a time).
    SyncEach,
    NoSync,
}

#[derive(Default)]
struct State {
    offset: u64,
    written: u64,
    synced: u64,
    syncing: bool,
}

impl Log {
    /// Writes one frame; returns its number.
    fn append(&self, frame: &[u8]) -> std::io::Result<u64> {
        let mut st = self.state.lock().expect("state");
        if st.offset + frame.len() as u64 > FILE_SIZE {
            st.offset = 0;
        }
        self.file.write_all_at(frame, st.offset)?;
        st.offset += frame.len() as u64;
        st.written += 1;
        Ok(st.written)
    }

    /// Returns once frame `n` is on disk.
    fn sync_to(&self, n: u64) -> std::io::Result<()> {
        match self.mode {
            Mode::NoSync => return Ok(()),
            Mode::SyncEach => return self.file.sync_data(),
            Mode::Sync => {}
        }
        let mut st = self.state.lock().expect("state");
        loop {
            if st.synced >= n {
                return Ok(());
            }
            if st.syncing {
                st = self.done.wait(st).expect("state");
                continue;
            }
            st.syncing = true;
            let upto = st.written;
            drop(st);
            let r = self.file.sync_data();
            st = self.state.lock().expect("state");
            st.syncing = false;
            if r.is_ok() {
                st.synced = st.synced.max(upto);
            }
            self.done.notify_all();
            r?;
        }
    }
}

fn serve(mut conn: TcpStream, log: Arc<Log>) -> Result<(), String> {
    conn.set_nodelay(true).map_err(|e| e.to_string())?;
    let limits = nagare_forward::Limits::default();
    // Bytes received and not yet handled are buf[start..end].
    let mut buf = vec![0u8; 8 << 20];
    let (mut start, mut end) = (0, 0);
    let mut ack = Vec::new();
    loop {
        while let Some(s) =
            nagare_forward::scan_frame(&buf[start..end], &limits).map_err(|e| e.to_string())?
        {
            let raw = bytes::Bytes::copy_from_slice(&buf[start..start + s.len]);
            start += s.len;
            let n = log.append(&raw).map_err(|e| e.to_string())?;
            let frame = s
                .into_frame(raw, &limits, Default::default())
                .map_err(|e| e.to_string())?;
            log.sync_to(n).map_err(|e| e.to_string())?;
            if let Some(id) = &frame.chunk {
                ack.clear();
                nagare_forward::encode_ack(&mut ack, id);
                conn.write_all(&ack).map_err(|e| e.to_string())?;
            }
        }
        if end == buf.len() {
            if start == 0 {
                return Err("frame larger than the receive buffer".into());
            }
            buf.copy_within(start..end, 0);
            (start, end) = (0, end - start);
        }
        match conn.read(&mut buf[end..]) {
            Ok(0) => return Ok(()),
            Ok(n) => end += n,
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, dir, mode] = &args[..] else {
        return Err("usage: ack_floor ADDR DIR sync|sync-each|nosync".into());
    };
    let mode = match mode.as_str() {
        "sync" => Mode::Sync,
        "sync-each" => Mode::SyncEach,
        "nosync" => Mode::NoSync,
        _ => return Err(format!("unknown mode {mode}: sync, sync-each or nosync")),
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
    let path = std::path::Path::new(dir).join("floor.log");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let block = vec![0u8; 1 << 20];
    for i in 0..FILE_SIZE / block.len() as u64 {
        file.write_all_at(&block, i * block.len() as u64)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    file.sync_all().map_err(|e| e.to_string())?;
    let log = Arc::new(Log {
        file,
        mode,
        state: Mutex::new(State::default()),
        done: Condvar::new(),
    });
    let listener = TcpListener::bind(addr).map_err(|e| format!("{addr}: {e}"))?;
    eprintln!("ack_floor listening on {addr}, file {}", path.display());
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let log = log.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve(conn, log) {
                eprintln!("connection: {e}");
            }
        });
    }
    Ok(())
}
