/* sim_env.h - the environment parsing the simulated runtime and the
 * simulated driver share, so that both read SIM_CUDA_DEVICES and
 * SIM_CUDA_MEM alike. */
#ifndef SIM_ENV_H
#define SIM_ENV_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* "123", "64K", "512M", "1G", "2T" (binary multiples), optional B.
 * Returns false if the string is not a positive size. */
static inline bool sim_parse_size(const char *s, unsigned long long *out)
{
    char *end;
    unsigned long long v, mult = 1;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9')
        return false; /* also rejects "-1", which strtoull would accept */
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    switch (*end) {
    case 'k': case 'K': mult = 1ULL << 10; end++; break;
    case 'm': case 'M': mult = 1ULL << 20; end++; break;
    case 'g': case 'G': mult = 1ULL << 30; end++; break;
    case 't': case 'T': mult = 1ULL << 40; end++; break;
    default: break;
    }
    if (mult > 1 && (*end == 'b' || *end == 'B'))
        end++; /* accept "1GB" as well */
    if (*end != '\0' || v == 0 || v > ~0ULL / mult)
        return false;
    *out = v * mult;
    return true;
}

/* SIM_CUDA_DEVICES: "0".."max" (0: no device). 0 and *out set when s is
 * valid; 1 when it is not a number (*out untouched); 2 when it exceeds
 * max (*out = max). */
static inline int sim_parse_devices(const char *s, unsigned long long max,
                                    unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end != '\0' || s[0] == '-')
        return 1;
    *out = v > max ? max : v;
    return v > max ? 2 : 0;
}

/* SIM_CUDA_OTHER_USED: bytes that other processes hold on each device (a
 * card shared by two ranks, say). cudaMemGetInfo and cuMemGetInfo report
 * them as in use; allocations are not limited by them. The simulated NVML
 * (sim_nvml.c) lists them as another process's. 0 when unset or bad. */
static inline unsigned long long sim_other_used(void)
{
    unsigned long long v = 0;
    const char *env = getenv("SIM_CUDA_OTHER_USED");
    if (env == NULL || !sim_parse_size(env, &v))
        return 0;
    return v;
}

/* free bytes as reported, with the other processes' bytes taken off */
static inline unsigned long long sim_free_reported(unsigned long long free_b)
{
    unsigned long long o = sim_other_used();
    return o < free_b ? free_b - o : 0;
}

#endif /* SIM_ENV_H */
