/* A stand-in libcuda.so.1 for testing the tracer without a GPU: the
 * driver entry points the test programs use, with deterministic answers
 * (pointers and handles are numbers derived from counters, IPC handles
 * carry the exporter's pointer). It judges nothing; the checker does.
 *
 * Like a real driver it may leave outputs unwritten when a call fails: it
 * writes them only on success, and rejects what a driver rejects (a size
 * of 0, a device that does not exist, a pointer it did not allocate, a bad
 * handle, unknown flags, a pop with no current context). With
 * FAKE_CUDA_REJECT set in the environment every call fails at once and
 * writes nothing. The tracer's transparency test links generated stubs
 * (every other traced entry point, failing) into the same library, and
 * their table (fake_all) into cuGetProcAddress. Build:
 *   cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o libcuda.so.1 libcuda.c */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char reserved[64]; } CUipcHandle;

#define INVALID_VALUE 1
#define INVALID_DEVICE 101
#define INVALID_CONTEXT 201
#define DEVICES 2

static CUdeviceptr next_ptr = 0x7f0000000000ULL;
static uintptr_t next_obj = 0x1000;
static CUdeviceptr open_ptrs[64];
static int open_counts[64];
static int reject_all;
static void *current;

__attribute__((constructor)) static void fake_init(void) { reject_all = getenv("FAKE_CUDA_REJECT") != 0; }
#define REJECT if (reject_all) return INVALID_VALUE

CUresult cuInit(unsigned flags) { REJECT; (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { REJECT; if (!v) return INVALID_VALUE; *v = 13000; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    REJECT;
    if (dev < 0 || dev >= DEVICES) return INVALID_DEVICE;
    *ctx = (void *)(uintptr_t)(0xc0 + dev);
    return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { REJECT; return dev < 0 || dev >= DEVICES ? INVALID_DEVICE : 0; }
CUresult cuCtxCreate_v2(void **ctx, unsigned flags, int dev) {
    REJECT;
    if (dev < 0 || dev >= DEVICES) return INVALID_DEVICE;
    (void)flags;
    *ctx = (void *)(next_obj += 0x10);
    return 0;
}
CUresult cuCtxSetCurrent(void *ctx) { REJECT; current = ctx; return 0; }
CUresult cuCtxPopCurrent_v2(void **ctx) {
    REJECT;
    if (!current) return INVALID_CONTEXT;
    if (ctx) *ctx = current;
    current = 0;
    return 0;
}
CUresult cuCtxSynchronize(void) { REJECT; return 0; }
CUresult cuCtxSynchronize_v2(void *ctx) { REJECT; (void)ctx; return 0; }
CUresult cuStreamSynchronize(void *s) { REJECT; (void)s; return 0; }
CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
    REJECT;
    if (dev < 0 || dev >= DEVICES) return INVALID_DEVICE;
    memset(uuid, 0, 16);
    uuid[0] = 0x60 + dev;
    return 0;
}
/* Memory kinds: the fake's device range is device memory, the rest is
 * unknown to it (pageable host memory). */
CUresult cuPointerGetAttributes(unsigned n, unsigned *attrs, void **data, CUdeviceptr p) {
    REJECT;
    for (unsigned i = 0; i < n; i++) {
        int device = p >= 0x7e0000000000ULL && p < 0x7f8000000000ULL;
        if (attrs[i] == 2) *(unsigned *)data[i] = device ? 2 : 0;
        if (attrs[i] == 8) *(unsigned *)data[i] = 0;
    }
    return 0;
}

/* Freed blocks' addresses are handed out again, the most recently freed
 * first when its rounded size fits exactly (as the real driver reuses VA). */
static CUdeviceptr alloc_ptrs[64];
static size_t alloc_sizes[64];
static int alloc_live[64];
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
    REJECT;
    if (size == 0) return INVALID_VALUE;
    size_t rounded = (size + 0x1fffff) & ~0x1fffffULL;
    for (int i = 63; i >= 0; i--) {
        if (alloc_ptrs[i] && !alloc_live[i] && alloc_sizes[i] == rounded) {
            alloc_live[i] = 1;
            *p = alloc_ptrs[i];
            return 0;
        }
    }
    *p = next_ptr;
    next_ptr += rounded;
    for (int i = 0; i < 64; i++) {
        if (!alloc_ptrs[i]) {
            alloc_ptrs[i] = *p;
            alloc_sizes[i] = rounded;
            alloc_live[i] = 1;
            break;
        }
    }
    return 0;
}
static int allocated(CUdeviceptr p) {
    for (int i = 0; i < 64; i++)
        if (alloc_live[i] && alloc_ptrs[i] == p) return 1;
    return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
    REJECT;
    if (!p) return 1;
    for (int i = 0; i < 64; i++)
        if (alloc_ptrs[i] == p) alloc_live[i] = 0;
    return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { REJECT; (void)p; (void)v; (void)n; return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) { REJECT; (void)p; (void)v; (void)n; (void)s; return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { REJECT; (void)d; (void)s; (void)n; return 0; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { REJECT; (void)s; memset(d, 0xab, n); return 0; }

CUresult cuIpcGetMemHandle(CUipcHandle *h, CUdeviceptr p) {
    REJECT;
    if (!allocated(p)) return INVALID_VALUE;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, "MEMH", 4);
    memcpy(h->reserved + 8, &p, sizeof p);
    return 0;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcHandle h, unsigned flags) {
    CUdeviceptr exporter;
    REJECT;
    (void)flags;
    if (memcmp(h.reserved, "MEMH", 4) != 0) return 400; /* CUDA_ERROR_INVALID_HANDLE */
    memcpy(&exporter, h.reserved + 8, sizeof exporter);
    *p = exporter - 0x010000000000ULL;
    for (int i = 0; i < 64; i++) {
        if (open_counts[i] == 0 || open_ptrs[i] == *p) {
            open_ptrs[i] = *p;
            open_counts[i]++;
            return 0;
        }
    }
    return 2;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    REJECT;
    for (int i = 0; i < 64; i++)
        if (open_counts[i] > 0 && open_ptrs[i] == p) { open_counts[i]--; return 0; }
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}

CUresult cuEventCreate(void **e, unsigned flags) {
    REJECT;
    if (flags & ~0xfu) return INVALID_VALUE;
    *e = (void *)(next_obj += 0x10);
    return 0;
}
CUresult cuEventRecord(void *e, void *s) { REJECT; (void)e; (void)s; return 0; }
CUresult cuEventQuery(void *e) { REJECT; (void)e; return 0; }
CUresult cuEventSynchronize(void *e) { REJECT; (void)e; return 0; }
CUresult cuEventDestroy_v2(void *e) { REJECT; (void)e; return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) { REJECT; (void)s; (void)e; (void)flags; return 0; }
CUresult cuIpcGetEventHandle(CUipcHandle *h, void *e) {
    REJECT;
    if (!e) return INVALID_VALUE;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, "EVTH", 4);
    memcpy(h->reserved + 8, &e, sizeof e);
    return 0;
}
CUresult cuIpcOpenEventHandle(void **e, CUipcHandle h) {
    REJECT;
    if (memcmp(h.reserved, "EVTH", 4) != 0) return 400;
    *e = (void *)(next_obj += 0x10);
    return 0;
}

/* A function's parameters: the fake takes the function value as the count
 * of 8-byte parameters. */
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) {
    REJECT;
    if (i >= (size_t)(uintptr_t)f) return 1;
    *off = i * 8;
    *size = 8;
    return 0;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *s, void **params, void **extra) {
    REJECT;
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s;
    (void)params; (void)extra;
    return 0;
}

CUresult cuMemCreate(unsigned long long *h, size_t size, const void *prop, unsigned long long flags) {
    REJECT;
    if (size == 0 || !prop) return INVALID_VALUE;
    (void)flags;
    *h = (next_obj += 0x10);
    return 0;
}
CUresult cuMemExportToShareableHandle(void *out, unsigned long long h, int type, unsigned long long flags) {
    REJECT;
    (void)h; (void)flags;
    if (type != 1) return 1;
    *(int *)out = open("/dev/null", O_RDONLY);
    return 0;
}
CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *os, int type) {
    REJECT;
    (void)os;
    if (type != 1) return 1;
    *h = (next_obj += 0x10);
    return 0;
}
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags) {
    REJECT;
    if (size == 0) return INVALID_VALUE;
    (void)align; (void)addr; (void)flags;
    *p = next_ptr;
    next_ptr += (size + 0x1fffff) & ~0x1fffffULL;
    return 0;
}
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, unsigned long long h, unsigned long long fl) {
    REJECT;
    (void)p; (void)size; (void)off; (void)h; (void)fl;
    return 0;
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count) {
    REJECT;
    (void)p; (void)size; (void)desc; (void)count;
    return 0;
}
CUresult cuMemUnmap(CUdeviceptr p, size_t size) { REJECT; (void)p; (void)size; return 0; }
CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { REJECT; (void)p; (void)size; return 0; }
CUresult cuMemRelease(unsigned long long h) { REJECT; (void)h; return 0; }

struct entry { const char *name; void *fn; };
static const struct entry table[] = {
    {"cuInit", (void *)cuInit},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuIpcGetMemHandle", (void *)cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle},
    {"cuEventCreate", (void *)cuEventCreate},
    {"cuEventRecord", (void *)cuEventRecord},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2},
};
/* Every entry point by its exact name, when the transparency test links
 * its generated stubs in. */
extern const struct entry fake_all[] __attribute__((weak));
extern const int fake_all_count __attribute__((weak));
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status) {
    (void)version; (void)flags;
    for (int i = 0; fake_all && &fake_all_count && i < fake_all_count; i++) {
        if (strcmp(fake_all[i].name, symbol) == 0) {
            *pfn = fake_all[i].fn;
            if (status) *status = 0;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) == 0) {
            *pfn = table[i].fn;
            if (status) *status = 0;
            return 0;
        }
    }
    *pfn = 0;
    if (status) *status = 1;
    return 500; /* CUDA_ERROR_NOT_FOUND */
}
