//! Checks across plugins, made after every plugin was built: two listeners
//! on one address (caught before anything binds, with both config lines),
//! and directories the config writes to that cannot
//! be created or written. Nothing here binds a socket or writes a file.

use std::collections::HashMap;
use std::ffi::CString;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nagare_core::plugin::Listen;

use super::loader::Place;

/// An error found: (byte offset for the line, key, message).
pub type Found = (usize, String, String);

/// Two listeners on one address (or one on a wildcard address and one on a
/// specific address of the same port and protocol).
pub fn listeners(listens: &[(Place, Listen)], found: &mut Vec<Found>) {
    let mut seen: HashMap<(u8, u16), Vec<(SocketAddr, &Place)>> = HashMap::new();
    let mut paths: HashMap<&Path, &Place> = HashMap::new();
    for (place, l) in listens {
        let (proto, addr) = match l {
            Listen::Tcp(a) => (0u8, *a),
            Listen::Udp(a) => (1u8, *a),
            Listen::Unix(p) => {
                if let Some(first) = paths.insert(p.as_path(), place) {
                    found.push(clash(place, first, &p.display().to_string()));
                }
                continue;
            }
        };
        if addr.port() == 0 {
            continue;
        }
        let same_port = seen.entry((proto, addr.port())).or_default();
        if let Some((_, first)) = same_port.iter().find(|(a, _)| overlaps(*a, addr)) {
            found.push(clash(place, first, &addr.to_string()));
        }
        same_port.push((addr, place));
    }
}

fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified()
}

fn clash(place: &Place, first: &Place, what: &str) -> Found {
    (
        place.at,
        place.key.clone(),
        format!(
            "{} listens on {what}, which {} ({}) already listens on; give each listener its own address",
            place.plugin, first.plugin, first.key
        ),
    )
}

/// Every directory the config writes to must exist or be creatable, and be
/// writable (by this user, now); two file buffers may not share one.
pub fn writable(writes: &[(Place, PathBuf)], found: &mut Vec<Found>) {
    let mut buffers: HashMap<&Path, &Place> = HashMap::new();
    for (place, dir) in writes {
        if place.key.ends_with("buffer.path") {
            if let Some(first) = buffers.insert(dir.as_path(), place) {
                found.push((
                    place.at,
                    place.key.clone(),
                    format!(
                        "{} and {} use the same file buffer directory {}; each output needs its own",
                        first.plugin,
                        place.plugin,
                        dir.display()
                    ),
                ));
                continue;
            }
        }
        if let Err(why) = can_write_in(dir) {
            found.push((place.at, place.key.clone(), why));
        }
    }
}

/// Ok when `dir` is a writable directory, or the closest existing folder
/// above it is one (so it can be created).
pub fn can_write_in(dir: &Path) -> Result<(), String> {
    let mut p = dir;
    loop {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(if p == dir {
                    format!("{} is not a directory", dir.display())
                } else {
                    format!(
                        "cannot create {}: {} is a file, not a directory",
                        dir.display(),
                        p.display()
                    )
                })
            }
            Err(_) => match p.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => p = parent,
                _ => {
                    p = Path::new(".");
                    break;
                }
            },
        }
    }
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| "path holds a NUL byte")?;
    // SAFETY: access(2) reads a NUL-terminated path and changes nothing.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if p == dir {
            format!("cannot write in {}: {e}", dir.display())
        } else {
            format!(
                "cannot create {}: cannot write in {}: {e}",
                dir.display(),
                p.display()
            )
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_dirs() {
        let d = tempfile::tempdir().unwrap();
        assert!(can_write_in(&d.path().join("a/b/c")).is_ok());
        let f = d.path().join("file");
        std::fs::write(&f, "x").unwrap();
        let e = can_write_in(&f.join("sub")).unwrap_err();
        assert!(e.contains("is a file"), "{e}");
        assert!(can_write_in(&f).unwrap_err().contains("not a directory"));
    }
}
