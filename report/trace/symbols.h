/* symbols.h - turning recorded addresses into functions and lines.
 *
 * Frames are resolved offline from the module map in the trace: each
 * module is looked up at its recorded path and used only if its GNU
 * build-id matches the recorded one (a rebuilt library would give wrong
 * names). elfutils' libdwfl gives the function, the source line and the
 * inlined functions at the address; C++ names are demangled. A frame whose
 * module is missing or different stays module+offset.
 *
 * Sites. Reports group allocations by where they came from. A site label
 * is made from the user's frames - the recorded stack without its leading
 * frames in the CUDA runtime or the tracer - at one of three grains:
 * function, line, or the whole stack to a depth.
 *
 * Python. When a stack carries Python frames, they name the site: the
 * innermost frame of the user's own code (not of an installed package or
 * the standard library: the model's line, not torch.nn's) is the line,
 * and the native frame the interpreter called (the op:
 * `THPVariable_linear`, a ctypes callee) is shown after it. The
 * interpreter's own frames are dropped; the native frames between the op
 * and the CUDA runtime, and the library's Python frames, stay in the
 * flamegraph view.
 */
#ifndef GMT_SYMBOLS_H
#define GMT_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "defs.h"

struct symbolizer;

/* One source-level frame (an inlined call is a frame of its own). */
struct sym {
    const char *function; /* demangled; NULL if unknown */
    const char *file;     /* NULL if unknown */
    int line;
    const char *module;   /* basename */
    unsigned long long offset; /* in the module */
    bool inlined;
    bool python;          /* a Python frame: file, line, function */
};

enum site_grain { GRAIN_FUNCTION, GRAIN_LINE, GRAIN_STACK };

/* resolve=false: never open binaries, frames stay module+offset. */
struct symbolizer *sym_new(const struct gmt_defs *d, bool resolve);
/* The synthetic stack ids of the replay's backward attribution
 * (backward.h), which sym_site and sym_folded then name. */
struct bw_state;
void sym_set_backward(struct symbolizer *s, const struct bw_state *bw);
void sym_free(struct symbolizer *s);

/* The source frames of recorded frame f, innermost first. Returns their
 * number (>= 1); the strings live as long as the symbolizer. */
/* The user frames of a stack, innermost first, in call order: native
 * frames without the leading runtime frames (and, when there are Python
 * frames, up to the interpreter), then the Python frames - for a block
 * autograd's engine made while a backward call waited (backward.h), its
 * own native frames and then the call's Python frames. *npy_out: how many
 * Python frames end the list. raw (may be NULL): each one's recorded
 * frame; {0, -2} for a function inlined into the one before it, {0, -1}
 * for a Python frame. */
int sym_user_frames(struct symbolizer *s, uint32_t stack, struct sym *out,
                    struct gmt_frame *raw, int max, int *npy_out);
int sym_frames(struct symbolizer *s, const struct gmt_frame *f,
               struct sym *out, int max);

/* A site's label for stack id `stack` at the given grain; depth: how many
 * user frames (GRAIN_STACK) or which frame's function (0 = innermost).
 * The string lives as long as the symbolizer. "(no stack)" for id 0. */
const char *sym_site(struct symbolizer *s, uint32_t stack,
                     enum site_grain grain, int depth);
/* What a site's label is made of: the op that allocated ("aten::mul",
 * or a binding's "mul"), the autograd node ("MulBackward0") and, for a
 * block the engine made while a backward call waited, that call's line.
 * NULL for what the stack does not show. */
void sym_site_parts(struct symbolizer *s, uint32_t stack, const char **op,
                    const char **node, const char **backward_of);
/* Does pred accept any native user frame of the stack (index 0: the
 * innermost, past the CUDA runtime's and driver's own frames)? */
bool sym_native_any(struct symbolizer *s, uint32_t stack,
                    bool (*pred)(const struct sym *f, int index));
/* The layer inside a library that allocated: the innermost library
 * Python frame of a method named forward outside torch's own package
 * ("GPT2Attention.forward (modeling_gpt2.py:NNN)"), else the innermost
 * such frame in torch (a torch.nn module); NULL when none. */
const char *sym_layer(struct symbolizer *s, uint32_t stack);
/* The user frames of a stack, outermost first, as "a;b;c" for folded
 * flamegraph input; depth 0: all. */
const char *sym_folded(struct symbolizer *s, uint32_t stack, int depth);
/* Format one frame: "function (file:line)" or "module+0xoff". */
const char *sym_format(struct symbolizer *s, const struct sym *f, bool with_line);
/* How many frames resolved to a function, and how many stayed raw. */
void sym_counts(const struct symbolizer *s, size_t *resolved, size_t *raw);

#endif /* GMT_SYMBOLS_H */
