//! Finding the real driver functions behind the wrappers.
//!
//! The tracer exports `dlsym` so that a program (or the CUDA runtime, or
//! Python's ctypes) that opens libcuda itself and looks its functions up
//! gets the wrappers; the real `dlsym` is found with `dlvsym`, which the
//! tracer does not replace.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// glibc's own `dlsym`.
pub fn real_dlsym() -> Option<DlsymFn> {
    let mut p = REAL_DLSYM.load(Ordering::Acquire);
    if p == 0 {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"] {
            // SAFETY: NUL-terminated names; dlvsym is not interposed.
            p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) }
                as usize;
            if p != 0 {
                break;
            }
        }
        if p == 0 {
            return None;
        }
        REAL_DLSYM.store(p, Ordering::Release);
    }
    // SAFETY: the address of glibc's dlsym.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// Look `name` up in the loaded libcuda (`RTLD_NOLOAD`: never loads it),
/// else in the objects after the tracer.
pub fn real_symbol(name: &CStr) -> usize {
    let Some(dlsym) = real_dlsym() else { return 0 };
    // SAFETY: NUL-terminated names; the handle is only used for lookups.
    unsafe {
        let lib = libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_NOLOAD,
        );
        if !lib.is_null() {
            let p = dlsym(lib, name.as_ptr()) as usize;
            libc::dlclose(lib);
            if p != 0 {
                return p;
            }
        }
        dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize
    }
}

/// The exported symbol that starts exactly at `addr`, if any.
pub fn exact_symbol_name(addr: usize) -> Option<&'static CStr> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address.
    let found = unsafe { libc::dladdr(addr as *const c_void, &mut info) };
    if found == 0 || info.dli_sname.is_null() || info.dli_saddr as usize != addr {
        return None;
    }
    // SAFETY: dladdr's names live as long as the object stays loaded.
    Some(unsafe { CStr::from_ptr(info.dli_sname) })
}

/// The real function behind one wrapper, resolved once.
pub struct Slot {
    name: &'static CStr,
    real: AtomicUsize,
    /// A libc function: found after the tracer (`RTLD_NEXT`), never in
    /// libcuda.
    next_only: bool,
}

impl Slot {
    pub const fn new(name: &'static CStr) -> Self {
        Slot {
            name,
            real: AtomicUsize::new(0),
            next_only: false,
        }
    }

    /// A slot for a libc function the tracer interposes.
    pub const fn next(name: &'static CStr) -> Self {
        Slot {
            name,
            real: AtomicUsize::new(0),
            next_only: true,
        }
    }

    #[inline]
    pub fn get(&self) -> Option<usize> {
        let p = self.real.load(Ordering::Acquire);
        if p != 0 {
            return Some(p);
        }
        let p = if self.next_only {
            real_dlsym().map_or(0, |dlsym| {
                // SAFETY: a NUL-terminated name, looked up after the tracer.
                unsafe { dlsym(libc::RTLD_NEXT, self.name.as_ptr()) as usize }
            })
        } else {
            real_symbol(self.name)
        };
        (p != 0).then(|| {
            self.real.store(p, Ordering::Release);
            p
        })
    }

    pub fn set(&self, real: usize) {
        self.real.store(real, Ordering::Release);
    }
}
