#!/usr/bin/env python3
"""Writes trace folders of about a million recorded calls, to measure
`ipc-conformance check` at its limit (docs/reliability.md, "check"):

  python3 tools/trace-scale/generate.py OUT
  /usr/bin/time -v ipc-conformance check OUT/alloc-free --out /tmp/x
  IPC_CONFORMANCE_PROFILE=1 ipc-conformance check OUT/ipc-mix --out /tmp/x

- alloc-free: one process, 499,999 cuMemAlloc/cuMemFree pairs;
- ipc-mix: an exporter and an importer, 90,907 rounds of allocate, set,
  record an interprocess event, get a handle / open it, wait, launch a
  kernel on it, query, read, close / free (1,000,000 calls);
- polling: one process polling an event a million times (NOT_READY).
"""
import json
import os
import sys


class Proc:
    def __init__(self, out, pid, clock):
        self.file = open(os.path.join(out, f"trace-{pid}.jsonl"), "w")
        self.pid, self.seq, self.clock = pid, 0, clock
        self.line({"kind": "header", "pid": pid, "ppid": 1, "exe": "scale",
                   "start_ns": 0, "tracer_version": "0.1.0"})

    def line(self, value):
        self.file.write(json.dumps(value, separators=(",", ":")) + "\n")

    def call(self, name, args, result=0):
        self.clock[0] += 100
        self.line({"kind": "call", "seq": self.seq, "call": name, "result": result,
                   "t_ns": self.clock[0], "dur_ns": 50, "tid": self.pid, "args": args})
        self.seq += 1

    def exit(self):
        self.line({"kind": "exit", "t_ns": self.clock[0] + 1000})
        self.file.close()


def folder(out, name):
    path = os.path.join(out, name)
    os.makedirs(path, exist_ok=True)
    return path


def main(out):
    clock = [1000]
    p = Proc(folder(out, "alloc-free"), 100, clock)
    p.call("cuDevicePrimaryCtxRetain", {"ctx": 1, "device": 0})
    p.call("cuCtxSetCurrent", {"ctx": 1})
    for i in range(499_999):
        ptr = 0x7F0000000000 + (i % 64) * 0x100000
        p.call("cuMemAlloc_v2", {"ptr": ptr, "size": 4096})
        p.call("cuMemFree_v2", {"ptr": ptr})
    p.exit()

    d = folder(out, "ipc-mix")
    e, m = Proc(d, 200, clock), Proc(d, 201, clock)
    e.call("cuDevicePrimaryCtxRetain", {"ctx": 1, "device": 0})
    e.call("cuCtxSetCurrent", {"ctx": 1})
    m.call("cuDevicePrimaryCtxRetain", {"ctx": 2, "device": 0})
    m.call("cuCtxSetCurrent", {"ctx": 2})
    e.call("cuEventCreate", {"event": 77, "flags": 6})
    e.call("cuIpcGetEventHandle", {"event": 77, "handle": "ee" * 64})
    m.call("cuIpcOpenEventHandle", {"event": 88, "handle": "ee" * 64})
    for i in range(90_907):
        ptr = 0x7F0000000000 + (i % 32) * 0x100000
        mapped = 0x7E0000000000 + (i % 32) * 0x100000
        handle = "%0128x" % (i + 1)
        e.call("cuMemAlloc_v2", {"ptr": ptr, "size": 65536})
        e.call("cuMemsetD8Async", {"ptr": ptr, "value": 1, "size": 65536, "stream": 0})
        e.call("cuEventRecord", {"event": 77, "stream": 0})
        e.call("cuIpcGetMemHandle", {"ptr": ptr, "handle": handle})
        m.call("cuIpcOpenMemHandle_v2", {"ptr": mapped, "handle": handle, "flags": 1})
        m.call("cuStreamWaitEvent", {"stream": 0, "event": 88, "flags": 0})
        m.call("cuLaunchKernel", {"stream": 0, "pointer_args": [mapped]})
        m.call("cuEventQuery", {"event": 88}, 600)
        m.call("cuMemcpyDtoH_v2", {"ptr": 0x5000, "src": mapped, "size": 256})
        m.call("cuIpcCloseMemHandle", {"ptr": mapped})
        e.call("cuMemFree_v2", {"ptr": ptr})
    e.exit()
    m.exit()

    p = Proc(folder(out, "polling"), 300, clock)
    p.call("cuDevicePrimaryCtxRetain", {"ctx": 1, "device": 0})
    p.call("cuCtxSetCurrent", {"ctx": 1})
    p.call("cuEventCreate", {"event": 5, "flags": 6})
    p.call("cuEventRecord", {"event": 5, "stream": 0})
    for i in range(999_990):
        p.call("cuEventQuery", {"event": 5}, 600 if i < 999_980 else 0)
    p.exit()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py OUT")
    main(sys.argv[1])
