//! CPU and RSS of a local process and its descendants, read from /proc.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One reading of a process tree.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// utime + stime of every process in the tree, in seconds.
    pub cpu_s: f64,
    /// Sum of resident set sizes, in bytes (shared pages count once per process).
    pub rss_bytes: u64,
    /// Processes found.
    pub procs: usize,
}

/// `sysconf(name)`, or `default` when the system does not say.
fn sysconf_or(name: libc::c_int, default: u64) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(name) };
    if v > 0 {
        v as u64
    } else {
        default
    }
}

/// (ppid, utime+stime ticks, rss pages) from /proc/PID/stat.
fn read_stat(pid: u32) -> Option<(u32, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); ppid is field 4, utime 14, stime 15, rss 24.
    let ppid = f.get(1)?.parse().ok()?;
    let ut: u64 = f.get(11)?.parse().ok()?;
    let st: u64 = f.get(12)?.parse().ok()?;
    let rss: i64 = f.get(21)?.parse().ok()?;
    Some((ppid, ut + st, rss.max(0) as u64))
}

/// Reads `root` and all its descendants now.
pub fn read_tree(root: u32) -> Usage {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut stats: HashMap<u32, (u64, u64)> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((ppid, ticks, rss)) = read_stat(pid) {
                children.entry(ppid).or_default().push(pid);
                stats.insert(pid, (ticks, rss));
            }
        }
    }
    let tck = sysconf_or(libc::_SC_CLK_TCK, 100) as f64;
    let page = sysconf_or(libc::_SC_PAGESIZE, 4096);
    let mut u = Usage::default();
    let mut stack = vec![root];
    let mut ticks = 0u64;
    while let Some(p) = stack.pop() {
        if let Some((t, r)) = stats.get(&p) {
            ticks += t;
            u.rss_bytes += r * page;
            u.procs += 1;
        }
        if let Some(c) = children.get(&p) {
            stack.extend(c);
        }
    }
    u.cpu_s = ticks as f64 / tck;
    u
}

/// Samples a process tree every `every` in the background, keeping the peak RSS.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
    pid: u32,
}

impl Sampler {
    pub fn start(pid: u32, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let u = read_tree(pid);
                p.fetch_max(u.rss_bytes, Ordering::Relaxed);
                std::thread::sleep(every);
            }
        });
        Sampler {
            stop,
            peak,
            handle: Some(handle),
            pid,
        }
    }

    /// Peak RSS since the last reset, in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Restarts the peak from the current RSS.
    pub fn reset_peak(&self) {
        self.peak
            .store(read_tree(self.pid).rss_bytes, Ordering::Relaxed);
    }

    pub fn now(&self) -> Usage {
        read_tree(self.pid)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_a_child() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let u = read_tree(me);
        child.kill().ok();
        child.wait().ok();
        assert!(u.procs >= 2, "{u:?}");
        assert!(u.rss_bytes > 1 << 20, "{u:?}");
        // Burn some CPU and see it counted.
        let t0 = read_tree(me).cpu_s;
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let t1 = read_tree(me).cpu_s;
        assert!(t1 - t0 >= 0.1, "cpu {t0} -> {t1}");
    }
}
