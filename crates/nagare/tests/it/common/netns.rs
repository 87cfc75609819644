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
//! partition: packets vanish, no reset is sent); [`Net::impair`] delays,
//! reorders and drops a host's packets both ways in userspace, through an
//! NFQUEUE (the kernel here has no sch_netem for `tc netem`).
//!
//! Names carry a prefix unique to the test process (`ngt<pid>x<n>-`), so
//! test processes run side by side; namespaces left by a killed run (whose
//! pid is gone) are removed, with their processes, before a new net is made.
//! Dropping the net kills what still runs in its namespaces and deletes them.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let ok = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Some("`ip` (iproute2) is not installed".into());
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

    /// Impairs `host`'s link both ways (see [`Impairment`]): its packets
    /// in and out on `eth0` go to an NFQUEUE (iptables, `--queue-bypass`),
    /// where a thread in the host's namespace holds each for the delay and
    /// then accepts it, or drops it. Dropping the guard removes the rules
    /// and lets every held packet go. Err when iptables or the kernel's
    /// NFQUEUE is missing.
    pub fn impair(&self, host: &str, imp: Impairment) -> Result<Impaired, String> {
        let iptables = ["iptables-nft", "iptables-legacy", "iptables"]
            .into_iter()
            .find(|t| {
                Command::new(t)
                    .arg("-V")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .ok_or("iptables is not installed (Debian package `iptables`)")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let stop = stop.clone();
            self.enter(host, move || delayer(imp, &stop, ready_tx))
        };
        let mut guard = Impaired {
            ns: self.ns(host),
            iptables,
            rules: Vec::new(),
            stop,
            thread: Some(thread),
        };
        ready_rx
            .recv()
            .map_err(|_| "the delayer thread ended".to_string())??;
        for (chain, dir) in [("OUTPUT", "-o"), ("INPUT", "-i")] {
            guard.add_rule(vec![
                chain.into(),
                dir.into(),
                "eth0".into(),
                "-j".into(),
                "NFQUEUE".into(),
                "--queue-num".into(),
                QUEUE.to_string(),
                // Should the delayer be gone, packets pass instead of vanishing.
                "--queue-bypass".into(),
            ])?;
        }
        Ok(guard)
    }
}

/// The NFQUEUE number the delayer binds (queues are per network namespace).
const QUEUE: u16 = 0;

/// What [`Net::impair`] does to each packet of a link, each way: held for
/// `delay` plus or minus up to `jitter` (uniformly; a jitter lets later
/// packets overtake earlier ones, so TCP sees them out of order), or,
/// `loss_percent` of them at random, dropped. The kernel here has neither
/// sch_netem nor sch_fq, so `tc netem` cannot do it.
#[derive(Clone, Copy, Debug)]
pub struct Impairment {
    pub delay: Duration,
    pub jitter: Duration,
    pub loss_percent: u32,
}

/// What the delayer did, counted in packets.
#[derive(Debug, Default)]
pub struct ImpairStats {
    pub passed: u64,
    pub dropped: u64,
    /// Packets let go after a packet that came in later than them.
    pub reordered: u64,
}

/// A link impaired by [`Net::impair`]; dropping it (or [`Impaired::stop`])
/// ends the impairment.
pub struct Impaired {
    ns: String,
    iptables: &'static str,
    /// The rules added, to delete them (each as `-A`'s arguments).
    rules: Vec<Vec<String>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<ImpairStats, String>>>,
}

impl Impaired {
    fn iptables(&self, op: &str, rule: &[String]) -> Result<(), String> {
        let mut args = vec!["netns", "exec", &self.ns, self.iptables, op];
        args.extend(rule.iter().map(String::as_str));
        run("ip", &args)
    }

    fn add_rule(&mut self, rule: Vec<String>) -> Result<(), String> {
        self.iptables("-A", &rule)?;
        self.rules.push(rule);
        Ok(())
    }

    /// Removes the rules, lets the held packets go and returns the counts.
    pub fn stop(mut self) -> Result<ImpairStats, String> {
        self.end()
    }

    fn end(&mut self) -> Result<ImpairStats, String> {
        for rule in std::mem::take(&mut self.rules) {
            let _ = self.iptables("-D", &rule);
        }
        self.stop.store(true, SeqCst);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| "the delayer panicked".to_string())?,
            None => Ok(ImpairStats::default()),
        }
    }
}

impl Drop for Impaired {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// The delayer: binds the queue (answers on `ready`), then until `stop`
/// takes the queued packets, drops some, and accepts the others once their
/// time has come; at the end accepts whatever it still holds.
fn delayer(
    imp: Impairment,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<ImpairStats, String> {
    let opened = (|| {
        let mut q = nfq::Queue::open()?;
        q.bind(QUEUE)?;
        // Only the verdict is needed, not the packet's bytes.
        q.set_copy_range(QUEUE, 0)?;
        q.set_nonblocking(true);
        Ok::<_, std::io::Error>(q)
    })();
    let mut q = match opened {
        Ok(q) => {
            let _ = ready.send(Ok(()));
            q
        }
        Err(e) => {
            let e = format!("NFQUEUE {QUEUE}: {e}");
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let fail = |e: std::io::Error| format!("NFQUEUE {QUEUE}: {e}");
    let mut rng = Rng::new();
    let mut stats = ImpairStats::default();
    // Held packets by release time, with their arrival number.
    let mut held: VecDeque<(Instant, u64, nfq::Message)> = VecDeque::new();
    let (mut arrived, mut last_out) = (0u64, None::<u64>);
    while !stop.load(SeqCst) {
        loop {
            let mut m = match q.recv() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(fail(e)),
            };
            arrived += 1;
            if rng.below(100) < u64::from(imp.loss_percent) {
                stats.dropped += 1;
                m.set_verdict(nfq::Verdict::Drop);
                q.verdict(m).map_err(fail)?;
                continue;
            }
            let spread = imp.jitter.as_micros() as u64;
            let due = if spread == 0 {
                Instant::now() + imp.delay
            } else {
                Instant::now() + imp.delay - imp.jitter
                    + Duration::from_micros(rng.below(2 * spread + 1))
            };
            let at = held.partition_point(|(t, _, _)| *t <= due);
            held.insert(at, (due, arrived, m));
        }
        let now = Instant::now();
        while held.front().is_some_and(|(t, _, _)| *t <= now) {
            let (_, n, mut m) = held.pop_front().expect("a held packet");
            if last_out.is_some_and(|l| n < l) {
                stats.reordered += 1;
            }
            last_out = Some(last_out.map_or(n, |l| l.max(n)));
            stats.passed += 1;
            m.set_verdict(nfq::Verdict::Accept);
            q.verdict(m).map_err(fail)?;
        }
        // Pacing of this loop, not synchronisation: a packet waits at most
        // this much past its time.
        std::thread::sleep(Duration::from_millis(1));
    }
    for (_, _, mut m) in held {
        stats.passed += 1;
        m.set_verdict(nfq::Verdict::Accept);
        q.verdict(m).map_err(fail)?;
    }
    Ok(stats)
}

/// xorshift64*: enough randomness to pick packets, no dependency.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Rng(t | 1)
    }

    /// A number in 0..n.
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
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
