//! A real redis-server (the Debian package) for the redis tests: started on
//! a free loopback port in a temporary folder, with persistence off unless
//! a test asks for it, killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{free_port, skip_unless, wait_until, WAIT};

pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    /// appendonly + appendfsync always: a restart keeps every write.
    durable: bool,
    /// More redis-server options, e.g. a TLS port or ACL users.
    extra: Vec<String>,
}

/// Skips the calling test when redis-server is not installed (CI installs
/// it: scripts/test-all.sh).
pub fn skip_without_redis() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    skip_unless(
        found,
        "redis-server is not installed (apt-get install redis-server)",
    )
}

impl RedisServer {
    /// A server without persistence (`--save ''`).
    pub fn start(dir: &Path) -> RedisServer {
        Self::start_with(dir, false)
    }

    /// A server that writes every command to its append-only file before
    /// answering, so a restart on the same folder loses nothing.
    pub fn start_durable(dir: &Path) -> RedisServer {
        Self::start_with(dir, true)
    }

    /// A server with more redis-server options (`--tls-port`, `--user`, …).
    pub fn start_args(dir: &Path, extra: &[&str]) -> RedisServer {
        let mut r = Self::new(dir, false);
        r.extra = extra.iter().map(|a| a.to_string()).collect();
        r.restart();
        r
    }

    fn start_with(dir: &Path, durable: bool) -> RedisServer {
        let mut r = Self::new(dir, durable);
        r.restart();
        r
    }

    fn new(dir: &Path, durable: bool) -> RedisServer {
        let dir = dir.join("redis");
        std::fs::create_dir_all(&dir).unwrap();
        RedisServer {
            port: free_port(),
            dir,
            child: None,
            durable,
            extra: Vec::new(),
        }
    }

    /// The UNIX socket the server also listens on.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again, on the same port and folder) and waits
    /// until it answers PING.
    pub fn restart(&mut self) {
        self.stop();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--unixsocket")
            .arg(self.socket())
            .args(["--unixsocketperm", "700", "--save", "", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.durable {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        cmd.args(&self.extra);
        self.child = Some(cmd.spawn().expect("start redis-server"));
        let url = self.url();
        wait_until(
            WAIT,
            &format!("redis-server on {url} to answer PING"),
            || {
                redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
            },
        );
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new synchronous connection for the test's own commands.
    pub fn con(&self) -> redis::Connection {
        redis::Client::open(self.url().as_str())
            .unwrap()
            .get_connection()
            .expect("connect to redis-server")
    }

    /// Runs one command and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut self.con())
            .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Redis Cluster of three masters (no replicas) on free loopback ports,
/// each a redis-server in its own folder; killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(dir: &Path) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                RedisServer::start_args(
                    &dir.join(format!("node{i}")),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        wait_until(WAIT, "the cluster to be ok on every node", || {
            nodes.iter().all(|n| {
                n.cmd::<String>(&["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            })
        });
        RedisCluster { nodes }
    }

    /// A connection that follows keys to their nodes.
    pub fn con(&self) -> redis::cluster::ClusterConnection {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url()).collect();
        redis::cluster::ClusterClient::new(urls)
            .and_then(|c| c.get_connection())
            .expect("connect to the cluster")
    }
}

/// A Redis Sentinel (redis-server --sentinel, from the same package)
/// watching one master as "mymaster", with small timeouts so a failover
/// takes seconds; killed on drop.
pub struct RedisSentinel {
    pub port: u16,
    child: Child,
}

impl RedisSentinel {
    /// Starts a sentinel for the master on `master_port` (quorum 1: it
    /// alone may fail it over) and waits until it answers.
    pub fn start(dir: &Path, master_port: u16) -> RedisSentinel {
        let dir = dir.join("sentinel");
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        // The sentinel rewrites its configuration file: one of its own.
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
                 sentinel monitor mymaster 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 10000\n",
                dir.display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let s = RedisSentinel { port, child };
        wait_until(WAIT, "the sentinel to answer PING", || {
            s.con()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok()
        });
        s
    }

    fn con(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port).as_str())?.get_connection()
    }

    /// The port of the master as the sentinel names it now.
    pub fn master_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("mymaster")
            .query(&mut self.con().unwrap())
            .unwrap();
        port
    }

    /// Starts a failover of "mymaster" (SENTINEL FAILOVER): once the
    /// sentinel has a replica fit to promote, which it learns from its
    /// periodic INFO, so this asks until it is accepted.
    pub fn failover(&self) {
        wait_until(WAIT, "the sentinel to accept SENTINEL FAILOVER", || {
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg("mymaster")
                .query::<String>(&mut self.con().unwrap())
                .is_ok()
        });
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
