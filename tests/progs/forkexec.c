/* forkexec.c - a traced process that forks, and forks and execs.
 *
 * The parent makes 3 alloc/free pairs; a forked child tries 4 allocations
 * (CUDA refuses to work in a child forked after initialization, so they
 * fail, and must be recorded as failed calls); a forked and exec'd child
 * makes 5 pairs. Each process gets its own trace, linked to the parent by
 * the session id and the parent pid. Prints the three pids.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static void pairs(int n)
{
    for (int i = 0; i < n; i++) {
        void *p;
        if (cudaMalloc(&p, 1024) != cudaSuccess || cudaFree(p) != cudaSuccess)
            exit(3);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "exec-child") == 0) {
        pairs(5);
        return 0;
    }
    pairs(3);
    fflush(stdout);
    pid_t a = fork();
    if (a == 0) {
        for (int i = 0; i < 4; i++) {
            void *p;
            if (cudaMalloc(&p, 1024) == cudaSuccess)
                cudaFree(p);
        }
        exit(0);
    }
    int st;
    waitpid(a, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    pid_t b = fork();
    if (b == 0) {
        execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
        _exit(127);
    }
    waitpid(b, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    printf("parent %d fork-child %d exec-child %d\n", (int)getpid(), (int)a,
           (int)b);
    return 0;
}
