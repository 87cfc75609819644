//! A ClickHouse server for the tests (Debian's clickhouse-server, 18.16),
//! one per test binary run: started by the first test that asks, with a
//! config of its own in a temporary folder (HTTP and native ports free on
//! loopback, no interserver port), killed and its folder removed at exit.
//! Rows are read back with `clickhouse-client`, a client that is not
//! nagare's code.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use super::{free_port, skip_unless, wait_port};

/// A user with a password (X-ClickHouse-User / Key); "default" has none.
pub const USER: &str = "nagare";
pub const PASSWORD: &str = "ch-secret";

pub struct ChServer {
    pub http_port: u16,
    pub tcp_port: u16,
    /// Killed at exit by pid (a static is never dropped).
    _child: std::process::Child,
}

static PID: AtomicU32 = AtomicU32::new(0);

pub fn skip_without_clickhouse() -> bool {
    skip_unless(
        Path::new("/usr/sbin/clickhouse-server").exists()
            && Path::new("/usr/bin/clickhouse-client").exists(),
        "ClickHouse is not installed (apt-get install clickhouse-server clickhouse-client)",
    )
}

/// The test binary's one server (None: the test skips).
pub fn shared_clickhouse() -> Option<&'static ChServer> {
    use std::sync::OnceLock;
    static SERVER: OnceLock<Option<ChServer>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn stop() {
        let pid = PID.load(SeqCst);
        if pid != 0 {
            // SAFETY: kill(2) on the server this process started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    SERVER
        .get_or_init(|| {
            if skip_without_clickhouse() {
                return None;
            }
            let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
            // SAFETY: registers a plain function with no state of its own.
            unsafe { libc::atexit(stop) };
            Some(ChServer::start(dir))
        })
        .as_ref()
}

impl ChServer {
    fn start(dir: &Path) -> ChServer {
        let (http_port, tcp_port) = (free_port(), free_port());
        let d = dir.display();
        std::fs::write(
            dir.join("config.xml"),
            format!(
                r#"<yandex>
  <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/error.log</errorlog></logger>
  <http_port>{http_port}</http_port>
  <tcp_port>{tcp_port}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
</yandex>
"#
            ),
        )
        .unwrap();
        let user = |name: &str, pw: &str| {
            format!("<{name}><password>{pw}</password><networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></{name}>")
        };
        std::fs::write(
            dir.join("users.xml"),
            format!(
                "<yandex><profiles><default></default></profiles><users>{}{}</users><quotas><default></default></quotas></yandex>\n",
                user("default", ""),
                user(USER, PASSWORD)
            ),
        )
        .unwrap();
        let child = Command::new("/usr/sbin/clickhouse-server")
            .arg(format!("--config-file={d}/config.xml"))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .spawn()
            .expect("clickhouse-server");
        PID.store(child.id(), SeqCst);
        wait_port(http_port);
        wait_port(tcp_port);
        ChServer {
            http_port,
            tcp_port,
            _child: child,
        }
    }

    /// The output of `sql` run by clickhouse-client (TabSeparated).
    pub fn query(&self, sql: &str) -> String {
        let out = Command::new("/usr/bin/clickhouse-client")
            .args(["--host", "127.0.0.1", "--port", &self.tcp_port.to_string()])
            .args(["--query", sql])
            .output()
            .expect("clickhouse-client");
        assert!(
            out.status.success(),
            "clickhouse-client {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn count(&self, table: &str) -> u64 {
        self.query(&format!("SELECT count() FROM {table}"))
            .trim()
            .parse()
            .unwrap()
    }
}
