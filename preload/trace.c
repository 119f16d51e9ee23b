/* trace.c - the trace file: per-thread chunks in a shared file mapping.
 *
 * Why this design holds (docs/trace-format.md has the long form):
 *  - Crash safety. The file is mapped MAP_SHARED, so every byte we store
 *    is in the kernel's page cache at once; when the process dies - even by
 *    SIGKILL - the kernel still owns those pages and writes them back. A
 *    record counts once its chunk's `used` field covers it, and we store
 *    `used` before the hook returns, so every event whose call returned is
 *    in the file. Disk blocks are reserved with posix_fallocate before a
 *    region is mapped, so a full disk is an error we see, never a SIGBUS.
 *  - No lock on the hot path. Each thread owns its current chunk and
 *    writes into it with plain stores. The file lock is taken only to hand
 *    out a fresh chunk (once per chunk_size bytes of records, 64 KiB by
 *    default) and, more rarely, to extend the file.
 *  - Total order. Every record takes a number from one atomic counter;
 *    the reader merges the threads' streams by it.
 *  - Nothing dropped silently. Writing is a memcpy-sized store into
 *    memory that is already there; a thread that needs a chunk waits for
 *    the lock, it never discards. Only a file that cannot grow (a full
 *    disk, the file size limit) or was cut by another process stops
 *    recording, and then every record not written is counted in the file
 *    header (lost_events, lost_records, lost_why: gmt_trace_lost), so the
 *    trace says it is incomplete.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "internal.h"
#include "rank.h"

#define MAX_WINDOWS 16384 /* with 8 MiB windows: traces up to 128 GiB */
#define FIRST_WINDOW_CHUNKS 16u
#define MAX_WINDOW_BYTES (8u << 20) /* what a thread keeps mapped at most */
#define EVENT_MAX 160u /* largest encoded core record */
/* tag, seq, time, device, stream, result, body */
_Static_assert(1 + 5 * GMT_VARINT_MAX + GMT_BODY_MAX <= EVENT_MAX,
               "EVENT_MAX holds the longest core record");

struct window {
    uint64_t retired; /* chunks whose thread has moved on to another */
    uint64_t first;  /* first chunk index in this mapping */
    uint64_t count;  /* chunks mapped */
    uint8_t *base;
};

static struct {
    pthread_mutex_t lock;
    int fd;
    bool open;
    bool full;              /* the file cannot grow: recording stopped */
    bool cut;               /* another process truncated the file (SIGBUS) */
    struct gmt_file_header *hdr;
    uint32_t chunk_size;
    uint64_t next_chunk;    /* next chunk to hand out */
    uint64_t usable_chunks; /* chunks below the reserved, mapped file end */
    struct window win[MAX_WINDOWS];
    unsigned nwin;
    char path[PATH_MAX];
} g_file = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static uint64_t g_seq;          /* the process-wide record counter */
static uint32_t g_thread_count; /* thread indices handed out */
static uint32_t g_gen;          /* bumped in a forked child */
static pthread_key_t g_thread_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static GMT_TLS struct gmt_thread *tls_thread;

/* ---- the file ------------------------------------------------------- */

/* Expand %p (pid), %h (host name), %r (rank, rank.h), %R ("r<rank>."
 * when a launcher set a rank, else nothing: the default name's) and %% of
 * the output pattern; any other '%' is copied as it is. */
static bool expand_path(const char *pat, char *out, size_t cap)
{
    size_t n = 0;
    char tmp[256];
    for (const char *s = pat; *s; s++) {
        const char *add = NULL;
        size_t len = 1;
        if (s[0] == '%' && s[1] == 'p') {
            snprintf(tmp, sizeof tmp, "%d", (int)getpid());
            add = tmp;
            s++;
        } else if (s[0] == '%' && s[1] == 'r') {
            gmt_rank(tmp, sizeof tmp); /* "0" when no launcher set one */
            add = tmp;
            s++;
        } else if (s[0] == '%' && s[1] == 'R') {
            char rk[16];
            tmp[0] = '\0';
            if (gmt_rank(rk, sizeof rk))
                snprintf(tmp, sizeof tmp, "r%s.", rk);
            add = tmp;
            s++;
        } else if (s[0] == '%' && s[1] == 'h') {
            gmt_host_component(tmp, sizeof tmp); /* never a directory step */
            add = tmp;
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            add = "%";
            s++;
        } else {
            add = s;
        }
        if (add != s)
            len = strlen(add);
        if (n + len >= cap)
            return false;
        memcpy(out + n, add, len);
        n += len;
    }
    out[n] = '\0';
    return true;
}

/* Create the trace file: never overwrite, never follow a symlink, private
 * to the user. An existing name (a re-exec'd process keeps its pid, or a
 * fixed name) gets a numeric suffix instead. */
static int create_file(const char *want, uint32_t *index, const char **kind)
{
    const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    for (uint32_t i = 0; i < 1000; i++) {
        if (i == 0)
            snprintf(g_file.path, sizeof g_file.path, "%s", want);
        else if (snprintf(g_file.path, sizeof g_file.path, "%s.%u", want, i) >=
                 (int)sizeof g_file.path)
            break;
        int fd = open(g_file.path, flags, 0600);
        if (fd >= 0) {
            *index = i;
            return fd;
        }
        if (errno != EEXIST)
            break;
        /* Only an existing trace (a regular file) earns a suffix: a name
         * that is a directory, a FIFO, a device or a link was not meant
         * to be written beside (GPUMEMTRACE_OUTPUT=/dev/null wrote
         * /dev/null.1). */
        struct stat st;
        if (i == 0 && lstat(want, &st) == 0 && !S_ISREG(st.st_mode)) {
            *kind = S_ISDIR(st.st_mode)    ? "a directory"
                    : S_ISFIFO(st.st_mode) ? "a FIFO"
                    : S_ISLNK(st.st_mode)  ? "a symbolic link"
                    : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                 : "not a file";
            return -1;
        }
    }
    return -1;
}

/* ---- what could not be recorded ---------------------------------------
 * Counted in the file header, which is mapped and has its disk blocks from
 * the start, so the counts reach the file whatever else fails, and as they
 * happen rather than at close: a process killed after a loss leaves a
 * trace that says so too. A counter is an atomic add on the header's
 * cache line, paid only by records that are lost. */
static void lost_why(uint32_t why, int err)
{
    struct gmt_file_header *h = __atomic_load_n(&g_file.hdr, __ATOMIC_ACQUIRE);
    if (h == NULL)
        return;
    if (err && !__atomic_load_n(&h->lost_errno, __ATOMIC_RELAXED))
        __atomic_store_n(&h->lost_errno, (int32_t)err, __ATOMIC_RELAXED);
    __atomic_or_fetch(&h->lost_why, why, __ATOMIC_RELAXED);
}

void gmt_trace_lost(enum gmt_lost_what what, uint32_t why)
{
    struct gmt_file_header *h = __atomic_load_n(&g_file.hdr, __ATOMIC_ACQUIRE);
    if (h == NULL)
        return;
    uint64_t *n = what == GMT_LOST_EVENT    ? &h->lost_events
                  : what == GMT_LOST_RECORD ? &h->lost_records
                                            : &h->lost_stacks;
    __atomic_add_fetch(n, 1, __ATOMIC_RELAXED);
    if (why)
        lost_why(why, 0);
}

/* The file cannot grow (a full disk, its size limit): stop recording for
 * good, said once, and in the header: why (err: the error that stopped
 * it, 0 for the recorder's own limit); the records lost from here on are
 * counted by the writers. Retrying on every later event cost a failing
 * 4 MiB fallocate under the file lock each time (the program ran ~10000x
 * slower); from here on an event costs one load and the count. */
static bool stop_growing(int err)
{
    lost_why(GMT_LOST_FILE, err);
    __atomic_store_n(&g_file.full, true, __ATOMIC_RELEASE);
    return false;
}

bool gmt_trace_full(void)
{
    return __atomic_load_n(&g_file.full, __ATOMIC_RELAXED);
}

/* ---- a file cut under us --------------------------------------------
 * The trace is written through shared mappings. When another process
 * truncates the file (a cleanup script, `> trace.gmt`), a store into a
 * page past the new end raises SIGBUS, which would kill the program. A
 * SIGBUS at an address of our mappings is ours: the mapping is replaced
 * by anonymous memory (the store then succeeds, into memory no file
 * holds), recording stops, and the next chunk request says so once. Any
 * other SIGBUS goes to the handler the program had, or kills as it
 * would have. Installed when the trace opens; a program that installs its
 * own SIGBUS handler later takes precedence (and its own risk). */
static struct sigaction g_old_bus;
static bool g_bus_installed;

static bool ours(uintptr_t a, uintptr_t *lo, size_t *len)
{
    uintptr_t h = (uintptr_t)__atomic_load_n(&g_file.hdr, __ATOMIC_RELAXED);
    if (h && a >= h && a < h + GMT_HEADER_SIZE) {
        *lo = h, *len = GMT_HEADER_SIZE;
        return true;
    }
    size_t cs = __atomic_load_n(&g_file.chunk_size, __ATOMIC_RELAXED);
    unsigned n = __atomic_load_n(&g_file.nwin, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n && i < MAX_WINDOWS; i++) {
        uintptr_t b = (uintptr_t)__atomic_load_n(&g_file.win[i].base, __ATOMIC_RELAXED);
        size_t l = (size_t)g_file.win[i].count * cs;
        if (b && a >= b && a < b + l) {
            *lo = b, *len = l;
            return true;
        }
    }
    return false;
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    uintptr_t lo;
    size_t len;
    int saved = errno;
    if (si && ours((uintptr_t)si->si_addr, &lo, &len) &&
        mmap((void *)lo, len, PROT_READ | PROT_WRITE,
             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
        __atomic_store_n(&g_file.cut, true, __ATOMIC_RELEASE);
        __atomic_store_n(&g_file.full, true, __ATOMIC_RELEASE);
        errno = saved;
        return; /* the store runs again, into anonymous memory */
    }
    errno = saved;
    if (g_old_bus.sa_flags & SA_SIGINFO) {
        if (g_old_bus.sa_sigaction) {
            g_old_bus.sa_sigaction(sig, si, ctx);
            return;
        }
    } else if (g_old_bus.sa_handler != SIG_DFL && g_old_bus.sa_handler != SIG_IGN) {
        g_old_bus.sa_handler(sig);
        return;
    }
    /* what the program had: the default action, delivered on return */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
    raise(SIGBUS);
}

static void guard_sigbus(void)
{
    if (g_bus_installed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_old_bus) == 0)
        g_bus_installed = true;
}

/* Called where a chunk is asked for: the one line about a cut file. */
static void say_cut(void)
{
    if (__atomic_load_n(&g_file.cut, __ATOMIC_ACQUIRE)) {
        gmt_error_once(GMT_ERR_GROW, "%s was truncated by another process; "
                       "events from here on are not recorded", g_file.path);
        /* Here, not in the handler: a store into a header page the
         * truncation took raises SIGBUS, which the handler serves (the
         * header then becomes anonymous memory) - inside the handler,
         * with SIGBUS blocked, it would kill the program. */
        lost_why(GMT_LOST_CUT, 0);
    }
}

/* Reserve and map `count` more chunks at the end of the usable area.
 * Called with the lock held. */
static bool grow(uint64_t count)
{
    if (g_file.nwin == MAX_WINDOWS) {
        gmt_error_once(GMT_ERR_GROW, "%s reached its size limit; events from "
                       "here on are not recorded", g_file.path);
        return stop_growing(0);
    }
    uint64_t cs = g_file.chunk_size;
    off_t off = (off_t)(GMT_HEADER_SIZE + g_file.usable_chunks * cs);
    off_t len = (off_t)(count * cs);
    int err = posix_fallocate(g_file.fd, off, len);
    if (err != 0) {
        gmt_error_once(GMT_ERR_GROW,
                       "cannot extend %s (%s); events from here on are not "
                       "recorded", g_file.path, strerror(err));
        return stop_growing(err);
    }
    void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED,
                   g_file.fd, off);
    if (p == MAP_FAILED) {
        int e = errno;
        gmt_error_once(GMT_ERR_GROW, "cannot map %s (%s); events from here "
                       "on are not recorded", g_file.path, strerror(e));
        return stop_growing(e);
    }
    g_file.win[g_file.nwin++] =
        (struct window){0, g_file.usable_chunks, count, (uint8_t *)p};
    g_file.usable_chunks += count;
    return true;
}

bool gmt_trace_open(void)
{
    char want[PATH_MAX];
    if (!expand_path(gmt_opt.output, want, sizeof want)) {
        gmt_error_once(GMT_ERR_OPEN, "output path too long: %s; tracing off",
                       gmt_opt.output);
        return false;
    }
    uint32_t index = 0;
    pthread_mutex_lock(&g_file.lock);
    const char *kind = NULL;
    int fd = create_file(want, &index, &kind);
    if (fd < 0) {
        int err = errno;
        pthread_mutex_unlock(&g_file.lock);
        if (kind)
            gmt_error_once(GMT_ERR_OPEN, "the trace path %s is %s, not a "
                           "file (GPUMEMTRACE_OUTPUT); tracing off", want, kind);
        else
            gmt_error_once(GMT_ERR_OPEN, "cannot create trace file %s (%s); "
                           "tracing off", want, strerror(err));
        return false;
    }
    g_file.fd = fd;
    /* whole pages: chunks are mapped at page-aligned file offsets */
    g_file.chunk_size = ((uint32_t)gmt_opt.chunk_kb * 1024u + 4095u) & ~4095u;
    g_file.next_chunk = g_file.usable_chunks = 0;
    g_file.nwin = 0;
    int err = posix_fallocate(fd, 0, GMT_HEADER_SIZE);
    void *h = err ? MAP_FAILED
                  : mmap(NULL, GMT_HEADER_SIZE, PROT_READ | PROT_WRITE,
                         MAP_SHARED, fd, 0);
    if (h == MAP_FAILED || !grow(FIRST_WINDOW_CHUNKS)) {
        if (h != MAP_FAILED)
            munmap(h, GMT_HEADER_SIZE);
        close(fd);
        unlink(g_file.path);
        g_file.fd = -1;
        pthread_mutex_unlock(&g_file.lock);
        gmt_error_once(GMT_ERR_OPEN, "cannot set up trace file %s; tracing "
                       "off", g_file.path);
        return false;
    }
    struct gmt_file_header *hdr = h;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    hdr->version_major = GMT_VERSION_MAJOR;
    hdr->version_minor = GMT_VERSION_MINOR;
    hdr->min_reader_major = 1;
    hdr->min_reader_minor = 0;
    hdr->header_size = GMT_HEADER_SIZE;
    hdr->endian = GMT_ENDIAN_MARK;
    hdr->features = (gmt_opt.stack_depth > 0 ? GMT_FEAT_NATIVE_STACKS : 0) |
                    (gmt_opt.pool ? GMT_FEAT_POOL : 0);
    hdr->chunk_size = g_file.chunk_size;
    hdr->session_id = gmt_opt.session;
    hdr->pid = (uint32_t)getpid();
    hdr->ppid = (uint32_t)getppid();
    hdr->start_realtime_ns =
        (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    hdr->start_monotonic_ns = gmt_now_ns();
    hdr->file_index = index;
    hdr->dist_flags = gmt_dist_read(&hdr->rank, &hdr->local_rank,
                                    &hdr->world_size, &hdr->local_world_size);
    if (gethostname(hdr->host, sizeof hdr->host - 1) != 0)
        hdr->host[0] = '\0';
    hdr->host[sizeof hdr->host - 1] = '\0';
    memcpy(hdr->magic, GMT_MAGIC, 8); /* last: a header is valid once named */
    g_file.hdr = hdr;
    g_file.open = true;
    guard_sigbus();
    pthread_mutex_unlock(&g_file.lock);
    return true;
}

void gmt_trace_close(void)
{
    pthread_mutex_lock(&g_file.lock);
    say_cut();
    if (g_file.open && __atomic_load_n(&g_file.cut, __ATOMIC_ACQUIRE)) {
        /* the file is what the truncation left: extending it again
         * would make zeros look like a trace */
    } else if (g_file.open) {
        uint64_t end = GMT_HEADER_SIZE + g_file.next_chunk * g_file.chunk_size;
        g_file.hdr->end_monotonic_ns = gmt_now_ns();
        g_file.hdr->data_end = end;
        /* a rank the program set while it ran (mp.spawn workers, say) */
        struct gmt_file_header *h = g_file.hdr;
        if (!(h->dist_flags & GMT_DIST_RANK)) {
            uint32_t f = gmt_dist_read(&h->rank, &h->local_rank,
                                       &h->world_size, &h->local_world_size);
            if (f & GMT_DIST_RANK)
                h->dist_flags = f | GMT_DIST_LATE;
        }
        /* Trim the reserved tail. Chunks in use all lie below `end`; a
         * thread that needs a new chunk after this extends the file again,
         * because nothing above `end` counts as usable any more. */
        if (ftruncate(g_file.fd, (off_t)end) == 0)
            g_file.usable_chunks = g_file.next_chunk;
        __atomic_or_fetch(&g_file.hdr->flags, GMT_FLAG_CLOSED, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_file.lock);
}

void gmt_trace_add_feature(uint64_t bit)
{
    if (g_file.hdr)
        __atomic_or_fetch(&g_file.hdr->features, bit, __ATOMIC_RELAXED);
}

const char *gmt_trace_path(void)
{
    return g_file.open ? g_file.path : NULL;
}

uint64_t gmt_trace_events(void)
{
    return __atomic_load_n(&g_seq, __ATOMIC_RELAXED);
}

void gmt_trace_lock(void)
{
    pthread_mutex_lock(&g_file.lock);
}

void gmt_trace_unlock(void)
{
    pthread_mutex_unlock(&g_file.lock);
}

/* In a forked child: the parent's mappings are shared with the parent's
 * file, so the child must never write through them. Drop them; the child
 * opens its own file when it next records something. */
void gmt_trace_reset_after_fork(void)
{
    pthread_mutex_init(&g_file.lock, NULL);
    for (unsigned i = 0; i < g_file.nwin; i++)
        if (g_file.win[i].base) /* retired ones are unmapped already */
            munmap(g_file.win[i].base, g_file.win[i].count * g_file.chunk_size);
    if (g_file.hdr)
        munmap(g_file.hdr, GMT_HEADER_SIZE);
    if (g_file.fd >= 0)
        close(g_file.fd);
    g_file.fd = -1;
    g_file.hdr = NULL;
    g_file.open = false;
    g_file.full = false;
    g_file.cut = false;
    g_file.nwin = 0;
    g_file.next_chunk = g_file.usable_chunks = 0;
    g_seq = 0;
    g_thread_count = 0; /* the child numbers its threads from 1 */
    g_gen++;
}

/* ---- threads and chunks --------------------------------------------- */

static void thread_free(void *p)
{
    if (tls_thread == p)
        tls_thread = NULL;
    gmt_stack_thread_free(p);
    free(p);
}

static void key_init(void)
{
    pthread_key_create(&g_thread_key, thread_free);
}

static void thread_reset(struct gmt_thread *t)
{
    t->gen = g_gen;
    t->index = __atomic_add_fetch(&g_thread_count, 1, __ATOMIC_RELAXED);
    t->ordinal = 0;
    t->chunk = NULL;
    t->pos = t->end = NULL;
    t->tid = (pid_t)syscall(SYS_gettid);
}

static struct gmt_thread *thread_slow(void)
{
    struct gmt_thread *t = tls_thread;
    if (t == NULL) {
        t = calloc(1, sizeof *t);
        if (t == NULL)
            return NULL;
        t->last_device = 0;
        pthread_once(&g_key_once, key_init);
        pthread_setspecific(g_thread_key, t);
        tls_thread = t;
    }
    thread_reset(t);
    return t;
}

struct gmt_thread *gmt_thread_get(void)
{
    struct gmt_thread *t = tls_thread;
    if (GMT_LIKELY(t != NULL && t->gen == g_gen))
        return t;
    return thread_slow();
}

struct gmt_thread *gmt_thread_peek(void)
{
    return tls_thread;
}

void gmt_stamp(uint64_t *seq, uint64_t *time)
{
    *seq = __atomic_add_fetch(&g_seq, 1, __ATOMIC_RELAXED);
    *time = gmt_now_ns();
}

static void chunk_start(struct gmt_thread *t, uint8_t *base)
{
    struct gmt_chunk_header *c = (struct gmt_chunk_header *)base;
    c->used = GMT_CHUNK_HEADER_SIZE;
    c->thread = t->index;
    c->ordinal = t->ordinal++;
    c->first_seq = 0;
    c->first_time = 0;
    __atomic_store_n(&c->magic, GMT_CHUNK_MAGIC, __ATOMIC_RELEASE);
    t->chunk = c;
    t->pos = base + GMT_CHUNK_HEADER_SIZE;
    t->end = base + g_file.chunk_size;
    t->r_addr = t->r_addr2 = t->r_stream = 0;
    t->r_device = 0;
}

static void emit_thread_record(struct gmt_thread *t, uint64_t seq,
                               uint64_t time);

/* Give the thread a fresh chunk. Only here is the file lock taken. A
 * thread's first chunk opens with its THREAD record, which shares the
 * seq/time of the record about to be written (seqs never go down within
 * a chunk; the reader keeps equal seqs of one thread in file order). */
/* A thread has moved on from this chunk: no one writes it again. A
 * window whose chunks are all handed out and left is unmapped, so the
 * process's memory stays flat however long the trace grows (its pages
 * are the file's: unmapping loses nothing, the kernel writes them back).
 * With the file lock held. */
static void retire(uint8_t *chunk)
{
    size_t cs = g_file.chunk_size;
    for (unsigned i = g_file.nwin; i-- > 0;) {
        struct window *w = &g_file.win[i];
        if (w->base == NULL || chunk < w->base || chunk >= w->base + w->count * cs)
            continue;
        if (++w->retired == w->count) {
            munmap(w->base, w->count * cs);
            w->base = NULL;
        }
        return;
    }
}

/* Windows still mapped, and in all (GPUMEMTRACE_VERBOSE). */
void gmt_trace_windows(unsigned *mapped, unsigned *all)
{
    pthread_mutex_lock(&g_file.lock);
    unsigned n = 0;
    for (unsigned i = 0; i < g_file.nwin; i++)
        n += g_file.win[i].base != NULL;
    *mapped = n;
    *all = g_file.nwin;
    pthread_mutex_unlock(&g_file.lock);
}

static bool chunk_new(struct gmt_thread *t, uint64_t seq, uint64_t time)
{
    if (gmt_trace_full()) {
        say_cut();
        return false;
    }
    pthread_mutex_lock(&g_file.lock);
    if (!g_file.open) {
        pthread_mutex_unlock(&g_file.lock);
        return false;
    }
    if (g_file.next_chunk == g_file.usable_chunks) {
        uint64_t n = g_file.usable_chunks; /* double, within bounds */
        uint64_t max = MAX_WINDOW_BYTES / g_file.chunk_size;
        if (n < FIRST_WINDOW_CHUNKS)
            n = FIRST_WINDOW_CHUNKS;
        if (n > max)
            n = max ? max : 1;
        if (!grow(n)) {
            pthread_mutex_unlock(&g_file.lock);
            return false;
        }
    }
    uint64_t idx = g_file.next_chunk++;
    struct window *w = &g_file.win[g_file.nwin - 1];
    for (unsigned i = g_file.nwin; i-- > 0;) {
        if (idx >= g_file.win[i].first &&
            idx < g_file.win[i].first + g_file.win[i].count) {
            w = &g_file.win[i];
            break;
        }
    }
    uint8_t *base = w->base + (idx - w->first) * g_file.chunk_size;
    if (t->chunk != NULL) /* only now: a thread keeps its chunk on failure */
        retire((uint8_t *)t->chunk);
    pthread_mutex_unlock(&g_file.lock);
    bool first = t->ordinal == 0;
    chunk_start(t, base);
    if (first)
        emit_thread_record(t, seq, time);
    return true;
}

static inline void commit(struct gmt_thread *t, uint8_t *p)
{
    t->pos = p;
    __atomic_store_n(&t->chunk->used, (uint32_t)(p - (uint8_t *)t->chunk),
                     __ATOMIC_RELEASE);
}

/* Common prefix of every record: tag, seq and time deltas. The first
 * record of a chunk also sets the chunk's base values. */
static inline uint8_t *put_prefix(struct gmt_thread *t, uint8_t *p,
                                  uint64_t seq, uint64_t time)
{
    if (t->chunk->first_seq == 0) {
        t->chunk->first_time = time;
        t->chunk->first_seq = seq;
        t->r_seq = seq;
        t->r_time = time;
    }
    if (seq < t->r_seq)
        seq = t->r_seq; /* never happens by construction; never corrupt */
    p = gmt_put_varint(p, seq - t->r_seq);
    t->r_seq = seq;
    uint64_t dt = time >= t->r_time ? time - t->r_time : 0;
    p = gmt_put_varint(p, dt);
    t->r_time += dt;
    return p;
}

/* The body of a core record, from the one description in gmt_format.h
 * (GMT_RECORD_BODIES): encode_event(p, ev, &reg_a, &reg_b). */
GMT_BODY_ENCODER(encode_event, struct gmt_event)

bool gmt_trace_emit(struct gmt_thread *t, struct gmt_event *ev)
{
    if (ev->seq == 0)
        gmt_stamp(&ev->seq, &ev->time);
    if (GMT_UNLIKELY(t->chunk == NULL ||
                     (size_t)(t->end - t->pos) < EVENT_MAX) &&
        !chunk_new(t, ev->seq, ev->time)) {
        gmt_trace_lost(GMT_LOST_EVENT, 0); /* why: said where it stopped */
        return false;
    }
    if (ev->kind == GMT_K_INVALID || ev->kind > GMT_K_CORE_MAX) {
        gmt_error_once(GMT_ERR_RECORD, "internal: unknown record kind %u",
                       ev->kind);
        gmt_trace_lost(GMT_LOST_EVENT, GMT_LOST_OTHER);
        return false;
    }
    uint8_t *p = t->pos;
    uint8_t *tag = p++;
    *tag = ev->kind;
    p = put_prefix(t, p, ev->seq, ev->time);
    if (ev->device >= 0 && (uint32_t)ev->device != t->r_device) {
        *tag |= GMT_TAG_DEVICE;
        p = gmt_put_varint(p, (uint32_t)ev->device);
        t->r_device = (uint32_t)ev->device;
    }
    if (ev->has_stream && ev->stream != t->r_stream) {
        *tag |= GMT_TAG_STREAM;
        p = gmt_put_varint(p, ev->stream);
        t->r_stream = ev->stream;
    }
    if (ev->result != 0) {
        *tag |= GMT_TAG_ERR;
        p = gmt_put_varint(p, (uint32_t)ev->result);
    }
    p = encode_event(p, ev, &t->r_addr, &t->r_addr2);
    commit(t, p);
    return true;
}

size_t gmt_trace_ext_max(void)
{
    /* tag, seq, time, kind and length, plus a thread record that may have
     * to open the chunk first */
    return g_file.chunk_size - GMT_CHUNK_HEADER_SIZE - 5 * GMT_VARINT_MAX - 64;
}

bool gmt_trace_emit_ext(struct gmt_thread *t, unsigned ext, const uint8_t *src,
                        size_t len)
{
    size_t need = 1 + 4 * GMT_VARINT_MAX + len;
    if (need > g_file.chunk_size - GMT_CHUNK_HEADER_SIZE) {
        gmt_trace_lost(GMT_LOST_RECORD, GMT_LOST_TOO_LARGE);
        return false;
    }
    uint64_t seq, time;
    gmt_stamp(&seq, &time);
    if ((t->chunk == NULL || (size_t)(t->end - t->pos) < need) &&
        !chunk_new(t, seq, time)) {
        gmt_trace_lost(GMT_LOST_RECORD, 0);
        return false;
    }
    uint8_t *p = t->pos;
    *p++ = GMT_K_EXT;
    p = put_prefix(t, p, seq, time);
    p = gmt_put_varint(p, ext);
    p = gmt_put_varint(p, len);
    memcpy(p, src, len);
    commit(t, p + len);
    return true;
}

void gmt_trace_note(struct gmt_thread *t, unsigned level, const char *text)
{
    uint8_t buf[600];
    size_t n = strnlen(text, sizeof buf - GMT_VARINT_MAX);
    uint8_t *p = gmt_put_varint(buf, level);
    memcpy(p, text, n);
    gmt_trace_emit_ext(t, GMT_X_NOTE, buf, (size_t)(p - buf) + n);
}

static void emit_thread_record(struct gmt_thread *t, uint64_t seq,
                               uint64_t time)
{
    uint8_t buf[64];
    uint8_t *p = gmt_put_varint(buf, (uint64_t)t->tid);
    char name[17] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    size_t n = strnlen(name, 16);
    memcpy(p, name, n);
    p += n;
    uint8_t *q = t->pos;
    *q++ = GMT_K_EXT;
    q = put_prefix(t, q, seq, time);
    q = gmt_put_varint(q, GMT_X_THREAD);
    q = gmt_put_varint(q, (uint64_t)(p - buf));
    memcpy(q, buf, (size_t)(p - buf));
    commit(t, q + (p - buf));
}
