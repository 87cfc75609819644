//! A real single-node OpenSearch server for the elasticsearch tests, from
//! the Maven Central jars that tests/opensearch/fetch.sh keeps in a cache
//! outside the repository (tests/opensearch/start.sh runs Launcher.java: a
//! Node with the Netty4 plugin). Started on free loopback ports in a
//! temporary folder, killed on drop. It takes a few seconds and about
//! 250 MB: one shared by the test binary (`shared_opensearch`), and nodes of
//! their own for the tests that need other settings or stop the server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, skip_unless};

/// The longest a node may take to start (a loaded CI machine, a cold JVM).
const START: Duration = Duration::from_secs(90);

const FETCH_SH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/opensearch/fetch.sh"
);
const START_SH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/opensearch/start.sh"
);

/// The pid of the shared node, killed at exit.
static SHARED_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub struct OpenSearch {
    pub port: u16,
    transport_port: u16,
    pub dir: PathBuf,
    settings: Vec<String>,
    child: Option<Child>,
    shared: bool,
}

/// Fetches the jars and compiles the launcher once (scripts/test-all.sh
/// runs fetch.sh in its set-up, a test run alone runs it here). Err says
/// why no node can run here.
fn fetch() -> Result<(), String> {
    for (tool, pkg) in [
        ("java", "default-jre-headless"),
        ("javac", "default-jdk-headless"),
    ] {
        let ok = Command::new(tool)
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!("{tool} is not installed (apt-get install {pkg})"));
        }
    }
    static FETCHED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    FETCHED
        .get_or_init(|| {
            let out = Command::new("bash")
                .arg(FETCH_SH)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .map_err(|e| format!("{FETCH_SH}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{FETCH_SH} could not fetch the OpenSearch jars (needs mvn): {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(())
        })
        .clone()
}

/// Skips the calling test when no OpenSearch node can be started here.
pub fn skip_without_opensearch() -> bool {
    match fetch() {
        Ok(()) => false,
        Err(reason) => skip_unless(false, &reason),
    }
}

impl OpenSearch {
    /// A node of the calling test's own in `dir/opensearch`, with more node
    /// `settings` ("KEY=VALUE"), started; killed on drop. None: skipped.
    pub fn start(dir: &Path, settings: &[&str]) -> Option<OpenSearch> {
        if skip_without_opensearch() {
            return None;
        }
        let mut node = OpenSearch::new(dir, settings);
        node.restart();
        Some(node)
    }

    fn new(dir: &Path, settings: &[&str]) -> OpenSearch {
        let dir = dir.join("opensearch");
        std::fs::create_dir_all(&dir).unwrap();
        OpenSearch {
            port: free_port(),
            transport_port: free_port(),
            dir,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            child: None,
            shared: false,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the node (again, on the same ports and data) and waits until
    /// its cluster is at least yellow.
    pub fn restart(&mut self) {
        self.stop();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("node.log"))
            .unwrap();
        let child = Command::new("bash")
            .arg(START_SH)
            .arg(&self.dir)
            .arg(self.port.to_string())
            .arg(self.transport_port.to_string())
            .args(&self.settings)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start OpenSearch (tests/opensearch/start.sh)");
        if self.shared {
            SHARED_PID.store(child.id(), std::sync::atomic::Ordering::SeqCst);
        }
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("OpenSearch exited ({status}) at start:\n{}", self.log());
                }
            }
            match self.try_request(
                "GET",
                "/_cluster/health?wait_for_status=yellow&timeout=2s",
                None,
            ) {
                Ok((200, _)) => return,
                _ if start.elapsed() > START => {
                    panic!("OpenSearch did not start within {START:?}:\n{}", self.log())
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Kills the node (SIGKILL) and waits for it to end.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }

    /// A request with a JSON (or NDJSON, for `_bulk`) body; (status, answer).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, serde_json::Value) {
        self.try_request(method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, serde_json::Value), String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let body = body.unwrap_or("");
        let ctype = if path.contains("_bulk") {
            "application/x-ndjson"
        } else {
            "application/json"
        };
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(|e| e.to_string())?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&resp).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("not HTTP: {text:?}"))?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("not HTTP: {text:?}"))?;
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            super::dechunk(body)
        } else {
            body.to_string()
        };
        let v = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
        Ok((status, v))
    }

    /// Creates an index (or index template, …) with `body`; panics unless 200.
    pub fn put(&self, path: &str, body: &str) {
        let (status, answer) = self.request("PUT", path, Some(body));
        assert_eq!(status, 200, "PUT {path}: {answer}");
    }

    /// The number of documents in `index` (refreshed first), 0 while it
    /// is absent or its shards are not started yet (503 just after an
    /// index is created).
    pub fn count(&self, index: &str) -> u64 {
        self.request("POST", &format!("/{index}/_refresh"), None);
        let (status, v) = self.request("GET", &format!("/{index}/_count"), None);
        if status == 404 || status == 503 {
            return 0;
        }
        v["count"]
            .as_u64()
            .unwrap_or_else(|| panic!("_count of {index}: {v}"))
    }

    /// Every document of `index` (a pattern, e.g. "logs-*"): (`_index`,
    /// `_id`, `_source`), read with scroll.
    pub fn docs(&self, index: &str) -> Vec<(String, String, serde_json::Value)> {
        self.request("POST", &format!("/{index}/_refresh"), None);
        let mut out = Vec::new();
        let (status, mut page) = self.request(
            "POST",
            &format!("/{index}/_search?scroll=1m"),
            Some(r#"{"size":5000,"sort":["_doc"]}"#),
        );
        assert_eq!(status, 200, "_search {index}: {page}");
        loop {
            let hits = page["hits"]["hits"].as_array().cloned().unwrap_or_default();
            if hits.is_empty() {
                break;
            }
            for h in hits {
                out.push((
                    h["_index"].as_str().unwrap_or("").to_string(),
                    h["_id"].as_str().unwrap_or("").to_string(),
                    h["_source"].clone(),
                ));
            }
            let id = page["_scroll_id"].as_str().expect("_scroll_id").to_string();
            let body = serde_json::json!({"scroll": "1m", "scroll_id": id}).to_string();
            let (status, next) = self.request("POST", "/_search/scroll", Some(&body));
            assert_eq!(status, 200, "scroll: {next}");
            page = next;
        }
        out
    }

    /// The `seq` field of every document of `index`.
    pub fn seqs(&self, index: &str) -> Vec<u64> {
        self.docs(index)
            .iter()
            .map(|(_, _, s)| s["seq"].as_u64().unwrap_or_else(|| panic!("no seq in {s}")))
            .collect()
    }
}

impl Drop for OpenSearch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The test binary's one shared node, started by the first test that asks
/// (None: the test skips). A static is never dropped, so the node is
/// killed and its folder removed when the test process exits (atexit).
pub fn shared_opensearch() -> Option<&'static OpenSearch> {
    use std::sync::OnceLock;
    static NODE: OnceLock<Option<OpenSearch>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn kill_node() {
        let pid = SHARED_PID.load(std::sync::atomic::Ordering::SeqCst);
        if pid != 0 {
            // SAFETY: kill(2) on the node this process started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    if skip_without_opensearch() {
        return None;
    }
    NODE.get_or_init(|| {
        let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
        // SAFETY: registers a plain function with no state of its own.
        unsafe { libc::atexit(kill_node) };
        let mut node = OpenSearch::new(dir, &[]);
        node.shared = true;
        node.restart();
        Some(node)
    })
    .as_ref()
}
