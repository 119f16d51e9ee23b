/* lifecycle.c - when tracing starts and stops.
 *
 * Nothing happens when the library is loaded: a shell or any other process
 * that never calls the CUDA runtime pays for the mapping of the .so and
 * nothing else. The first intercepted call starts tracing (options, file,
 * module map); other threads arriving meanwhile wait for it, so no event
 * is lost. A forked child starts over lazily with its own file. At exit
 * the header is marked closed; a process that dies without exiting leaves
 * a file that reads cleanly up to its last event and says it was cut.
 *
 * The life of one hooked call is events.c's: it asks gmt_tracer_start here
 * only while tracing is not on. The fork handlers reset every file's
 * state in the child through its gmt_*_reset_after_fork.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "internal.h"

int gmt_tracer_state = GMT_TRACER_UNINIT;
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_atfork_done;
static uint64_t g_intercepted; /* calls seen while tracing was off or on */

static uint64_t new_session_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id || !id)
        id = gmt_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    return id;
}

/* setenv() races with getenv() in other threads, so the session id is
 * exported to exec'd children only when that cannot happen: in a process
 * that is still single-threaded, and in a freshly forked child. */
static bool single_threaded(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may contain anything */
    if (p == NULL)
        return false;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime cutime cstime priority nice num_threads */
    int field = 0;
    for (p++; *p && field < 18; p++)
        if (*p == ' ')
            field++;
    return field == 18 && atoi(p) == 1;
}

static void export_session(void)
{
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)gmt_opt.session);
    setenv("GPUMEMTRACE_SESSION", hex, 1);
}

static size_t read_file(const char *path, uint8_t *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    return n;
}

static void emit_process(struct gmt_thread *t)
{
    enum { CMDLINE_MAX = 16384 };
    static uint8_t buf[CMDLINE_MAX + 4096 + 512]; /* under g_init_lock */
    uint8_t cmd[CMDLINE_MAX];
    char host[256] = "", exe[4096] = "";
    size_t ncmd = read_file("/proc/self/cmdline", cmd, sizeof cmd);
    gethostname(host, sizeof host - 1);
    ssize_t nexe = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (nexe < 0)
        nexe = 0;
    /* small chunks: shorten the command line rather than lose the record */
    size_t room = gmt_trace_ext_max();
    size_t fixed = 8 * GMT_VARINT_MAX + strlen(host) + (size_t)nexe;
    if (fixed >= room)
        nexe = 0, fixed = 8 * GMT_VARINT_MAX + strlen(host);
    if (ncmd > room - fixed)
        ncmd = room > fixed ? room - fixed : 0;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint8_t *p = gmt_put_varint(buf, (uint64_t)getpid());
    p = gmt_put_varint(p, (uint64_t)getppid());
    p = gmt_put_varint(p, gmt_opt.session);
    p = gmt_put_varint(p, 0); /* file index: in the header */
    p = gmt_put_varint(p, (uint64_t)rt.tv_sec * 1000000000ull +
                              (uint64_t)rt.tv_nsec);
    p = gmt_put_str(p, cmd, ncmd);
    p = gmt_put_str(p, host, strlen(host));
    p = gmt_put_str(p, exe, (size_t)nexe);
    gmt_trace_emit_ext(t, GMT_X_PROCESS, buf, (size_t)(p - buf));
}

static void before_fork(void)
{
    pthread_mutex_lock(&g_init_lock);
    gmt_modules_lock();
    gmt_trace_lock();
}

static void after_fork_parent(void)
{
    gmt_trace_unlock();
    gmt_modules_unlock();
    pthread_mutex_unlock(&g_init_lock);
}

static void after_fork_child(void)
{
    /* Only this thread exists now: reset freely. The child records into
     * its own file, opened at its first CUDA call, in the same session. */
    gmt_trace_reset_after_fork();
    gmt_stack_reset_after_fork();
    gmt_py_reset_after_fork();
    gmt_api_reset_after_fork();
    gmt_modules_reset_after_fork();
    gmt_log_reset_after_fork();
    gmt_mem_reset_after_fork();
    gmt_drv_reset_after_fork();
    gmt_fw_reset_after_fork();
    gmt_nvml_reset_after_fork();
    gmt_call_reset_after_fork();
    if (gmt_tracer_state == GMT_TRACER_ACTIVE) {
        export_session();
        gmt_tracer_state = GMT_TRACER_UNINIT;
    }
    pthread_mutex_init(&g_init_lock, NULL);
}

/* Start tracing; called by the first hooked call. */
static bool start(void)
{
    pthread_mutex_lock(&g_init_lock);
    if (gmt_tracer_state != GMT_TRACER_UNINIT) {
        bool on = gmt_tracer_state == GMT_TRACER_ACTIVE;
        pthread_mutex_unlock(&g_init_lock);
        return on;
    }
    gmt_options_load();
    if (gmt_opt.disable) {
        __atomic_store_n(&gmt_tracer_state, GMT_TRACER_OFF, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g_init_lock);
        return false;
    }
    if (!gmt_opt.session_set) {
        gmt_opt.session = new_session_id();
        gmt_opt.session_set = true;
        if (single_threaded())
            export_session();
    }
    if (!g_atfork_done) {
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        g_atfork_done = true;
    }
    struct gmt_thread *t = NULL;
    if (!gmt_trace_open() || (t = gmt_thread_get()) == NULL) {
        __atomic_store_n(&gmt_tracer_state, GMT_TRACER_OFF, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&g_init_lock);
        return false;
    }
    gmt_stack_init();
    gmt_modules_init();
    emit_process(t);
    gmt_modules_scan(t);
    if (gmt_py_init(t)) {
        gmt_trace_add_feature(GMT_FEAT_PYTHON_STACKS);
        gmt_retention_start(t);
    }
    gmt_mem_init();
    __atomic_store_n(&gmt_tracer_state, GMT_TRACER_ACTIVE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_init_lock);
    return true;
}

/* The slow path of gmt_call_begin, while tracing is not on: start it,
 * unless it was turned off. The call counts as intercepted either way: at
 * exit, only a process no hook saw is told why its use of the driver left
 * no trace. */
bool gmt_tracer_start(void)
{
    __atomic_store_n(&g_intercepted, 1, __ATOMIC_RELAXED);
    return __atomic_load_n(&gmt_tracer_state, __ATOMIC_ACQUIRE) != GMT_TRACER_OFF && start();
}

__attribute__((destructor)) static void gmt_fini(void)
{
    if (__atomic_load_n(&gmt_tracer_state, __ATOMIC_ACQUIRE) == GMT_TRACER_ACTIVE) {
        struct gmt_thread *t;
        if (gmt_opt.embed_symbols && (t = gmt_thread_get()) != NULL)
            gmt_stack_embed_symbols(t);
        gmt_trace_close();
        if (gmt_opt.verbose && gmt_opt.pool) {
            uint64_t rec, waits, wait_ns, issued, record_ns;
            gmt_fence_counts(&rec, &waits, &wait_ns, &issued, &record_ns);
            const char *why = gmt_fence_off_reason();
            gmt_info("pool: %llu fences recorded, %llu waited for in %.1f ms%s%s",
                     (unsigned long long)rec, (unsigned long long)waits,
                     wait_ns / 1e6,
                     why ? "; fences off: " : "", why ? why : "");
            const char *lib;
            bool more;
            uint64_t joined = gmt_fence_joined(&lib, &more);
            if (joined)
                gmt_info("pool: %llu non-blocking streams of %s%s left out "
                         "of fences: their work joins the calling stream "
                         "(GPUMEMTRACE_POOL_JOINED_STREAMS)",
                         (unsigned long long)joined, lib,
                         more ? " and others" : "");
            if (gmt_opt.pool_ordered)
                gmt_info("pool: ordered reuse: %llu fences made frees "
                         "reusable when recorded", (unsigned long long)issued);
            if (rec)
                gmt_info("pool: recording the fences took %.1f ms; %llu "
                         "event queries asked whether they were done",
                         record_ns / 1e6, (unsigned long long)gmt_fence_queries());
            gmt_info("hooks: %llu cudaMalloc calls took %.1f ms, %llu "
                     "cudaFree calls %.1f ms (pool and recording included)",
                     (unsigned long long)gmt_hook_calls[0], gmt_hook_ns[0] / 1e6,
                     (unsigned long long)gmt_hook_calls[1], gmt_hook_ns[1] / 1e6);
            gmt_mem_steady_summary();
            gmt_mem_verbose_summary();
        }
        char line[512];
        if (gmt_opt.verbose && gmt_opt.stack_depth > 0 &&
            gmt_stack_summary(gmt_thread_peek(), line, sizeof line))
            gmt_info("%s", line);
        if (gmt_opt.verbose) {
            unsigned mapped, all;
            gmt_trace_windows(&mapped, &all);
            gmt_info("wrote %s (%llu records; %u of %u file windows still "
                     "mapped)", gmt_trace_path(),
                     (unsigned long long)gmt_trace_events(), mapped, all);
        }
        return;
    }
    const char *why;
    bool worth;
    if (!__atomic_load_n(&g_intercepted, __ATOMIC_RELAXED) &&
        gmt_real_cuda_loaded() && (why = gmt_drv_silence_reason(&worth)) != NULL) {
        if (worth)
            gmt_warn("this process used the CUDA driver but nothing was "
                     "recorded: %s", why);
        else if (gmt_opt_verbose_now())
            gmt_info("this process used the CUDA driver but nothing was "
                     "recorded: %s", why);
    }
}