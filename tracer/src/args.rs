//! A call record under construction: the line's fixed fields, then the
//! arguments. Every read of the program's memory goes through a method
//! that says whether it may happen: outputs only after a call that
//! succeeded (a driver may leave them unwritten, or point them nowhere,
//! when it fails), inputs behind a pointer only when the driver accepted
//! the call (and so read them itself).

use crate::json::Line;
use crate::writer;

pub struct Args {
    line: Line,
    /// The call succeeded.
    pub ok: bool,
    /// The driver read its input structures: it succeeded, or failed for a
    /// reason other than an argument it refused (CUDA_ERROR_INVALID_VALUE).
    pub read_inputs: bool,
}

impl Args {
    /// An empty record, to `begin` where it lies.
    #[inline(always)]
    pub fn blank() -> Args {
        Args {
            line: Line::blank(),
            ok: false,
            read_inputs: false,
        }
    }

    #[inline]
    pub fn begin(&mut self, call: &str, result: i32, t_ns: u64, dur_ns: u64) {
        self.ok = result == 0;
        self.read_inputs = result != 1;
        let line = &mut self.line;
        line.start("call");
        writer::add_seq(line);
        line.str("call", call);
        line.i64("result", result.into());
        line.u64("t_ns", t_ns);
        line.u64("dur_ns", dur_ns);
        writer::add_tid(line);
        line.open("args");
    }

    pub fn end(&mut self) {
        self.line.close();
        writer::emit(&mut self.line);
    }

    pub fn n(&mut self, key: &str, value: impl Into<u64>) {
        self.line.u64(key, value.into());
    }

    pub fn i(&mut self, key: &str, value: impl Into<i64>) {
        self.line.i64(key, value.into());
    }

    pub fn text(&mut self, key: &str, value: &str) {
        self.line.str(key, value);
    }

    pub fn hex(&mut self, key: &str, bytes: &[u8]) {
        self.line.hex(key, bytes);
    }

    pub fn list(&mut self, key: &str, values: impl IntoIterator<Item = u64>) {
        self.line.u64_list(key, values);
    }

    pub fn pairs(&mut self, key: &str, values: impl IntoIterator<Item = (i64, u64)>) {
        self.line.pairs(key, values);
    }

    /// An output the call wrote: read only after success.
    ///
    /// # Safety
    /// After a successful call the driver wrote `*p`.
    pub unsafe fn out<T: Copy + Into<u64>>(&mut self, key: &str, p: *const T) {
        if self.ok && !p.is_null() {
            self.line.u64(key, std::ptr::read_unaligned(p).into());
        }
    }

    /// An output pointer-sized handle (`CUcontext`, `CUevent`, ...).
    ///
    /// # Safety
    /// As [`Args::out`].
    pub unsafe fn out_handle(&mut self, key: &str, p: *const usize) {
        if self.ok && !p.is_null() {
            self.line.u64(key, std::ptr::read_unaligned(p) as u64);
        }
    }

    /// A field of an input structure at `offset`, read only after success
    /// (the driver read the structure).
    ///
    /// # Safety
    /// After a successful call `base` points to a structure holding a `T`
    /// at `offset`.
    pub unsafe fn field<T: Copy>(&self, base: *const u8, offset: usize) -> Option<T> {
        (self.ok && !base.is_null()).then(|| std::ptr::read_unaligned(base.add(offset) as *const T))
    }

    /// A `T` at `offset` in an input structure the driver read (a failed
    /// call's inputs too, unless the driver refused an argument: a program
    /// that passed a bad pointer then gets its own error, not a crash here).
    ///
    /// # Safety
    /// Unless the call returned CUDA_ERROR_INVALID_VALUE, a non-null `base`
    /// points to a structure holding a `T` at `offset`.
    pub unsafe fn input_field<T: Copy>(&self, base: *const u8, offset: usize) -> Option<T> {
        (self.read_inputs && !base.is_null())
            .then(|| std::ptr::read_unaligned(base.add(offset) as *const T))
    }

    /// 64 bytes of an input or output handle, in hex, after success.
    ///
    /// # Safety
    /// After a successful call `p` points to 64 readable bytes.
    pub unsafe fn handle64(&mut self, key: &str, p: *const u8) {
        if self.ok && !p.is_null() {
            let bytes = std::ptr::read_unaligned(p as *const [u8; 64]);
            self.line.hex(key, &bytes);
        }
    }
}
