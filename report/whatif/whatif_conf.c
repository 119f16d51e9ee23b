/* whatif_conf.c - PYTORCH_CUDA_ALLOC_CONF, read as PyTorch reads it.
 *
 * The string is split into tokens at ',', ':', '[' and ']' (spaces
 * dropped), then read as key:value pairs separated by commas, as
 * c10/core/AllocatorConfig.cpp (parseArgs) does. The same values are
 * refused: max_split_size_mb and max_non_split_rounding_mb below 20
 * (kLargeBuffer), a garbage_collection_threshold outside (0, 1),
 * divisions that are not a power of two, expandable_segments other than
 * True/False. Keys that only matter for pinned host memory or locking are
 * accepted and ignored; backend:cudaMallocAsync is refused (not modelled).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "whatif.h"

#define MIB (1024ull * 1024ull)
#define MAX_TOKENS 256

static bool pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static int ulong_of(const char *t, uint64_t *out)
{
    if (!isdigit((unsigned char)t[0]))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (*end || errno)
        return -1;
    *out = v;
    return 0;
}

static int fail(char *why, size_t len, const char *fmt, const char *arg)
{
    snprintf(why, len, fmt, arg);
    return -1;
}

int wi_conf_parse(const char *s, struct wi_conf *c, char *why, size_t whylen)
{
    memset(c, 0, sizeof *c);
    c->max_split_size = UINT64_MAX;
    c->max_non_split_rounding = 20 * MIB;
    char tok[MAX_TOKENS][64];
    int n = 0;
    size_t bl = 0;
    for (const char *p = s;; p++) {
        bool sep = *p == ',' || *p == ':' || *p == '[' || *p == ']';
        if ((sep || *p == '\0') && bl) {
            if (n >= MAX_TOKENS)
                return fail(why, whylen, "%s", "too many settings");
            tok[n++][bl] = '\0';
            bl = 0;
        }
        if (*p == '\0')
            break;
        if (sep) {
            if (n >= MAX_TOKENS)
                return fail(why, whylen, "%s", "too many settings");
            tok[n][0] = *p;
            tok[n++][1] = '\0';
        } else if (*p != ' ') {
            if (bl >= sizeof tok[0] - 1)
                return fail(why, whylen, "%s", "a setting is too long");
            tok[n][bl++] = *p;
        }
    }
#define NEXT_IS(ch) (i + 1 < n && tok[i + 1][0] == (ch) && tok[i + 1][1] == '\0')
    for (int i = 0; i < n; i++) {
        const char *key = tok[i];
        if (!NEXT_IS(':') || i + 2 >= n)
            return fail(why, whylen, "'%s' needs ':' and a value", key);
        i += 2;
        const char *val = tok[i];
        uint64_t v;
        if (!strcmp(key, "max_split_size_mb") || !strcmp(key, "max_non_split_rounding_mb")) {
            if (ulong_of(val, &v) != 0)
                return fail(why, whylen, "%s needs a number of MiB", key);
            if (v < 20)
                return fail(why, whylen, "%s must be >= 20", key);
            uint64_t bytes = v > UINT64_MAX / MIB ? UINT64_MAX / MIB * MIB : v * MIB;
            if (key[4] == 's')
                c->max_split_size = bytes;
            else
                c->max_non_split_rounding = bytes;
        } else if (!strcmp(key, "garbage_collection_threshold")) {
            char *end;
            double d = strtod(val, &end);
            if (*end || !(d > 0 && d < 1.0))
                return fail(why, whylen, "%s must be in (0.0, 1.0)", key);
            c->gc_threshold = d;
        } else if (!strcmp(key, "expandable_segments")) {
            if (strcmp(val, "True") && strcmp(val, "False"))
                return fail(why, whylen, "%s takes True or False", key);
            c->expandable = !strcmp(val, "True");
        } else if (!strcmp(key, "roundup_power2_divisions")) {
            if (strcmp(val, "[")) {
                if (ulong_of(val, &v) != 0 || !pow2(v) || v > UINT32_MAX)
                    return fail(why, whylen, "%s: divisions must be a power of 2", key);
                for (int k = 0; k < WI_ROUNDUP_INTERVALS; k++)
                    c->roundup[k] = (uint32_t)v;
            } else {
                bool first = true;
                int last = 0;
                i++;
                while (i < n && strcmp(tok[i], "]")) {
                    const char *iv = tok[i];
                    if (!NEXT_IS(':') || i + 2 >= n)
                        return fail(why, whylen, "%s: expected INTERVAL:DIVISIONS", key);
                    i += 2;
                    if (ulong_of(tok[i], &v) != 0 || (v && !pow2(v)) || v > UINT32_MAX)
                        return fail(why, whylen,
                                    "%s: divisions must be a power of 2 or 0", key);
                    if (!strcmp(iv, ">")) {
                        for (int k = last; k < WI_ROUNDUP_INTERVALS; k++)
                            c->roundup[k] = (uint32_t)v;
                    } else {
                        uint64_t mb;
                        if (ulong_of(iv, &mb) != 0 || !pow2(mb))
                            return fail(why, whylen, "%s: intervals must be powers of 2", key);
                        int idx = 63 - __builtin_clzll(mb);
                        if (idx > WI_ROUNDUP_INTERVALS - 1)
                            idx = WI_ROUNDUP_INTERVALS - 1;
                        if (first) {
                            for (int k = 0; k < idx; k++)
                                c->roundup[k] = (uint32_t)v;
                            first = false;
                        }
                        c->roundup[idx] = (uint32_t)v;
                        last = idx;
                    }
                    if (NEXT_IS(','))
                        i++;
                    i++;
                }
                if (i >= n)
                    return fail(why, whylen, "%s: missing ']'", key);
            }
        } else if (!strcmp(key, "backend")) {
            if (strcmp(val, "native"))
                return fail(why, whylen, "backend '%s' is not modelled (native only)", val);
        } else if (!strcmp(key, "release_lock_on_cudamalloc") ||
                   !strcmp(key, "pinned_use_cuda_host_register") ||
                   !strcmp(key, "pinned_num_register_threads") ||
                   !strcmp(key, "pinned_use_background_threads") ||
                   !strcmp(key, "pinned_reserve_segment_size_mb") ||
                   !strcmp(key, "graph_capture_record_stream_reuse")) {
            /* no effect on device memory */
        } else {
            return fail(why, whylen, "unknown setting '%s'", key);
        }
        if (i + 1 < n) {
            if (!NEXT_IS(','))
                return fail(why, whylen, "expected ',' after '%s'", tok[i]);
            i++;
        }
    }
#undef NEXT_IS
    return 0;
}
