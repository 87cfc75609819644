//! `fuse`: a directory mounted through FUSE (K2HFTFUSE's model). Whatever
//! applications write into files under the mountpoint becomes events, one per
//! line, without touching the disk; the tag comes from the file's path
//! relative to the mountpoint.
//!
//! The filesystem is an in-memory tree of folders and files that hold no data:
//! reads return nothing, and a file's size is the number of bytes written to
//! it since it was created or last truncated (so `ls -l` looks sane). Files
//! are opened with direct I/O, so every write() reaches the daemon as it is.
//!
//! Two threads share the work: fuser's session thread answers the kernel and
//! hands each write's bytes to a bounded channel; a tokio task splits them
//! into lines, encodes the entries and appends batches to the outputs. When
//! the outputs push back (a full buffer with `overflow = "block"`), the
//! channel fills and the writer's write() blocks: memory stays bounded and
//! nothing is dropped. Each writing process (the kernel's pid of the writer)
//! has its own partial-line buffer per file, so concurrent appenders never
//! interleave inside a line, as in K2HFTFUSE; a partial line goes out when
//! its writer closes the file or after `partial_line_timeout` without more
//! data from that writer. That timeout is separate from `flush_interval` (how
//! long complete lines wait in a batch) and long by default: a writer that
//! pauses mid-line (block-buffered stdio on a loaded machine) must not get its
//! line cut in two by a short batching delay.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, SessionACL, TimeOrNow, WriteFlags,
};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::tail::{append_batch, default_max_line, encode_line, tag_for, LongLines};
use crate::config::units::{Dur, Size};
use crate::parsers::{Parser, ParserConfig};
use crate::router::Router;
use crate::stats::PluginStats;

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FuseConfig {
    /// The folder to mount the FUSE filesystem on (created if missing). A
    /// stale mount left by a killed daemon is unmounted first.
    pub mountpoint: String,
    /// The events' tag; a `*` is replaced by the file's path relative to the
    /// mountpoint, `/` as `.` (`fuse.*` + `app/x.log` = `fuse.app.x.log`).
    #[serde(default = "default_tag")]
    pub tag: String,
    /// Longest line kept whole (default "1MiB").
    #[serde(default = "default_max_line")]
    pub max_line_size: Size,
    /// What happens to a longer line: "split" (default: pieces of max_line_size) or "skip".
    #[serde(default)]
    pub long_lines: LongLines,
    /// Add the file's path relative to the mountpoint to each record under this key.
    #[serde(default)]
    pub path_key: Option<String>,
    /// Mount with FUSE's `allow_other`: users other than the daemon's may use
    /// the mount (for a non-root daemon, /etc/fuse.conf needs `user_allow_other`).
    #[serde(default)]
    pub allow_other: bool,
    /// How long complete lines may wait in a batch before they go to the outputs (default "100ms").
    #[serde(default = "default_flush")]
    pub flush_interval: Dur,
    /// How long a writer's unfinished last line (no newline yet) waits for more
    /// data from that writer before it is an event on its own; closing the file
    /// ends it at once (default "5s").
    #[serde(default = "default_partial_timeout")]
    pub partial_line_timeout: Dur,
    /// `[input.parser]` (default "none": the line in `message`; "multiline" is not supported here).
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

fn default_tag() -> String {
    "fuse.*".into()
}
fn default_flush() -> Dur {
    Dur(Duration::from_millis(100))
}
fn default_partial_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}

/// Largest write the kernel is asked to send at once (it caps this at
/// /proc/sys/fs/fuse/max_pages_limit pages, 1 MiB by default).
const MAX_WRITE: u32 = 1 << 20;
/// Writes in flight between the FUSE thread and the line task: with
/// MAX_WRITE, at most 16 MiB of data waits here before writers block.
const CHANNEL: usize = 16;
/// A tag's batch is appended at once when it holds this many bytes or lines.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_LINES: u32 = 10_000;
/// How long the kernel may cache names and attributes.
const TTL: Duration = Duration::from_secs(1);
/// At shutdown, how long files still open on the (already detached) mount
/// may keep writing before their writers get errors.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// From the FUSE thread to the line task.
enum Msg {
    /// Bytes `pid` wrote to the file `ino` (tag and relative path as of now).
    Data {
        ino: u64,
        pid: u32,
        tag: Arc<str>,
        path: Arc<str>,
        data: Vec<u8>,
    },
    /// `pid` closed the file: its unterminated last line is complete.
    Close { ino: u64, pid: u32 },
}

pub async fn start(
    name: &str,
    cfg: FuseConfig,
    router: Arc<Router>,
    stats: Arc<PluginStats>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let parser = Parser::new(&cfg.parser.as_deref().cloned().unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("{name}: [input.parser]: {e}"))?;
    if parser.multiline().is_some() {
        anyhow::bail!("{name}: [input.parser] type \"multiline\" is not supported by the fuse input; use a tail or directory input for multi-line events");
    }
    let mp = PathBuf::from(&cfg.mountpoint);
    let task_name = name.to_string();
    let mp2 = mp.clone();
    tokio::task::spawn_blocking(move || prepare_mountpoint(&task_name, &mp2)).await??;
    // The path as the kernel's mount table will show it (for the unmount).
    let mp = std::fs::canonicalize(&mp).unwrap_or(mp);
    if !Path::new("/dev/fuse").exists() {
        anyhow::bail!(
            "{name}: cannot mount {}: /dev/fuse is absent; load the fuse kernel module (modprobe fuse), or run the container with --device /dev/fuse",
            mp.display()
        );
    }

    let (tx, rx) = mpsc::channel(CHANNEL);
    // With allow_other, other users must be able to create their files:
    // the root folder is then world-writable with the sticky bit, like /tmp.
    let root_perm = if cfg.allow_other { 0o1777 } else { 0o755 };
    let tree = Arc::new(Mutex::new(Tree::new(root_perm)));
    let fs = DropFs {
        tree: tree.clone(),
        tx,
        tag_pattern: cfg.tag.clone(),
    };
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
    options.acl = if cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let mp2 = mp.clone();
    let session = tokio::task::spawn_blocking(move || fuser::spawn_mount(fs, &mp2, &options))
        .await?
        .map_err(|e| mount_error(name, &mp, e))?;
    tracing::info!(input = %name, mountpoint = %mp.display(), "FUSE filesystem mounted");

    let worker = Lines {
        name: name.to_string(),
        router,
        stats,
        parser,
        max_line: (cfg.max_line_size.0 as usize).max(1),
        long_lines: cfg.long_lines,
        path_key: cfg.path_key.clone(),
        flush_interval: cfg.flush_interval.0.max(Duration::from_millis(1)),
        partial_timeout: cfg.partial_line_timeout.0.max(Duration::from_millis(1)),
        partials: HashMap::new(),
        batches: HashMap::new(),
    };
    let (finish_tx, finish_rx) = oneshot::channel();
    let lines = tokio::spawn(worker.run(rx, finish_rx));

    let name = name.to_string();
    let mut sd = shutdown;
    let unmount = tokio::spawn(async move {
        let _ = sd.wait_for(|s| *s).await;
        // Detach first (MNT_DETACH, like `umount -l`): new opens fail at
        // once, while files still open may finish their writes; the session
        // ends when the last one is closed. A plain thread, not
        // spawn_blocking: if a writer keeps a file open, the join never
        // returns, and the runtime must not wait for it at exit (the exit
        // then ends the connection).
        let (detached_tx, detached_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let mp2 = mp.clone();
        let _ = std::thread::Builder::new()
            .name("fuse-unmount".into())
            .spawn(move || {
                let _ = detached_tx.send(detach(&mp2));
                let _ = done_tx.send(session.join());
            });
        match detached_rx.await {
            Ok(Ok(())) => {
                tracing::info!(input = %name, mountpoint = %mp.display(), "FUSE filesystem unmounted")
            }
            Ok(Err(e)) => {
                tracing::error!(input = %name, mountpoint = %mp.display(), error = %e,
                    "cannot unmount the FUSE filesystem; the next start unmounts it")
            }
            Err(_) => {}
        }
        let finished = tokio::select! {
            _ = done_rx => true,
            _ = tokio::time::sleep(CLOSE_GRACE) => false,
        };
        if !finished {
            let open = tree.lock().map(|t| t.handles.len()).unwrap_or(0);
            tracing::warn!(input = %name, mountpoint = %mp.display(), open_files = open,
                "files are still open on the detached FUSE filesystem; what was written so far goes on, later writes fail");
            let _ = finish_tx.send(());
        }
        let _ = lines.await;
    });
    Ok(vec![unmount])
}

/// Unmounts a stale mount (its daemon was killed: "Transport endpoint is not
/// connected"), creates the folder if missing, and checks it is a folder.
fn prepare_mountpoint(name: &str, mp: &Path) -> anyhow::Result<()> {
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

/// Lazy unmount (MNT_DETACH) when root; else through fusermount3 -u -z.
fn detach(mp: &Path) -> std::io::Result<()> {
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

fn mount_error(name: &str, mp: &Path, e: std::io::Error) -> anyhow::Error {
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

// ---------------------------------------------------------------------------
// The filesystem: an in-memory tree of names; file data goes to the line task.

struct Node {
    parent: u64,
    name: OsString,
    kind: NodeKind,
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    /// A removed file stays until its last handle is released.
    unlinked: bool,
    open: u32,
}

enum NodeKind {
    Dir(BTreeMap<OsString, u64>),
    File {
        /// Bytes written since creation or the last truncation.
        size: u64,
        tag: Arc<str>,
        /// Relative to the mountpoint.
        path: Arc<str>,
    },
}

/// An open file: the pids that wrote through it, whose partial lines are
/// complete when it is released.
struct Handle {
    writers: Vec<u32>,
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
}

impl Tree {
    fn new(root_perm: u16) -> Tree {
        let now = SystemTime::now();
        let mut nodes = HashMap::new();
        nodes.insert(
            INodeNo::ROOT.0,
            Node {
                parent: INodeNo::ROOT.0,
                name: OsString::new(),
                kind: NodeKind::Dir(BTreeMap::new()),
                perm: root_perm,
                // SAFETY: plain getters without arguments.
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
                atime: now,
                mtime: now,
                ctime: now,
                unlinked: false,
                open: 0,
            },
        );
        Tree {
            nodes,
            next_ino: INodeNo::ROOT.0 + 1,
            handles: HashMap::new(),
            next_fh: 1,
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let n = self.nodes.get(&ino)?;
        let (kind, size, nlink) = match &n.kind {
            NodeKind::Dir(c) => (FileType::Directory, 0, 2 + c.len() as u32),
            NodeKind::File { size, .. } => (FileType::RegularFile, *size, u32::from(!n.unlinked)),
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: 0,
            atime: n.atime,
            mtime: n.mtime,
            ctime: n.ctime,
            crtime: n.ctime,
            kind,
            perm: n.perm,
            nlink,
            uid: n.uid,
            gid: n.gid,
            rdev: 0,
            blksize: MAX_WRITE,
            flags: 0,
        })
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<Option<u64>, Errno> {
        match self.nodes.get(&parent).map(|n| &n.kind) {
            Some(NodeKind::Dir(c)) => Ok(c.get(name).copied()),
            Some(NodeKind::File { .. }) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// The path of `ino` relative to the mountpoint.
    fn rel_path(&self, mut ino: u64) -> PathBuf {
        let mut parts = Vec::new();
        while ino != INodeNo::ROOT.0 {
            let Some(n) = self.nodes.get(&ino) else { break };
            parts.push(n.name.clone());
            ino = n.parent;
        }
        parts.iter().rev().collect()
    }

    /// Sets the tag and path of `ino` and, for a folder, of everything in it
    /// (after a create or a rename).
    fn retag(&mut self, ino: u64, pattern: &str) {
        let mut stack = vec![ino];
        while let Some(i) = stack.pop() {
            let rel = self.rel_path(i);
            match self.nodes.get_mut(&i).map(|n| &mut n.kind) {
                Some(NodeKind::Dir(c)) => stack.extend(c.values().copied()),
                Some(NodeKind::File { tag, path, .. }) => {
                    *tag = Arc::from(tag_for(pattern, &rel));
                    *path = Arc::from(rel.to_string_lossy().as_ref());
                }
                None => {}
            }
        }
    }

    /// Adds a file or folder named `name` in `parent`.
    fn add(
        &mut self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        perm: u16,
        dir: bool,
        pattern: &str,
    ) -> Result<u64, Errno> {
        if name.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        if self.child(parent, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = SystemTime::now();
        let kind = if dir {
            NodeKind::Dir(BTreeMap::new())
        } else {
            NodeKind::File {
                size: 0,
                tag: Arc::from(""),
                path: Arc::from(""),
            }
        };
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_owned(),
                kind,
                perm,
                uid: req.uid(),
                gid: req.gid(),
                atime: now,
                mtime: now,
                ctime: now,
                unlinked: false,
                open: 0,
            },
        );
        if let Some(p) = self.nodes.get_mut(&parent) {
            if let NodeKind::Dir(c) = &mut p.kind {
                c.insert(name.to_owned(), ino);
            }
            p.mtime = now;
            p.ctime = now;
        }
        if !dir {
            self.retag(ino, pattern);
        }
        Ok(ino)
    }

    fn open(&mut self, ino: u64) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(
            fh,
            Handle {
                writers: Vec::new(),
            },
        );
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open += 1;
        }
        fh
    }

    /// Removes the name `name` from `parent`; the node goes when no handle is open on it.
    fn remove(&mut self, parent: u64, name: &OsStr, want_dir: bool) -> Result<(), Errno> {
        let ino = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        match self.nodes.get(&ino).map(|n| &n.kind) {
            Some(NodeKind::Dir(c)) if want_dir && !c.is_empty() => return Err(Errno::ENOTEMPTY),
            Some(NodeKind::Dir(_)) if !want_dir => return Err(Errno::EISDIR),
            Some(NodeKind::File { .. }) if want_dir => return Err(Errno::ENOTDIR),
            None => return Err(Errno::ENOENT),
            _ => {}
        }
        let now = SystemTime::now();
        if let Some(p) = self.nodes.get_mut(&parent) {
            if let NodeKind::Dir(c) = &mut p.kind {
                c.remove(name);
            }
            p.mtime = now;
            p.ctime = now;
        }
        let gone = match self.nodes.get_mut(&ino) {
            Some(n) => {
                n.unlinked = true;
                n.ctime = now;
                n.open == 0
            }
            None => false,
        };
        if gone {
            self.nodes.remove(&ino);
        }
        Ok(())
    }
}

struct DropFs {
    tree: Arc<Mutex<Tree>>,
    tx: mpsc::Sender<Msg>,
    tag_pattern: String,
}

impl DropFs {
    fn tree(&self) -> std::sync::MutexGuard<'_, Tree> {
        // A panic while holding the lock cannot leave the tree half-changed
        // in a way that matters more than stopping the filesystem would.
        self.tree.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn reply_entry(&self, t: &Tree, ino: u64, reply: ReplyEntry) {
        match t.attr(ino) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }
}

/// The permission bits of a new file or folder.
fn perm(mode: u32, umask: u32) -> u16 {
    (mode & !umask & 0o7777) as u16
}

fn set_time(t: Option<TimeOrNow>) -> Option<SystemTime> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(s) => s,
        TimeOrNow::Now => SystemTime::now(),
    })
}

impl fuser::Filesystem for DropFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Big writes: fewer round trips through the kernel per MB.
        let _ = config
            .set_max_write(MAX_WRITE)
            .or_else(|max| config.set_max_write(max));
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = self.tree();
        match t.child(parent.0, name) {
            Ok(Some(ino)) => self.reply_entry(&t, ino, reply),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree().attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut t = self.tree();
        let Some(n) = t.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let now = SystemTime::now();
        if let Some(m) = mode {
            n.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            n.uid = u;
        }
        if let Some(g) = gid {
            n.gid = g;
        }
        if let Some(s) = size {
            // Truncation changes the reported size only: what was written is
            // already on its way as events (`>` redirection truncates).
            match &mut n.kind {
                NodeKind::File { size, .. } => *size = s,
                NodeKind::Dir(_) => return reply.error(Errno::EISDIR),
            }
            n.mtime = now;
        }
        if let Some(a) = set_time(atime) {
            n.atime = a;
        }
        if let Some(m) = set_time(mtime) {
            n.mtime = m;
        }
        n.ctime = now;
        match t.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Only regular files: devices, fifos and sockets make no sense here.
            return reply.error(Errno::EPERM);
        }
        let mut t = self.tree();
        match t.add(
            req,
            parent.0,
            name,
            perm(mode, umask),
            false,
            &self.tag_pattern,
        ) {
            Ok(ino) => self.reply_entry(&t, ino, reply),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut t = self.tree();
        match t.add(
            req,
            parent.0,
            name,
            perm(mode, umask),
            true,
            &self.tag_pattern,
        ) {
            Ok(ino) => self.reply_entry(&t, ino, reply),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return reply.error(Errno::EINVAL);
        }
        if newname.len() > 255 {
            return reply.error(Errno::ENAMETOOLONG);
        }
        let mut t = self.tree();
        let ino = match t.child(parent.0, name) {
            Ok(Some(i)) => i,
            Ok(None) => return reply.error(Errno::ENOENT),
            Err(e) => return reply.error(e),
        };
        let is_dir = matches!(t.nodes.get(&ino).map(|n| &n.kind), Some(NodeKind::Dir(_)));
        // A folder cannot move into itself.
        let mut up = newparent.0;
        loop {
            if up == ino {
                return reply.error(Errno::EINVAL);
            }
            if up == INodeNo::ROOT.0 {
                break;
            }
            match t.nodes.get(&up) {
                Some(n) => up = n.parent,
                None => return reply.error(Errno::ENOENT),
            }
        }
        match t.child(newparent.0, newname) {
            Ok(Some(existing)) if existing == ino => return reply.ok(),
            Ok(Some(existing)) => {
                if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                    return reply.error(Errno::EEXIST);
                }
                let target_dir = matches!(
                    t.nodes.get(&existing).map(|n| &n.kind),
                    Some(NodeKind::Dir(_))
                );
                let r = match (is_dir, target_dir) {
                    (true, false) => Err(Errno::ENOTDIR),
                    (false, true) => Err(Errno::EISDIR),
                    _ => t.remove(newparent.0, newname, target_dir),
                };
                if let Err(e) = r {
                    return reply.error(e);
                }
            }
            Ok(None) => {}
            Err(e) => return reply.error(e),
        }
        let now = SystemTime::now();
        if let Some(NodeKind::Dir(c)) = t.nodes.get_mut(&parent.0).map(|n| &mut n.kind) {
            c.remove(name);
        }
        if let Some(p) = t.nodes.get_mut(&newparent.0) {
            if let NodeKind::Dir(c) = &mut p.kind {
                c.insert(newname.to_owned(), ino);
            }
            p.mtime = now;
            p.ctime = now;
        }
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.parent = newparent.0;
            n.name = newname.to_owned();
            n.ctime = now;
        }
        // Later writes carry the new path's tag.
        t.retag(ino, &self.tag_pattern);
        reply.ok()
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut t = self.tree();
        match t.nodes.get(&ino.0).map(|n| &n.kind) {
            Some(NodeKind::File { .. }) => {
                let fh = t.open(ino.0);
                // Direct I/O: each write() comes here as it is, and reads
                // (always empty) are not served from a stale page cache.
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            Some(NodeKind::Dir(_)) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return reply.error(Errno::EPERM);
        }
        let mut t = self.tree();
        match t.add(
            req,
            parent.0,
            name,
            perm(mode, umask),
            false,
            &self.tag_pattern,
        ) {
            Ok(ino) => {
                let fh = t.open(ino);
                match t.attr(ino) {
                    Some(a) => reply.created(
                        &TTL,
                        &a,
                        Generation(0),
                        FileHandle(fh),
                        FopenFlags::FOPEN_DIRECT_IO,
                    ),
                    None => reply.error(Errno::EIO),
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Files keep no data: what was written is already events.
        reply.data(&[])
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let pid = req.pid();
        let (tag, path) = {
            let mut t = self.tree();
            if let Some(h) = t.handles.get_mut(&fh.0) {
                if !h.writers.contains(&pid) {
                    h.writers.push(pid);
                }
            }
            let Some(n) = t.nodes.get_mut(&ino.0) else {
                return reply.error(Errno::ENOENT);
            };
            n.mtime = SystemTime::now();
            match &mut n.kind {
                NodeKind::File { size, tag, path } => {
                    *size += data.len() as u64;
                    (tag.clone(), path.clone())
                }
                NodeKind::Dir(_) => return reply.error(Errno::EISDIR),
            }
        };
        // Blocks while the outputs push back: the writer waits, nothing is lost.
        let msg = Msg::Data {
            ino: ino.0,
            pid,
            tag,
            path,
            data: data.to_vec(),
        };
        match self.tx.blocking_send(msg) {
            Ok(()) => reply.written(data.len() as u32),
            // The daemon is stopping: the write did not become an event.
            Err(_) => reply.error(Errno::EIO),
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() by `pid`: its unterminated line is complete.
        let pid = req.pid();
        let wrote = self
            .tree()
            .handles
            .get(&fh.0)
            .is_some_and(|h| h.writers.contains(&pid));
        if wrote {
            let _ = self.tx.blocking_send(Msg::Close { ino: ino.0, pid });
        }
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let writers = {
            let mut t = self.tree();
            let h = t.handles.remove(&fh.0);
            let gone = match t.nodes.get_mut(&ino.0) {
                Some(n) => {
                    n.open = n.open.saturating_sub(1);
                    n.unlinked && n.open == 0
                }
                None => false,
            };
            if gone {
                t.nodes.remove(&ino.0);
            }
            h.map(|h| h.writers).unwrap_or_default()
        };
        // The last close of this open file: every writer's last line is complete.
        for pid in writers {
            let _ = self.tx.blocking_send(Msg::Close { ino: ino.0, pid });
        }
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let t = self.tree();
        let Some(n) = t.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let NodeKind::Dir(children) = &n.kind else {
            return reply.error(Errno::ENOTDIR);
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (n.parent, FileType::Directory, OsStr::new("..")),
        ];
        let entries = dots.into_iter().chain(children.iter().map(|(name, &c)| {
            let kind = match t.nodes.get(&c).map(|n| &n.kind) {
                Some(NodeKind::Dir(_)) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            (c, kind, name.as_os_str())
        }));
        for (i, (child, kind, name)) in entries.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok()
    }

    // No extended attributes, ioctls or links: answered without fuser's
    // "not implemented" log lines (ls and Python ask for them routinely).
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::NO_XATTR)
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOTSUP)
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::NO_XATTR)
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Not a terminal (isatty), nor anything else.
        reply.error(Errno::ENOTTY)
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM)
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EPERM)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Nothing is stored: report plenty of free room so that tools which
        // check free space before writing go ahead.
        let files = self.tree().nodes.len() as u64;
        let blocks = 1u64 << 32;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            files + (1 << 20),
            1 << 20,
            4096,
            255,
            4096,
        )
    }
}

// ---------------------------------------------------------------------------
// The line task: bytes → lines → PackedForward batches → outputs.

/// The unterminated line of one writer in one file.
struct Partial {
    buf: Vec<u8>,
    /// Inside a line longer than max_line_size that is being skipped.
    skipping: bool,
    /// The current line was already counted as too long.
    long: bool,
    /// The writer's last data: partial_line_timeout counts from here.
    at: Instant,
    tag: Arc<str>,
    path: Arc<str>,
}

/// Entries waiting to be appended, for one tag.
struct Batch {
    out: Vec<u8>,
    count: u32,
    since: Instant,
}

struct Lines {
    name: String,
    router: Arc<Router>,
    stats: Arc<PluginStats>,
    parser: Parser,
    max_line: usize,
    long_lines: LongLines,
    path_key: Option<String>,
    flush_interval: Duration,
    /// A partial line quiet this long is an event on its own.
    partial_timeout: Duration,
    partials: HashMap<(u64, u32), Partial>,
    batches: HashMap<Arc<str>, Batch>,
}

impl Lines {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>, finish: oneshot::Receiver<()>) {
        // Often enough for both deadlines to be met within half their length.
        let period = self.flush_interval.min(self.partial_timeout) / 2;
        let mut tick = tokio::time::interval(period.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut finish = finish;
        let mut finishing = false;
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => self.handle(m).await,
                    // The filesystem is gone (unmounted): everything it sent is here.
                    None => break,
                },
                _ = tick.tick() => self.flush_due(false).await,
                r = &mut finish, if !finishing => {
                    finishing = true;
                    if r.is_ok() {
                        // Files stay open on a detached mount: take what was
                        // written, and make later writes fail.
                        rx.close();
                    }
                }
            }
        }
        self.flush_due(true).await;
    }

    async fn handle(&mut self, m: Msg) {
        match m {
            Msg::Data {
                ino,
                pid,
                tag,
                path,
                data,
            } => {
                self.data(ino, pid, tag.clone(), path, &data);
                let full = self
                    .batches
                    .get(&tag)
                    .is_some_and(|b| b.out.len() >= BATCH_BYTES || b.count >= BATCH_LINES);
                if full {
                    if let Some(b) = self.batches.remove(&tag) {
                        self.append(&tag, b).await;
                    }
                }
            }
            Msg::Close { ino, pid } => {
                if let Some(p) = self.partials.remove(&(ino, pid)) {
                    self.finish_partial(p);
                }
            }
        }
    }

    /// Turns the complete lines of `data` into entries of the tag's batch;
    /// keeps the unterminated rest in the writer's partial line.
    fn data(&mut self, ino: u64, pid: u32, tag: Arc<str>, path: Arc<str>, data: &[u8]) {
        let now = EventTime::now();
        let mut p = self
            .partials
            .remove(&(ino, pid))
            .unwrap_or_else(|| Partial {
                buf: Vec::new(),
                skipping: false,
                long: false,
                at: Instant::now(),
                tag: tag.clone(),
                path: path.clone(),
            });
        p.at = Instant::now();
        p.tag = tag;
        p.path = path;
        let mut batch = self.batches.remove(&p.tag).unwrap_or_else(|| Batch {
            out: Vec::with_capacity(data.len() + data.len() / 4 + 64),
            count: 0,
            since: Instant::now(),
        });
        let mut rest = data;
        // The writer's pending line first.
        if !p.buf.is_empty() || p.skipping {
            match memchr::memchr(b'\n', rest) {
                Some(nl) => {
                    if !p.skipping {
                        p.buf.extend_from_slice(&rest[..nl]);
                        let line = std::mem::take(&mut p.buf);
                        self.line(&mut batch, now, &line, &mut p);
                        p.buf = line;
                        p.buf.clear();
                    }
                    p.skipping = false;
                    p.long = false;
                    rest = &rest[nl + 1..];
                }
                None => {
                    if !p.skipping {
                        p.buf.extend_from_slice(rest);
                    }
                    rest = &[];
                }
            }
        }
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', rest) {
            self.line(&mut batch, now, &rest[start..nl], &mut p);
            p.long = false;
            start = nl + 1;
        }
        p.buf.extend_from_slice(&rest[start..]);
        self.bound_partial(&mut batch, now, &mut p);
        if batch.count > 0 {
            self.batches.insert(p.tag.clone(), batch);
        }
        if !p.buf.is_empty() || p.skipping {
            self.partials.insert((ino, pid), p);
        }
    }

    /// A partial line longer than max_line_size is split (or dropped) now,
    /// so memory stays bounded by writers × max_line_size.
    fn bound_partial(&self, batch: &mut Batch, now: EventTime, p: &mut Partial) {
        if p.buf.len() <= self.max_line {
            return;
        }
        self.count_long(p);
        match self.long_lines {
            LongLines::Split => {
                // Whole pieces go; the rest (1..=max_line bytes) waits for
                // the line's end, so no empty piece is made.
                let cut = (p.buf.len() - 1) / self.max_line * self.max_line;
                for piece in p.buf[..cut].chunks(self.max_line) {
                    self.entry(batch, now, piece, p);
                }
                p.buf.drain(..cut);
            }
            LongLines::Skip => {
                p.buf.clear();
                p.skipping = true;
            }
        }
    }

    fn count_long(&self, p: &mut Partial) {
        if p.long {
            return;
        }
        p.long = true;
        PluginStats::add(&self.stats.errors, 1);
        let what = match self.long_lines {
            LongLines::Split => "split into pieces",
            LongLines::Skip => "skipped",
        };
        tracing::warn!(input = %self.name, path = %p.path, limit = self.max_line,
            "line longer than max_line_size: {what}");
    }

    /// One complete line (without its newline).
    fn line(&self, batch: &mut Batch, now: EventTime, line: &[u8], p: &mut Partial) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() <= self.max_line {
            return self.entry(batch, now, line, p);
        }
        self.count_long(p);
        if self.long_lines == LongLines::Split {
            for piece in line.chunks(self.max_line) {
                self.entry(batch, now, piece, p);
            }
        }
    }

    fn entry(&self, batch: &mut Batch, now: EventTime, line: &[u8], p: &Partial) {
        let path_key = self.path_key.as_deref().map(|k| (k, p.path.as_ref()));
        if !encode_line(&mut batch.out, now, line, &self.parser, path_key) {
            PluginStats::add(&self.stats.errors, 1);
        }
        batch.count += 1;
    }

    /// The writer is done with its line (closed the file, or went quiet).
    fn finish_partial(&mut self, mut p: Partial) {
        if p.skipping || p.buf.is_empty() {
            return;
        }
        let mut batch = self.batches.remove(&p.tag).unwrap_or_else(|| Batch {
            out: Vec::new(),
            count: 0,
            since: Instant::now(),
        });
        let line = std::mem::take(&mut p.buf);
        self.line(&mut batch, EventTime::now(), &line, &mut p);
        if batch.count > 0 {
            self.batches.insert(p.tag.clone(), batch);
        }
    }

    /// Emits partial lines quiet for partial_line_timeout and appends batches
    /// that waited flush_interval (everything when `all`).
    async fn flush_due(&mut self, all: bool) {
        let quiet_for = self.partial_timeout;
        let quiet: Vec<(u64, u32)> = self
            .partials
            .iter()
            .filter(|(_, p)| all || p.at.elapsed() >= quiet_for)
            .map(|(k, _)| *k)
            .collect();
        for k in quiet {
            if let Some(p) = self.partials.remove(&k) {
                self.finish_partial(p);
            }
        }
        let wait = self.flush_interval;
        let due: Vec<Arc<str>> = self
            .batches
            .iter()
            .filter(|(_, b)| all || b.since.elapsed() >= wait)
            .map(|(t, _)| t.clone())
            .collect();
        for tag in due {
            if let Some(b) = self.batches.remove(&tag) {
                self.append(&tag, b).await;
            }
        }
    }

    async fn append(&self, tag: &str, mut b: Batch) {
        let count = b.count;
        // Buffers count a batch's length, not its capacity: give the spare
        // room of a grown Vec back so memory stays what is accounted.
        if b.out.capacity() - b.out.len() > b.out.len() / 4 {
            b.out.shrink_to_fit();
        }
        if !append_batch(
            &self.name,
            &self.router,
            &self.stats,
            tag,
            Bytes::from(b.out),
            count,
        )
        .await
        {
            PluginStats::add(&self.stats.errors, count as u64);
            tracing::error!(input = %self.name, tag, events = count, "the outputs are closed (shutting down): these lines are lost");
        }
    }
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
