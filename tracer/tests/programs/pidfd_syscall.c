/* Descriptor taking as PyTorch's expandable segments do it: the child
 * exports a VMM allocation as a POSIX descriptor and writes its number to a
 * pipe; the parent takes a copy with syscall(SYS_pidfd_open) and
 * syscall(SYS_pidfd_getfd) (not the glibc wrappers) and imports it, then
 * lets the child go and reaps it. Exit 77: this kernel or sandbox refuses
 * pidfd_getfd (nothing to check). */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemExportToShareableHandle(void *, unsigned long long, int, unsigned long long);
CUresult cuMemImportFromShareableHandle(unsigned long long *, void *, int);
CUresult cuMemRelease(unsigned long long);

int main(void) {
    struct { int type, handle_types, loc_type, loc_id; void *meta; unsigned char rest[16]; } prop = {1, 1, 1, 0, 0, {0}};
    int there[2], back[2], status, fd = -1;
    char byte = 0;
    if (pipe(there) || pipe(back)) return 2;
    cuInit(0);
    pid_t child = fork();
    if (child == 0) {
        unsigned long long handle;
        cuMemCreate(&handle, 2 << 20, &prop, 0);
        cuMemExportToShareableHandle(&fd, handle, 1, 0);
        if (write(there[1], &fd, sizeof fd) != sizeof fd) _exit(3);
        if (read(back[0], &byte, 1) != 1) _exit(3);
        close(fd);
        cuMemRelease(handle);
        _exit(0);
    }
    if (read(there[0], &fd, sizeof fd) != sizeof fd) return 4;
    long pidfd = syscall(SYS_pidfd_open, (long)child, 0L);
    long mine = pidfd < 0 ? -1 : syscall(SYS_pidfd_getfd, pidfd, (long)fd, 0L);
    int refused = mine < 0;
    if (!refused) {
        unsigned long long handle;
        cuMemImportFromShareableHandle(&handle, (void *)mine, 1);
        cuMemRelease(handle);
        close((int)mine);
    }
    if (write(back[1], &byte, 1) != 1) return 5;
    waitpid(child, &status, 0);
    return refused ? 77 : WEXITSTATUS(status);
}
