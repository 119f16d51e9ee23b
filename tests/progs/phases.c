/* phases.c - phase markers with known answers (tests/e2e/test_markers.py).
 *
 * Calls the public API (preload/gpumemtrace.h) through weak references, so
 * it also runs, untraced, without the library. usage: phases MODE
 *
 *   basic      setup region: 8 MiB weights, kept.
 *              3 x mark "step":
 *                region forward: 3 x 2 MiB activations
 *                region backward: 4 MiB gradient, and nested in it
 *                  region allreduce: 1 MiB, freed; then gradient and
 *                  activations freed
 *                1 MiB kept per step ("history": +1 MiB per step)
 *              mark "eval": 3 MiB allocated and freed; the program ends
 *              with the weights and the history live.
 *              Peak: 8 + 2 (history) + 6 + 4 + 1 = 21 MiB, in the third
 *              step, inside backward/allreduce.
 *   growth     20 x mark "step", each keeping 256 KiB, 2 ms apart
 *   threads N  N threads, each: 5 x (push "worker" (all overlapping: a
 *              barrier), 1 MiB allocated and freed, pop), mark "tick"
 *   stress N I N threads, each I x (push "s", mark "m", pop), an
 *              allocation every 64; I < 0: until killed ("ready" printed)
 *   fork       mark "parent" and region "shared" in the parent; a forked
 *              child marks "parent" and "child" and opens region "shared"
 *   unbalanced pop; push a; pop; pop; push "left-open", never popped
 *   names      a 300-byte name, a name whose 256th byte is inside a UTF-8
 *              character, NULL, and an empty name; errno survives every
 *              call (exit 4 if not)
 *   many N     N distinct mark names n0..n(N-1), then n0 and n(N-1) again
 * Prints "active N" (gpumemtrace_active(), -1 without the library).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define GPUMEMTRACE_WEAK
#include "gpumemtrace.h"

#define MiB (1u << 20)

static void *alloc(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", n);
        exit(3);
    }
    return p;
}

/* Markers never change errno. */
static void check_errno(void)
{
    errno = 1234;
    GPUMEMTRACE_MARK("errno-check");
    GPUMEMTRACE_PUSH("errno-check");
    GPUMEMTRACE_POP();
    if (errno != 1234) {
        fprintf(stderr, "errno changed to %d\n", errno);
        exit(4);
    }
}

static void basic(void)
{
    GPUMEMTRACE_PUSH("setup");
    void *weights = alloc(8 * MiB);
    GPUMEMTRACE_POP();
    for (int i = 0; i < 3; i++) {
        GPUMEMTRACE_MARK("step");
        void *act[3];
        GPUMEMTRACE_PUSH("forward");
        for (int k = 0; k < 3; k++)
            act[k] = alloc(2 * MiB);
        GPUMEMTRACE_POP();
        GPUMEMTRACE_PUSH("backward");
        void *grad = alloc(4 * MiB);
        GPUMEMTRACE_PUSH("allreduce");
        cudaFree(alloc(1 * MiB));
        GPUMEMTRACE_POP();
        cudaFree(grad);
        for (int k = 0; k < 3; k++)
            cudaFree(act[k]);
        GPUMEMTRACE_POP();
        alloc(1 * MiB); /* history, kept */
    }
    GPUMEMTRACE_MARK("eval");
    cudaFree(alloc(3 * MiB));
    (void)weights;
}

/* 256 KiB kept "for logging" per step: the growing site */
__attribute__((noinline)) static void history(void)
{
    void *p;
    if (cudaMalloc(&p, 256 * 1024) != cudaSuccess)
        exit(3);
}

static void growth(void)
{
    for (int i = 0; i < 20; i++) {
        GPUMEMTRACE_MARK("step");
        cudaFree(alloc(1 * MiB));
        history();
        usleep(2000);
    }
}

static pthread_barrier_t g_barrier;

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++) {
        GPUMEMTRACE_PUSH("worker");
        pthread_barrier_wait(&g_barrier); /* every thread's region is open */
        cudaFree(alloc(1 * MiB));
        pthread_barrier_wait(&g_barrier);
        GPUMEMTRACE_POP();
        GPUMEMTRACE_MARK("tick");
    }
    return NULL;
}

static void threads(int n)
{
    pthread_t t[64];
    if (n < 1 || n > 64)
        exit(2);
    pthread_barrier_init(&g_barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static long g_iters;

static void *stresser(void *arg)
{
    (void)arg;
    for (long i = 0; g_iters < 0 || i < g_iters; i++) {
        GPUMEMTRACE_PUSH("s");
        GPUMEMTRACE_MARK("m");
        if (i % 64 == 0)
            cudaFree(alloc(4096));
        GPUMEMTRACE_POP();
    }
    return NULL;
}

/* n threads, each iters x (push "s", mark "m", pop), an allocation every
 * 64; iters < 0: forever (the test kills the process) */
static void stress(int n, long iters)
{
    pthread_t t[64];
    if (n < 1 || n > 64)
        exit(2);
    g_iters = iters;
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, stresser, NULL);
    if (iters < 0) {
        usleep(50000);
        printf("ready\n");
        fflush(stdout);
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static void forked(void)
{
    GPUMEMTRACE_MARK("parent");
    GPUMEMTRACE_PUSH("shared");
    cudaFree(alloc(1 * MiB));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* "parent" and "shared" were defined in the parent's trace only */
        GPUMEMTRACE_MARK("parent");
        GPUMEMTRACE_MARK("child");
        GPUMEMTRACE_PUSH("shared");
        GPUMEMTRACE_POP();
        printf("child %d\n", (int)getpid());
        exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    GPUMEMTRACE_POP();
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        exit(5);
}

static void unbalanced(void)
{
    GPUMEMTRACE_POP();
    GPUMEMTRACE_PUSH("a");
    cudaFree(alloc(1 * MiB));
    GPUMEMTRACE_POP();
    GPUMEMTRACE_POP();
    GPUMEMTRACE_PUSH("left-open");
    alloc(2 * MiB);
}

static void names(void)
{
    check_errno();
    char longname[301], cut[300];
    memset(longname, 'x', 300);
    longname[300] = '\0';
    /* 255 ASCII bytes, then a 2-byte character at bytes 255-256: the cut
     * at 256 would split it, so it is left out whole */
    memset(cut, 'y', 255);
    memcpy(cut + 255, "\xc3\xa9z", 4);
    GPUMEMTRACE_MARK(longname);
    GPUMEMTRACE_MARK(cut);
    GPUMEMTRACE_MARK(NULL);
    GPUMEMTRACE_MARK("");
    GPUMEMTRACE_PUSH(NULL);
    GPUMEMTRACE_POP();
    cudaFree(alloc(1 * MiB));
}

static void many(int n)
{
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "n%d", i);
        GPUMEMTRACE_MARK(name);
    }
    GPUMEMTRACE_MARK("n0");
    snprintf(name, sizeof name, "n%d", n - 1);
    GPUMEMTRACE_MARK(name);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "basic"))
        basic();
    else if (!strcmp(mode, "growth"))
        growth();
    else if (!strcmp(mode, "threads"))
        threads(argc > 2 ? atoi(argv[2]) : 4);
    else if (!strcmp(mode, "stress"))
        stress(argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atol(argv[3]) : 1000);
    else if (!strcmp(mode, "fork"))
        forked();
    else if (!strcmp(mode, "unbalanced"))
        unbalanced();
    else if (!strcmp(mode, "names"))
        names();
    else if (!strcmp(mode, "many"))
        many(argc > 2 ? atoi(argv[2]) : 1000);
    else
        return 2;
    printf("active %d\n", gpumemtrace_active ? GPUMEMTRACE_ACTIVE() : -1);
    return 0;
}
