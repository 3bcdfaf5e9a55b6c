//! What the program's descriptors are, learned once per descriptor: the
//! host wrappers record only pipes and sockets, and a `read` of a regular
//! file must not cost an `fstat` each time. The cache is forgotten where a
//! number changes meaning (`close`, `close_range`, `closefrom`, `dup2`,
//! `dup3`; a number closed behind libc's back, by a raw system call, is
//! not noticed). Also kept: which descriptors the tracer follows (passed
//! with `SCM_RIGHTS`, taken with `pidfd_getfd`, exported by the driver),
//! whose copies and closes it records.

use crate::json::Line;
use crate::sys;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors below this number are cached; above it, each use asks.
const CACHED: usize = 4096;
/// Descriptors below this number can be followed.
const FOLLOWED: usize = 65536;

const KIND_OTHER: u64 = 1;
const KIND_PIPE: u64 = 2;
const KIND_SOCKET: u64 = 3;

/// Per descriptor: `inode << 2 | kind` (0: not known yet).
static CLASS: [AtomicU64; CACHED] = [const { AtomicU64::new(0) }; CACHED];
/// Per descriptor: the device of a pipe's inode.
static DEVICE: [AtomicU64; CACHED] = [const { AtomicU64::new(0) }; CACHED];
static FOLLOW: [AtomicU64; FOLLOWED / 64] = [const { AtomicU64::new(0) }; FOLLOWED / 64];

/// What a descriptor the host wrappers record is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Object {
    Pipe { dev: u64, ino: u64 },
    Socket { ino: u64 },
}

impl Object {
    pub fn write(self, line: &mut Line, key: &str) {
        let mut buf = [0u8; 64];
        let text = match self {
            Object::Pipe { dev, ino } => {
                crate::writer::format_args_to(&mut buf, format_args!("pipe:{dev}:{ino}"))
            }
            Object::Socket { ino } => {
                crate::writer::format_args_to(&mut buf, format_args!("socket:{ino}"))
            }
        };
        line.bytes_str(key, text, text.len());
    }
}

fn decode(class: u64, dev: u64) -> Option<Object> {
    match class & 3 {
        KIND_PIPE => Some(Object::Pipe {
            dev,
            ino: class >> 2,
        }),
        KIND_SOCKET => Some(Object::Socket { ino: class >> 2 }),
        _ => None,
    }
}

/// The pipe or socket behind `fd`, or `None` for anything else; `fresh`
/// is true the first time it is learned (the caller describes it).
pub fn classify(fd: c_int) -> (Option<Object>, bool) {
    if fd < 0 {
        return (None, false);
    }
    let index = fd as usize;
    if index < CACHED {
        let class = CLASS[index].load(Ordering::Acquire);
        if class != 0 {
            return (decode(class, DEVICE[index].load(Ordering::Relaxed)), false);
        }
    }
    let Some(st) = sys::fstat(fd) else {
        return (None, false);
    };
    let (kind, dev) = match st.st_mode & libc::S_IFMT {
        libc::S_IFIFO => (KIND_PIPE, st.st_dev),
        libc::S_IFSOCK => (KIND_SOCKET, 0),
        _ => (KIND_OTHER, 0),
    };
    let class = (st.st_ino << 2) | kind;
    if index < CACHED {
        DEVICE[index].store(dev, Ordering::Relaxed);
        CLASS[index].store(class, Ordering::Release);
    }
    (decode(class, dev), true)
}

/// `fd` no longer means what it meant.
pub fn forget(fd: c_int) {
    if fd >= 0 && (fd as usize) < CACHED {
        CLASS[fd as usize].store(0, Ordering::Release);
    }
}

/// Every number in `[first, last]` no longer means what it meant.
pub fn forget_range(first: u32, last: u32) {
    let end = (last as usize).min(CACHED - 1);
    for slot in CLASS.iter().take(end + 1).skip(first as usize) {
        slot.store(0, Ordering::Release);
    }
}

pub fn follow(fd: c_int) {
    if fd >= 0 && (fd as usize) < FOLLOWED {
        FOLLOW[fd as usize / 64].fetch_or(1 << (fd % 64), Ordering::Relaxed);
    }
}

/// Stop following `fd`; whether it was followed.
pub fn unfollow(fd: c_int) -> bool {
    if fd < 0 || fd as usize >= FOLLOWED {
        return false;
    }
    let bit = 1u64 << (fd % 64);
    FOLLOW[fd as usize / 64].fetch_and(!bit, Ordering::Relaxed) & bit != 0
}

pub fn followed(fd: c_int) -> bool {
    fd >= 0
        && (fd as usize) < FOLLOWED
        && FOLLOW[fd as usize / 64].load(Ordering::Relaxed) & (1 << (fd % 64)) != 0
}

/// Stop following every number in `[first, last]`; calls `closed` with
/// each that was followed.
pub fn unfollow_range(first: u32, last: u32, mut closed: impl FnMut(c_int)) {
    let end = (last as usize).min(FOLLOWED - 1);
    let mut fd = first as usize;
    while fd <= end {
        let word = FOLLOW[fd / 64].load(Ordering::Relaxed);
        if word == 0 {
            fd = (fd / 64 + 1) * 64;
            continue;
        }
        if unfollow(fd as c_int) {
            closed(fd as c_int);
        }
        fd += 1;
    }
}

/// A socket address as the records spell it: a Unix path made absolute
/// with the working directory, `@name` for the abstract namespace,
/// `ip:port` for IPv4 and `[ip]:port` for IPv6. Returns the length written
/// into `out`, 0 for an unnamed socket or another family.
///
/// # Safety
/// `addr` points to `len` readable bytes.
pub unsafe fn address(addr: *const libc::sockaddr, len: u32, out: &mut [u8]) -> usize {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return 0;
    }
    match (*addr).sa_family as c_int {
        libc::AF_UNIX => {
            let un = &*(addr as *const libc::sockaddr_un);
            let offset = std::mem::size_of::<libc::sa_family_t>();
            let n = (len as usize).saturating_sub(offset).min(un.sun_path.len());
            let path: &[u8] = std::slice::from_raw_parts(un.sun_path.as_ptr().cast(), n);
            if path.is_empty() {
                return 0;
            }
            if path[0] == 0 {
                // Abstract: the whole length counts, NULs included.
                let name = &path[1..];
                return copy_all(out, &[b"@", name]);
            }
            let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
            if path.first() == Some(&b'/') {
                return copy_all(out, &[path]);
            }
            let mut cwd = [0u8; 1024];
            let c = sys::getcwd(&mut cwd).unwrap_or(0);
            if c == 0 {
                return copy_all(out, &[path]);
            }
            let sep: &[u8] = if cwd[..c].ends_with(b"/") { b"" } else { b"/" };
            copy_all(out, &[&cwd[..c], sep, path])
        }
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            let sin = &*(addr as *const libc::sockaddr_in);
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            let port = u16::from_be(sin.sin_port);
            crate::writer::format_args_to(out, format_args!("{ip}:{port}")).len()
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            let sin = &*(addr as *const libc::sockaddr_in6);
            let ip = std::net::Ipv6Addr::from(sin.sin6_addr.s6_addr);
            let port = u16::from_be(sin.sin6_port);
            crate::writer::format_args_to(out, format_args!("[{ip}]:{port}")).len()
        }
        _ => 0,
    }
}

fn copy_all(out: &mut [u8], parts: &[&[u8]]) -> usize {
    let mut n = 0;
    for part in parts {
        let take = part.len().min(out.len() - n);
        out[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    n
}

/// The other end's inode of a connected Unix socket, from the kernel's
/// socket diagnostics (`NETLINK_SOCK_DIAG`, `UNIX_DIAG_PEER`).
fn unix_peer_inode(ino: u64) -> Option<u64> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const UDIAG_SHOW_PEER: u32 = 4;
    const UNIX_DIAG_PEER: u16 = 2;
    #[repr(C)]
    struct Request {
        len: u32,
        kind: u16,
        flags: u16,
        seq: u32,
        pid: u32,
        family: u8,
        protocol: u8,
        pad: u16,
        states: u32,
        ino: u32,
        show: u32,
        cookie: [u32; 2],
    }
    // SAFETY: a netlink socket of our own, closed below; plain buffers.
    unsafe {
        let sock = libc::syscall(
            libc::SYS_socket,
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        ) as c_int;
        if sock < 0 {
            return None;
        }
        let request = Request {
            len: std::mem::size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: libc::NLM_F_REQUEST as u16,
            seq: 1,
            pid: 0,
            family: libc::AF_UNIX as u8,
            protocol: 0,
            pad: 0,
            states: u32::MAX,
            ino: ino as u32,
            show: UDIAG_SHOW_PEER,
            cookie: [u32::MAX; 2],
        };
        let mut result = None;
        let sent = libc::syscall(
            libc::SYS_sendto,
            sock,
            &request as *const Request,
            std::mem::size_of::<Request>(),
            0,
            std::ptr::null::<libc::sockaddr>(),
            0,
        );
        let mut buf = [0u8; 512];
        if sent > 0 {
            let n = libc::syscall(
                libc::SYS_recvfrom,
                sock,
                buf.as_mut_ptr(),
                buf.len(),
                0,
                std::ptr::null_mut::<libc::sockaddr>(),
                std::ptr::null_mut::<u32>(),
            );
            // nlmsghdr (16) + unix_diag_msg (16), then attributes.
            if n >= 32 && u16::from_ne_bytes([buf[4], buf[5]]) == SOCK_DIAG_BY_FAMILY {
                let end =
                    (n as usize).min(u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize);
                let mut at = 32;
                while at + 4 <= end {
                    let len = u16::from_ne_bytes([buf[at], buf[at + 1]]) as usize;
                    let kind = u16::from_ne_bytes([buf[at + 2], buf[at + 3]]);
                    if len < 4 {
                        break;
                    }
                    if kind == UNIX_DIAG_PEER && len >= 8 && at + 8 <= end {
                        let peer = u32::from_ne_bytes([
                            buf[at + 4],
                            buf[at + 5],
                            buf[at + 6],
                            buf[at + 7],
                        ]);
                        result = (peer != 0).then_some(peer as u64);
                    }
                    at += (len + 3) & !3;
                }
            }
        }
        sys::close(sock);
        result
    }
}

/// The `describe` fields of a socket: type, local and peer addresses,
/// the peer's inode for a connected Unix socket.
pub fn describe_socket(fd: c_int, ino: u64, line: &mut Line) {
    // SAFETY: plain socket queries into buffers we own.
    unsafe {
        let mut kind: c_int = 0;
        let mut len = std::mem::size_of::<c_int>() as u32;
        if libc::syscall(
            libc::SYS_getsockopt,
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            &mut kind as *mut c_int,
            &mut len as *mut u32,
        ) == 0
        {
            let name = match kind {
                libc::SOCK_STREAM => "stream",
                libc::SOCK_DGRAM => "dgram",
                libc::SOCK_SEQPACKET => "seqpacket",
                _ => "other",
            };
            line.str("sock_type", name);
        }
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut text = [0u8; 1200];
        let mut unix = false;
        for (call, key) in [
            (libc::SYS_getsockname, "local"),
            (libc::SYS_getpeername, "peer_path"),
        ] {
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            let addr = &mut storage as *mut libc::sockaddr_storage as *mut libc::sockaddr;
            if libc::syscall(call, fd, addr, &mut len as *mut u32) == 0 {
                unix |= (*addr).sa_family as c_int == libc::AF_UNIX;
                let n = address(addr, len, &mut text);
                if n > 0 {
                    line.bytes_str(key, &text[..n], n);
                }
            }
        }
        if unix {
            if let Some(peer) = unix_peer_inode(ino) {
                Object::Socket { ino: peer }.write(line, "peer");
            }
        }
    }
}

/// The file and offset a semaphore (or any address) lives at, from
/// `/proc/self/maps`: `(dev, inode, offset)`, or `None` for memory no file
/// backs (private to this process). Cached per address.
pub fn backing(addr: usize) -> Option<(u64, u64, u64)> {
    const SLOTS: usize = 64;
    static ADDR: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
    static VALUE: [[AtomicU64; 3]; SLOTS] = [const { [const { AtomicU64::new(0) }; 3] }; SLOTS];
    let key = addr as u64;
    for (i, slot) in ADDR.iter().enumerate() {
        let a = slot.load(Ordering::Acquire);
        if a == key {
            let v = &VALUE[i];
            let ino = v[1].load(Ordering::Relaxed);
            return (ino != 0).then(|| {
                (
                    v[0].load(Ordering::Relaxed),
                    ino,
                    v[2].load(Ordering::Relaxed),
                )
            });
        }
        if a == 0 {
            break;
        }
    }
    let found = scan_maps(addr);
    let (dev, ino, off) = found.unwrap_or((0, 0, 0));
    for (i, slot) in ADDR.iter().enumerate() {
        // Claim a free slot (1 marks one being filled).
        if slot
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            VALUE[i][0].store(dev, Ordering::Relaxed);
            VALUE[i][1].store(ino, Ordering::Relaxed);
            VALUE[i][2].store(off, Ordering::Relaxed);
            slot.store(key, Ordering::Release);
            break;
        }
    }
    found
}

/// The mapping of `/proc/self/maps` that holds `addr`, when a file backs
/// it: `(dev, inode, offset of addr in the file)`.
fn scan_maps(addr: usize) -> Option<(u64, u64, u64)> {
    let fd = sys::openat(
        libc::AT_FDCWD,
        c"/proc/self/maps",
        libc::O_RDONLY | libc::O_CLOEXEC,
        0,
    )
    .ok()?;
    // A line: start-end perms offset major:minor inode path. Only the
    // fields before the path matter; lines may be longer than the buffer.
    let mut buf = [0u8; 1024];
    let mut field = 0usize;
    let mut values = [0u64; 6]; // start end offset major minor inode
    let mut found = None;
    'read: loop {
        let n = match sys::read(fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                let [start, end, offset, major, minor, inode] = values;
                if (start..end).contains(&(addr as u64)) {
                    if inode != 0 {
                        let dev = libc::makedev(major as u32, minor as u32);
                        found = Some((dev, inode, offset + (addr as u64 - start)));
                    }
                    break 'read;
                }
                field = 0;
                values = [0; 6];
                continue;
            }
            // Fields: 0 start, 1 end, 2 perms, 3 offset, 4 major, 5 minor,
            // 6 inode, 7 path.
            match (field, b) {
                (0, b'-') => field = 1,
                (1, b' ') => field = 2,
                (2, b' ') => field = 3,
                (3, b' ') => field = 4,
                (4, b':') => field = 5,
                (5, b' ') => field = 6,
                (6, b' ') => field = 7,
                (0 | 1 | 3 | 4 | 5, _) => {
                    let slot = match field {
                        0 => 0,
                        1 => 1,
                        3 => 2,
                        4 => 3,
                        _ => 4,
                    };
                    if let Some(d) = (b as char).to_digit(16) {
                        values[slot] = values[slot].wrapping_mul(16).wrapping_add(d as u64);
                    }
                }
                (6, _) if b.is_ascii_digit() => {
                    values[5] = values[5].wrapping_mul(10).wrapping_add((b - b'0') as u64);
                }
                _ => {}
            }
        }
    }
    sys::close(fd);
    found
}
