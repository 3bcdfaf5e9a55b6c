/* A program that closes every descriptor it did not open (closefrom(3),
 * as daemons and sandboxes do) after a traced call, then opens a file of
 * its own and makes more calls: the tracer must keep out of that file and
 * keep recording. usage: closefrom FILE [closefrom|close_range|loop] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
CUresult cuInit(unsigned);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuCtxSynchronize(void);

int main(int argc, char **argv) {
    const char *how = argc > 2 ? argv[2] : "closefrom";
    void *ctx;
    cuInit(0);
    cuDevicePrimaryCtxRetain(&ctx, 0);
    if (strcmp(how, "closefrom") == 0) {
        closefrom(3);
    } else if (strcmp(how, "close_range") == 0) {
        close_range(3, ~0U, 0);
    } else {
        for (int fd = 3; fd < 4096; fd++) close(fd);
    }
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 2;
    cuCtxSetCurrent(ctx);
    cuCtxSynchronize();
    if (write(fd, "mine\n", 5) != 5) return 3;
    close(fd);
    return 0;
}
