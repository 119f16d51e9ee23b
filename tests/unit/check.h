/* check.h - the unit tests' one assertion: report file:line and what
 * failed, keep going, and make main() return non-zero at the end. */
#ifndef GMT_CHECK_H
#define GMT_CHECK_H
#include <stdio.h>

static int check_failures;
#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__,  \
                    #cond);                                                   \
            check_failures++;                                                 \
        }                                                                     \
    } while (0)
#define CHECK_DONE() (check_failures ? (fprintf(stderr, "%d failed\n",        \
                                                check_failures), 1) : 0)
#endif
