//! One JSON line of the record format (`ipc_harness::trace_record`), built
//! in a buffer on the stack: no allocation, so a record costs its
//! formatting and one `write(2)`, and a host wrapper can record inside a
//! signal handler. A line too long for the buffer (a kernel with hundreds
//! of parameters) moves to the heap; the host records are bounded so that
//! theirs never does. The tests parse every kind of line back with the
//! format's own types.

use std::mem::MaybeUninit;

/// Bytes a line holds before it moves to the heap.
pub const INLINE: usize = 3072;

/// A line being built. Made in place and passed by reference: moving it
/// would copy the whole buffer.
pub struct Line {
    /// The first `len` bytes are written.
    buf: MaybeUninit<[u8; INLINE]>,
    len: usize,
    spill: Option<Vec<u8>>,
    /// A `,` is due before the next key of the current object.
    comma: bool,
}

impl Line {
    /// A line opening `{"kind":"<kind>"` (`kind` needs no escaping).
    #[inline]
    pub fn new(kind: &str) -> Line {
        let mut line = Line::blank();
        line.start(kind);
        line
    }

    /// An empty line, to `start` where it lies (no copy of the buffer).
    #[inline(always)]
    pub fn blank() -> Line {
        Line {
            buf: MaybeUninit::uninit(),
            len: 0,
            spill: None,
            comma: false,
        }
    }

    /// Open the line: `{"kind":"<kind>"`.
    #[inline]
    pub fn start(&mut self, kind: &str) {
        self.raw(b"{\"kind\":\"");
        self.raw(kind.as_bytes());
        self.raw(b"\"");
        self.comma = true;
    }

    #[inline]
    fn raw(&mut self, bytes: &[u8]) {
        if self.spill.is_none() && self.len + bytes.len() <= INLINE {
            // SAFETY: in bounds of the buffer; bytes are plain data.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    (self.buf.as_mut_ptr() as *mut u8).add(self.len),
                    bytes.len(),
                );
            }
            self.len += bytes.len();
        } else {
            self.spill_raw(bytes);
        }
    }

    #[cold]
    fn spill_raw(&mut self, bytes: &[u8]) {
        match &mut self.spill {
            Some(spill) => spill.extend_from_slice(bytes),
            None => {
                let mut spill = Vec::with_capacity(self.len * 2 + bytes.len());
                spill.extend_from_slice(self.written());
                spill.extend_from_slice(bytes);
                self.spill = Some(spill);
            }
        }
    }

    fn written(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const u8, self.len) }
    }

    fn key(&mut self, key: &str) {
        if self.comma {
            self.raw(b",");
        }
        self.raw(b"\"");
        self.raw(key.as_bytes());
        self.raw(b"\":");
        self.comma = true;
    }

    #[inline]
    fn unsigned(&mut self, mut value: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.raw(&digits[at..]);
    }

    fn signed(&mut self, value: i64) {
        if value < 0 {
            self.raw(b"-");
        }
        self.unsigned(value.unsigned_abs());
    }

    #[inline]
    pub fn u64(&mut self, key: &str, value: u64) {
        self.key(key);
        self.unsigned(value);
    }

    pub fn i64(&mut self, key: &str, value: i64) {
        self.key(key);
        self.signed(value);
    }

    pub fn bool(&mut self, key: &str, value: bool) {
        self.key(key);
        self.raw(if value { b"true" } else { b"false" });
    }

    /// A string from bytes: JSON-escaped, invalid UTF-8 as U+FFFD, at most
    /// `max` bytes of input.
    pub fn bytes_str(&mut self, key: &str, value: &[u8], max: usize) {
        self.key(key);
        self.raw(b"\"");
        for chunk in value[..value.len().min(max)].utf8_chunks() {
            let valid = chunk.valid().as_bytes();
            let mut start = 0;
            for (i, &b) in valid.iter().enumerate() {
                let escaped: Option<&[u8]> = match b {
                    b'"' => Some(b"\\\""),
                    b'\\' => Some(b"\\\\"),
                    b'\n' => Some(b"\\n"),
                    b'\r' => Some(b"\\r"),
                    b'\t' => Some(b"\\t"),
                    _ => None,
                };
                if escaped.is_some() || b < 0x20 {
                    self.raw(&valid[start..i]);
                    match escaped {
                        Some(e) => self.raw(e),
                        None => {
                            const HEX: &[u8; 16] = b"0123456789abcdef";
                            self.raw(&[
                                b'\\',
                                b'u',
                                b'0',
                                b'0',
                                HEX[(b >> 4) as usize],
                                HEX[(b & 15) as usize],
                            ]);
                        }
                    }
                    start = i + 1;
                }
            }
            self.raw(&valid[start..]);
            if !chunk.invalid().is_empty() {
                self.raw("\u{fffd}".as_bytes());
            }
        }
        self.raw(b"\"");
    }

    /// A string; plain ones (symbol names, kinds) are copied as they are.
    pub fn str(&mut self, key: &str, value: &str) {
        let plain = value
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
        if plain {
            self.key(key);
            self.raw(b"\"");
            self.raw(value.as_bytes());
            self.raw(b"\"");
        } else {
            self.bytes_str(key, value.as_bytes(), usize::MAX);
        }
    }

    /// Bytes as lowercase hex digits (IPC handles, pool export data, UUIDs).
    pub fn hex(&mut self, key: &str, bytes: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.key(key);
        self.raw(b"\"");
        for &b in bytes {
            self.raw(&[HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
        self.raw(b"\"");
    }

    pub fn u64_list(&mut self, key: &str, values: impl IntoIterator<Item = u64>) {
        self.key(key);
        self.raw(b"[");
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.unsigned(v);
        }
        self.raw(b"]");
    }

    pub fn i64_list(&mut self, key: &str, values: impl IntoIterator<Item = i64>) {
        self.key(key);
        self.raw(b"[");
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.signed(v);
        }
        self.raw(b"]");
    }

    /// `[[a,b],...]`: pairs of numbers (`access`, `attrs`).
    pub fn pairs(&mut self, key: &str, values: impl IntoIterator<Item = (i64, u64)>) {
        self.key(key);
        self.raw(b"[");
        for (i, (a, b)) in values.into_iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.raw(b"[");
            self.signed(a);
            self.raw(b",");
            self.unsigned(b);
            self.raw(b"]");
        }
        self.raw(b"]");
    }

    /// Open a nested object under `key`.
    pub fn open(&mut self, key: &str) {
        self.key(key);
        self.raw(b"{");
        self.comma = false;
    }

    /// Close the nested object.
    pub fn close(&mut self) {
        self.raw(b"}");
        self.comma = true;
    }

    /// The finished line, `}` and newline included.
    pub fn finish(&mut self) -> &[u8] {
        self.raw(b"}\n");
        match &self.spill {
            Some(spill) => spill,
            None => self.written(),
        }
    }
}
