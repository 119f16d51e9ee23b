// free_semantics.cu - which device does a real cudaFree wait for?
//
// usage: free_semantics [SPIN_MS]      (run untraced; default 200)
//
// The pool counts a real cudaFree as a synchronization of a device and
// makes that device's pending blocks reusable (preload/mem.c,
// real_free). That is only safe for the device the free really waits for:
// the current one, the pointer's, or both? This measures it. For each
// case, a spin kernel of SPIN_MS is launched on one device (on a
// non-blocking stream, which the legacy stream does not cover), then the
// free is made; clock_gettime times the free and cudaEventQuery of the
// kernel's event, right after the free returns, says whether the kernel
// had ended by then. Each case runs twice: once with device 0 busy, once
// with device 1 busy (one GPU: device 0 only). A free that returns after
// the busy device's kernel ended waited for that device.
//
// One line per case:
//   free_semantics CASE waits_for=dev0|dev1|both|none elapsed_ms=X
//       kernel_done_after_free=yes|no  busy0_ms=A busy0_done=yes|no
//       [busy1_ms=B busy1_done=yes|no]
// elapsed_ms and kernel_done_after_free are those of the trial that waited
// longest (the other trial's figures follow as busyN_ms / busyN_done).
// "invalid" in a trial's done field: the kernel had ended before the free
// began (the trial proves nothing; raise SPIN_MS).
//
// Cases (memory, its device, current device at the free):
//   malloc0_cur0     cudaMalloc memory of device 0, device 0 current
//   managed0_cur0    cudaMallocManaged made with device 0 current
//   async0_cur0      cudaMallocAsync memory of device 0, freed by cudaFree
//   freeasync_malloc0_otherstream  cudaFreeAsync of cudaMalloc memory of
//                    device 0 on an idle non-blocking stream of device 0
//   freeasync_malloc0_busystream   the same on the stream the device-0
//                    kernel runs on (idle in the device-1 trial)
//   freeasync_async0 cudaFreeAsync of cudaMallocAsync memory (the normal use)
//   with two GPUs also:
//   malloc1_cur1     (a) device-1 memory freed with device 1 current: does
//                    it return before device 0's kernel ends?
//   malloc1_cur0     (b) device-1 memory freed with device 0 current
//   malloc0_cur1     (c) device-0 memory freed with device 1 current
//   managed1_cur0    (d) managed memory made (and touched) on device 1,
//                    freed with device 0 current
//   async1_cur0      (d) cudaMallocAsync memory of device 1, cudaFree'd
//                    with device 0 current
//   freeasync_malloc1_cur0  (e) cudaFreeAsync of device-1 cudaMalloc
//                    memory on a device-1 stream, device 0 current
// With fewer than two GPUs it prints "SKIP: needs 2 GPUs" after the
// single-device cases. Exits 0 unless a CUDA call fails (1): a failing
// free prints "free_semantics CASE error=NAME" and the other cases go on;
// any other failing call ends the program.
//
// Build: nvcc -O2 -arch=sm_90 -cudart shared -o free_semantics free_semantics.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <time.h>

#define PROG "free_semantics"
#define CHECK(x)                                                              \
    do {                                                                      \
        cudaError_t e_ = (x);                                                 \
        if (e_ != cudaSuccess) {                                              \
            fprintf(stderr, "%s: %s: %s (line %d)\n", PROG, #x,               \
                    cudaGetErrorName(e_), __LINE__);                          \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define BYTES (4u << 20)

static __device__ unsigned long long gtime(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins for ns nanoseconds of the GPU's global timer (independent of the
// SM clock), then writes one word so the compiler keeps the loop.
__global__ void spin(unsigned long long ns, unsigned *sink)
{
    unsigned long long t0 = gtime();
    while (gtime() - t0 < ns)
        ;
    if (sink)
        *sink = 1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

enum kind { K_MALLOC, K_MANAGED, K_ASYNC };
enum how { F_FREE, F_FREEASYNC_OTHER, F_FREEASYNC_BUSY };

struct kase {
    const char *name;
    enum kind kind;
    int mem_dev; // device current when the memory is made
    int cur_dev; // device current at the free
    enum how how;
    bool two; // needs two GPUs
};

static const kase cases[] = {
    {"malloc0_cur0", K_MALLOC, 0, 0, F_FREE, false},
    {"managed0_cur0", K_MANAGED, 0, 0, F_FREE, false},
    {"async0_cur0", K_ASYNC, 0, 0, F_FREE, false},
    {"freeasync_malloc0_otherstream", K_MALLOC, 0, 0, F_FREEASYNC_OTHER, false},
    {"freeasync_malloc0_busystream", K_MALLOC, 0, 0, F_FREEASYNC_BUSY, false},
    {"freeasync_async0", K_ASYNC, 0, 0, F_FREEASYNC_OTHER, false},
    {"malloc1_cur1", K_MALLOC, 1, 1, F_FREE, true},
    {"malloc1_cur0", K_MALLOC, 1, 0, F_FREE, true},
    {"malloc0_cur1", K_MALLOC, 0, 1, F_FREE, true},
    {"managed1_cur0", K_MANAGED, 1, 0, F_FREE, true},
    {"async1_cur0", K_ASYNC, 1, 0, F_FREE, true},
    {"freeasync_malloc1_cur0", K_MALLOC, 1, 0, F_FREEASYNC_OTHER, true},
};

static int ndev;
static cudaStream_t busy_st[2];  // where the spin kernels run
static cudaStream_t other_st[2]; // idle streams for cudaFreeAsync
static cudaEvent_t done_ev[2];
static unsigned long long spin_ns;

struct trial {
    double ms;
    bool done;    // kernel had ended when the free returned
    bool invalid; // kernel had ended before the free began
    cudaError_t err; // the free's own result
};

// One free of case c while device `busy` runs a spin kernel.
static trial run_trial(const kase &c, int busy)
{
    // The memory, made and (for managed memory) touched on its device,
    // which is then left idle.
    void *p = NULL;
    CHECK(cudaSetDevice(c.mem_dev));
    switch (c.kind) {
    case K_MALLOC:
        CHECK(cudaMalloc(&p, BYTES));
        break;
    case K_MANAGED:
        CHECK(cudaMallocManaged(&p, BYTES, cudaMemAttachGlobal));
        break;
    case K_ASYNC:
        CHECK(cudaMallocAsync(&p, BYTES, other_st[c.mem_dev]));
        break;
    }
    CHECK(cudaMemsetAsync(p, 0x5a, BYTES, other_st[c.mem_dev]));
    CHECK(cudaDeviceSynchronize());

    // The spin kernel on the busy device.
    CHECK(cudaSetDevice(busy));
    spin<<<1, 1, 0, busy_st[busy]>>>(spin_ns, NULL);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done_ev[busy], busy_st[busy]));

    CHECK(cudaSetDevice(c.cur_dev));
    trial t = {0, false, false, cudaSuccess};
    cudaError_t q = cudaEventQuery(done_ev[busy]);
    if (q == cudaErrorNotReady)
        (void)cudaGetLastError(); // not an error: leave none behind
    else
        CHECK(q);
    t.invalid = q == cudaSuccess;
    cudaStream_t fs = c.how == F_FREEASYNC_BUSY ? busy_st[c.mem_dev]
                                                : other_st[c.mem_dev];
    double t0 = now_ms();
    // A failing free is reported on the case's line, not fatal: the other
    // cases still run (the program exits 1 at the end).
    t.err = c.how == F_FREE ? cudaFree(p) : cudaFreeAsync(p, fs);
    double t1 = now_ms();
    if (t.err != cudaSuccess)
        (void)cudaGetLastError();
    q = cudaEventQuery(done_ev[busy]);
    if (q == cudaErrorNotReady)
        (void)cudaGetLastError();
    else
        CHECK(q);
    t.ms = t1 - t0;
    t.done = q == cudaSuccess;

    // Leave every device idle for the next trial.
    for (int d = 0; d < (ndev >= 2 ? 2 : 1); d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaDeviceSynchronize());
    }
    return t;
}

int main(int argc, char **argv)
{
    int spin_ms = argc > 1 ? atoi(argv[1]) : 200;
    if (spin_ms <= 0)
        spin_ms = 200;
    spin_ns = (unsigned long long)spin_ms * 1000000ull;
    CHECK(cudaGetDeviceCount(&ndev));
    int nd = ndev >= 2 ? 2 : 1;
    for (int d = 0; d < nd; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaStreamCreateWithFlags(&busy_st[d], cudaStreamNonBlocking));
        CHECK(cudaStreamCreateWithFlags(&other_st[d], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&done_ev[d], cudaEventDisableTiming));
        // Load the kernel and start the context now, not inside a trial.
        spin<<<1, 1, 0, busy_st[d]>>>(1000, NULL);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
    }
    char name[256] = "?";
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(name, sizeof name, "%s", prop.name);
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("free_semantics devices=%d gpu0=\"%s\" driver=%d runtime=%d spin_ms=%d\n",
           ndev, name, drv, rt, spin_ms);
    int rc = 0;
    for (const kase &c : cases) {
        if (c.two && ndev < 2)
            continue;
        trial t[2];
        bool waited[2] = {false, false};
        for (int b = 0; b < nd; b++) {
            t[b] = run_trial(c, b);
            waited[b] = t[b].done && !t[b].invalid;
        }
        const char *w = waited[0] && waited[1] ? "both"
                        : waited[0]            ? "dev0"
                        : waited[1]            ? "dev1"
                                               : "none";
        cudaError_t err = t[0].err != cudaSuccess ? t[0].err
                          : nd == 2               ? t[1].err
                                                  : cudaSuccess;
        if (err != cudaSuccess) {
            printf("free_semantics %s error=%s\n", c.name, cudaGetErrorName(err));
            fflush(stdout);
            rc = 1;
            continue;
        }
        int m = nd == 2 && t[1].ms > t[0].ms ? 1 : 0; // the longest wait
        printf("free_semantics %s waits_for=%s elapsed_ms=%.3f "
               "kernel_done_after_free=%s",
               c.name, w, t[m].ms, t[m].invalid ? "invalid" : t[m].done ? "yes" : "no");
        for (int b = 0; b < nd; b++)
            printf(" busy%d_ms=%.3f busy%d_done=%s", b, t[b].ms, b,
                   t[b].invalid ? "invalid" : t[b].done ? "yes" : "no");
        printf("\n");
        fflush(stdout);
    }
    if (ndev < 2)
        printf("SKIP: needs 2 GPUs (found %d): cross-device cases not run\n", ndev);
    return rc;
}
