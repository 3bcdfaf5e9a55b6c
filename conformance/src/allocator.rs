//! The global allocator of the binaries, benches and tests: mimalloc.
//!
//! The harness makes many short-lived allocations (names, labels, step
//! text, each explore case's program and scenario). `mimalloc::MiMalloc`
//! sends every request through `mi_malloc_aligned`, whose path for blocks
//! over 1 KiB is several times longer than `mi_malloc`'s. A request whose
//! alignment is at most a machine word is met by any mimalloc block, so it
//! goes to the plain calls; larger alignments keep the aligned ones.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// Every mimalloc block is aligned to at least a machine word.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc, with plain calls for word-aligned requests.
pub struct Allocator;

// SAFETY: each call forwards to mimalloc, which returns null on failure and
// a block of at least `size` bytes aligned to at least a word, or to the
// alignment asked of its aligned calls; `dealloc` and `realloc` receive
// only pointers that these calls returned.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi::mi_malloc(layout.size()) as *mut u8 }
        } else {
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi::mi_zalloc(layout.size()) as *mut u8 }
        } else {
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= WORD {
            unsafe { mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8 }
        } else {
            unsafe {
                mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every alignment and a range of sizes come back aligned,
    /// writable, zeroed where asked, and keep their bytes through a realloc.
    #[test]
    fn blocks_are_aligned_zeroed_and_kept_through_realloc() {
        let a = Allocator;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 7, 8, 9, 24, 100, 1024, 1025, 5000, 70_000, 3 << 20] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc_zeroed(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                    std::ptr::write_bytes(p, 0x5a, size);
                    let q = a.realloc(p, layout, size * 2 + 3);
                    assert!(!q.is_null());
                    assert_eq!(q as usize % align, 0, "realloc, size {size} align {align}");
                    assert!(std::slice::from_raw_parts(q, size)
                        .iter()
                        .all(|&b| b == 0x5a));
                    a.dealloc(q, Layout::from_size_align(size * 2 + 3, align).unwrap());
                    let r = a.alloc(layout);
                    assert_eq!(r as usize % align, 0);
                    a.dealloc(r, layout);
                }
            }
        }
    }
}
