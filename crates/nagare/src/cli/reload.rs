//! `nagare reload [--pid-file FILE]`: asks the running nagare whose pid file
//! this is to reload its config (sends it SIGHUP). The outcome is in that
//! nagare's log; `POST /api/reload` on its monitor answers with it instead.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where `nagare run --pid-file` writes by default in the packaged service.
pub const DEFAULT_PID_FILE: &str = "/run/nagare/nagare.pid";

#[derive(clap::Args)]
pub struct ReloadArgs {
    /// The pid file the running nagare was started with (`nagare run --pid-file`).
    #[arg(long, default_value = DEFAULT_PID_FILE)]
    pub pid_file: PathBuf,
}

pub fn main(a: ReloadArgs) -> ExitCode {
    match running_pid(&a.pid_file).and_then(hangup) {
        Ok(pid) => {
            eprintln!(
                "sent SIGHUP to {}: it reloads its config; its log says \"configuration reloaded\" or \"reload failed\" with the errors",
                nagare_core::holder::describe(pid)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(super::EXIT_RUNTIME)
        }
    }
}

/// The pid in `path`, if a running nagare holds the file (its lock).
fn running_pid(path: &Path) -> Result<u32, String> {
    let file = std::fs::File::open(path).map_err(|e| {
        format!(
            "cannot read the pid file {}: {e} (is nagare running with `--pid-file {}`?)",
            path.display(),
            path.display()
        )
    })?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the pid file {}: {e}", path.display()))?;
    let pid: u32 = text.trim().parse().map_err(|_| {
        format!(
            "the pid file {} does not hold a process id ({:?})",
            path.display(),
            text.trim()
        )
    })?;
    // `nagare run` holds an exclusive lock on its pid file while it runs: a
    // file nobody holds was left by a nagare that is gone.
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    if free {
        return Err(format!(
            "no nagare is running with the pid file {} (it names pid {pid}, which no longer holds it)",
            path.display()
        ));
    }
    Ok(pid)
}

fn hangup(pid: u32) -> Result<u32, String> {
    let id = libc::pid_t::try_from(pid).map_err(|_| format!("bad pid {pid}"))?;
    // SAFETY: kill only sends a signal.
    if unsafe { libc::kill(id, libc::SIGHUP) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "cannot signal {}: {e}",
            nagare_core::holder::describe(pid)
        ));
    }
    Ok(pid)
}
