/* fw_cache.c - the bridge cache: where built bridges are kept, and what
 * is trusted from it.
 *
 * We load code from the cache, so it must be the user's own directory
 * (mode 0700, not a symbolic link) under directories no one else can
 * write; links above it (a /home that is a link to /gpfs/home) are
 * resolved once, and the resolved path is what is checked and used.
 *
 * A cached bridge is loaded only once checked whole. A file cut short (a
 * home directory synced or copied while it was written, a crash before
 * it reached the disk) is mapped by dlopen past its end, and the first
 * touch of the missing pages kills the program with SIGBUS: no error to
 * catch. So a bridge is sealed when built - a record of its size and of a
 * hash of its bytes appended after them, flushed to the disk before the
 * file is renamed into place - and read back whole against the seal
 * before dlopen. The hash is a check against damage, not an adversary
 * (the directory is the user's alone). A file that fails, or loads
 * without the bridge's entry point, is built again and replaced whole.
 *
 * A failed build is remembered: a marker beside the key's bridge holds
 * why (naming the compiler's log) and, by its time, when; for
 * FW_FAIL_TTL_S no process builds that key again. Concurrent processes
 * take a lock file per key, so one builds and the others use its bridge,
 * or its marker.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fw_build.h"
#include "internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

/* The seal: magic, the size of what precedes it and its FNV-1a hash,
 * both 64-bit little-endian. */
#define SEAL_MAGIC "GMTSEAL1"
#define SEAL_SIZE 24

uint64_t fw_fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- the directory -------------------------------------------------------- */

/* Can a directory on the way to the cache be trusted: owned by root or
 * the user, and not writable by others unless sticky (/tmp)? */
static bool trusted_parent(const struct stat *st)
{
    if (st->st_uid != 0 && st->st_uid != geteuid())
        return false;
    return !(st->st_mode & 022) || (st->st_mode & S_ISVTX);
}

/* Resolve the directories above path's last component: the deepest one
 * that exists through realpath, the rest (to be created) as written.
 * The last component is left alone: a link there is refused, not
 * followed. false with why. */
static bool resolve_above(char *path, size_t n, char *why, size_t wn)
{
    char *leaf = strrchr(path, '/');
    if (leaf == NULL || leaf == path)
        return true;
    char head[PATH_MAX], real[PATH_MAX];
    snprintf(head, sizeof head, "%.*s", (int)(leaf - path), path);
    size_t cut = strlen(head);
    while (realpath(cut ? head : "/", real) == NULL) {
        char *up = strrchr(head, '/');
        if ((errno != ENOENT && errno != ENOTDIR) || up == NULL) {
            snprintf(why, wn, "cannot resolve %s: %s", head, strerror(errno));
            return false;
        }
        *up = '\0';
        cut = strlen(head);
    }
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s%s", strcmp(real, "/") ? real : "",
             path + cut);
    snprintf(path, n, "%s", out);
    return true;
}

static bool cache_base(char *out, size_t n, char *why, size_t wn)
{
    const char *base = gmt_opt.cache;
    if (base && *base == '/') {
        snprintf(out, n, "%s", base);
    } else if (base && *base) {
        snprintf(why, wn, "GPUMEMTRACE_CACHE must be an absolute path");
        return false;
    } else if ((base = getenv("XDG_CACHE_HOME")) && *base == '/') {
        snprintf(out, n, "%s/gpumemtrace", base);
    } else if ((base = getenv("HOME")) && *base == '/') {
        snprintf(out, n, "%s/.cache/gpumemtrace", base);
    } else {
        snprintf(why, wn, "no cache directory (set GPUMEMTRACE_CACHE)");
        return false;
    }
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/')
        out[--len] = '\0';
    return resolve_above(out, n, why, wn);
}

bool fw_cache_dir(char *out, size_t n, char *why, size_t wn)
{
    if (!cache_base(out, n, why, wn))
        return false;
    struct stat st;
    for (char *p = out + 1;; p++) { /* mkdir -p, checking each level */
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(out, 0700) != 0 && errno != EEXIST) {
            snprintf(why, wn, "cannot create %s: %s", out, strerror(errno));
            *p = c;
            return false;
        }
        bool leaf = c == '\0';
        if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) ||
            (!leaf && !trusted_parent(&st)) ||
            (leaf && (st.st_uid != geteuid() || (st.st_mode & 077)))) {
            snprintf(why, wn, "%s %s is a link, or another user's, or open "
                     "to others: no bridge is loaded from it (mode 0700, "
                     "yours)", leaf ? "the cache directory" : "the directory",
                     out);
            *p = c;
            return false;
        }
        *p = c;
        if (leaf)
            return true;
    }
}

/* ---- sealed bridges ------------------------------------------------------- */

/* Hash the first n bytes of fd; *head gets its first four. */
static bool hash_fd(int fd, uint64_t n, uint64_t *hash, uint8_t head[4])
{
    uint8_t buf[8192];
    uint64_t h = 0xcbf29ce484222325ull, off = 0;
    while (off < n) {
        size_t want = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;
        ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got <= 0)
            return false;
        if (off == 0 && got >= 4)
            memcpy(head, buf, 4);
        h = fw_fnv(h, buf, (size_t)got);
        off += (uint64_t)got;
    }
    *hash = h;
    return true;
}

bool fw_cache_seal(const char *path, char *why, size_t wn)
{
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    uint64_t h = 0;
    uint8_t head[4] = {0}, seal[SEAL_SIZE];
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 4 &&
              hash_fd(fd, (uint64_t)st.st_size, &h, head);
    if (ok) {
        memcpy(seal, SEAL_MAGIC, 8);
        put64(seal + 8, (uint64_t)st.st_size);
        put64(seal + 16, h);
        ok = pwrite(fd, seal, SEAL_SIZE, st.st_size) == SEAL_SIZE &&
             fsync(fd) == 0;
    }
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    if (!ok)
        snprintf(why, wn, "cannot seal the built bridge %s: %s", path,
                 strerror(errno));
    return ok;
}

/* NULL if the open file is a sealed bridge, whole; else what is wrong. */
static const char *check_whole(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid() || (st.st_mode & 022))
        return "not a file of the user's, or writable by others";
    uint8_t seal[SEAL_SIZE], head[4] = {0};
    if (st.st_size < SEAL_SIZE + 4 ||
        pread(fd, seal, SEAL_SIZE, st.st_size - SEAL_SIZE) != SEAL_SIZE ||
        memcmp(seal, SEAL_MAGIC, 8) != 0)
        return "no seal at its end: cut short, or not sealed when built";
    uint64_t body = (uint64_t)st.st_size - SEAL_SIZE, h;
    if (get64(seal + 8) != body)
        return "its size is not the one sealed: cut short or grown";
    if (!hash_fd(fd, body, &h, head))
        return "cannot be read";
    if (h != get64(seal + 16) || memcmp(head, "\177ELF", 4) != 0)
        return "its bytes are not the ones sealed";
    return NULL;
}

/* The name to dlopen so by: a new one at each load of the process.
 * glibc hands back an object already loaded under the same name without
 * opening the file, so once a stale bridge is loaded (refused below, and
 * not unloadable: C++ objects often are not), the one built after it is
 * opened as dir/./file; a file that is the same as a loaded one is still
 * found by its inode. Only the program's attach thread loads. */
static const char *load_name(const char *so, char *alt, size_t n)
{
    static unsigned loads;
    unsigned k = loads < 8 ? loads++ : 8;
    const char *base = strrchr(so, '/');
    snprintf(alt, n, "%.*s/%.*s%s", (int)(base - so), so, 2 * (int)k,
             "./././././././././", base + 1);
    return alt;
}

gmt_fw_attach_fn fw_cache_load(const char *so, bool *damaged, char *why,
                               size_t wn)
{
    *damaged = false;
    int fd = open(so, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        snprintf(why, wn, "no bridge at %s", so);
        return NULL;
    }
    *damaged = true;
    const char *bad = fd < 0 ? strerror(errno) : check_whole(fd);
    if (fd >= 0)
        close(fd);
    if (bad != NULL) {
        snprintf(why, wn, "%s", bad);
        return NULL;
    }
    char alt[PATH_MAX + 32];
    void *h = dlopen(load_name(so, alt, sizeof alt), RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, wn, "cannot load it: %s", e ? e : "?");
        return NULL;
    }
    void *sym = gmt_real_dlsym(h, GMT_FW_ATTACH_SYM);
    if (sym == NULL) {
        dlclose(h);
        snprintf(why, wn, "it has no %s: stale", GMT_FW_ATTACH_SYM);
        return NULL;
    }
    *damaged = false;
    gmt_modules_add_bridge(sym);
    gmt_fw_attach_fn fn;
    memcpy(&fn, &sym, sizeof fn);
    return fn;
}

/* ---- failures and the lock ------------------------------------------------ */

bool fw_cache_failed_recently(const char *marker, char *why, size_t wn)
{
    int fd = open(marker, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    char text[400];
    ssize_t n = 0;
    long long age = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
        age = (long long)(time(NULL) - st.st_mtime);
        n = read(fd, text, sizeof text - 1);
    }
    close(fd);
    /* a marker from the future (a clock set back) counts as old */
    if (age < 0 || age >= FW_FAIL_TTL_S)
        return false;
    text[n > 0 ? n : 0] = '\0';
    text[strcspn(text, "\n")] = '\0';
    snprintf(why, wn, "%s, %lld s ago; not built again for %d min (remove %s "
             "to try now)", text, age, FW_FAIL_TTL_S / 60, marker);
    return true;
}

void fw_cache_mark_failed(const char *marker, const char *why)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", marker);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    if (fd < 0)
        return;
    size_t n = strlen(why);
    bool ok = write(fd, why, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    if (close(fd) == 0 && ok && rename(tmp, marker) == 0)
        return;
    unlink(tmp);
}

int fw_cache_lock(const char *path, char *why, size_t wn)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(why, wn, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct timespec t0, now, nap = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (fw_stop_requested()) {
            snprintf(why, wn, "the program was signalled while it waited "
                     "for another process's build of the bridge");
        } else if ((errno != EWOULDBLOCK && errno != EINTR) ||
                   now.tv_sec - t0.tv_sec > FW_COMPILE_TIMEOUT_S + 30) {
            snprintf(why, wn, "another process holds %s (building the "
                     "bridge?) for too long", path);
        } else {
            nanosleep(&nap, NULL);
            continue;
        }
        close(fd);
        return -1;
    }
    return fd;
}

/* What getdents64 returns (glibc's struct dirent64 is not promised to
 * be this). */
struct fw_dirent {
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

void fw_cache_rm_build(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* a second pass for names a pass that deleted as it read skipped */
    for (int pass = 0; fd >= 0 && pass < 2; pass++) {
        char buf[4096] __attribute__((aligned(8)));
        long n;
        lseek(fd, 0, SEEK_SET);
        while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < n;) {
                const struct fw_dirent *d = (const void *)(buf + off);
                if (strcmp(d->name, ".") != 0 && strcmp(d->name, "..") != 0)
                    unlinkat(fd, d->name, 0);
                off += d->reclen;
            }
        }
    }
    if (fd >= 0)
        close(fd);
    rmdir(dir);
}
