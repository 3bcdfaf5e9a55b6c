//! Writing into output folders that other jobs and other users may share.
//!
//! Rules kept by every file this tool writes into `--out`:
//!
//! - A file is first written to a fresh temporary name in the destination
//!   folder, created with `O_CREAT | O_EXCL` and a random suffix (the
//!   `tempfile` crate), so a name planted in advance (a symlink to a victim,
//!   a FIFO, another run's half-written file) is never opened, let alone
//!   truncated. The finished file is fsynced and renamed over the
//!   destination; `rename(2)` replaces a planted symlink itself and never
//!   writes through it. A reader sees the old file or the whole new one.
//! - A report set (`results.json`, `junit.xml`, `summary.md`) is written by
//!   [`write_set`]: every member is written in full to its temporary file
//!   before any of them replaces its destination, under an exclusive
//!   `flock` on [`LOCK_FILE`] in the folder. A write that fails (a full
//!   disk, a file size limit) leaves the previous set untouched; two runs
//!   writing the same folder take turns, and the folder ends with one run's
//!   whole set. The switch itself is three renames in a row, `results.json`
//!   last; a reader that must see the three files of one run takes the
//!   lock shared ([`DirLock::shared`]) while it reads.
//! - Temporary files left by a writer that was killed (`kill -9`) are
//!   removed by the next [`write_set`] into the folder, under the lock.
//! - Files are created with mode `0666` less the umask, as any tool's
//!   files are: a CI folder shared by a group stays readable to it.
//! - The folder itself is checked by [`prepare_dir`] before a run and again
//!   before its reports are written: a symlink on its path that another
//!   user owns (planted where a run was told to write) is refused, and so is
//!   a folder another user owns or every user can write (they could replace
//!   the reports after they are written). You and root are trusted.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The lock file a report set is written under, in the report folder.
pub const LOCK_FILE: &str = ".ipc-conformance.lock";

/// How long [`DirLock`] waits for a lock another process holds.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The suffix of every temporary file (the prefix is `.NAME.`).
const TMP_SUFFIX: &str = ".ipc-tmp";

/// The mode every file is created with; the umask takes its bits away, as
/// for any file a tool writes (`O_EXCL` keeps the temporary name safe, not
/// the mode).
const FILE_MODE: u32 = 0o666;

/// An error with the path it concerns.
#[derive(Debug)]
pub struct PathError {
    pub path: PathBuf,
    pub source: io::Error,
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> PathError + '_ {
    move |source| PathError {
        path: path.to_path_buf(),
        source,
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn tmp_prefix(name: &std::ffi::OsStr) -> OsString {
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    prefix
}

/// A file written in full under a temporary name beside its destination,
/// not yet in place. Dropping it removes the temporary file.
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    dest: PathBuf,
}

/// What writes a file's contents into it (through a buffer), so that a
/// large report is written as it is rendered rather than first held whole.
pub type Contents<'a> = &'a dyn Fn(&mut dyn Write) -> io::Result<()>;

/// Write `bytes` to a fresh `O_EXCL` temporary file beside `dest` and fsync it.
pub fn stage(dest: &Path, bytes: &[u8]) -> Result<Staged, PathError> {
    stage_with(dest, &|w| w.write_all(bytes))
}

/// [`stage`] with the contents written by `contents`.
pub fn stage_with(dest: &Path, contents: Contents<'_>) -> Result<Staged, PathError> {
    let name = dest.file_name().ok_or_else(|| PathError {
        path: dest.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
    })?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&tmp_prefix(name))
        .suffix(TMP_SUFFIX)
        .permissions(fs::Permissions::from_mode(FILE_MODE))
        .tempfile_in(parent_of(dest))
        .map_err(at(dest))?;
    let mut out = io::BufWriter::with_capacity(1 << 16, tmp.as_file_mut());
    contents(&mut out).map_err(at(dest))?;
    out.flush().map_err(at(dest))?;
    drop(out);
    tmp.as_file().sync_all().map_err(at(dest))?;
    Ok(Staged {
        tmp,
        dest: dest.to_path_buf(),
    })
}

impl Staged {
    /// Rename the staged file over its destination (a symlink there is
    /// replaced, not followed).
    pub fn commit(self) -> Result<(), PathError> {
        let dest = self.dest;
        self.tmp
            .persist(&dest)
            .map_err(|e| PathError {
                path: dest.clone(),
                source: e.error,
            })
            .map(drop)
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Write `bytes` to `path` atomically, never through a planted name.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PathError> {
    stage(path, bytes)?.commit()?;
    sync_dir(parent_of(path));
    Ok(())
}

/// The mode of a folder [`prepare_dir`] creates, less the umask: never
/// writable by every user, which [`prepare_dir`] would then refuse.
const DIR_MODE: u32 = 0o775;

fn refused(path: &Path, why: String) -> PathError {
    PathError {
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::PermissionDenied, why),
    }
}

/// Make `dir` (and its parents) a folder this process may write reports
/// into, refusing what another user could have planted or could tamper
/// with (module documentation). Call it before a run and before writing.
pub fn prepare_dir(dir: &Path) -> Result<(), PathError> {
    prepare_dir_as(dir, nix::unistd::geteuid().as_raw())
}

/// [`prepare_dir`] for the user `uid` (tests pass another user's id).
fn prepare_dir_as(dir: &Path, uid: u32) -> Result<(), PathError> {
    let trusted = |owner: u32| owner == uid || owner == 0;
    // Every existing prefix of the path as given: a symlink among them that
    // someone else owns is refused before anything is created through it.
    let mut prefix = PathBuf::new();
    for part in dir.components() {
        prefix.push(part);
        match fs::symlink_metadata(&prefix) {
            Ok(m) if m.file_type().is_symlink() && !trusted(m.uid()) => {
                return Err(refused(
                    &prefix,
                    format!(
                        "a symbolic link owned by another user (uid {}), who may have planted \
                         it to redirect the reports: give the folder itself, or one of your own",
                        m.uid()
                    ),
                ));
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(at(dir))?;
    let m = fs::metadata(dir).map_err(at(dir))?;
    if !trusted(m.uid()) {
        return Err(refused(
            dir,
            format!(
                "the folder is owned by another user (uid {}), who could replace the \
                 reports: choose a folder of your own",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o002 != 0 {
        return Err(refused(
            dir,
            format!(
                "every user can write the folder (mode {:o}), and could replace the \
                 reports: choose another folder, or chmod o-w it",
                m.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// A `flock` on [`LOCK_FILE`] in a folder, released on drop.
pub struct DirLock {
    _lock: nix::fcntl::Flock<File>,
}

impl DirLock {
    /// Take the folder's lock exclusively (writers), waiting for others.
    pub fn exclusive(dir: &Path) -> Result<DirLock, PathError> {
        Self::take(dir, nix::fcntl::FlockArg::LockExclusive)
    }

    /// Take the folder's lock shared (readers of a whole set).
    pub fn shared(dir: &Path) -> Result<DirLock, PathError> {
        Self::take(dir, nix::fcntl::FlockArg::LockShared)
    }

    fn take(dir: &Path, how: nix::fcntl::FlockArg) -> Result<DirLock, PathError> {
        let path = dir.join(LOCK_FILE);
        // O_NOFOLLOW: a symlink planted at the lock's name is refused;
        // O_NONBLOCK: a FIFO planted there does not hang the open.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(FILE_MODE)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(&path)
            .or_else(|e| {
                // A lock file another user created may be read-only to us;
                // a shared or exclusive flock needs only a descriptor.
                if e.kind() == io::ErrorKind::PermissionDenied {
                    OpenOptions::new()
                        .read(true)
                        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                        .open(&path)
                } else {
                    Err(e)
                }
            })
            .map_err(at(&path))?;
        let meta = file.metadata().map_err(at(&path))?;
        if !meta.is_file() {
            return Err(PathError {
                path,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the lock is not a regular file",
                ),
            });
        }
        // A writer holds the lock for milliseconds; a lock held much longer
        // (another user's process in a shared folder) is an error, not a
        // run that waits forever.
        let nonblocking = match how {
            nix::fcntl::FlockArg::LockShared => nix::fcntl::FlockArg::LockSharedNonblock,
            _ => nix::fcntl::FlockArg::LockExclusiveNonblock,
        };
        let started = std::time::Instant::now();
        let mut file = file;
        loop {
            match nix::fcntl::Flock::lock(file, nonblocking) {
                Ok(lock) => return Ok(DirLock { _lock: lock }),
                Err((f, nix::errno::Errno::EWOULDBLOCK)) if started.elapsed() < LOCK_WAIT => {
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err((_, errno)) => {
                    let source = if errno == nix::errno::Errno::EWOULDBLOCK {
                        io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!(
                                "another process has held the lock for more than {} s",
                                LOCK_WAIT.as_secs()
                            ),
                        )
                    } else {
                        io::Error::from(errno)
                    };
                    return Err(PathError { path, source });
                }
            }
        }
    }
}

/// Remove temporary files of `names` that a killed writer left in `dir`.
/// Call with the folder's exclusive lock held.
fn remove_stale_temporaries(dir: &Path, names: &[&str]) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefixes: Vec<String> = names
        .iter()
        .map(|n| tmp_prefix(n.as_ref()).to_string_lossy().into_owned())
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(TMP_SUFFIX) && prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            // unlink removes a symlink itself, never its target.
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Write a set of files into `dir` as described in the module
/// documentation: all staged first, then switched in the given order, under
/// the folder's exclusive lock. Put the file readers treat as the record
/// (`results.json`) last.
pub fn write_set(dir: &Path, files: &[(&str, &[u8])]) -> Result<Vec<PathBuf>, PathError> {
    let writers: Vec<_> = files
        .iter()
        .map(|&(name, bytes)| (name, move |w: &mut dyn Write| w.write_all(bytes)))
        .collect();
    let set: Vec<(&str, Contents<'_>)> = writers
        .iter()
        .map(|(name, w)| (*name, w as Contents<'_>))
        .collect();
    write_set_with(dir, &set)
}

/// [`write_set`] with each file's contents written by a function. The
/// folder is checked again ([`prepare_dir`]) before anything is written.
pub fn write_set_with(
    dir: &Path,
    files: &[(&str, Contents<'_>)],
) -> Result<Vec<PathBuf>, PathError> {
    prepare_dir(dir)?;
    let _lock = DirLock::exclusive(dir)?;
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    remove_stale_temporaries(dir, &names);
    let staged = files
        .iter()
        .map(|(name, contents)| stage_with(&dir.join(name), *contents))
        .collect::<Result<Vec<_>, _>>()?;
    // A destination that cannot be replaced (a folder in its place) is
    // found before anything is switched.
    for s in &staged {
        if fs::symlink_metadata(&s.dest).is_ok_and(|m| m.is_dir()) {
            return Err(PathError {
                path: s.dest.clone(),
                source: io::Error::new(io::ErrorKind::IsADirectory, "a folder is in the way"),
            });
        }
    }
    let mut written = Vec::new();
    for s in staged {
        written.push(s.dest.clone());
        s.commit()?;
    }
    sync_dir(dir);
    Ok(written)
}

/// Open `path` for appending, refusing a symlink at its name (O_NOFOLLOW)
/// and anything but a regular file.
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}

/// Read a regular file of at most `limit` bytes. A FIFO, a device (a
/// symlink to `/dev/zero`) or a folder is refused without blocking, and a
/// longer file is an error naming the limit (`what` says which input).
pub fn read_bounded(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({what} must be one)"),
        ));
    }
    let too_long = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("longer than the limit of {limit} bytes for {what}"),
        )
    };
    if meta.len() > limit {
        return Err(too_long());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    io::Read::read_to_end(&mut io::Read::take(file, limit + 1), &mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long());
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_bounded_text(path: &Path, limit: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit, what)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim.txt");
        fs::write(&victim, b"PRECIOUS").unwrap();
        let out = dir.path().join("out");
        fs::create_dir(&out).unwrap();
        symlink(&victim, out.join("results.json")).unwrap();
        symlink(&victim, out.join(".results.json.x.ipc-tmp")).unwrap();
        write_set(&out, &[("results.json", b"new")]).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"PRECIOUS");
        assert_eq!(fs::read(out.join("results.json")).unwrap(), b"new");
        assert!(!fs::symlink_metadata(out.join("results.json"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(names(&out), [LOCK_FILE, "results.json"]);
    }

    #[test]
    fn a_folder_in_the_way_switches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        write_set(dir.path(), &[("a", b"old a"), ("b", b"old b")]).unwrap();
        fs::create_dir(dir.path().join("c")).unwrap();
        let err =
            write_set(dir.path(), &[("a", b"new a"), ("c", b"c"), ("b", b"new b")]).unwrap_err();
        assert!(err.path.ends_with("c"), "{:?}", err.path);
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"old a");
        assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"old b");
        assert_eq!(names(dir.path()), [LOCK_FILE, "a", "b", "c"]);
    }

    #[test]
    fn a_planted_lock_symlink_or_fifo_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"x").unwrap();
        let out = dir.path().join("out");
        fs::create_dir(&out).unwrap();
        symlink(&victim, out.join(LOCK_FILE)).unwrap();
        let err = write_set(&out, &[("a", b"a")]).expect_err("refused");
        assert!(err.path.ends_with(LOCK_FILE));
        fs::remove_file(out.join(LOCK_FILE)).unwrap();
        nix::unistd::mkfifo(&out.join(LOCK_FILE), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = write_set(&out, &[("a", b"a")]).expect_err("refused");
        assert!(
            err.source.to_string().contains("regular file"),
            "{}",
            err.source
        );
    }

    #[test]
    fn bounded_reads_refuse_devices_fifos_and_long_files() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.ipc");
        symlink("/dev/zero", &zero).unwrap();
        let err = read_bounded(&zero, 10, "a clause file").unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let fifo = dir.path().join("fifo.ipc");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_bounded(&fifo, 10, "a clause file").is_err());
        let long = dir.path().join("long.ipc");
        fs::write(&long, [b'x'; 11]).unwrap();
        let err = read_bounded(&long, 10, "a clause file").unwrap_err();
        assert!(err.to_string().contains("limit of 10 bytes"), "{err}");
        assert_eq!(read_bounded(&long, 11, "a clause file").unwrap().len(), 11);
    }

    /// The uid to act as so that `path` is another user's: as root, `path`
    /// is given to `nobody`; otherwise we act as a uid that is not ours.
    fn someone_else_owns(path: &Path) -> u32 {
        let me = nix::unistd::geteuid().as_raw();
        if me == 0 {
            std::os::unix::fs::lchown(path, Some(65534), Some(65534)).unwrap();
            0
        } else {
            me + 1
        }
    }

    #[test]
    fn an_out_path_through_another_users_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::create_dir(&target).unwrap();
        let link = dir.path().join("out");
        symlink(&target, &link).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        // Your own symlink is followed.
        prepare_dir_as(&link, me).unwrap();
        prepare_dir_as(&link.join("sub"), me).unwrap();
        let uid = someone_else_owns(&link);
        for out in [link.clone(), link.join("deeper")] {
            let err = prepare_dir_as(&out, uid).unwrap_err();
            assert_eq!(err.path, link);
            assert!(err
                .source
                .to_string()
                .contains("symbolic link owned by another user"));
        }
        assert!(
            !target.join("deeper").exists(),
            "nothing created through it"
        );
    }

    #[test]
    fn an_out_folder_another_user_owns_or_everyone_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let open = dir.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare_dir_as(&open, me).unwrap_err();
        assert!(err
            .source
            .to_string()
            .contains("every user can write the folder (mode 777)"));
        // A group may share it.
        fs::set_permissions(&open, fs::Permissions::from_mode(0o2775)).unwrap();
        prepare_dir_as(&open, me).unwrap();
        let theirs = dir.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        let uid = someone_else_owns(&theirs);
        let err = prepare_dir_as(&theirs, uid).unwrap_err();
        assert!(err.source.to_string().contains("owned by another user"));
    }

    #[test]
    fn append_refuses_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"x").unwrap();
        symlink(&victim, dir.path().join("rec.jsonl")).unwrap();
        assert!(open_append(&dir.path().join("rec.jsonl")).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"x");
    }
}
