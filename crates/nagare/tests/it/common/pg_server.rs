//! A PostgreSQL 15 server for the tests (Debian's postgresql-15: initdb
//! and pg_ctl), one per test binary run: started by the first test that
//! asks, in a temporary folder owned by user postgres (the server refuses
//! to run as root), on a free loopback port; stopped (SIGQUIT, immediate)
//! and its folder removed at exit. Rows are read back with `psql`, a
//! client that is not nagare's code.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use super::{free_port, skip_unless};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// The role the outputs log in as (scram-sha-256 over TCP); "postgres"
/// is trusted over TCP for the tests' own psql.
pub const USER: &str = "nagare";
pub const PASSWORD: &str = "s3cret pw";
/// A role that may log in over TLS only (same password).
pub const TLS_USER: &str = "nagare_tls";

pub struct PgServer {
    pub port: u16,
    dir: PathBuf,
    /// The CA of the server's certificate (for 127.0.0.1), PEM.
    pub ca: PathBuf,
}

/// The postmaster's pid, signalled at exit.
static PID: AtomicU32 = AtomicU32::new(0);

/// Skips the calling test unless PostgreSQL 15 is installed.
pub fn skip_without_postgres() -> bool {
    skip_unless(
        Path::new(BIN).join("initdb").exists() && Path::new(BIN).join("psql").exists(),
        "PostgreSQL 15 is not installed (apt-get install postgresql-15)",
    )
}

/// The test binary's one server (None: the test skips). Tests use it in
/// parallel (each its own tables); a test that restarts it takes it for
/// writing.
pub fn shared_postgres() -> Option<&'static std::sync::RwLock<PgServer>> {
    use std::sync::{OnceLock, RwLock};
    static SERVER: OnceLock<Option<RwLock<PgServer>>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn stop() {
        let pid = PID.load(SeqCst);
        if pid != 0 {
            // SAFETY: kill(2) on the server this process started; SIGQUIT
            // is PostgreSQL's immediate shutdown (children end too).
            unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
            for _ in 0..200 {
                // SAFETY: signal 0 only asks whether the process exists.
                if unsafe { libc::kill(pid as i32, 0) } != 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    SERVER
        .get_or_init(|| {
            if skip_without_postgres() {
                return None;
            }
            let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
            // SAFETY: registers a plain function with no state of its own.
            unsafe { libc::atexit(stop) };
            Some(RwLock::new(PgServer::init(dir)))
        })
        .as_ref()
}

/// Runs a server program as user postgres when we are root.
fn as_postgres(program: &str) -> Command {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"])
            .arg(Path::new(BIN).join(program));
        c
    } else {
        Command::new(Path::new(BIN).join(program))
    }
}

fn run(mut c: Command, what: &str) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl PgServer {
    fn init(dir: &Path) -> PgServer {
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } == 0 {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("-R").arg("postgres:postgres").arg(dir);
                    c
                },
                "chown",
            );
        }
        // The server's certificate for 127.0.0.1, from a CA of the test's.
        let ca = super::tls::Ca::new(dir, "pg");
        let pair = ca.issue("server", &["127.0.0.1", "localhost"]);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pair.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } == 0 {
            let mut c = Command::new("chown");
            c.arg("postgres:postgres").arg(&pair.cert).arg(&pair.key);
            run(c, "chown");
        }
        let data = dir.join("data");
        let mut c = as_postgres("initdb");
        c.arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"]);
        run(c, "initdb");
        std::fs::write(
            data.join("pg_hba.conf"),
            format!(
                "local all all trust\nhostnossl all {TLS_USER} 127.0.0.1/32 reject\nhost all postgres 127.0.0.1/32 trust\nhost all {USER},{TLS_USER} 127.0.0.1/32 scram-sha-256\n"
            ),
        )
        .unwrap();
        std::fs::write(
            data.join("conf.d.tls"),
            format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                pair.cert.display(),
                pair.key.display()
            ),
        )
        .unwrap();
        let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        conf.push_str("include 'conf.d.tls'\n");
        std::fs::write(data.join("postgresql.conf"), conf).unwrap();
        let server = PgServer {
            port: free_port(),
            dir: dir.to_path_buf(),
            ca: ca.path.clone(),
        };
        server.start();
        server.psql(&format!(
            "CREATE ROLE {USER} LOGIN PASSWORD '{PASSWORD}'; GRANT ALL ON SCHEMA public TO {USER}; \
             CREATE ROLE {TLS_USER} LOGIN PASSWORD '{PASSWORD}'; GRANT ALL ON SCHEMA public TO {TLS_USER};"
        ));
        server
    }

    /// Starts the server (waits until it takes connections).
    pub fn start(&self) {
        let mut c = as_postgres("pg_ctl");
        c.arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "start", "-o"])
            .arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c max_connections=200",
                self.port,
                self.dir.display()
            ));
        run(c, "pg_ctl start");
        let pid = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).unwrap();
        PID.store(pid.lines().next().unwrap().trim().parse().unwrap(), SeqCst);
    }

    /// Stops the server ("fast": connections are ended, as a restart by an
    /// operator does).
    pub fn stop(&self) {
        let mut c = as_postgres("pg_ctl");
        c.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-w", "-m", "fast", "stop"]);
        run(c, "pg_ctl stop");
        PID.store(0, SeqCst);
    }

    /// The result of `sql` run by psql as postgres: unaligned, tuples
    /// only, fields separated by '|'.
    pub fn psql(&self, sql: &str) -> String {
        let mut c = Command::new(Path::new(BIN).join("psql"));
        c.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-X", "-q", "-At"])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql]);
        run(c, &format!("psql {sql:?}"))
    }

    /// `SELECT count(*) FROM table`.
    pub fn count(&self, table: &str) -> u64 {
        self.psql(&format!("SELECT count(*) FROM {table}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// The connection string of the output's role.
    pub fn connection(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={USER} dbname=postgres",
            self.port
        )
    }
}
