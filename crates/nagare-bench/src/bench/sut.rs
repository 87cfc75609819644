//! Systems under test: starting a local process (a nagare config or any
//! command), waiting until it listens, and stopping it with its children.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// What bench needs to know about a nagare config.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigPorts {
    /// The first forward input's `bind` (where to send).
    pub input: Option<String>,
    /// The first forward output's first server `address` (where the sink listens).
    pub output: Option<String>,
    /// The first tail input's path (the file-transfer case).
    pub tail_path: Option<PathBuf>,
    /// That tail input's tag, if set.
    pub tail_tag: Option<String>,
}

/// Reads `[[input]] type = "forward" bind`, `type = "tail" path` and
/// `[[output]] type = "forward"` `[[output.server]] address` from a config.
pub fn read_config_ports(path: &Path) -> Result<ConfigPorts> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: toml::Value = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let mut p = ConfigPorts::default();
    let s = |t: &toml::Value, k: &str| t.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    for inp in v
        .get("input")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        match s(inp, "type").as_deref() {
            Some("forward") if p.input.is_none() => {
                p.input = Some(s(inp, "bind").unwrap_or_else(|| "0.0.0.0:24224".into()))
            }
            Some("tail") if p.tail_path.is_none() => {
                p.tail_path = s(inp, "path")
                    .or_else(|| {
                        inp.get("paths")
                            .and_then(|x| x.as_array())
                            .and_then(|a| a.first())
                            .and_then(|x| x.as_str())
                            .map(str::to_owned)
                    })
                    .map(PathBuf::from);
                p.tail_tag = s(inp, "tag");
            }
            _ => {}
        }
    }
    for out in v
        .get("output")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        if s(out, "type").as_deref() == Some("forward") && p.output.is_none() {
            let server = out
                .get("server")
                .and_then(|x| x.as_array())
                .and_then(|a| a.first())
                .ok_or_else(|| {
                    anyhow!(
                        "{}: the forward output has no [[output.server]]",
                        path.display()
                    )
                })?;
            p.output =
                Some(s(server, "address").ok_or_else(|| {
                    anyhow!("{}: [[output.server]] has no address", path.display())
                })?);
        }
    }
    Ok(p)
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A local process under test, in its own process group.
pub struct Sut {
    child: Option<Child>,
    pub pid: u32,
    pub log: PathBuf,
    pub name: String,
}

impl Sut {
    /// Starts `program args…` with `env`, output to `log`.
    pub fn start(
        name: &str,
        program: &str,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Result<Sut> {
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {program} {}", args.join(" ")))?;
        Ok(Sut {
            pid: child.id(),
            child: Some(child),
            log: log.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The last `n` bytes of the log.
    pub fn log_tail(&self, n: u64) -> String {
        let Ok(mut f) = File::open(&self.log) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(n)));
        let mut s = String::new();
        let _ = f.read_to_string(&mut s);
        s
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = &mut self.child {
            if let Some(st) = c.try_wait()? {
                bail!(
                    "{} exited ({st}) — end of its log {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(2000)
                );
            }
        }
        Ok(())
    }

    /// Waits until `addr` accepts TCP connections.
    pub fn wait_listening(&mut self, addr: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let sa = addr
            .to_socket_addrs()
            .with_context(|| format!("resolving {addr}"))?
            .next()
            .ok_or_else(|| anyhow!("{addr} resolves to nothing"))?;
        loop {
            self.check_alive()?;
            if TcpStream::connect_timeout(&sa, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} did not listen on {addr} within {timeout:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM to the process group, SIGKILL after `grace`. Returns how it ended.
    pub fn stop(mut self, grace: Duration) -> String {
        self.stop_inner(grace)
    }

    fn stop_inner(&mut self, grace: Duration) -> String {
        let Some(mut c) = self.child.take() else {
            return String::new();
        };
        let pg = self.pid as i32;
        // SAFETY: kill has no memory preconditions; -pg is the group we created.
        unsafe {
            libc::kill(-pg, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        loop {
            match c.try_wait() {
                Ok(Some(st)) => {
                    // SAFETY: as above; reaps stragglers in the group.
                    unsafe {
                        libc::kill(-pg, libc::SIGKILL);
                    }
                    return st.to_string();
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    // SAFETY: as above.
                    unsafe {
                        libc::kill(-pg, libc::SIGKILL);
                    }
                    let st = c.wait().map(|s| s.to_string()).unwrap_or_default();
                    return format!("killed after {grace:?} ({st})");
                }
            }
        }
    }
}

impl Drop for Sut {
    fn drop(&mut self) {
        self.stop_inner(Duration::from_secs(5));
    }
}

/// Splits a command line on whitespace, honouring single and double quotes.
pub fn split_command(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut any = false;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if quote.is_some() {
        bail!("unclosed quote in {s:?}");
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}
