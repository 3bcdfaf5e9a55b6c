/* Starts /bin/true in ways that drop the tracer: exec and posix_spawn with
 * an empty environment. usage: exec_env exec|spawn */
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned);

int main(int argc, char **argv) {
    char *args[] = {"true", 0};
    char *empty[] = {0};
    int status;
    pid_t child;
    cuInit(0);
    if (argc > 1 && strcmp(argv[1], "spawn") == 0) {
        if (posix_spawn(&child, "/bin/true", 0, 0, args, empty)) return 2;
        waitpid(child, &status, 0);
        return WEXITSTATUS(status);
    }
    execve("/bin/true", args, empty);
    return 3;
}
