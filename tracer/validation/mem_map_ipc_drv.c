/* Two processes share a VMM allocation through the driver API, in the shape
 * of NVIDIA's memMapIPCDrv sample (written for this suite): the exporter
 * creates shareable memory, maps it, fills it asynchronously, records an
 * interprocess event, and passes the POSIX descriptor over a Unix socket
 * (SCM_RIGHTS) with the event's handle; the importer imports, maps, waits
 * on the event, reads, and unmaps.
 *
 * Broken variants: no-wait (the importer reads without waiting on the
 * event), free-before-close (the exporter unmaps and releases while the
 * importer maps: defined for VMM, the allocation lives until its last
 * mapping and handle are gone), double-close (the importer unmaps and
 * releases twice), leak (the importer exits without unmapping, freeing
 * its reservation or releasing its handle).
 *
 * usage: mem_map_ipc_drv [ok|no-wait|free-before-close|double-close|leak]
 * build: cc -I$CUDA_HOME/include -o mem_map_ipc_drv mem_map_ipc_drv.c -lcuda */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                     \
            fprintf(stderr, "%s:%d: %s failed with %d\n", __FILE__, __LINE__, #call,  \
                    (int)r_);                                                         \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static void send_fd(int sock, int fd, const void *data, size_t len) {
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {(void *)data, len};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != (ssize_t)len) exit(3);
}

static int recv_fd(int sock, void *data, size_t len) {
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {data, len};
    struct msghdr msg = {0};
    int fd;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    if (recvmsg(sock, &msg, 0) != (ssize_t)len) exit(3);
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
    return fd;
}

static size_t setup(CUcontext *ctx, CUmemAllocationProp *prop) {
    size_t granularity;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(ctx, 0));
    CHECK(cuCtxSetCurrent(*ctx));
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = 0;
    CHECK(cuMemGetAllocationGranularity(&granularity, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return granularity * 8;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    int sv[2];
    char byte = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
    pid_t child = fork(); /* before any CUDA call */
    CUcontext ctx;
    CUmemAllocationProp prop;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUipcEventHandle eh;
    CUevent e;
    CUdeviceptr va;
    CUmemGenericAllocationHandle m;
    if (child == 0) {
        close(sv[0]);
        size_t size = setup(&ctx, &prop);
        unsigned char buf[64];
        int fd = recv_fd(sv[1], &eh, sizeof eh);
        CHECK(cuMemImportFromShareableHandle(&m, (void *)(long)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
        CHECK(cuMemMap(va, size, 0, m, 0));
        CHECK(cuMemSetAccess(va, size, &access, 1));
        CHECK(cuIpcOpenEventHandle(&e, eh));
        if (strcmp(mode, "no-wait") != 0) CHECK(cuStreamWaitEvent(0, e, 0));
        CHECK(cuMemcpyDtoH(buf, va + size - sizeof buf, sizeof buf));
        printf("importer: last byte 0x%02x (expected 0x5a)\n", buf[sizeof buf - 1]);
        if (strcmp(mode, "free-before-close") == 0) {
            /* Tell the exporter it is mapped here, wait for its release, read again. */
            if (write(sv[1], &byte, 1) != 1 || read(sv[1], &byte, 1) != 1) return 3;
            CHECK(cuMemcpyDtoH(buf, va + size - sizeof buf, sizeof buf));
        }
        if (strcmp(mode, "leak") == 0) {
            CHECK(cuEventDestroy(e));
            if (write(sv[1], &byte, 1) != 1) return 3;
            return 0;
        }
        CHECK(cuMemUnmap(va, size));
        CHECK(cuMemAddressFree(va, size));
        CHECK(cuMemRelease(m));
        if (strcmp(mode, "double-close") == 0) {
            /* The driver refuses these; the checker flags them whatever it answered. */
            (void)cuMemUnmap(va, size);
            (void)cuMemRelease(m);
        }
        CHECK(cuEventDestroy(e));
        close(fd);
        if (write(sv[1], &byte, 1) != 1) return 3;
        return 0;
    }
    close(sv[1]);
    size_t size = setup(&ctx, &prop);
    int fd, status;
    CHECK(cuMemCreate(&m, size, &prop, 0));
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemMap(va, size, 0, m, 0));
    CHECK(cuMemSetAccess(va, size, &access, 1));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
    CHECK(cuIpcGetEventHandle(&eh, e));
    CHECK(cuMemsetD8Async(va, 0x5a, size, 0));
    CHECK(cuEventRecord(e, 0));
    CHECK(cuMemExportToShareableHandle(&fd, m, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    send_fd(sv[0], fd, &eh, sizeof eh);
    if (read(sv[0], &byte, 1) != 1) return 3;
    CHECK(cuMemUnmap(va, size));
    CHECK(cuMemAddressFree(va, size));
    CHECK(cuMemRelease(m));
    if (strcmp(mode, "free-before-close") == 0) {
        if (write(sv[0], &byte, 1) != 1 || read(sv[0], &byte, 1) != 1) return 3;
    }
    CHECK(cuEventDestroy(e));
    close(fd);
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
