/* Driver calls a real driver rejects, each with an output argument that
 * points nowhere (a driver may leave outputs unwritten when it fails):
 * the program must fare the same traced and untraced. Each call runs in a
 * child of its own and the parent prints "name result" or
 * "name signal N". Built against the stand-in libcuda. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char reserved[64]; } CUipcHandle;
CUresult cuInit(unsigned);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuIpcGetMemHandle(CUipcHandle *, CUdeviceptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *, CUipcHandle, unsigned);
CUresult cuCtxPopCurrent_v2(void **);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxCreate_v2(void **, unsigned, int);
CUresult cuEventCreate(void **, unsigned);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemImportFromShareableHandle(unsigned long long *, void *, int);
CUresult cuMemExportToShareableHandle(void *, unsigned long long, int, unsigned long long);

/* Non-null, never mapped. */
#define DANGLING ((void *)0x10)

static CUresult run(int which) {
    CUipcHandle bad;
    struct { int type, handle_types, loc_type, loc_id; void *meta; unsigned char rest[16]; } prop = {1, 1, 1, 0, 0, {0}};
    memset(&bad, 0x5a, sizeof bad);
    cuInit(0);
    switch (which) {
    case 0: return cuMemAlloc_v2(DANGLING, 0);
    case 1: return cuIpcGetMemHandle(DANGLING, 0x1234);
    case 2: return cuIpcOpenMemHandle_v2(DANGLING, bad, 1);
    case 3: return cuCtxPopCurrent_v2(DANGLING);
    case 4: return cuDevicePrimaryCtxRetain(DANGLING, 99);
    case 5: return cuCtxCreate_v2(DANGLING, 0, 99);
    case 6: return cuEventCreate(DANGLING, 0xffff);
    case 7: return cuMemCreate(DANGLING, 0, &prop, 0);
    /* Another handle type: the second argument is a value, not memory. */
    case 8: return cuMemImportFromShareableHandle(DANGLING, (void *)(long)7, 2);
    case 9: return cuMemExportToShareableHandle(DANGLING, 0x77, 2, 0);
    }
    return -1;
}

static const char *names[] = {
    "cuMemAlloc_v2 size 0", "cuIpcGetMemHandle unknown pointer", "cuIpcOpenMemHandle_v2 bad handle",
    "cuCtxPopCurrent_v2 nothing current", "cuDevicePrimaryCtxRetain missing device",
    "cuCtxCreate_v2 missing device", "cuEventCreate bad flags", "cuMemCreate size 0",
    "cuMemImportFromShareableHandle other type", "cuMemExportToShareableHandle other type",
};

int main(void) {
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        int fds[2], status;
        CUresult r = -1;
        if (pipe(fds)) return 2;
        pid_t child = fork();
        if (child == 0) {
            r = run(i);
            if (write(fds[1], &r, sizeof r) != sizeof r) _exit(3);
            _exit(0);
        }
        close(fds[1]);
        waitpid(child, &status, 0);
        if (WIFSIGNALED(status)) {
            printf("%s: signal %d\n", names[i], WTERMSIG(status));
        } else if (read(fds[0], &r, sizeof r) == sizeof r) {
            printf("%s: %d\n", names[i], r);
        } else {
            printf("%s: exit %d\n", names[i], WEXITSTATUS(status));
        }
        close(fds[0]);
    }
    return 0;
}
