//! A real VictoriaLogs server (Apache-2.0; installed by scripts/test-all.sh
//! with `go install`) for the loki and splunk_hec outputs: it takes Loki's
//! push API (/insert/loki/api/v1/push) and Splunk's HEC
//! (/insert/splunk/services/collector/event), and answers LogsQL queries
//! (/select/logsql/query) with one JSON object per line.
//!
//! One server per test binary, started by the first test that asks, on a
//! free loopback port with its storage in a temporary folder; killed and
//! the folder removed when the test process exits. Tests keep apart by
//! their own tags and tenants.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};

use super::{free_port, skip_unless, wait_until, WAIT};

/// The version scripts/test-all.sh installs.
pub const VERSION: &str = "v1.52.1";

pub struct VictoriaLogs {
    pub port: u16,
    /// The same server over TLS, its certificate (for 127.0.0.1) signed by
    /// the CA `ca`.
    pub tls_port: u16,
    pub ca: PathBuf,
    child: Mutex<Child>,
}

static PID: AtomicU32 = AtomicU32::new(0);
static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Where the binary is: $NAGARE_VICTORIA_LOGS, the cache folder
/// scripts/test-all.sh installs into, or `victoria-logs` on the PATH.
fn binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let cached = home.map(|h| h.join(".cache/nagare-test/gobin/victoria-logs"));
    super::installed_tool("NAGARE_VICTORIA_LOGS", cached, "victoria-logs", "-version")
}

/// The test binary's one server; None when it is not installed (the test
/// then skips, or fails under NAGARE_TEST_REQUIRE).
pub fn shared() -> Option<&'static VictoriaLogs> {
    static SERVER: OnceLock<VictoriaLogs> = OnceLock::new();
    extern "C" fn kill_server() {
        let pid = PID.load(SeqCst);
        if pid != 0 {
            // SAFETY: kill(2) on the server this process started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    // Checked by every caller, so each test that cannot run says so.
    let bin = binary();
    if skip_unless(
        bin.is_some(),
        &format!("victoria-logs is not installed (go install github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@{VERSION}; scripts/test-all.sh does)"),
    ) {
        return None;
    }
    Some(SERVER.get_or_init(|| {
        let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
        // SAFETY: registers a plain function with no state of its own.
        unsafe { libc::atexit(kill_server) };
        let (port, tls_port) = (free_port(), free_port());
        let ca = super::tls::Ca::new(dir, "victoria-logs");
        let pair = ca.issue("victoria-logs", &["127.0.0.1"]);
        let child = Command::new(bin.unwrap())
            .arg(format!("-storageDataPath={}", dir.join("data").display()))
            // Two listeners: plain HTTP, and HTTPS.
            .arg(format!(
                "-httpListenAddr=127.0.0.1:{port},127.0.0.1:{tls_port}"
            ))
            .arg("-tls=false,true")
            .arg(format!("-tlsCertFile=,{}", pair.cert.display()))
            .arg(format!("-tlsKeyFile=,{}", pair.key.display()))
            // The line stays the line (_msg), not parsed into fields:
            // the tests compare it whole.
            .arg("-loki.disableMessageParsing")
            .arg("-retentionPeriod=100y")
            .arg("-loggerLevel=ERROR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start victoria-logs");
        PID.store(child.id(), SeqCst);
        let vl = VictoriaLogs {
            port,
            tls_port,
            ca: ca.path.clone(),
            child: Mutex::new(child),
        };
        wait_until(WAIT, "victoria-logs to answer /health", || {
            vl.get("/health", &[]).is_some_and(|(s, _)| s == 200)
        });
        vl
    }))
}

impl VictoriaLogs {
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// A GET with `headers`; (status, body), or None when the server does
    /// not answer.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(WAIT)).ok()?;
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).ok()?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).ok()?;
        let text = String::from_utf8_lossy(&resp).into_owned();
        let status = text.split(' ').nth(1)?.parse().ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            super::dechunk(body)
        } else {
            body.to_string()
        };
        Some((status, body))
    }

    /// The rows a LogsQL query finds for the tenant (account, project),
    /// each a JSON object (`_msg`, `_time`, `_stream`, the fields).
    pub fn query(&self, logsql: &str, tenant: (u32, u32)) -> Vec<serde_json::Value> {
        let q = percent_encoding::utf8_percent_encode(logsql, percent_encoding::NON_ALPHANUMERIC);
        let (a, p) = (tenant.0.to_string(), tenant.1.to_string());
        let (status, body) = self
            .get(
                &format!("/select/logsql/query?query={q}"),
                &[("AccountID", &a), ("ProjectID", &p)],
            )
            .expect("victoria-logs answers a query");
        assert_eq!(status, 200, "query {logsql:?}: {body}");
        body.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Waits until `logsql` finds `n` rows (and no more), and returns them.
    pub fn wait_rows(&self, logsql: &str, tenant: (u32, u32), n: usize) -> Vec<serde_json::Value> {
        let mut rows = Vec::new();
        wait_until(WAIT, &format!("{n} rows for {logsql:?}"), || {
            rows = self.query(logsql, tenant);
            rows.len() >= n
        });
        assert_eq!(rows.len(), n, "rows of {logsql:?}: {rows:?}");
        rows
    }
}

impl Drop for VictoriaLogs {
    fn drop(&mut self) {
        let mut c = self.child.lock().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The first TOML block under the heading `heading` of the search outputs
/// page, with its addresses replaced by `(from, to)` pairs.
pub fn doc_example(heading: &str, replace: &[(&str, String)]) -> String {
    let page = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/outputs-search-loki-splunk.md"
    );
    let doc = std::fs::read_to_string(page).unwrap();
    let section = &doc[doc
        .find(heading)
        .unwrap_or_else(|| panic!("{heading} in {page}"))..];
    let mut toml = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("a toml block under {heading}"))
        .to_string();
    for (from, to) in replace {
        assert!(toml.contains(from), "{from} in the example under {heading}");
        toml = toml.replace(from, to);
    }
    toml
}
