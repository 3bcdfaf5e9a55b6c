// What the probes of this folder share: a millisecond clock and a check
// that ends the probe on the first failing driver call.
#ifndef IPC_CONFORMANCE_PROBE_H
#define IPC_CONFORMANCE_PROBE_H
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// Milliseconds on CLOCK_MONOTONIC.
static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

#define CHECK(call)                                                        \
    do {                                                                   \
        CUresult r_ = (call);                                              \
        if (r_ != CUDA_SUCCESS) {                                          \
            const char *s_ = "?";                                          \
            cuGetErrorName(r_, &s_);                                       \
            fprintf(stderr, "%s failed: %s\n", #call, s_);                 \
            exit(2);                                                       \
        }                                                                  \
    } while (0)

#endif
