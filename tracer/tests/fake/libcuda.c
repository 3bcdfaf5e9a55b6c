/* A stand-in libcuda.so.1 for testing the tracer without a GPU: every
 * traced entry point with deterministic answers (pointers and handles are
 * numbers derived from counters, IPC handles carry the exporter's pointer).
 * It judges nothing; the checker does. Build:
 *   cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o libcuda.so.1 libcuda.c */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char reserved[64]; } CUipcHandle;

static CUdeviceptr next_ptr = 0x7f0000000000ULL;
static uintptr_t next_obj = 0x1000;
static CUdeviceptr open_ptrs[64];
static int open_counts[64];

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)(uintptr_t)(0xc0 + dev); return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }

/* Freed blocks' addresses are handed out again, the most recently freed
 * first when its rounded size fits exactly (as the real driver reuses VA). */
static CUdeviceptr alloc_ptrs[64];
static size_t alloc_sizes[64];
static int alloc_live[64];
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
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
CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!p) return 1;
    for (int i = 0; i < 64; i++)
        if (alloc_ptrs[i] == p) alloc_live[i] = 0;
    return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { (void)p; (void)v; (void)n; return 0; }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) { (void)p; (void)v; (void)n; (void)s; return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { (void)d; (void)s; (void)n; return 0; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { (void)s; memset(d, 0xab, n); return 0; }

CUresult cuIpcGetMemHandle(CUipcHandle *h, CUdeviceptr p) {
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, "MEMH", 4);
    memcpy(h->reserved + 8, &p, sizeof p);
    return 0;
}
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcHandle h, unsigned flags) {
    CUdeviceptr exporter;
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
    for (int i = 0; i < 64; i++)
        if (open_counts[i] > 0 && open_ptrs[i] == p) { open_counts[i]--; return 0; }
    return 1; /* CUDA_ERROR_INVALID_VALUE */
}

CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = (void *)(next_obj += 0x10); return 0; }
CUresult cuEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
CUresult cuEventQuery(void *e) { (void)e; return 0; }
CUresult cuEventSynchronize(void *e) { (void)e; return 0; }
CUresult cuEventDestroy_v2(void *e) { (void)e; return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) { (void)s; (void)e; (void)flags; return 0; }
CUresult cuIpcGetEventHandle(CUipcHandle *h, void *e) {
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, "EVTH", 4);
    memcpy(h->reserved + 8, &e, sizeof e);
    return 0;
}
CUresult cuIpcOpenEventHandle(void **e, CUipcHandle h) {
    if (memcmp(h.reserved, "EVTH", 4) != 0) return 400;
    *e = (void *)(next_obj += 0x10);
    return 0;
}

/* A function's parameters: the fake takes the function value as the count
 * of 8-byte parameters. */
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size) {
    if (i >= (size_t)(uintptr_t)f) return 1;
    *off = i * 8;
    *size = 8;
    return 0;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *s, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)s;
    (void)params; (void)extra;
    return 0;
}

CUresult cuMemCreate(unsigned long long *h, size_t size, const void *prop, unsigned long long flags) {
    (void)size; (void)prop; (void)flags;
    *h = (next_obj += 0x10);
    return 0;
}
CUresult cuMemExportToShareableHandle(void *out, unsigned long long h, int type, unsigned long long flags) {
    (void)h; (void)flags;
    if (type != 1) return 1;
    *(int *)out = open("/dev/null", O_RDONLY);
    return 0;
}
CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *os, int type) {
    (void)os;
    if (type != 1) return 1;
    *h = (next_obj += 0x10);
    return 0;
}
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                             unsigned long long flags) {
    (void)align; (void)addr; (void)flags;
    *p = next_ptr;
    next_ptr += (size + 0x1fffff) & ~0x1fffffULL;
    return 0;
}
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off, unsigned long long h, unsigned long long fl) {
    (void)p; (void)size; (void)off; (void)h; (void)fl;
    return 0;
}
CUresult cuMemSetAccess(CUdeviceptr p, size_t size, const void *desc, size_t count) {
    (void)p; (void)size; (void)desc; (void)count;
    return 0;
}
CUresult cuMemUnmap(CUdeviceptr p, size_t size) { (void)p; (void)size; return 0; }
CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { (void)p; (void)size; return 0; }
CUresult cuMemRelease(unsigned long long h) { (void)h; return 0; }

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
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status) {
    (void)version; (void)flags;
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
