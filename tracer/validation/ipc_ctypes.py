#!/usr/bin/env python3
"""Two processes share GPU memory through ctypes calls into libcuda (the
driver API), the way Python programs do without a CUDA binding: the parent
allocates, fills, exports an IPC handle and an interprocess event; the child
opens both, waits on the event, reads, and closes.

usage: ipc_ctypes.py [ok|free-before-close|no-wait|double-close|leak]
"""
import ctypes
import os
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
SIZE = 1 << 20
cuda = ctypes.CDLL("libcuda.so.1")


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def check(result, what):
    if result != 0:
        raise SystemExit(f"{what} failed with CUresult {result}")


def context():
    ctx = ctypes.c_void_p()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def child(rd, wr):
    mem, event = Handle(), Handle()
    raw = os.read(rd, 128)
    ctypes.memmove(ctypes.byref(mem), raw[:64], 64)
    ctypes.memmove(ctypes.byref(event), raw[64:], 64)
    context()
    ptr = ctypes.c_uint64()
    ev = ctypes.c_void_p()
    check(cuda.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), mem, 1), "cuIpcOpenMemHandle")
    check(cuda.cuIpcOpenEventHandle(ctypes.byref(ev), event), "cuIpcOpenEventHandle")
    if MODE != "no-wait":
        check(cuda.cuStreamWaitEvent(None, ev, 0), "cuStreamWaitEvent")
    buf = ctypes.create_string_buffer(16)
    check(cuda.cuMemcpyDtoH_v2(buf, ptr, 16), "cuMemcpyDtoH")
    os.write(wr, b"r")
    os.read(rd, 1)
    if MODE != "leak":
        check(cuda.cuIpcCloseMemHandle(ptr), "cuIpcCloseMemHandle")
    if MODE == "double-close":
        cuda.cuIpcCloseMemHandle(ptr)  # the bug: a second close
    cuda.cuEventDestroy_v2(ev)
    os.write(wr, b"c")
    os._exit(0)


def main():
    to_child, to_parent = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        child(to_child[0], to_parent[1])
    context()
    ptr = ctypes.c_uint64()
    ev = ctypes.c_void_p()
    mem, event = Handle(), Handle()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(SIZE)), "cuMemAlloc")
    check(cuda.cuEventCreate(ctypes.byref(ev), 2 | 4), "cuEventCreate")
    check(cuda.cuIpcGetMemHandle(ctypes.byref(mem), ptr), "cuIpcGetMemHandle")
    check(cuda.cuIpcGetEventHandle(ctypes.byref(event), ev), "cuIpcGetEventHandle")
    # Asynchronous work the child must wait for: a memset on a stream, then the event.
    check(cuda.cuMemsetD8Async(ptr, ctypes.c_ubyte(0x5A), ctypes.c_size_t(SIZE), None), "cuMemsetD8Async")
    check(cuda.cuEventRecord(ev, None), "cuEventRecord")
    os.write(to_child[1], ctypes.string_at(ctypes.byref(mem), 64) + ctypes.string_at(ctypes.byref(event), 64))
    os.read(to_parent[0], 1)
    freed = False
    if MODE == "free-before-close":
        check(cuda.cuMemFree_v2(ptr), "cuMemFree")  # the bug: the child still maps it
        freed = True
    os.write(to_child[1], b"g")
    os.read(to_parent[0], 1)
    if not freed:
        check(cuda.cuMemFree_v2(ptr), "cuMemFree")
    cuda.cuEventDestroy_v2(ev)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


main()
