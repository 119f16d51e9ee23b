/* fail.h - the test programs' way out: print "FAIL <what>" on stdout (the
 * e2e tests read stdout) and exit 1. */
#ifndef GMT_TEST_FAIL_H
#define GMT_TEST_FAIL_H
#include <stdio.h>
#include <stdlib.h>

#define FAIL(...)                                                             \
    do {                                                                      \
        printf("FAIL " __VA_ARGS__);                                          \
        printf("\n");                                                         \
        exit(1);                                                              \
    } while (0)
#endif
