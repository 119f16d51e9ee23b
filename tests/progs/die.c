/* die.c - a traced process that dies in the middle of its work.
 *
 * usage: die MODE THREADS TARGET COUNTS_FILE. THREADS threads allocate and
 * free in a loop. After each call returns, a thread stores its tid and its
 * number of completed calls in its slot of COUNTS_FILE, a shared file
 * mapping (which survives the death, like the trace). Once TARGET calls
 * are done, the main thread dies by MODE - kill (SIGKILL), abort, segv,
 * _exit or exit - while the workers are still allocating. For each
 * worker, the trace must hold at least the completed calls (every call
 * that returned) and at most one more (a call in flight).
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

struct slot {
    volatile int64_t tid, completed;
};
static struct slot *slots;

static void *worker(void *arg)
{
    struct slot *s = &slots[(intptr_t)arg];
    s->tid = (int64_t)syscall(SYS_gettid);
    for (;;) {
        void *p;
        cudaMalloc(&p, 512);
        s->completed++;
        cudaFree(p);
        s->completed++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *mode = argv[1];
    int n = atoi(argv[2]);
    long target = atol(argv[3]);
    int fd = open(argv[4], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || n < 1 || n > 64 || ftruncate(fd, 4096) != 0)
        return 2;
    slots = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (slots == MAP_FAILED)
        return 2;
    pthread_t t;
    for (intptr_t i = 0; i < n; i++)
        pthread_create(&t, NULL, worker, (void *)i);
    for (;;) {
        long sum = 0;
        for (int i = 0; i < n; i++)
            sum += slots[i].completed;
        if (sum >= target)
            break;
        usleep(100);
    }
    if (!strcmp(mode, "kill"))
        kill(getpid(), SIGKILL);
    else if (!strcmp(mode, "abort"))
        abort();
    else if (!strcmp(mode, "segv"))
        *(volatile int *)(uintptr_t)8 = 1;
    else if (!strcmp(mode, "_exit"))
        _exit(0);
    else if (!strcmp(mode, "exit"))
        exit(0);
    return 2;
}
