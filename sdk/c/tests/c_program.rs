//! Compiles tests/emit_test.c with `cc` against the static library that
//! `cargo test` just built, runs it against the scripted forward server, and
//! checks what the server received.

#[path = "../../rust/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, Opts, Server};

fn static_lib() -> PathBuf {
    // target/debug/deps/c_program-<hash> → target/debug
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let profile = deps.parent().unwrap();
    let mut found: Vec<PathBuf> = [profile, deps]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("libnagare_logger_c") && n.ends_with(".a")
        })
        .collect();
    found.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    found
        .pop()
        .expect("libnagare_logger_c.a not built (run through cargo test -p nagare-logger-c)")
}

fn compile(src: &Path, out: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(dir.join("include"))
        .arg(src)
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(out)
        .status()
        .expect("run cc");
    assert!(st.success(), "cc failed for {}", src.display());
}

#[test]
fn c_program_emits_to_a_server() {
    let dir = std::env::temp_dir().join(format!("nagare-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("emit_test");
    compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emit_test.c"),
        &exe,
    );
    let srv = Server::start(Opts::default());
    let refused = format!("127.0.0.1:{}", free_port());
    let out = Command::new(&exe)
        .arg(&srv.addr)
        .arg(&refused)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "emit_test failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");

    assert!(srv.wait_for(131, Duration::from_secs(5)));
    // The program has exited: once its connections are read to their end,
    // the server holds everything it sent.
    assert!(srv.wait_closed(Duration::from_secs(5)));
    let evs = srv.events();
    let mut by_src: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for e in &evs {
        assert_eq!(e.tag, "c.test");
        let src = e.field("src").unwrap().as_str().unwrap().to_string();
        let seq = match e.field("seq").unwrap() {
            rmpv::Value::String(s) => s.as_str().unwrap().parse().unwrap(),
            v => v.as_u64().unwrap(),
        };
        by_src.entry(src).or_default().push(seq);
    }
    let mut want: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    want.insert("json".into(), (0..100).collect());
    want.insert("kv".into(), (100..110).collect());
    want.insert("mp".into(), vec![110]);
    want.insert("parent".into(), (200..210).collect());
    want.insert("child".into(), (1000..1010).collect());
    assert_eq!(by_src, want, "each event exactly once, in order per source");
    let json0 = evs
        .iter()
        .find(|e| e.field("src").unwrap().as_str() == Some("json"))
        .unwrap();
    assert_eq!(
        json0.field("message").unwrap().as_str(),
        Some("hello from c")
    );
}
