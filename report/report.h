/* report.h - what the gpumemreport commands share.
 *
 * Each command lives in its own cmd_<name>.c (here, or in the folder of its
 * wing: check/, export/, html/, whatif/) and exports exactly one entry
 * point, listed in the command table in main.c. Exit codes are the same
 * for all: 0 fine, 1 a check failed, 2 an error (bad input, bad usage,
 * output that could not be written).
 */
#ifndef GMT_REPORT_H
#define GMT_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gmttrace.h"

/* ---- cmd_*.c: one entry point each ---------------------------------- */
int cmd_summary(int argc, char **argv);
int cmd_peak(int argc, char **argv);
int cmd_frag(int argc, char **argv);
int cmd_retention(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int cmd_leaks(int argc, char **argv);
int cmd_growth(int argc, char **argv);
int cmd_phases(int argc, char **argv);
int cmd_transfers(int argc, char **argv);
int cmd_flamegraph(int argc, char **argv);
int cmd_html(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_ranks(int argc, char **argv);

#endif /* GMT_REPORT_H */
