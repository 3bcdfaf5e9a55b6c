/* Time per call of a traced entry point (cuEventQuery), with and without
 * the tracer preloaded: run it both ways and subtract. usage: overhead [N] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int cuInit(unsigned);
int cuDevicePrimaryCtxRetain(void **, int);
int cuCtxSetCurrent(void *);
int cuEventCreate(void **, unsigned);
int cuEventQuery(void *);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    void *e;
    struct timespec a, b;
    void *ctx;
    /* A real driver needs a current context before an event exists. */
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) ||
        cuEventCreate(&e, 2)) {
        fprintf(stderr, "overhead: no CUDA context or event\n");
        return 1;
    }
    cuEventQuery(e); /* resolve and open the trace file before timing */
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) cuEventQuery(e);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
    printf("%.1f ns per cuEventQuery over %ld calls\n", ns, n);
    return 0;
}
