/* addrmap.h - tables of records keyed by a device address.
 *
 * The replay, the memory kinds, the HTML page's pass and the exports each
 * follow live blocks by address. One table serves them all: open
 * addressing with linear probing, kept at most 3/4 full, and deletion by
 * backward shift (no tombstones, so a long run of allocations and frees
 * never slows the probes). The address 0 marks an empty slot: no block
 * lives at 0.
 *
 * ADDRMAP_FUNCS(prefix, table, entry, first_cap) defines, for a table
 * struct with members `entry *slot; size_t cap, n;` and an entry struct
 * whose member `uint64_t addr` is the key:
 *
 *   entry *prefix_find(table *t, uint64_t addr)    NULL if absent
 *   entry *prefix_insert(table *t, uint64_t addr)  a new entry, zeroed but
 *         for addr (the caller knows addr is absent); NULL on no memory
 *   void prefix_remove(table *t, entry *e)         e from find or insert
 *   void prefix_release(table *t)                  frees the slots
 *
 * static functions, so each user's compiler sees them whole: the replay
 * runs them once per event.
 */
#ifndef GMT_ADDRMAP_H
#define GMT_ADDRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline size_t gmt_addrmap_home(uint64_t addr, size_t cap)
{
    return (size_t)((addr * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

#define ADDRMAP_FUNCS(prefix, table, entry, first_cap)                                   \
    __attribute__((unused)) static bool prefix##_grow(table *t)                         \
    {                                                                                   \
        size_t cap = t->cap ? 2 * t->cap : (first_cap);                                 \
        entry *s = calloc(cap, sizeof *s);                                              \
        if (s == NULL)                                                                  \
            return false;                                                               \
        for (size_t i = 0; i < t->cap; i++) {                                           \
            if (!t->slot[i].addr)                                                       \
                continue;                                                               \
            size_t j = gmt_addrmap_home(t->slot[i].addr, cap);                          \
            while (s[j].addr)                                                           \
                j = (j + 1) & (cap - 1);                                                \
            s[j] = t->slot[i];                                                          \
        }                                                                               \
        free(t->slot);                                                                  \
        t->slot = s;                                                                    \
        t->cap = cap;                                                                   \
        return true;                                                                    \
    }                                                                                   \
                                                                                        \
    __attribute__((unused)) static entry *prefix##_find(table *t, uint64_t addr)        \
    {                                                                                   \
        if (t->cap == 0 || addr == 0)                                                   \
            return NULL;                                                                \
        for (size_t j = gmt_addrmap_home(addr, t->cap); t->slot[j].addr;               \
             j = (j + 1) & (t->cap - 1))                                                \
            if (t->slot[j].addr == addr)                                                \
                return &t->slot[j];                                                     \
        return NULL;                                                                    \
    }                                                                                   \
                                                                                        \
    __attribute__((unused)) static entry *prefix##_insert(table *t, uint64_t addr)      \
    {                                                                                   \
        if (addr == 0 || ((t->n + 1) * 4 > t->cap * 3 && !prefix##_grow(t)))           \
            return NULL;                                                                \
        size_t j = gmt_addrmap_home(addr, t->cap);                                      \
        while (t->slot[j].addr)                                                         \
            j = (j + 1) & (t->cap - 1);                                                 \
        t->slot[j].addr = addr; /* empty slots are kept zeroed */                       \
        t->n++;                                                                         \
        return &t->slot[j];                                                             \
    }                                                                                   \
                                                                                        \
    __attribute__((unused)) static void prefix##_remove(table *t, entry *e)             \
    {                                                                                   \
        size_t cap = t->cap, hole = (size_t)(e - t->slot), j = hole;                    \
        for (;;) {                                                                      \
            j = (j + 1) & (cap - 1);                                                    \
            if (!t->slot[j].addr)                                                       \
                break;                                                                  \
            size_t home = gmt_addrmap_home(t->slot[j].addr, cap);                       \
            /* move it into the hole unless its home lies after the hole */            \
            if (((j - home) & (cap - 1)) >= ((j - hole) & (cap - 1))) {                 \
                t->slot[hole] = t->slot[j];                                             \
                hole = j;                                                               \
            }                                                                           \
        }                                                                               \
        memset(&t->slot[hole], 0, sizeof t->slot[hole]);                                \
        t->n--;                                                                         \
    }                                                                                   \
                                                                                        \
    __attribute__((unused)) static void prefix##_release(table *t)                      \
    {                                                                                   \
        free(t->slot);                                                                  \
        t->slot = NULL;                                                                 \
        t->cap = t->n = 0;                                                              \
    }

#endif /* GMT_ADDRMAP_H */
