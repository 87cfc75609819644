//! The filesystem's contents: an in-memory tree of folders and files that
//! keep no data, with the operations the kernel asks for. Knows nothing of
//! FUSE's replies (`fs` turns these results into them).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo};

use super::MAX_WRITE;
use crate::inputs::common::lines::tag_for;

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

impl Node {
    /// A new node, made at `now` by the user and group `owner`.
    fn new(
        parent: u64,
        name: &OsStr,
        kind: NodeKind,
        perm: u16,
        owner: (u32, u32),
        now: SystemTime,
    ) -> Node {
        Node {
            parent,
            name: name.to_owned(),
            kind,
            perm,
            uid: owner.0,
            gid: owner.1,
            atime: now,
            mtime: now,
            ctime: now,
            unlinked: false,
            open: 0,
        }
    }
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

pub(super) struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    /// The input's `tag`: a file's tag is made from it and the file's path.
    tag_pattern: String,
}

/// What a setattr changes (`None`: left as it is).
#[derive(Default)]
pub(super) struct AttrChange {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SystemTime>,
    pub mtime: Option<SystemTime>,
}

impl Tree {
    pub(super) fn new(allow_other: bool, tag_pattern: String) -> Tree {
        // With allow_other, other users must be able to create their files:
        // the root folder is then world-writable with the sticky bit, like /tmp.
        let root_perm = if allow_other { 0o1777 } else { 0o755 };
        // SAFETY: plain getters without arguments.
        let owner = unsafe { (libc::geteuid(), libc::getegid()) };
        let root = INodeNo::ROOT.0;
        let dir = NodeKind::Dir(BTreeMap::new());
        let mut nodes = HashMap::new();
        nodes.insert(
            root,
            Node::new(
                root,
                OsStr::new(""),
                dir,
                root_perm,
                owner,
                SystemTime::now(),
            ),
        );
        Tree {
            nodes,
            next_ino: root + 1,
            handles: HashMap::new(),
            next_fh: 1,
            tag_pattern,
        }
    }

    /// Files open now (for the shutdown's warning).
    pub(super) fn open_files(&self) -> usize {
        self.handles.len()
    }

    pub(super) fn attr(&self, ino: u64) -> Option<FileAttr> {
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

    fn is_dir(&self, ino: u64) -> bool {
        matches!(
            self.nodes.get(&ino).map(|n| &n.kind),
            Some(NodeKind::Dir(_))
        )
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<Option<u64>, Errno> {
        match self.nodes.get(&parent).map(|n| &n.kind) {
            Some(NodeKind::Dir(c)) => Ok(c.get(name).copied()),
            Some(NodeKind::File { .. }) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// Like `child`, for a name that must exist.
    pub(super) fn existing_child(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        self.child(parent, name)?.ok_or(Errno::ENOENT)
    }

    /// Changes the entries of the folder `dir` with `change`, which changes
    /// its modification time.
    fn change_dir(
        &mut self,
        dir: u64,
        now: SystemTime,
        change: impl FnOnce(&mut BTreeMap<OsString, u64>),
    ) {
        if let Some(p) = self.nodes.get_mut(&dir) {
            if let NodeKind::Dir(c) = &mut p.kind {
                change(c);
            }
            p.mtime = now;
            p.ctime = now;
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
    fn retag(&mut self, ino: u64) {
        let mut stack = vec![ino];
        while let Some(i) = stack.pop() {
            let rel = self.rel_path(i);
            match self.nodes.get_mut(&i).map(|n| &mut n.kind) {
                Some(NodeKind::Dir(c)) => stack.extend(c.values().copied()),
                Some(NodeKind::File { tag, path, .. }) => {
                    *tag = Arc::from(tag_for(&self.tag_pattern, &rel));
                    *path = Arc::from(rel.to_string_lossy().as_ref());
                }
                None => {}
            }
        }
    }

    /// Adds a file or folder named `name` in `parent`, owned by `owner`
    /// (user, group).
    pub(super) fn add(
        &mut self,
        owner: (u32, u32),
        parent: u64,
        name: &OsStr,
        perm: u16,
        dir: bool,
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
        let node = Node::new(parent, name, kind, perm, owner, now);
        self.nodes.insert(ino, node);
        self.change_dir(parent, now, |c| {
            c.insert(name.to_owned(), ino);
        });
        if !dir {
            self.retag(ino);
        }
        Ok(ino)
    }

    /// Opens the file `ino`; returns the new handle.
    pub(super) fn open(&mut self, ino: u64) -> Result<u64, Errno> {
        match self.nodes.get(&ino).map(|n| &n.kind) {
            Some(NodeKind::File { .. }) => Ok(self.new_handle(ino)),
            Some(NodeKind::Dir(_)) => Err(Errno::EISDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// Adds the file `name` in `parent` and opens it: its handle and attributes.
    pub(super) fn create(
        &mut self,
        owner: (u32, u32),
        parent: u64,
        name: &OsStr,
        perm: u16,
    ) -> Result<(u64, FileAttr), Errno> {
        let ino = self.add(owner, parent, name, perm, false)?;
        let fh = self.new_handle(ino);
        let attr = self.attr(ino).ok_or(Errno::EIO)?;
        Ok((fh, attr))
    }

    fn new_handle(&mut self, ino: u64) -> u64 {
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

    /// Closes the handle `fh` on `ino`; returns the pids that wrote through it.
    pub(super) fn release(&mut self, fh: u64, ino: u64) -> Vec<u32> {
        let h = self.handles.remove(&fh);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open = n.open.saturating_sub(1);
        }
        self.forget_if_gone(ino);
        h.map(|h| h.writers).unwrap_or_default()
    }

    /// Removes the name `name` from `parent`; the node goes when no handle is open on it.
    pub(super) fn remove(
        &mut self,
        parent: u64,
        name: &OsStr,
        want_dir: bool,
    ) -> Result<(), Errno> {
        let ino = self.existing_child(parent, name)?;
        match self.nodes.get(&ino).map(|n| &n.kind) {
            Some(NodeKind::Dir(c)) if want_dir && !c.is_empty() => return Err(Errno::ENOTEMPTY),
            Some(NodeKind::Dir(_)) if !want_dir => return Err(Errno::EISDIR),
            Some(NodeKind::File { .. }) if want_dir => return Err(Errno::ENOTDIR),
            None => return Err(Errno::ENOENT),
            _ => {}
        }
        let now = SystemTime::now();
        self.change_dir(parent, now, |c| {
            c.remove(name);
        });
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.unlinked = true;
            n.ctime = now;
        }
        self.forget_if_gone(ino);
        Ok(())
    }

    /// Moves `name` in `parent` to `newname` in `newparent`, replacing what
    /// was there (a file by a file, a folder by an empty folder) unless
    /// `noreplace`.
    pub(super) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
    ) -> Result<(), Errno> {
        if newname.len() > 255 {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.existing_child(parent, name)?;
        let is_dir = self.is_dir(ino);
        // A folder cannot move into itself.
        let mut up = newparent;
        loop {
            if up == ino {
                return Err(Errno::EINVAL);
            }
            if up == INodeNo::ROOT.0 {
                break;
            }
            match self.nodes.get(&up) {
                Some(n) => up = n.parent,
                None => return Err(Errno::ENOENT),
            }
        }
        match self.child(newparent, newname)? {
            Some(existing) if existing == ino => return Ok(()),
            Some(existing) => {
                if noreplace {
                    return Err(Errno::EEXIST);
                }
                let target_dir = self.is_dir(existing);
                match (is_dir, target_dir) {
                    (true, false) => return Err(Errno::ENOTDIR),
                    (false, true) => return Err(Errno::EISDIR),
                    _ => self.remove(newparent, newname, target_dir)?,
                }
            }
            None => {}
        }
        let now = SystemTime::now();
        if let Some(NodeKind::Dir(c)) = self.nodes.get_mut(&parent).map(|n| &mut n.kind) {
            c.remove(name);
        }
        self.change_dir(newparent, now, |c| {
            c.insert(newname.to_owned(), ino);
        });
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = newparent;
            n.name = newname.to_owned();
            n.ctime = now;
        }
        // Later writes carry the new path's tag.
        self.retag(ino);
        Ok(())
    }

    /// Applies a setattr; the node's attributes after it.
    pub(super) fn set_attr(&mut self, ino: u64, c: &AttrChange) -> Result<FileAttr, Errno> {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return Err(Errno::ENOENT);
        };
        let now = SystemTime::now();
        if let Some(m) = c.mode {
            n.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = c.uid {
            n.uid = u;
        }
        if let Some(g) = c.gid {
            n.gid = g;
        }
        if let Some(s) = c.size {
            // Truncation changes the reported size only: what was written is
            // already on its way as events (`>` redirection truncates).
            match &mut n.kind {
                NodeKind::File { size, .. } => *size = s,
                NodeKind::Dir(_) => return Err(Errno::EISDIR),
            }
            n.mtime = now;
        }
        if let Some(a) = c.atime {
            n.atime = a;
        }
        if let Some(m) = c.mtime {
            n.mtime = m;
        }
        n.ctime = now;
        self.attr(ino).ok_or(Errno::ENOENT)
    }

    /// `pid` writes `len` bytes through the handle `fh` on `ino`: the file's
    /// tag and path, for the line task.
    pub(super) fn write(
        &mut self,
        fh: u64,
        ino: u64,
        pid: u32,
        len: usize,
    ) -> Result<(Arc<str>, Arc<str>), Errno> {
        if let Some(h) = self.handles.get_mut(&fh) {
            if !h.writers.contains(&pid) {
                h.writers.push(pid);
            }
        }
        let Some(n) = self.nodes.get_mut(&ino) else {
            return Err(Errno::ENOENT);
        };
        n.mtime = SystemTime::now();
        match &mut n.kind {
            NodeKind::File { size, tag, path } => {
                *size += len as u64;
                Ok((tag.clone(), path.clone()))
            }
            NodeKind::Dir(_) => Err(Errno::EISDIR),
        }
    }

    /// Whether `pid` wrote through the handle `fh`.
    pub(super) fn wrote(&self, fh: u64, pid: u32) -> bool {
        self.handles
            .get(&fh)
            .is_some_and(|h| h.writers.contains(&pid))
    }

    /// Lists the folder `ino` from entry `offset` on ("." and ".." first) to
    /// `add`, until it returns true (full).
    pub(super) fn list(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(u64, u64, FileType, &OsStr) -> bool,
    ) -> Result<(), Errno> {
        let Some(n) = self.nodes.get(&ino) else {
            return Err(Errno::ENOENT);
        };
        let NodeKind::Dir(children) = &n.kind else {
            return Err(Errno::ENOTDIR);
        };
        let dots = [
            (ino, FileType::Directory, OsStr::new(".")),
            (n.parent, FileType::Directory, OsStr::new("..")),
        ];
        let entries = dots.into_iter().chain(children.iter().map(|(name, &c)| {
            let kind = if self.is_dir(c) {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            (c, kind, name.as_os_str())
        }));
        // An entry's offset is that of the next one: where a listing resumes.
        for (i, (child, kind, name)) in entries.enumerate().skip(offset as usize) {
            if add(child, i as u64 + 1, kind, name) {
                break;
            }
        }
        Ok(())
    }

    /// Files and folders, including removed files still open.
    pub(super) fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Drops a node that has no name left and no handle open on it.
    fn forget_if_gone(&mut self, ino: u64) {
        if self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.unlinked && n.open == 0)
        {
            self.nodes.remove(&ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: u64 = INodeNo::ROOT.0;
    const ME: (u32, u32) = (1000, 1000);

    fn tree() -> Tree {
        Tree::new(false, "fuse.*".into())
    }

    fn tag_path(t: &mut Tree, ino: u64) -> (String, String) {
        let (tag, path) = t.write(0, ino, 1, 0).unwrap();
        (tag.to_string(), path.to_string())
    }

    #[test]
    fn a_renamed_folder_retags_the_files_in_it() {
        let mut t = tree();
        let app = t.add(ME, ROOT, OsStr::new("app"), 0o755, true).unwrap();
        let log = t.add(ME, app, OsStr::new("x.log"), 0o644, false).unwrap();
        assert_eq!(
            tag_path(&mut t, log),
            ("fuse.app.x.log".into(), "app/x.log".into())
        );
        t.rename(ROOT, OsStr::new("app"), ROOT, OsStr::new("web"), false)
            .unwrap();
        assert_eq!(
            tag_path(&mut t, log),
            ("fuse.web.x.log".into(), "web/x.log".into())
        );
        assert_eq!(
            t.existing_child(ROOT, OsStr::new("app")),
            Err(Errno::ENOENT)
        );
        // Not into itself, and not over a file.
        let sub = t.add(ME, app, OsStr::new("sub"), 0o755, true).unwrap();
        assert_eq!(
            t.rename(ROOT, OsStr::new("web"), sub, OsStr::new("w"), false),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            t.rename(ROOT, OsStr::new("web"), app, OsStr::new("x.log"), false),
            Err(Errno::EINVAL)
        );
        t.add(ME, ROOT, OsStr::new("f"), 0o644, false).unwrap();
        assert_eq!(
            t.rename(ROOT, OsStr::new("web"), ROOT, OsStr::new("f"), false),
            Err(Errno::ENOTDIR)
        );
        assert_eq!(
            t.rename(ROOT, OsStr::new("f"), ROOT, OsStr::new("web"), true),
            Err(Errno::EEXIST)
        );
    }

    #[test]
    fn a_removed_file_lives_until_its_last_handle_is_released() {
        let mut t = tree();
        let (fh, attr) = t.create(ME, ROOT, OsStr::new("a.log"), 0o644).unwrap();
        let ino = attr.ino.0;
        assert_eq!(
            (attr.uid, attr.gid, attr.perm, attr.nlink),
            (1000, 1000, 0o644, 1)
        );
        t.write(fh, ino, 42, 10).unwrap();
        assert!(t.wrote(fh, 42) && !t.wrote(fh, 43));
        t.remove(ROOT, OsStr::new("a.log"), false).unwrap();
        let attr = t.attr(ino).expect("still open");
        assert_eq!((attr.size, attr.nlink), (10, 0));
        assert_eq!(t.open_files(), 1);
        assert_eq!(t.release(fh, ino), vec![42]);
        assert!(t.attr(ino).is_none());
        assert_eq!(t.open_files(), 0);
    }

    #[test]
    fn folders_list_with_resumable_offsets() {
        let mut t = tree();
        for name in ["b", "a", "c"] {
            t.add(ME, ROOT, OsStr::new(name), 0o644, name == "c")
                .unwrap();
        }
        let list = |t: &Tree, offset: u64, room: usize| {
            let mut got = Vec::new();
            t.list(ROOT, offset, |_, next, kind, name| {
                got.push((
                    next,
                    kind == FileType::Directory,
                    name.to_string_lossy().into_owned(),
                ));
                got.len() == room
            })
            .unwrap();
            got
        };
        let all = list(&t, 0, usize::MAX);
        let names: Vec<&str> = all.iter().map(|e| e.2.as_str()).collect();
        assert_eq!(names, [".", "..", "a", "b", "c"]);
        assert_eq!(all[4], (5, true, "c".to_string()));
        // Two entries fit; the listing goes on from the last one's offset.
        let first = list(&t, 0, 2);
        let rest = list(&t, first[1].0, usize::MAX);
        assert_eq!([first, rest].concat(), all);
        let file = t.existing_child(ROOT, OsStr::new("a")).unwrap();
        assert_eq!(t.list(file, 0, |_, _, _, _| false), Err(Errno::ENOTDIR));
        assert_eq!(t.remove(ROOT, OsStr::new("a"), true), Err(Errno::ENOTDIR));
        assert_eq!(t.remove(ROOT, OsStr::new("c"), false), Err(Errno::EISDIR));
    }
}
