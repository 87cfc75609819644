//! A stand-in system under test for this crate's own tests while the nagare
//! daemon is being written. It is NOT the daemon: it relays raw bytes from
//! the config's forward input to its forward output server, and turns lines
//! appended to a tail input's file into PackedForward frames. Only
//! `nagare-bench-dev run -c FILE` uses it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Result};
use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::{encode_packed_forward, write_entry, Compression, EventTime};

use super::sut::read_config_ports;

/// Runs until killed.
pub fn run_relay(config: &Path) -> Result<()> {
    let ports = read_config_ports(config)?;
    let out = ports
        .output
        .clone()
        .ok_or_else(|| anyhow!("stand-in needs a forward output"))?;
    let mut threads = Vec::new();
    if let Some(bind) = ports.input.clone() {
        let ln = TcpListener::bind(&bind)?;
        let out = out.clone();
        threads.push(std::thread::spawn(move || {
            for c in ln.incoming().flatten() {
                let out = out.clone();
                std::thread::spawn(move || {
                    if let Ok(up) = TcpStream::connect(&out) {
                        pipe(c, up);
                    }
                });
            }
        }));
    }
    if let Some(path) = ports.tail_path.clone() {
        let tag = ports.tail_tag.clone().unwrap_or_else(|| "tail".into());
        threads.push(std::thread::spawn(move || {
            let _ = tail(&path, &tag, &out);
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn pipe(a: TcpStream, b: TcpStream) {
    let (mut a2, mut b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut b2, &mut a2);
    });
    let (mut a, mut b) = (a, b);
    let _ = std::io::copy(&mut a, &mut b);
    let _ = b.shutdown(std::net::Shutdown::Write);
    let _ = back.join();
}

fn tail(path: &Path, tag: &str, out: &str) -> Result<()> {
    let mut up = TcpStream::connect(out)?;
    let mut pos = 0u64;
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let (mut entries, mut frame, mut rec) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let Ok(mut f) = std::fs::File::open(path) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        use std::io::Seek;
        f.seek(std::io::SeekFrom::Start(pos))?;
        let n = f.read(&mut buf)?;
        if n == 0 {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        pos += n as u64;
        pending.extend_from_slice(&buf[..n]);
        let Some(last) = pending.iter().rposition(|c| *c == b'\n') else {
            continue;
        };
        entries.clear();
        let mut count = 0u32;
        let t = EventTime::now();
        for line in pending[..last].split(|c| *c == b'\n') {
            rec.clear();
            write_map_len(&mut rec, 1);
            write_str(&mut rec, b"message");
            write_str(&mut rec, line);
            write_entry(&mut entries, t, &rec);
            count += 1;
        }
        pending.drain(..=last);
        frame.clear();
        encode_packed_forward(&mut frame, tag, &entries, count, None, Compression::None)?;
        up.write_all(&frame)?;
    }
}
