/* truncate.c - the trace file cut under a running program (it used to
 * die of SIGBUS), and SIGBUS that is not the trace's.
 *
 * usage: truncate cut PATH   allocate and free, truncate PATH (the trace)
 *                            to 0 bytes, go on allocating; print "alive"
 *        truncate own        install a SIGBUS handler, start tracing,
 *                            raise SIGBUS: the program's handler runs
 *                            ("handled 7"), the program goes on ("alive")
 *        truncate dfl        start tracing, raise SIGBUS: killed by it,
 *                            as without the library
 * The trace is written through shared mappings; before the fix, the
 * first store into a page past the cut end killed the program. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static void pairs(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096 + (size_t)(i % 7) * 512) != cudaSuccess || cudaFree(p) != cudaSuccess)
            _exit(3);
    }
}

static void on_bus(int sig)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "handled %d\n", sig);
    ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
    (void)w;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "cut") == 0 && argc == 3) {
        pairs(2000);
        if (truncate(argv[2], 0) != 0)
            return 4;
        pairs(200000);
    } else if (strcmp(argv[1], "own") == 0) {
        signal(SIGBUS, on_bus);
        pairs(10);
        raise(SIGBUS);
        pairs(10);
    } else if (strcmp(argv[1], "dfl") == 0) {
        pairs(10);
        raise(SIGBUS);
        pairs(10);
    } else {
        return 2;
    }
    printf("alive\n");
    return 0;
}
