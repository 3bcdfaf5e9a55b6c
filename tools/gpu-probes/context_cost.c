// Measures what the CUDA driver charges for the work that bounds GPU
// exploration: making a context, a process's start and its exit, and
// whether one process's context work stalls another's calls.
//
// Build (on a GPU host): nvcc -O2 -o context_cost context_cost.c -lcuda
// Usage:
//   context_cost init                 cuInit, primary context, first alloc
//   context_cost create N [FLAGS]     N cuCtxCreate, then N cuCtxDestroy
//   context_cost hold SECONDS [K]     primary + K contexts (2), then sleep
//   context_cost exit K               a child with primary + K contexts
//                                     exits; time until waitpid returns
//   context_cost calls SECONDS        alloc/free + IPC handle loop; prints
//                                     the mean and slowest call
//   context_cost churn SECONDS        create/destroy contexts in a loop
// Times are milliseconds on CLOCK_MONOTONIC.
#include "probe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static CUdevice dev;

static void start_primary(int quiet) {
    double t0 = now_ms();
    CHECK(cuInit(0));
    double t1 = now_ms();
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext primary;
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, 1 << 20));
    double t2 = now_ms();
    if (!quiet)
        printf("init: cuInit %.1f ms, primary context + first alloc %.1f ms\n",
               t1 - t0, t2 - t1);
}

static CUcontext create(unsigned flags) {
    CUcontext c;
    CHECK(cuCtxCreate_v4(&c, NULL, flags, dev));
    return c;
}

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    const char *what = argv[1];
    if (!strcmp(what, "init")) {
        start_primary(0);
    } else if (!strcmp(what, "create")) {
        int n = argc > 2 ? atoi(argv[2]) : 4;
        unsigned flags = argc > 3 ? (unsigned)strtoul(argv[3], 0, 0) : 0;
        start_primary(1);
        CUcontext cs[64];
        printf("create flags=0x%x:", flags);
        for (int i = 0; i < n; i++) {
            double t0 = now_ms();
            cs[i] = create(flags);
            printf(" %.1f", now_ms() - t0);
        }
        printf(" ms\ndestroy:");
        for (int i = n - 1; i >= 0; i--) {
            double t0 = now_ms();
            CHECK(cuCtxDestroy(cs[i]));
            printf(" %.1f", now_ms() - t0);
        }
        printf(" ms\n");
    } else if (!strcmp(what, "hold")) {
        int k = argc > 3 ? atoi(argv[3]) : 2;
        start_primary(1);
        for (int i = 0; i < k; i++) create(0);
        sleep(argc > 2 ? atoi(argv[2]) : 10);
    } else if (!strcmp(what, "exit")) {
        int k = argc > 2 ? atoi(argv[2]) : 0;
        int ready[2], go[2];
        if (pipe(ready) || pipe(go)) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            start_primary(1);
            for (int i = 0; i < k; i++) create(0);
            char b = 1;
            if (write(ready[1], &b, 1) != 1) _exit(3);
            if (read(go[0], &b, 1) != 1) _exit(3);
            exit(0);
        }
        char b;
        if (read(ready[0], &b, 1) != 1) return 1;
        double t0 = now_ms();
        if (write(go[1], &b, 1) != 1) return 1;
        int status;
        waitpid(pid, &status, 0);
        printf("exit with primary + %d contexts: %.1f ms\n", k, now_ms() - t0);
    } else if (!strcmp(what, "calls")) {
        double secs = argc > 2 ? atof(argv[2]) : 3;
        start_primary(1);
        double end = now_ms() + secs * 1e3, worst = 0, total = 0;
        long n = 0;
        while (now_ms() < end) {
            double t0 = now_ms();
            CUdeviceptr p;
            CUipcMemHandle h;
            CHECK(cuMemAlloc(&p, 2 << 20));
            CHECK(cuIpcGetMemHandle(&h, p));
            CHECK(cuMemFree(p));
            double d = now_ms() - t0;
            total += d;
            if (d > worst) worst = d;
            n++;
        }
        printf("calls: %ld rounds, mean %.3f ms, slowest %.1f ms\n", n, total / n, worst);
    } else if (!strcmp(what, "churn")) {
        double secs = argc > 2 ? atof(argv[2]) : 3;
        start_primary(1);
        double end = now_ms() + secs * 1e3;
        int n = 0;
        while (now_ms() < end) {
            CUcontext c = create(0);
            CHECK(cuCtxDestroy(c));
            n++;
        }
        printf("churn: %d contexts made and destroyed\n", n);
    }
    return 0;
}
