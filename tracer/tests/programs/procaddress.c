/* Reaches the driver the way the CUDA runtime and ctypes do: dlopen of
 * libcuda, dlsym, and cuGetProcAddress for the rest. Not linked to libcuda. */
#include <dlfcn.h>
#include <stdio.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char reserved[64]; } CUipcHandle;
typedef CUresult (*GetProc)(const char *, void **, int, unsigned long long, int *);

int main(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "no libcuda: %s\n", dlerror()); return 2; }
    GetProc get_proc = (GetProc)dlsym(lib, "cuGetProcAddress_v2");
    CUresult (*mem_free)(CUdeviceptr) = (CUresult (*)(CUdeviceptr))dlsym(lib, "cuMemFree_v2");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = 0;
    CUresult (*get_handle)(CUipcHandle *, CUdeviceptr) = 0;
    int status;
    if (!get_proc || !mem_free) return 3;
    get_proc("cuMemAlloc", (void **)&mem_alloc, 12000, 0, &status);
    get_proc("cuIpcGetMemHandle", (void **)&get_handle, 12000, 0, &status);
    if (!mem_alloc || !get_handle) return 4;
    CUdeviceptr p;
    CUipcHandle h;
    mem_alloc(&p, 4096);
    get_handle(&h, p);
    mem_free(p);
    return 0;
}
