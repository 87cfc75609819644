//! The kernel's side: fuser's `Filesystem` on the tree. Each request is
//! answered from the tree; the bytes written to a file go to the line task
//! as they come.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tokio::sync::mpsc;

use super::tree::{AttrChange, Tree};
use super::{Msg, MAX_WRITE};

/// How long the kernel may cache names and attributes.
const TTL: Duration = Duration::from_secs(1);

/// The filesystem fuser serves: the tree, and the way to the line task.
pub(super) struct DropFs {
    tree: Arc<Mutex<Tree>>,
    tx: mpsc::Sender<Msg>,
}

impl DropFs {
    pub(super) fn new(tree: Arc<Mutex<Tree>>, tx: mpsc::Sender<Msg>) -> DropFs {
        DropFs { tree, tx }
    }

    fn tree(&self) -> MutexGuard<'_, Tree> {
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

    /// mknod and mkdir: adds the file or folder and answers with its entry.
    fn add_entry(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        perm: u16,
        dir: bool,
        reply: ReplyEntry,
    ) {
        let mut t = self.tree();
        match t.add(owner(req), parent.0, name, perm, dir) {
            Ok(ino) => self.reply_entry(&t, ino, reply),
            Err(e) => reply.error(e),
        }
    }

    /// unlink and rmdir.
    fn remove_entry(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        match self.tree().remove(parent.0, name, dir) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// The user and group of the process that asks.
fn owner(req: &Request) -> (u32, u32) {
    (req.uid(), req.gid())
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
        match t.existing_child(parent.0, name) {
            Ok(ino) => self.reply_entry(&t, ino, reply),
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
        let change = AttrChange {
            mode,
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        match self.tree().set_attr(ino.0, &change) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
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
        self.add_entry(req, parent, name, perm(mode, umask), false, reply)
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
        self.add_entry(req, parent, name, perm(mode, umask), true, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove_entry(parent, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove_entry(parent, name, true, reply)
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
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self
            .tree()
            .rename(parent.0, name, newparent.0, newname, noreplace)
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.tree().open(ino.0) {
            // Direct I/O: each write() comes here as it is, and reads
            // (always empty) are not served from a stale page cache.
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
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
        let created = self
            .tree()
            .create(owner(req), parent.0, name, perm(mode, umask));
        match created {
            Ok((fh, a)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
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
        let written = self.tree().write(fh.0, ino.0, pid, data.len());
        let (tag, path) = match written {
            Ok(tp) => tp,
            Err(e) => return reply.error(e),
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
        let wrote = self.tree().wrote(fh.0, pid);
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
        let writers = self.tree().release(fh.0, ino.0);
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
        let listed = self.tree().list(ino.0, offset, |child, next, kind, name| {
            reply.add(INodeNo(child), next, kind, name)
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        let files = self.tree().nodes() as u64;
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
