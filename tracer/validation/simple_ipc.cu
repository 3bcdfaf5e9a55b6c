// Two processes share device memory through the CUDA runtime, in the shape
// of NVIDIA's simpleIPC sample (written for this suite): the processes are
// forked before CUDA starts; the exporter writes the buffer with a kernel
// and an asynchronous memset, records an interprocess event and passes both
// handles through a pipe; the importer waits on the event, reads the buffer
// with a kernel and a copy, and closes.
//
// usage: simple_ipc [ok|free-before-close|no-wait|double-close|leak]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N (1 << 20)
#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t err_ = (call);                                                    \
        if (err_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(err_));                                        \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

struct Handles {
    cudaIpcMemHandle_t mem;
    cudaIpcEventHandle_t event;
};

// Long enough that a reader that does not wait sees it unfinished.
__global__ void slow_fill(unsigned char *p, size_t n, unsigned char value) {
    long long start = clock64();
    while (clock64() - start < 200000000LL) {
    }
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = value;
}

__global__ void sum(const unsigned char *p, size_t n, unsigned long long *out) {
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(out, (unsigned long long)p[i]);
}

static void put(int fd, const void *b, size_t n) { if (write(fd, b, n) != (ssize_t)n) exit(3); }
static void get(int fd, void *b, size_t n) { if (read(fd, b, n) != (ssize_t)n) exit(3); }

static int importer(const char *mode, int rd, int wr) {
    Handles h;
    unsigned char *p;
    unsigned long long *total, host_total = 0;
    cudaEvent_t e;
    char byte = 0;
    get(rd, &h, sizeof h);
    CHECK(cudaSetDevice(0));
    CHECK(cudaIpcOpenMemHandle((void **)&p, h.mem, cudaIpcMemLazyEnablePeerAccess));
    CHECK(cudaIpcOpenEventHandle(&e, h.event));
    if (strcmp(mode, "no-wait") != 0) CHECK(cudaStreamWaitEvent(0, e, 0));
    CHECK(cudaMalloc(&total, sizeof *total));
    CHECK(cudaMemset(total, 0, sizeof *total));
    sum<<<64, 256>>>(p, N, total);
    CHECK(cudaMemcpy(&host_total, total, sizeof host_total, cudaMemcpyDeviceToHost));
    printf("importer: sum %llu (expected %llu)\n", host_total, (unsigned long long)N * 0x5a);
    CHECK(cudaFree(total));
    put(wr, &byte, 1);
    get(rd, &byte, 1);
    if (strcmp(mode, "leak") != 0) CHECK(cudaIpcCloseMemHandle(p));
    if (strcmp(mode, "double-close") == 0) {
        cudaError_t again = cudaIpcCloseMemHandle(p);  // the bug: a second close
        printf("importer: second close: %s\n", cudaGetErrorString(again));
    }
    CHECK(cudaEventDestroy(e));
    put(wr, &byte, 1);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent)) return 2;
    pid_t child = fork();  // before any CUDA call, as simpleIPC does
    if (child == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        exit(importer(mode, to_child[0], to_parent[1]));
    }
    close(to_child[0]);
    close(to_parent[1]);
    Handles h;
    unsigned char *d;
    cudaEvent_t e;
    char byte;
    int status, freed = 0;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&d, N));
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess));
    CHECK(cudaIpcGetMemHandle(&h.mem, d));
    CHECK(cudaIpcGetEventHandle(&h.event, e));
    slow_fill<<<64, 256>>>(d, N, 0x5a);
    CHECK(cudaMemsetAsync(d, 0x5a, 4096, 0));  // seen by the tracer whatever the launch path
    CHECK(cudaEventRecord(e, 0));
    put(to_child[1], &h, sizeof h);
    get(to_parent[0], &byte, 1);
    if (strcmp(mode, "free-before-close") == 0) {
        CHECK(cudaFree(d));  // the bug: the importer still maps it
        freed = 1;
    }
    put(to_child[1], &byte, 1);
    get(to_parent[0], &byte, 1);
    if (!freed) CHECK(cudaFree(d));
    CHECK(cudaEventDestroy(e));
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
