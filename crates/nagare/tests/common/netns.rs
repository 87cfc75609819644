//! A multi-host test network made of Linux network namespaces.
//!
//! [`Net::create`] reads a topology file (see `tests/cluster/topology.toml`)
//! and makes one namespace per host plus a "switch" namespace holding a
//! bridge; each host is joined to the bridge by a veth pair (`eth0` on the
//! host, `p-<host>` on the switch) and gets its address in the topology's
//! private subnet. Nothing touches the machine's own network: the bridge
//! lives in the switch namespace and no route leads out of it.
//!
//! Processes run on a host with [`Net::command`] (`ip netns exec`), test
//! code with [`Net::enter`] (a thread moved into the host's namespace). Link
//! faults: [`Net::set_link`] downs or ups a host's switch port (a
//! partition: packets vanish, no reset is sent), [`Net::netem`] puts a
//! `tc netem` qdisc (delay, loss, reordering) on both ends of a host's link,
//! [`Net::loss`] drops a share of the host's packets with nftables (for
//! kernels without sch_netem).
//!
//! Names carry a prefix unique to the test process (`ngt<pid>x<n>-`), so
//! test processes run side by side; namespaces left by a killed run (whose
//! pid is gone) are removed, with their processes, before a new net is made.
//! Dropping the net kills what still runs in its namespaces and deletes them.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

use serde::Deserialize;

use super::Daemon;

const PREFIX: &str = "ngt";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The hosts' subnet, e.g. "10.77.0.0/24" (its prefix length is used).
    pub subnet: String,
    pub host: Vec<HostSpec>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub name: String,
    pub addr: String,
}

impl Topology {
    pub fn load(path: &Path) -> Topology {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

/// Why this machine cannot make the net (for a skip), or None.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("network namespaces need root".into());
    }
    for tool in ["ip", "tc"] {
        let ok = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Some(format!("`{tool}` (iproute2) is not installed"));
        }
    }
    None
}

/// The hosts of one topology, each in its own namespace, on one bridge.
pub struct Net {
    prefix: String,
    hosts: BTreeMap<String, HostSpec>,
    prefix_len: u8,
}

/// Runs `ip ARGS`; Err carries its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Kills the processes in namespace `ns` (by pid) and deletes it.
fn remove_ns(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                // SAFETY: kill(2) on a pid that runs in a namespace this
                // harness made (its name carries our prefix).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let _ = ip(&["netns", "del", ns]);
}

/// Removes namespaces of earlier test processes that no longer run.
fn remove_leftovers() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('x').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            remove_ns(name);
        }
    }
}

impl Net {
    /// Makes the namespaces, the bridge and the links of `topology`.
    pub fn create(topology: &Path) -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        remove_leftovers();
        let t = Topology::load(topology);
        let prefix_len: u8 = t
            .subnet
            .rsplit_once('/')
            .and_then(|(_, l)| l.parse().ok())
            .unwrap_or_else(|| panic!("subnet {:?}: expected ADDR/LEN", t.subnet));
        let net = Net {
            prefix: format!("{PREFIX}{}x{}-", std::process::id(), N.fetch_add(1, SeqCst)),
            hosts: t.host.iter().map(|h| (h.name.clone(), h.clone())).collect(),
            prefix_len,
        };
        let sw = net.switch();
        must(ip(&["netns", "add", &sw]));
        must(ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]));
        must(ip(&["-n", &sw, "link", "set", "br0", "up"]));
        for h in &t.host {
            let ns = net.ns(&h.name);
            let port = Net::port(&h.name);
            must(ip(&["netns", "add", &ns]));
            must(ip(&["-n", &ns, "link", "set", "lo", "up"]));
            must(ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ]));
            must(ip(&[
                "-n", &sw, "link", "set", &port, "master", "br0", "up",
            ]));
            let cidr = format!("{}/{}", h.addr, net.prefix_len);
            must(ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"]));
            must(ip(&["-n", &ns, "link", "set", "eth0", "up"]));
        }
        net
    }

    fn switch(&self) -> String {
        format!("{}sw", self.prefix)
    }

    /// The switch-side end of a host's link.
    fn port(host: &str) -> String {
        format!("p-{host}")
    }

    /// The namespace of `host`.
    pub fn ns(&self, host: &str) -> String {
        assert!(
            self.hosts.contains_key(host),
            "no host {host:?} in the topology"
        );
        format!("{}{host}", self.prefix)
    }

    pub fn addr(&self, host: &str) -> &str {
        &self.hosts[host].addr
    }

    /// `program` to run on `host` (`ip netns exec NS program`).
    pub fn command(&self, host: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(host)]).arg(program);
        c
    }

    /// Writes `config` to `dir/<host>.toml` and starts `nagare run` on
    /// `host`. `ip netns exec` execs nagare, so the child's pid is nagare's.
    pub fn daemon(&self, host: &str, dir: &Path, config: &str) -> Daemon {
        let path = dir.join(format!("{host}.toml"));
        std::fs::write(&path, config).expect("write config");
        let mut cmd = self.command(host, super::BIN);
        cmd.arg("run").arg("-c").arg(&path);
        Daemon::spawn(cmd, dir, path, None)
    }

    /// Runs `body` on a thread inside `host`'s namespace and returns its value.
    pub fn enter<T: Send + 'static>(
        &self,
        host: &str,
        body: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/run/netns/{}", self.ns(host));
        let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        std::thread::spawn(move || {
            // SAFETY: setns(2) moves only this thread, made for the purpose.
            let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            body()
        })
    }

    /// Downs (false) or ups (true) `host`'s switch port: while down, its
    /// packets are dropped on the floor, both ways, with no reset.
    pub fn set_link(&self, host: &str, up: bool) {
        let state = if up { "up" } else { "down" };
        must(ip(&[
            "-n",
            &self.switch(),
            "link",
            "set",
            &Net::port(host),
            state,
        ]));
    }

    /// A `tc netem` qdisc with `args` (e.g. "delay 200ms loss 5%") on both
    /// ends of `host`'s link, so each direction gets it; Err when the
    /// kernel has no sch_netem.
    pub fn netem(&self, host: &str, args: &str) -> Result<(), String> {
        let args: Vec<&str> = args.split_whitespace().collect();
        for (ns, dev) in [
            (self.ns(host), "eth0".to_string()),
            (self.switch(), Net::port(host)),
        ] {
            let mut a = vec!["-n", &ns, "qdisc", "replace", "dev", &dev, "root", "netem"];
            a.extend(&args);
            run("tc", &a)?;
        }
        Ok(())
    }

    /// Drops `percent` % of the packets `host` sends and of those it
    /// receives, at random (nftables `numgen`).
    pub fn loss(&self, host: &str, percent: u32) -> Result<(), String> {
        let rules = format!(
            "table inet nagare_fault {{
  chain out {{ type filter hook output priority 0; oifname \"eth0\" numgen random mod 100 < {percent} drop; }}
  chain in {{ type filter hook input priority 0; iifname \"eth0\" numgen random mod 100 < {percent} drop; }}
}}"
        );
        let file = std::env::temp_dir().join(format!("{}{host}.nft", self.prefix));
        std::fs::write(&file, rules).map_err(|e| e.to_string())?;
        let r = run(
            "ip",
            &[
                "netns",
                "exec",
                &self.ns(host),
                "nft",
                "-f",
                &file.to_string_lossy(),
            ],
        );
        let _ = std::fs::remove_file(&file);
        r
    }

    /// Removes the netem qdiscs and the loss rules of `host`'s link.
    pub fn clear_faults(&self, host: &str) {
        let ns = self.ns(host);
        let _ = run("tc", &["-n", &ns, "qdisc", "del", "dev", "eth0", "root"]);
        let sw = self.switch();
        let _ = run(
            "tc",
            &["-n", &sw, "qdisc", "del", "dev", &Net::port(host), "root"],
        );
        let _ = run(
            "ip",
            &[
                "netns",
                "exec",
                &ns,
                "nft",
                "delete",
                "table",
                "inet",
                "nagare_fault",
            ],
        );
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in self.hosts.keys() {
            remove_ns(&self.ns(h));
        }
        remove_ns(&self.switch());
    }
}
