/* retention.c - which Python objects keep the tensors alive, captured in
 * the traced interpreter at the moments GPUMEMTRACE_RETENTION names.
 *
 * The walk is Python (preload/retention.py, carried as the string
 * gmt_retention_py): it follows the program's objects from its roots
 * (module globals, the frames' locals) through containers, attributes,
 * closures and autograd's graphs to the tensors' storages, and writes
 * one GMT_X_RETENTION record per line (gpumemtrace_retention_line, by
 * ctypes): the holders by the bytes they retain, each storage's shortest
 * chain.
 *
 * Nothing of it runs in a hook, and nothing between captures. Once the
 * tracer has found the interpreter (gmt_py_init, at the first CUDA call),
 * one pending call (Py_AddPendingCall: the interpreter's main thread runs
 * it at its next safe point, holding the GIL) runs a short bootstrap in a
 * namespace of its own - nothing is added to __main__ or sys.modules -
 * that compiles the walk and registers the moments asked for:
 *
 *   exit    an atexit handler: atexit runs before the interpreter's
 *           teardown, while the program's objects are all still there
 *   signal  a handler for SIGUSR2 through Python's signal module, so the
 *           walk runs on the main thread at a safe point, never in the
 *           signal's context; not when the program has its own handler
 *           for it (a note in the trace says so)
 *   all     every tensor, not only CUDA's (for a CPU-only PyTorch)
 *
 * A failure in the bootstrap or in a walk costs that capture, never the
 * program: exceptions are swallowed, nothing is printed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef void PyObject;

static PyObject *(*g_dict_new)(void);
static int (*g_dict_set)(PyObject *, const char *, PyObject *);
static PyObject *(*g_builtins)(void);
static PyObject *(*g_run)(const char *, int, PyObject *, PyObject *, void *);
static void (*g_decref)(PyObject *);
static void (*g_err_clear)(void);

#define PY_FILE_INPUT 257 /* Py_file_input, the same in every CPython 3 */

/* What the bootstrap does: WANT and DEVICE are set before it in its
 * namespace. Every name it makes stays in that namespace. */
static const char g_boot[] =
    "try:\n"
    "    import atexit, ctypes\n"
    "    _lib = ctypes.CDLL(None)\n"
    "    _get = _lib.gpumemtrace_retention_source\n"
    "    _get.restype = ctypes.c_char_p\n"
    "    _src = _get()\n"
    "    _ns = {'__name__': '_gpumemtrace_retention'}\n"
    "    exec(compile(_src, '<gpumemtrace retention>', 'exec'), _ns)\n"
    "    _line = _lib.gpumemtrace_retention_line\n"
    "    _line.argtypes = (ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t)\n"
    "    _count = [0]\n"
    "    def _run(reason, _ns=_ns, _line=_line, _count=_count, _device=DEVICE):\n"
    "        try:\n"
    "            _count[0] += 1\n"
    "            n = _count[0]\n"
    "            def emit(s):\n"
    "                b = s.encode('utf-8', 'replace')\n"
    "                _line(n, b, len(b))\n"
    "            _ns['capture'](reason, emit, device=_device)\n"
    "        except BaseException:\n"
    "            pass\n"
    "    if 'exit' in WANT:\n"
    "        atexit.register(_run, 'exit')\n"
    "    if 'signal' in WANT:\n"
    "        import signal\n"
    "        if signal.getsignal(signal.SIGUSR2) in (signal.SIG_DFL, None):\n"
    "            signal.signal(signal.SIGUSR2, lambda signum, frame: _run('signal'))\n"
    "        else:\n"
    "            _m = b'note\\tSIGUSR2 is the program\\'s: no capture on the signal'\n"
    "            _line(0, _m, len(_m))\n"
    "    _m = ('armed\\t' + ','.join(WANT)).encode()\n"
    "    _line(0, _m, len(_m))\n"
    "except BaseException:\n"
    "    pass\n";

/* The interpreter's main thread, at a safe point, holding the GIL. */
static int boot(void *arg)
{
    const char *pre = arg;
    PyObject *ns = g_dict_new();
    if (ns == NULL) {
        g_err_clear();
        return 0;
    }
    PyObject *r = NULL;
    if (g_dict_set(ns, "__builtins__", g_builtins()) == 0 &&
        (r = g_run(pre, PY_FILE_INPUT, ns, ns, NULL)) != NULL) {
        g_decref(r);
        r = g_run(g_boot, PY_FILE_INPUT, ns, ns, NULL);
    }
    if (r == NULL)
        g_err_clear();
    else
        g_decref(r);
    g_decref(ns);
    return 0; /* a failed capture set-up is no error of the program's */
}

void gmt_retention_start(struct gmt_thread *t)
{
    static char pre[160];
    const char *want = gmt_opt.retention;
    if (want == NULL || *want == '\0' || pre[0])
        return;
    bool exit_ = false, signal_ = false, all = false;
    char w[128];
    snprintf(w, sizeof w, "%s", want);
    for (char *save = NULL, *tok = strtok_r(w, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "exit"))
            exit_ = true;
        else if (!strcmp(tok, "signal"))
            signal_ = true;
        else if (!strcmp(tok, "all"))
            all = true;
        else
            gmt_info("GPUMEMTRACE_RETENTION: '%s' is none of exit, signal, all; ignored", tok);
    }
    if (!exit_ && !signal_)
        return;
    int (*pending)(int (*)(void *), void *) = dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
    int (*initialized)(void) = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    g_dict_new = dlsym(RTLD_DEFAULT, "PyDict_New");
    g_dict_set = dlsym(RTLD_DEFAULT, "PyDict_SetItemString");
    g_builtins = dlsym(RTLD_DEFAULT, "PyEval_GetBuiltins");
    g_run = dlsym(RTLD_DEFAULT, "PyRun_StringFlags");
    g_decref = dlsym(RTLD_DEFAULT, "Py_DecRef");
    g_err_clear = dlsym(RTLD_DEFAULT, "PyErr_Clear");
    if (!pending || !initialized || !g_dict_new || !g_dict_set || !g_builtins || !g_run ||
        !g_decref || !g_err_clear || !initialized()) {
        gmt_trace_note(t, 1, "retention: the interpreter does not export what a capture "
                             "needs; none will be taken");
        return;
    }
    snprintf(pre, sizeof pre, "WANT = %s%s\nDEVICE = '%s'\n",
             exit_ ? "('exit',)" : "()", signal_ ? " + ('signal',)" : "",
             all ? "all" : "cuda");
    if (pending(boot, pre) != 0) {
        gmt_trace_note(t, 1, "retention: the interpreter's queue of pending calls is "
                             "full; no capture will be taken");
        pre[0] = '\0';
    }
}
