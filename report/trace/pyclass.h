/* pyclass.h - what a stack's Python frames say, found once per stack id.
 *
 * Reports that follow a run (backward.c, kinds.c) ask the same question
 * of every allocation: is one of its Python frames a call of backward, an
 * optimizer step, torch.nn placing parameters? The answer depends only on
 * the stack, so it is cached by stack id: a stack's frames are looked up
 * and its flags computed the first time it is met.
 */
#ifndef GMT_PYCLASS_H
#define GMT_PYCLASS_H

#include <stdbool.h>
#include <stdint.h>

#include "defs.h"

#define PYCLASS_KNOWN 0x80u  /* set on every cached answer */
#define PYCLASS_PYTHON 0x40u /* the stack has Python frames */

struct pyclass;

/* The flags of stack id: PYCLASS_PYTHON, and the union of of_frame(code
 * name, file) over its Python frames (bits below 0x40). *cache is made on
 * first use; on no memory the flags are computed but not kept. */
uint8_t gmt_pyclass(struct pyclass **cache, const struct gmt_defs *d, uint32_t id,
                    uint8_t (*of_frame)(const char *name, const char *file));
void gmt_pyclass_free(struct pyclass *cache);

/* Python code of installed packages and the standard library (NULL:
 * unknown), not the user's own: a site is named by the innermost frame of
 * the user's code instead. */
bool gmt_library_file(const char *file);

#endif /* GMT_PYCLASS_H */
