//! A real dockerd for the tests of Docker's log drivers (containers.rs,
//! gelf.rs): its own folders and socket, started per test, stopped on drop.

use std::path::{Path, PathBuf};

use super::{read_file, skip_unless, WAIT};

/// A dockerd of the test's own (its data, exec root and socket in a temp
/// folder; no bridge, no iptables rules: containers run with `--network
/// none`, the drivers run in dockerd), stopped on drop.
pub struct Dockerd {
    child: std::process::Child,
    dir: tempfile::TempDir,
}

impl Dockerd {
    /// Err says why no dockerd runs here.
    pub fn start() -> Result<Dockerd, String> {
        if unsafe { libc::geteuid() } != 0 {
            return Err("dockerd needs root".into());
        }
        for (bin, pkg) in [("dockerd", "docker.io"), ("busybox", "busybox-static")] {
            let found = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {bin}")])
                .output()
                .is_ok_and(|o| o.status.success());
            if !found {
                return Err(format!("{bin} is not installed (apt-get install {pkg})"));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let log = std::fs::File::create(d.join("dockerd.log")).unwrap();
        let child = std::process::Command::new("dockerd")
            .arg("--data-root")
            .arg(d.join("root"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}/sock", d.display()))
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run dockerd: {e}"))?;
        let mut me = Dockerd { child, dir };
        let start = std::time::Instant::now();
        loop {
            if let Ok(Some(status)) = me.child.try_wait() {
                return Err(format!(
                    "dockerd exited ({status}) at start: {}",
                    me.log().lines().last().unwrap_or("")
                ));
            }
            if me.docker(&["version"]).is_ok() {
                return Ok(me);
            }
            if start.elapsed() > WAIT * 3 {
                return Err(format!(
                    "dockerd did not answer within {:?}: {}",
                    WAIT * 3,
                    me.log().lines().last().unwrap_or("")
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        read_file(&self.dir.path().join("dockerd.log"))
    }

    /// Runs the docker client against this dockerd; Ok(stdout).
    pub fn docker(&self, args: &[&str]) -> Result<String, String> {
        // Debian's client, of the daemon's version, when there is one.
        let client = if Path::new("/usr/bin/docker").exists() {
            "/usr/bin/docker"
        } else {
            "docker"
        };
        let out = std::process::Command::new(client)
            .env(
                "DOCKER_HOST",
                format!("unix://{}/sock", self.dir.path().display()),
            )
            .args(args)
            .output()
            .map_err(|e| format!("docker: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "docker {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// An image of busybox-static alone (nothing can be pulled): `docker import`.
    pub fn busybox_image(&self) -> &'static str {
        let root = self.dir.path().join("rootfs");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
        for c in [
            "sh", "head", "tr", "seq", "echo", "printf", "sleep", "[", "test",
        ] {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(c)).unwrap();
        }
        let tar = self.dir.path().join("rootfs.tar");
        let status = std::process::Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(status.success());
        self.docker(&["import", tar.to_str().unwrap(), "nagare-busybox:test"])
            .unwrap();
        "nagare-busybox:test"
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // SIGTERM: dockerd stops its containers and its containerd.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = std::time::Instant::now();
        while start.elapsed() < WAIT {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dockerd {
    /// A dockerd, or None after `skip_unless` has said why none runs here.
    pub fn start_or_skip() -> Option<Dockerd> {
        match Dockerd::start() {
            Ok(d) => Some(d),
            Err(reason) => {
                skip_unless(false, &reason);
                None
            }
        }
    }

    /// Waits (up to `WAIT`) until `tags()`, the tags of the events received
    /// so far, holds `total`; else panics with the count per tag, nagare's
    /// log and the end of dockerd's.
    pub fn wait_events(
        &self,
        total: usize,
        mut tags: impl FnMut() -> Vec<String>,
        nagare_log: impl Fn() -> String,
    ) {
        let start = std::time::Instant::now();
        let mut got = tags();
        while got.len() < total && start.elapsed() < WAIT {
            std::thread::sleep(std::time::Duration::from_millis(50));
            got = tags();
        }
        if got.len() >= total {
            return;
        }
        let mut by_tag = std::collections::BTreeMap::new();
        for t in &got {
            *by_tag.entry(t.as_str()).or_insert(0) += 1;
        }
        panic!(
            "{} of {total} events after {WAIT:?}: {by_tag:?}; nagare's log:\n{}\ndockerd's log (end):\n{}",
            got.len(),
            nagare_log(),
            self.log().lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
    }
}
