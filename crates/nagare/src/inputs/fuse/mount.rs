//! Mounting: the mountpoint made ready (a stale mount from a killed daemon
//! removed), the mount options, and the lazy unmount.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fuser::{MountOption, SessionACL};

/// Unmounts a stale mount (its daemon was killed: "Transport endpoint is not
/// connected"), creates the folder if missing, and checks it is a folder.
pub(super) fn prepare_mountpoint(name: &str, mp: &Path) -> anyhow::Result<()> {
    if let Err(e) = std::fs::metadata(mp) {
        let code = e.raw_os_error();
        if code == Some(libc::ENOTCONN) || code == Some(libc::ECONNABORTED) {
            tracing::warn!(input = %name, mountpoint = %mp.display(), error = %e,
                "stale FUSE mount left by a previous run; unmounting it");
            detach(mp).map_err(|e| {
                anyhow::anyhow!("{name}: the stale FUSE mount at {} cannot be unmounted: {e}; run `fusermount3 -u -z {}` (or `umount -l`) as root", mp.display(), mp.display())
            })?;
        }
    }
    if std::fs::metadata(mp).is_ok_and(|m| !m.is_dir()) {
        anyhow::bail!(
            "{name}: mountpoint {} is not a folder; give `mountpoint` a folder (it is created if missing)",
            mp.display()
        );
    }
    std::fs::create_dir_all(mp).map_err(|e| {
        anyhow::anyhow!("{name}: cannot create the mountpoint {}: {e}", mp.display())
    })?;
    if let Some(fstype) = mounted_fs(mp) {
        anyhow::bail!(
            "{name}: {} is already a mountpoint ({fstype}); another nagare may be running on it: stop it, or unmount it (fusermount3 -u {}), or choose another mountpoint",
            mp.display(),
            mp.display()
        );
    }
    Ok(())
}

/// How the filesystem is mounted; with `allow_other`, for every user.
pub(super) fn options(allow_other: bool) -> fuser::Config {
    let mut options = fuser::Config::default();
    options.mount_options = vec![
        MountOption::FSName("nagare".into()),
        MountOption::Subtype("nagare".into()),
        // The kernel checks modes and owners, as on a disk filesystem.
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
    ];
    options.acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    options
}

/// Lazy unmount (MNT_DETACH) when root; else through fusermount3 -u -z.
pub(super) fn detach(mp: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(mp.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid NUL-terminated path; umount2 reads it only.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let direct = std::io::Error::last_os_error();
    match std::process::Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(mp)
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(std::io::Error::other(format!(
            "umount2: {direct}; fusermount3: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))),
        Err(e) => Err(std::io::Error::other(format!(
            "umount2: {direct}; fusermount3: {e}"
        ))),
    }
}

/// The filesystem type mounted exactly at `mp`, if any (from /proc/self/mounts).
fn mounted_fs(mp: &Path) -> Option<String> {
    let mp = std::fs::canonicalize(mp).ok()?;
    let text = std::fs::read_to_string("/proc/self/mounts").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(' ');
        let _src = f.next()?;
        let target = unescape_mount_field(f.next()?);
        let fstype = f.next()?;
        (Path::new(&target) == mp).then(|| fstype.to_string())
    })
}

/// /proc/mounts writes space, tab, newline and backslash as \ooo.
fn unescape_mount_field(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A failed mount, with a hint at what it most likely lacks.
pub(super) fn mount_error(name: &str, mp: &Path, e: std::io::Error) -> anyhow::Error {
    let hint = match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "mounting needs root (with CAP_SYS_ADMIN in a container), or for other users the setuid helper fusermount3 (Debian package fuse3)"
        }
        std::io::ErrorKind::NotFound => {
            "a non-root daemon mounts through fusermount3: install it (Debian package fuse3), or run as root"
        }
        _ => "mounting needs /dev/fuse and root (or fusermount3, Debian package fuse3, for other users)",
    };
    anyhow::anyhow!("{name}: cannot mount FUSE at {}: {e}; {hint}", mp.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_fields_are_unescaped() {
        assert_eq!(unescape_mount_field("/tmp/a\\040b"), "/tmp/a b");
        assert_eq!(unescape_mount_field("/plain"), "/plain");
        assert_eq!(unescape_mount_field("/end\\"), "/end\\");
    }
}
