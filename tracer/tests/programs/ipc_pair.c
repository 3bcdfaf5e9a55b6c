/* Two processes sharing memory through the driver API, in the shape of
 * NVIDIA's simpleIPC: the exporter writes with a kernel, records an
 * interprocess event and passes both handles through a pipe; the importer
 * waits on the event, reads, closes. argv[1] picks a variant:
 *   ok, free-before-close, no-wait, double-close, leak, crash, vmm, get-ok,
 *   ignored-error, reuse (after its first close the importer keeps the
 *   handle's bytes; the exporter frees the block, allocates and exports a
 *   new one of the same size, and the importer re-opens the old bytes,
 *   reaching the new block only because the driver reuses the address).
 *   vmm-free-before-release (the exporter unmaps and releases while the
 *   importer maps), vmm-double-close (the importer unmaps and releases
 *   twice), vmm-leak (the importer exits holding its handle, mapping and
 *   reservation).
 * Built against the fake libcuda in tests. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char reserved[64]; } CUipcHandle;
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);
CUresult cuIpcGetMemHandle(CUipcHandle *, CUdeviceptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcHandle, unsigned);
CUresult cuIpcCloseMemHandle(CUdeviceptr);
CUresult cuEventCreate(void **, unsigned);
CUresult cuEventRecord(void *, void *);
CUresult cuEventDestroy_v2(void *);
CUresult cuStreamWaitEvent(void *, void *, unsigned);
CUresult cuIpcGetEventHandle(CUipcHandle *, void *);
CUresult cuIpcOpenEventHandle(void **, CUipcHandle);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        void *, void **, void **);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemExportToShareableHandle(void *, unsigned long long, int, unsigned long long);
CUresult cuMemImportFromShareableHandle(unsigned long long *, void *, int);
CUresult cuMemAddressReserve(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
CUresult cuMemSetAccess(CUdeviceptr, size_t, const void *, size_t);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemAddressFree(CUdeviceptr, size_t);
CUresult cuMemRelease(unsigned long long);

#define SIZE (1 << 20)
/* The fake reads a function's value as its count of pointer parameters. */
#define ONE_POINTER_KERNEL ((void *)1)

static void launch(CUdeviceptr p) {
    void *params[] = {&p};
    cuLaunchKernel(ONE_POINTER_KERNEL, 1, 1, 1, 256, 1, 1, 0, 0, params, 0);
}

static void context(void) {
    void *ctx;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&ctx, 0);
    cuCtxSetCurrent(ctx);
}

static void put(int fd, const void *b, size_t n) { if (write(fd, b, n) != (ssize_t)n) exit(3); }
static void get(int fd, void *b, size_t n) { if (read(fd, b, n) != (ssize_t)n) exit(3); }

static int vmm(const char *mode) {
    struct { int type, handle_types, loc_type, loc_id; void *meta; unsigned char rest[16]; } prop = {1, 1, 1, 0, 0, {0}};
    struct { int loc_type, loc_id, flags; } access = {1, 0, 3};
    unsigned long long m;
    CUdeviceptr va;
    int fd;
    char buf[16];
    context();
    cuMemCreate(&m, 2 << 20, &prop, 0);
    cuMemExportToShareableHandle(&fd, m, 1, 0);
    cuMemAddressReserve(&va, 2 << 20, 0, 0, 0);
    cuMemMap(va, 2 << 20, 0, m, 0);
    cuMemSetAccess(va, 2 << 20, &access, 1);
    cuMemsetD8_v2(va, 0x5a, 2 << 20);
    cuCtxSynchronize();
    int early = strcmp(mode, "vmm-free-before-release") == 0;
    int up[2], down[2];
    if (pipe(up) || pipe(down)) return 2;
    pid_t child = fork();
    if (child == 0) {
        unsigned long long pm;
        CUdeviceptr pva;
        context();
        cuMemImportFromShareableHandle(&pm, (void *)(long)fd, 1);
        cuMemAddressReserve(&pva, 2 << 20, 0, 0, 0);
        cuMemMap(pva, 2 << 20, 0, pm, 0);
        cuMemSetAccess(pva, 2 << 20, &access, 1);
        cuMemcpyDtoH_v2(buf, pva, sizeof buf);
        if (early) {
            /* Tell the exporter we map it, wait for its release, read again. */
            put(up[1], buf, 1);
            get(down[0], buf, 1);
            cuMemcpyDtoH_v2(buf, pva, sizeof buf);
        }
        if (strcmp(mode, "vmm-leak") == 0) exit(0);
        cuMemUnmap(pva, 2 << 20);
        cuMemAddressFree(pva, 2 << 20);
        cuMemRelease(pm);
        if (strcmp(mode, "vmm-double-close") == 0) {
            cuMemUnmap(pva, 2 << 20);
            cuMemRelease(pm);
        }
        exit(0);
    }
    int status;
    if (early) {
        get(up[0], buf, 1);
        cuMemUnmap(va, 2 << 20);
        cuMemAddressFree(va, 2 << 20);
        cuMemRelease(m);
        put(down[1], buf, 1);
    }
    waitpid(child, &status, 0);
    if (!early) {
        cuMemUnmap(va, 2 << 20);
        cuMemAddressFree(va, 2 << 20);
        cuMemRelease(m);
    }
    return WEXITSTATUS(status);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    int to_child[2], to_parent[2];
    CUipcHandle handles[2];
    char byte = 0, buf[16];
    if (strncmp(mode, "vmm", 3) == 0) return vmm(mode);
    if (pipe(to_child) || pipe(to_parent)) return 2;
    pid_t child = fork();
    if (child == 0) {
        CUdeviceptr p;
        void *e;
        /* Only the parent's ends stay open: a parent that dies ends the child's reads. */
        close(to_child[1]);
        close(to_parent[0]);
        get(to_child[0], handles, sizeof handles);
        context();
        if (strcmp(mode, "ignored-error") == 0) handles[0].reserved[0] ^= 0xff;
        cuIpcOpenMemHandle_v2(&p, handles[0], 1);
        cuIpcOpenEventHandle(&e, handles[1]);
        if (strcmp(mode, "no-wait") != 0) cuStreamWaitEvent(0, e, 0);
        launch(p);
        cuMemcpyDtoH_v2(buf, p, sizeof buf);
        put(to_parent[1], &byte, 1);
        get(to_child[0], &byte, 1);
        if (strcmp(mode, "leak") != 0) cuIpcCloseMemHandle(p);
        if (strcmp(mode, "double-close") == 0) cuIpcCloseMemHandle(p);
        if (strcmp(mode, "reuse") == 0) {
            put(to_parent[1], &byte, 1);
            get(to_child[0], &byte, 1);
            cuIpcOpenMemHandle_v2(&p, handles[0], 1);
            cuMemcpyDtoH_v2(buf, p, sizeof buf);
            cuIpcCloseMemHandle(p);
        }
        cuEventDestroy_v2(e);
        put(to_parent[1], &byte, 1);
        exit(0);
    }
    CUdeviceptr d;
    void *e;
    int status, freed = 0;
    close(to_child[0]);
    close(to_parent[1]);
    context();
    cuMemAlloc_v2(&d, SIZE);
    cuMemsetD8_v2(d, 0, SIZE);
    cuCtxSynchronize();
    cuEventCreate(&e, 2 | 4); /* disable timing, interprocess */
    cuIpcGetMemHandle(&handles[0], d);
    cuIpcGetEventHandle(&handles[1], e);
    if (strcmp(mode, "crash") == 0) raise(SIGSEGV);
    launch(d);
    cuEventRecord(e, 0);
    put(to_child[1], handles, sizeof handles);
    get(to_parent[0], &byte, 1);
    if (strcmp(mode, "free-before-close") == 0) { cuMemFree_v2(d); freed = 1; }
    put(to_child[1], &byte, 1);
    get(to_parent[0], &byte, 1);
    if (strcmp(mode, "reuse") == 0) {
        CUipcHandle again;
        cuMemFree_v2(d);
        cuMemAlloc_v2(&d, SIZE);
        cuMemsetD8_v2(d, 1, SIZE);
        cuCtxSynchronize();
        cuIpcGetMemHandle(&again, d);
        put(to_child[1], &byte, 1);
        get(to_parent[0], &byte, 1);
    }
    if (!freed) cuMemFree_v2(d);
    cuEventDestroy_v2(e);
    waitpid(child, &status, 0);
    return WEXITSTATUS(status);
}
