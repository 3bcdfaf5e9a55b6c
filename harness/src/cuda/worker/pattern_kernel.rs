//! `KernelPattern`: a kernel on the default stream that writes a computed
//! multi-byte pattern, one thread per byte. Like `slow_fill` it returns
//! once launched; the bytes reach another process only through an event
//! recorded after it (`event.order.kernel-pattern-after-wait`).

use crate::cuda::ffi::{self, CallResult, Handle};
use crate::cuda::protocol::WireError;
use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

/// The pattern kernel: for `i < n`, `dst[i]` is byte `i % width` of
/// `pattern` (shifted right by `8 * (i % width)`) plus `step * (i / width)`,
/// keeping the low 8 bits. One thread per byte, in blocks of
/// [`PATTERN_BLOCK`].
pub(super) const PATTERN_FILL_PTX: &CStr = c"
.version 7.0
.target sm_52
.address_size 64

.visible .entry pattern_fill(
    .param .u64 pattern_fill_param_0,
    .param .u64 pattern_fill_param_1,
    .param .u64 pattern_fill_param_2,
    .param .u32 pattern_fill_param_3,
    .param .u32 pattern_fill_param_4
)
{
    .reg .pred %p<2>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<13>;

    ld.param.u64 %rd1, [pattern_fill_param_0];
    ld.param.u64 %rd2, [pattern_fill_param_1];
    ld.param.u64 %rd3, [pattern_fill_param_2];
    ld.param.u32 %r4, [pattern_fill_param_3];
    ld.param.u32 %r5, [pattern_fill_param_4];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.s64 %rd6, %rd4, %rd5;
    setp.ge.u64 %p1, %rd6, %rd2;
    @%p1 bra $L__done;
    cvt.u64.u32 %rd7, %r4;
    rem.u64 %rd8, %rd6, %rd7;
    div.u64 %rd9, %rd6, %rd7;
    cvt.u32.u64 %r6, %rd8;
    shl.b32 %r7, %r6, 3;
    shr.b64 %rd10, %rd3, %r7;
    cvt.u32.u64 %r8, %rd10;
    cvt.u32.u64 %r9, %rd9;
    mad.lo.u32 %r8, %r9, %r5, %r8;
    cvt.u16.u32 %rs1, %r8;
    cvta.to.global.u64 %rd11, %rd1;
    add.s64 %rd12, %rd11, %rd6;
    st.global.u8 [%rd12], %rs1;
$L__done:
    ret;
}
";

pub(super) const PATTERN_FILL_NAME: &CStr = c"pattern_fill";
const PATTERN_BLOCK: u64 = 256;

/// Launch the pattern kernel (`function`, loaded in the current context
/// from [`PATTERN_FILL_PTX`]) on the null stream and return without
/// waiting. A width outside 1 to 8 is refused before the launch with
/// `CUDA_ERROR_INVALID_VALUE` / `cudaErrorInvalidValue` (the same code in
/// both dialects), as a launch with a bad argument is. A zero length
/// launches one block that writes nothing.
pub(super) fn launch(
    function: Handle,
    ptr: u64,
    len: u64,
    pattern: u64,
    width: u8,
    step: u8,
) -> CallResult {
    if !(1..=8).contains(&width) {
        return Err(WireError::Api(ffi::ERROR_INVALID_VALUE));
    }
    let grid = u32::try_from(len.div_ceil(PATTERN_BLOCK).max(1)).map_err(|_| {
        WireError::Harness(format!(
            "kernel_pattern of {len} bytes needs too many blocks"
        ))
    })?;
    let (mut dst, mut n, mut word, mut w, mut s) =
        (ptr, len, pattern, u32::from(width), u32::from(step));
    let mut params: [*mut c_void; 5] = [
        &mut dst as *mut u64 as *mut c_void,
        &mut n as *mut u64 as *mut c_void,
        &mut word as *mut u64 as *mut c_void,
        &mut w as *mut u32 as *mut c_void,
        &mut s as *mut u32 as *mut c_void,
    ];
    // SAFETY: `params` points at three u64s and two u32s matching the
    // kernel's parameters, alive across the call.
    unsafe {
        ffi::cuLaunchKernel(
            function,
            grid,
            1,
            1,
            PATTERN_BLOCK as u32,
            1,
            1,
            0,
            null_mut(),
            params.as_mut_ptr(),
            null_mut(),
        )
    }
}
