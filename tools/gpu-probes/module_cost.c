// Measures what a worker's first kernel launch costs in a context, and
// whether loading a module moves where later allocations land: the copy
// kernel of `device_read` is PTX that the driver JIT-compiles the first
// time a context needs it (harness/src/cuda/worker.rs).
//
// Build (on a GPU host): nvcc -O2 -o module_cost module_cost.c -lcuda
// Usage:
//   module_cost read             a device_read's phases twice in the primary
//                                context, then twice in a created one
//   module_cost place 0|1        allocation addresses without (0) or after
//                                (1) loading the module first
//   module_cost link             PTX -> cubin with cuLink*, then the
//                                cubin's load in a new context
// Times are milliseconds on CLOCK_MONOTONIC.
#include "probe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The copy kernel of harness/src/cuda/worker.rs (COPY_BYTES_PTX).
static const char PTX[] =
"\n"
".version 7.0\n"
".target sm_52\n"
".address_size 64\n"
"\n"
".visible .entry copy_bytes(\n"
"    .param .u64 copy_bytes_param_0,\n"
"    .param .u64 copy_bytes_param_1,\n"
"    .param .u64 copy_bytes_param_2\n"
")\n"
"{\n"
"    .reg .pred %p<2>;\n"
"    .reg .b16 %rs<2>;\n"
"    .reg .b32 %r<4>;\n"
"    .reg .b64 %rd<11>;\n"
"\n"
"    ld.param.u64 %rd1, [copy_bytes_param_0];\n"
"    ld.param.u64 %rd2, [copy_bytes_param_1];\n"
"    ld.param.u64 %rd3, [copy_bytes_param_2];\n"
"    mov.u32 %r1, %ctaid.x;\n"
"    mov.u32 %r2, %ntid.x;\n"
"    mov.u32 %r3, %tid.x;\n"
"    mul.wide.u32 %rd4, %r1, %r2;\n"
"    cvt.u64.u32 %rd5, %r3;\n"
"    add.s64 %rd6, %rd4, %rd5;\n"
"    setp.ge.u64 %p1, %rd6, %rd3;\n"
"    @%p1 bra $L__done;\n"
"    cvta.to.global.u64 %rd7, %rd1;\n"
"    add.s64 %rd8, %rd7, %rd6;\n"
"    ld.global.u8 %rs1, [%rd8];\n"
"    cvta.to.global.u64 %rd9, %rd2;\n"
"    add.s64 %rd10, %rd9, %rd6;\n"
"    st.global.u8 [%rd10], %rs1;\n"
"$L__done:\n"
"    ret;\n"
"}\n"
"";

static CUdevice dev;

static void start_primary(void) {
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext primary;
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));
}

// One device_read of 16 bytes of `src` as the worker does it; prints each
// phase. `f` is loaded first when null.
static void device_read(const char *label, CUdeviceptr src, CUfunction *f) {
    double t0 = now_ms();
    if (!*f) {
        CUmodule m;
        CHECK(cuModuleLoadData(&m, PTX));
        CHECK(cuModuleGetFunction(f, m, "copy_bytes"));
    }
    double t1 = now_ms();
    CUdeviceptr scratch;
    CHECK(cuMemAlloc(&scratch, 16));
    double t2 = now_ms();
    unsigned long long n = 16;
    void *args[] = {&src, &scratch, &n};
    CHECK(cuLaunchKernel(*f, 1, 1, 1, 256, 1, 1, 0, 0, args, 0));
    double t3 = now_ms();
    CHECK(cuCtxSynchronize());
    double t4 = now_ms();
    unsigned char out[16];
    CHECK(cuMemcpyDtoH(out, scratch, 16));
    double t5 = now_ms();
    CHECK(cuMemFree(scratch));
    double t6 = now_ms();
    printf("%s: load %.2f alloc %.2f launch %.2f sync %.2f dtoh %.2f free %.2f total %.2f ms\n",
           label, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t6 - t0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: module_cost read | place 0|1 | link\n");
        return 1;
    }
    double t0 = now_ms();
    start_primary();
    printf("start: %.1f ms\n", now_ms() - t0);
    if (!strcmp(argv[1], "read")) {
        CUdeviceptr p;
        CHECK(cuMemAlloc(&p, 1024));
        CUfunction f = 0;
        device_read("primary, first", p, &f);
        device_read("primary, again", p, &f);
        CUcontext c;
        double t = now_ms();
        CHECK(cuCtxCreate_v4(&c, NULL, 0, dev));
        printf("ctx_create: %.1f ms\n", now_ms() - t);
        CUdeviceptr q;
        CHECK(cuMemAlloc(&q, 1024));
        CUfunction g = 0;
        device_read("created, first", q, &g);
        device_read("created, again", q, &g);
    } else if (!strcmp(argv[1], "place") && argc > 2) {
        if (atoi(argv[2])) {
            CUmodule m;
            double t = now_ms();
            CHECK(cuModuleLoadData(&m, PTX));
            printf("module loaded first: %.2f ms\n", now_ms() - t);
        }
        size_t sizes[] = {1000, 2 << 20, 1000, 64 << 20, 4096};
        for (int i = 0; i < 5; i++) {
            CUdeviceptr p;
            CHECK(cuMemAlloc(&p, sizes[i]));
            printf("alloc %zu -> 0x%llx\n", sizes[i], (unsigned long long)p);
        }
        CUdeviceptr h;
        CHECK(cuMemHostAlloc((void **)&h, 4096, 0));
        printf("host alloc 4096 -> 0x%llx\n", (unsigned long long)h);
    } else if (!strcmp(argv[1], "link")) {
        double t = now_ms();
        CUlinkState link;
        CHECK(cuLinkCreate(0, 0, 0, &link));
        CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, (void *)PTX, sizeof PTX, "copy", 0, 0, 0));
        void *cubin;
        size_t size;
        CHECK(cuLinkComplete(link, &cubin, &size));
        printf("link to cubin: %.2f ms (%zu bytes)\n", now_ms() - t, size);
        CUcontext c;
        CHECK(cuCtxCreate_v4(&c, NULL, 0, dev));
        t = now_ms();
        CUmodule m;
        CHECK(cuModuleLoadData(&m, cubin));
        printf("cubin load in a new context: %.2f ms\n", now_ms() - t);
        CHECK(cuLinkDestroy(link));
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 1;
    }
    return 0;
}
