//! The fuzz targets' seeds and kept crashes, replayed without a fuzzer:
//! each file of `fuzz/seeds/` (frame_decoder) and
//! `fuzz/seeds-receivers/<target>/` goes through the very function the
//! target calls under libFuzzer (fuzz/checks.rs, included here), on the
//! stable toolchain. A panic names the file. So CI keeps every input the
//! fuzzers found (crashes fixed, and the corpus entries kept as seeds)
//! passing without nightly; see docs/fuzzing.md.

use std::path::{Path, PathBuf};

#[path = "../../../../fuzz/checks.rs"]
mod checks;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Runs `target`'s check on every file of its seed folder; fails naming
/// each file that panics (all of them, not only the first).
fn replay(target: &str) {
    let (_, check, dir) = checks::TARGETS
        .iter()
        .find(|(name, _, _)| *name == target)
        .unwrap_or_else(|| panic!("no target {target} in fuzz/checks.rs"));
    let dir = fuzz_dir().join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no seeds", dir.display());
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failed.push(f.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs fail: {failed:#?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn frame_decoder_seeds() {
    replay("frame_decoder");
}

#[test]
fn es_bulk_seeds() {
    replay("es_bulk");
}

#[test]
fn hec_events_seeds() {
    replay("hec_events");
}

#[test]
fn http_body_seeds() {
    replay("http_body");
}

#[test]
fn lumberjack_frames_seeds() {
    replay("lumberjack_frames");
}

#[test]
fn gelf_seeds() {
    replay("gelf");
}

#[test]
fn syslog_seeds() {
    replay("syslog");
}

/// Every target in fuzz/Cargo.toml has a check here and seeds, and every
/// check a target: a new target cannot be left out of the replay.
#[test]
fn every_target_is_replayed() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let mut bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "nagare-forward-fuzz")
        .collect();
    bins.sort();
    let mut checked: Vec<&str> = checks::TARGETS.iter().map(|(n, _, _)| *n).collect();
    checked.sort();
    assert_eq!(bins, checked);
    let this = include_str!("fuzz_seeds.rs");
    for t in checked {
        assert!(
            this.contains(&format!("replay(\"{t}\");")),
            "no test replays {t}"
        );
    }
}

/// The socket inputs' replay takes the seeds' messages as a server would
/// (a replay that decoded nothing would fuzz nothing): the gelf seeds'
/// messages, a chunked one joined, and each syslog message, octet-counted
/// or a line, as one event.
#[test]
fn socket_seeds_give_their_events() {
    use nagare::inputs::common::sockets::Feed;
    let events = |r: &nagare::inputs::common::sockets::Replayed| -> u32 {
        r.batches.iter().map(|(_, _, n)| n).sum()
    };
    let seed = |p: &str| std::fs::read(fuzz_dir().join("seeds-receivers").join(p)).unwrap();
    let gelf = |proto: &str| -> nagare::inputs::gelf::GelfInputConfig {
        toml::from_str(&format!(
            "bind = \"127.0.0.1:0\"\ntag = \"g\"\nprotocol = \"{proto}\""
        ))
        .unwrap()
    };
    let syslog: nagare::inputs::syslog::SyslogInputConfig =
        toml::from_str("bind = \"127.0.0.1:0\"\ntag = \"s\"\nprotocol = \"tcp\"").unwrap();
    for (file, want) in [
        ("udp_plain.bin", 2),
        ("udp_gzip_zlib.bin", 2),
        ("udp_chunked.bin", 2),
    ] {
        let data = seed(&format!("gelf/{file}"));
        let mut dgs = Vec::new();
        let mut rest = &data[1..];
        while let [a, b, r @ ..] = rest {
            let n = usize::from(*a) << 8 | usize::from(*b);
            dgs.push(&r[..n]);
            rest = &r[n..];
        }
        let r = gelf("udp").replay(Feed::Datagrams(dgs));
        assert_eq!(events(&r), want, "gelf/{file}");
    }
    let data = seed("gelf/tcp_nul.bin");
    let r = gelf("tcp").replay(Feed::Stream {
        data: &data[1..],
        read_size: 3,
    });
    assert_eq!((events(&r), r.cut_off), (3, false));
    for (file, want) in [("tcp_octet.bin", 3), ("tcp_lines.bin", 5)] {
        let data = seed(&format!("syslog/{file}"));
        let r = syslog
            .replay(Feed::Stream {
                data: &data[1..],
                read_size: 7,
            })
            .unwrap();
        assert_eq!((events(&r), r.cut_off), (want, false), "syslog/{file}");
        assert!(r.batches.iter().all(|(t, _, _)| t.starts_with("s.")));
    }
}
