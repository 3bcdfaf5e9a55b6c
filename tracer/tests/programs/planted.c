/* Another user who can write the trace folder plants a symlink where a
 * traced process's file will be, after that process started: here the
 * parent does it for its forked child (it knows the child's pid), then
 * lets the child make its first traced call. The tracer must not follow
 * the link. usage: planted VICTIM */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuCtxSynchronize(void);

int main(int argc, char **argv) {
    int go[2], status;
    char byte = 0, link[4096];
    if (argc < 2 || pipe(go)) return 2;
    pid_t child = fork();
    if (child == 0) {
        if (read(go[0], &byte, 1) != 1) _exit(3);
        cuInit(0);
        cuCtxSynchronize();
        _exit(0);
    }
    snprintf(link, sizeof link, "%s/trace-%d.jsonl", getenv("IPC_TRACE_DIR"), (int)child);
    unlink(link);
    if (symlink(argv[1], link)) perror("symlink");
    if (write(go[1], &byte, 1) != 1) return 3;
    waitpid(child, &status, 0);
    return WEXITSTATUS(status);
}
