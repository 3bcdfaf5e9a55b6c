/* Descriptor passing as NVIDIA's memMapIPCDrv does it: the child binds a
 * Unix datagram socket to a path named after its pid (relative to the
 * working directory), the parent exports a VMM allocation as a POSIX
 * descriptor and sends it there with SCM_RIGHTS; the child imports what it
 * received. A process-shared semaphore in shared memory then orders the
 * child's read after the parent's write; the parent reaps the child. */
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuMemCreate(unsigned long long *, size_t, const void *, unsigned long long);
CUresult cuMemExportToShareableHandle(void *, unsigned long long, int, unsigned long long);
CUresult cuMemImportFromShareableHandle(unsigned long long *, void *, int);
CUresult cuCtxSynchronize(void);

int main(void) {
    struct { int type, handle_types, loc_type, loc_id; void *meta; unsigned char rest[16]; } prop = {1, 1, 1, 0, 0, {0}};
    sem_t *sems = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int ready[2], status;
    char byte = 0;
    if (sems == MAP_FAILED || sem_init(&sems[0], 1, 0) || sem_init(&sems[1], 1, 0) || pipe(ready)) return 2;
    cuInit(0);
    pid_t child = fork();
    if (child == 0) {
        struct sockaddr_un me = {.sun_family = AF_UNIX};
        int sock = socket(AF_UNIX, SOCK_DGRAM, 0);
        snprintf(me.sun_path, sizeof me.sun_path, "%d", (int)getpid());
        unlink(me.sun_path);
        if (bind(sock, (struct sockaddr *)&me, sizeof me)) return 3;
        if (write(ready[1], &byte, 1) != 1) return 3;
        union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } control;
        struct iovec iov = {&byte, 1};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                             .msg_controllen = sizeof control.buf};
        if (recvmsg(sock, &msg, 0) != 1) return 4;
        int fd;
        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
        unsigned long long handle;
        cuInit(0);
        cuMemImportFromShareableHandle(&handle, (void *)(long)fd, 1);
        sem_post(&sems[0]);
        sem_wait(&sems[1]);
        unlink(me.sun_path);
        _exit(0);
    }
    unsigned long long handle;
    int fd;
    cuMemCreate(&handle, 2 << 20, &prop, 0);
    cuMemExportToShareableHandle(&fd, handle, 1, 0);
    if (read(ready[0], &byte, 1) != 1) return 5;
    struct sockaddr_un to = {.sun_family = AF_UNIX};
    snprintf(to.sun_path, sizeof to.sun_path, "%d", (int)child);
    int sock = socket(AF_UNIX, SOCK_DGRAM, 0);
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control.buf, .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != 1) return 6;
    sem_wait(&sems[0]);
    cuCtxSynchronize();
    sem_post(&sems[1]);
    waitpid(child, &status, 0);
    close(fd);
    return WEXITSTATUS(status);
}
