/* launched.c - a command for the launcher's tests (tests/e2e/test_launcher.py).
 *
 * usage: launched argv [ARG...]   print every argument as "argv I HEX" (the
 *                                 bytes in hex: spaces, quotes and empty
 *                                 strings survive the trip) and exit 0
 *        launched ACTION...       run the actions in order:
 *   alloc N      cudaMalloc N bytes and keep them (a leak at exit)
 *   env NAME     print "env NAME=VALUE", or "env NAME unset"
 *   setenv N=V   set a variable while running (as mp.spawn workers do)
 *   capture      begin and end a stream capture (twice)
 *   wait         on SIGTERM, SIGINT, SIGHUP or SIGUSR1: print "got N" and
 *                exit 40 + N; print "ready" once the handlers are in place
 *   pause        print "ready" and wait for a signal to end it
 *   count        count SIGINTs (printing "got 2" for each) until SIGUSR1,
 *                then print "ints N" and exit 40 + N
 *   setsid       leave the launcher's session and process group
 *   exit N       exit with status N
 *   kill SIG     kill itself with signal number SIG
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static void on_signal(int sig)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "got %d\n", sig);
    ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
    (void)w;
    _exit(40 + sig);
}

static volatile sig_atomic_t ints;

static void count_int(int sig)
{
    (void)sig;
    ints++;
    ssize_t w = write(STDOUT_FILENO, "got 2\n", 6);
    (void)w;
}

static void count_done(int sig)
{
    (void)sig;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "ints %d\n", (int)ints);
    ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
    (void)w;
    _exit(40 + ints);
}

static void capture(void)
{
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        exit(5);
    for (int i = 0; i < 2; i++) {
        cudaGraph_t g;
        if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess ||
            cudaStreamEndCapture(s, &g) != cudaSuccess)
            exit(6);
        cudaGraphDestroy(g);
    }
    cudaStreamDestroy(s);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "argv") == 0) {
        for (int i = 2; i < argc; i++) {
            printf("argv %d ", i - 2);
            for (const unsigned char *p = (const unsigned char *)argv[i]; *p; p++)
                printf("%02x", *p);
            printf("\n");
        }
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *arg = i + 1 < argc ? argv[i + 1] : "0";
        if (strcmp(a, "alloc") == 0) {
            void *p;
            if (cudaMalloc(&p, (size_t)atol(arg)) != cudaSuccess)
                return 4;
            i++;
        } else if (strcmp(a, "env") == 0) {
            const char *v = getenv(arg);
            if (v)
                printf("env %s=%s\n", arg, v);
            else
                printf("env %s unset\n", arg);
            i++;
        } else if (strcmp(a, "capture") == 0) {
            capture();
        } else if (strcmp(a, "wait") == 0) {
            int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
            for (int k = 0; k < 4; k++)
                signal(sigs[k], on_signal);
            printf("ready\n");
            fflush(stdout);
            for (;;)
                pause();
        } else if (strcmp(a, "pause") == 0) {
            printf("ready\n");
            fflush(stdout);
            for (;;)
                pause();
        } else if (strcmp(a, "count") == 0) {
            /* SIGUSR1 waits while a SIGINT is handled: both pending, the
             * SIGINT is counted before SIGUSR1 reports the count */
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = count_int;
            sigemptyset(&sa.sa_mask);
            sigaddset(&sa.sa_mask, SIGUSR1);
            sigaction(SIGINT, &sa, NULL);
            signal(SIGUSR1, count_done);
            printf("ready\n");
            fflush(stdout);
            for (;;)
                pause();
        } else if (strcmp(a, "setenv") == 0) {
            char name[64];
            const char *eq = strchr(arg, '=');
            if (eq == NULL || (size_t)(eq - arg) >= sizeof name)
                return 9;
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = '\0';
            setenv(name, eq + 1, 1);
            i++;
        } else if (strcmp(a, "setsid") == 0) {
            if (setsid() < 0)
                return 8;
        } else if (strcmp(a, "exit") == 0) {
            fflush(stdout);
            return atoi(arg);
        } else if (strcmp(a, "kill") == 0) {
            fflush(stdout);
            kill(getpid(), atoi(arg));
            return 7; /* not reached unless the signal was ignored */
        } else {
            fprintf(stderr, "launched: unknown action %s\n", a);
            return 2;
        }
    }
    return 0;
}
