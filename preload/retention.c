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
 *   step:N  after the N-th training step: the N-th optimizer step (a
 *           global post hook of torch.optim, PyTorch 2.0 and later) or
 *           the N-th gpumemtrace_mark("step"), whichever comes first
 *   mark:NAME  at the first mark (or region) the program names NAME,
 *           through gpumemtrace_markers or NVTX
 *   growth  once, when the tensors PyTorch holds grew at each of five
 *           optimizer steps in a row (torch.cuda.memory_allocated(), read
 *           once a step in the same hook)
 *
 * A mark is made on any thread and in the tracer's own code: it only
 * queues a pending call (the interpreter's main thread runs it at its
 * next safe point), which runs the walk in the bootstrap's namespace,
 * kept for that. A program may also ask for a capture itself
 * (gpumemtrace_markers.retention(), by ctypes.PyDLL so the GIL is held):
 * that one runs at once, bootstrapping first if nothing else had.
 *
 * A failure in the bootstrap or in a walk costs that capture, never the
 * program: exceptions are swallowed, nothing is printed.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define GMT_EXPORT __attribute__((visibility("default")))

typedef void PyObject;

static PyObject *(*g_dict_new)(void);
static int (*g_dict_set)(PyObject *, const char *, PyObject *);
static PyObject *(*g_builtins)(void);
static PyObject *(*g_run)(const char *, int, PyObject *, PyObject *, void *);
static void (*g_decref)(PyObject *);
static void (*g_err_clear)(void);
static int (*g_pending)(int (*)(void *), void *);

#define PY_FILE_INPUT 257 /* Py_file_input, the same in every CPython 3 */

/* What the bootstrap does: WANT, STEP and DEVICE are set before it in
 * its namespace. Every name it makes stays in that namespace, which is
 * kept (g_ns) for the captures a mark or the program asks for: _fire(k)
 * takes the reason C holds for k (gpumemtrace_retention_reason). */
static const char g_boot[] =
    "try:\n"
    "    import atexit, ctypes\n"
    "    _lib = ctypes.CDLL(None)\n"
    "    _get = _lib.gpumemtrace_retention_source\n"
    "    _get.restype = ctypes.c_char_p\n"
    "    _src = _get()\n"
    "    _ns = {'__name__': '_gpumemtrace_retention'}\n"
    "    exec(compile(_src, '<gpumemtrace retention>', 'exec'), _ns)\n"
    "    _ns['_BOOT_NS'] = globals()  # its frames and objects are not the program's\n"
    "    _line = _lib.gpumemtrace_retention_line\n"
    "    _line.argtypes = (ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t)\n"
    "    _reason = _lib.gpumemtrace_retention_reason\n"
    "    _reason.argtypes, _reason.restype = (ctypes.c_int,), ctypes.c_char_p\n"
    "    _claim = _lib.gpumemtrace_retention_claim\n"
    "    _claim.argtypes, _claim.restype = (ctypes.c_int,), ctypes.c_int\n"
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
    "    def _fire(k):\n"
    "        r = _reason(k)\n"
    "        if r:\n"
    "            _run(r.decode('utf-8', 'replace'))\n"
    "    def _note(m):\n"
    "        m = ('note\\t' + m).encode()\n"
    "        _line(0, m, len(m))\n"
    "    if 'exit' in WANT:\n"
    "        atexit.register(_run, 'exit')\n"
    "    if 'signal' in WANT:\n"
    "        import signal\n"
    "        if signal.getsignal(signal.SIGUSR2) in (signal.SIG_DFL, None):\n"
    "            signal.signal(signal.SIGUSR2, lambda signum, frame: _run('signal'))\n"
    "        else:\n"
    "            _note(\"SIGUSR2 is the program's: no capture on the signal\")\n"
    "    _steps = [0, [], False]  # steps, allocated after the last 6, hooked\n"
    "    def _on_step(opt, args, kwargs, _steps=_steps):\n"
    "        try:\n"
    "            _steps[0] += 1\n"
    "            n = _steps[0]\n"
    "            if STEP and n == STEP and _claim(1):\n"
    "                _run(_reason(1).decode())\n"
    "            if 'growth' in WANT:\n"
    "                h = _steps[1]\n"
    "                h.append(_torch_now.cuda.memory_allocated())\n"
    "                del h[:-6]\n"
    "                if len(h) == 6 and all(a < b for a, b in zip(h, h[1:])) and _claim(3):\n"
    "                    _run('growth: %d bytes more in 5 steps, to step %d' %\n"
    "                         (h[-1] - h[0], n))\n"
    "        except BaseException:\n"
    "            pass\n"
    "    def _loading(m):\n"
    "        return getattr(getattr(m, '__spec__', None), '_initializing', False)\n"
    "    def _arm():\n"
    "        # PyTorch's global optimizer hook, once torch is imported: the\n"
    "        # first CUDA call may come while it still is (C calls again at a\n"
    "        # later allocation while this returns False)\n"
    "        global _torch_now\n"
    "        import sys\n"
    "        t, m = sys.modules.get('torch'), sys.modules.get('torch.optim.optimizer')\n"
    "        if t is None or m is None or _loading(t) or _loading(m):\n"
    "            return False\n"
    "        hook = getattr(m, 'register_optimizer_step_post_hook', None)\n"
    "        if _steps[2]:\n"
    "            pass  # a try queued before the one that registered it\n"
    "        elif hook is None:\n"
    "            _note('no optimizer steps to count (PyTorch 2.0 or later has them)' +\n"
    "                  (': step:N counts gpumemtrace_mark(\"step\") alone' if STEP else '') +\n"
    "                  ('; no capture on growth' if 'growth' in WANT else ''))\n"
    "        else:\n"
    "            _torch_now = t\n"
    "            hook(_on_step)\n"
    "            _steps[2] = True\n"
    "        return True\n"
    "    def _rearm():\n"
    "        try:\n"
    "            if _arm():\n"
    "                _armed()\n"
    "        except BaseException:\n"
    "            _armed()\n"
    "    _armed = _lib.gpumemtrace_retention_armed\n"
    "    _armed.argtypes, _armed.restype = (), None\n"
    "    if STEP or 'growth' in WANT:\n"
    "        _rearm()\n"
    "    _m = ('armed\\t' + ','.join(WANT)).encode()\n"
    "    if WANT:\n"
    "        _line(0, _m, len(_m))\n"
    "except BaseException:\n"
    "    pass\n";

/* The bootstrap's namespace, once it ran; NULL before and when it could
 * not be made. Read and written under the GIL only. */
static PyObject *g_ns;

/* The triggers GPUMEMTRACE_RETENTION asked for: their reasons, and
 * whether each is still to come (a trigger fires once). */
enum { FIRE_CALL, FIRE_STEP, FIRE_MARK, FIRE_GROWTH, FIRES };
static char g_reason[FIRES][160];
static int g_armed[FIRES];      /* 1 until claimed */
static char g_mark[128];        /* mark:NAME's name */
static size_t g_mark_len;
static unsigned long g_step;    /* step:N's N */
static unsigned long g_step_marks; /* "step" marks so far */
bool gmt_retention_marks;       /* a mark may trigger a capture */

/* The interpreter's main thread, at a safe point, holding the GIL (or a
 * program's own call, by ctypes.PyDLL: the GIL held too). */
static int boot(void *arg)
{
    const char *pre = arg;
    if (g_ns != NULL)
        return 0;
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
    if (r == NULL) {
        g_err_clear();
        g_decref(ns);
        return 0; /* a failed capture set-up is no error of the program's */
    }
    g_decref(r);
    g_ns = ns; /* kept: the later captures run in it */
    return 0;
}

/* code run in the bootstrap's namespace (the GIL held); an exception in
 * it is dropped */
static void run_in_ns(const char *code)
{
    if (g_ns == NULL)
        return;
    PyObject *r = g_run(code, PY_FILE_INPUT, g_ns, g_ns, NULL);
    if (r == NULL)
        g_err_clear();
    else
        g_decref(r);
}

/* A capture for trigger k, in the bootstrap's namespace (the GIL held). */
static void fire(int k)
{
    static const char *const run[FIRES] = {"_fire(0)\n", "_fire(1)\n", "_fire(2)\n",
                                           "_fire(3)\n"};
    run_in_ns(run[k]);
}

static int fire_pending(void *arg)
{
    fire((int)(intptr_t)arg);
    return 0;
}

/* Until the optimizer hook is registered (step:N, growth): each device
 * allocation recorded tries again, through a pending call, while none is
 * queued; given up after REARM_TRIES. */
#define REARM_TRIES 10000
bool gmt_retention_rearm;
static int g_rearm_queued;
static unsigned g_rearm_tries;

GMT_EXPORT void gpumemtrace_retention_armed(void)
{
    __atomic_store_n(&gmt_retention_rearm, false, __ATOMIC_RELEASE);
}

static int rearm_pending(void *arg)
{
    (void)arg;
    run_in_ns("_rearm()\n");
    __atomic_store_n(&g_rearm_queued, 0, __ATOMIC_RELEASE);
    return 0;
}

static int giveup_pending(void *arg)
{
    (void)arg;
    run_in_ns("_note('no PyTorch optimizer was found to count steps: no capture at a step "
              "or on growth')\n");
    return 0;
}

void gmt_retention_retry(void)
{
    if (__atomic_exchange_n(&g_rearm_queued, 1, __ATOMIC_ACQ_REL))
        return; /* one queued already */
    bool last = __atomic_add_fetch(&g_rearm_tries, 1, __ATOMIC_RELAXED) >= REARM_TRIES;
    if (last) /* the note is the walk's, written outside this hook */
        gpumemtrace_retention_armed();
    if (g_pending(last ? giveup_pending : rearm_pending, NULL) != 0)
        __atomic_store_n(&g_rearm_queued, 0, __ATOMIC_RELEASE);
}

/* Trigger k taken, once: 1 for the first caller, 0 after. */
GMT_EXPORT int gpumemtrace_retention_claim(int k)
{
    if (k <= FIRE_CALL || k >= FIRES)
        return 0;
    return __atomic_exchange_n(&g_armed[k], 0, __ATOMIC_ACQ_REL);
}

GMT_EXPORT const char *gpumemtrace_retention_reason(int k)
{
    return k >= 0 && k < FIRES && g_reason[k][0] ? g_reason[k] : NULL;
}

/* A mark or region named s[0..n) was recorded: a capture queued when it
 * is the one asked for. Any thread, the tracer's guard held: nothing here
 * touches Python but the queue of pending calls, which takes its own lock
 * and may be called without the GIL. */
void gmt_retention_on_mark(unsigned type, const char *s, size_t n)
{
    int k = -1;
    if (g_mark_len && n == g_mark_len && memcmp(s, g_mark, n) == 0 &&
        gpumemtrace_retention_claim(FIRE_MARK))
        k = FIRE_MARK;
    else if (g_step && type == GMT_MARK && n == 4 && memcmp(s, "step", 4) == 0 &&
             __atomic_add_fetch(&g_step_marks, 1, __ATOMIC_RELAXED) == g_step &&
             gpumemtrace_retention_claim(FIRE_STEP))
        k = FIRE_STEP;
    if (k >= 0 && g_pending(fire_pending, (void *)(intptr_t)k) != 0)
        __atomic_store_n(&g_armed[k], 1, __ATOMIC_RELEASE); /* queue full: the next one */
}

/* The interpreter's functions a capture needs; false when one is missing. */
static bool bind_python(void)
{
    int (*initialized)(void) = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    g_pending = dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
    g_dict_new = dlsym(RTLD_DEFAULT, "PyDict_New");
    g_dict_set = dlsym(RTLD_DEFAULT, "PyDict_SetItemString");
    g_builtins = dlsym(RTLD_DEFAULT, "PyEval_GetBuiltins");
    g_run = dlsym(RTLD_DEFAULT, "PyRun_StringFlags");
    g_decref = dlsym(RTLD_DEFAULT, "Py_DecRef");
    g_err_clear = dlsym(RTLD_DEFAULT, "PyErr_Clear");
    return g_pending && initialized && g_dict_new && g_dict_set && g_builtins && g_run &&
           g_decref && g_err_clear && initialized();
}

static char g_pre[256]; /* the bootstrap's settings; empty until armed */

/* The program asks for a capture now (gpumemtrace_markers.retention,
 * through ctypes.PyDLL: on its own thread, holding the GIL). Without
 * GPUMEMTRACE_RETENTION the bootstrap runs first, arming nothing. 1: a
 * capture was taken. */
GMT_EXPORT int gpumemtrace_retention_now(const char *reason)
{
    if (g_ns == NULL) {
        if (g_run == NULL && !bind_python())
            return 0;
        boot(g_pre[0] ? g_pre : "WANT = ()\nSTEP = 0\nDEVICE = 'cuda'\n");
    }
    if (g_ns == NULL)
        return 0;
    snprintf(g_reason[FIRE_CALL], sizeof g_reason[FIRE_CALL], "%s",
             reason && *reason ? reason : "marker");
    fire(FIRE_CALL);
    return 1;
}

void gmt_retention_start(struct gmt_thread *t)
{
    const char *want = gmt_opt.retention;
    if (want == NULL || *want == '\0' || g_pre[0] || g_ns)
        return;
    bool exit_ = false, signal_ = false, all = false, growth = false;
    char w[256];
    snprintf(w, sizeof w, "%s", want);
    for (char *save = NULL, *tok = strtok_r(w, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long n;
        if (!strcmp(tok, "exit")) {
            exit_ = true;
        } else if (!strcmp(tok, "signal")) {
            signal_ = true;
        } else if (!strcmp(tok, "all")) {
            all = true;
        } else if (!strcmp(tok, "growth")) {
            growth = true;
        } else if (!strncmp(tok, "step:", 5) && tok[5] >= '1' && tok[5] <= '9' &&
                   (n = strtoul(tok + 5, &end, 10)) < 1000000000 && *end == '\0') {
            g_step = n;
            snprintf(g_reason[FIRE_STEP], sizeof g_reason[FIRE_STEP], "step %lu", g_step);
        } else if (!strncmp(tok, "mark:", 5) && tok[5] && strlen(tok + 5) < sizeof g_mark) {
            g_mark_len = strlen(tok + 5);
            memcpy(g_mark, tok + 5, g_mark_len);
            snprintf(g_reason[FIRE_MARK], sizeof g_reason[FIRE_MARK], "mark %s", g_mark);
        } else {
            gmt_info("GPUMEMTRACE_RETENTION: '%s' is none of exit, signal, step:N, "
                     "mark:NAME, growth, all; ignored", tok);
        }
    }
    if (!exit_ && !signal_ && !g_step && !g_mark_len && !growth) {
        if (all) /* no moment: what the program's own captures look for */
            snprintf(g_pre, sizeof g_pre, "WANT = ()\nSTEP = 0\nDEVICE = 'all'\n");
        return;
    }
    if (!bind_python()) {
        gmt_trace_note(t, 1, "retention: the interpreter does not export what a capture "
                             "needs; none will be taken");
        return;
    }
    char wanted[200];
    snprintf(wanted, sizeof wanted, "%s%s%s%s%s", exit_ ? "'exit'," : "",
             signal_ ? "'signal'," : "", g_step ? "'step'," : "", g_mark_len ? "'mark'," : "",
             growth ? "'growth'," : "");
    snprintf(g_pre, sizeof g_pre, "WANT = (%s)\nSTEP = %lu\nDEVICE = '%s'\n", wanted, g_step,
             all ? "all" : "cuda");
    g_armed[FIRE_STEP] = g_step > 0;
    g_armed[FIRE_MARK] = g_mark_len > 0;
    g_armed[FIRE_GROWTH] = growth;
    if (g_pending(boot, g_pre) != 0) {
        gmt_trace_note(t, 1, "retention: the interpreter's queue of pending calls is "
                             "full; no capture will be taken");
        g_pre[0] = '\0';
        return;
    }
    __atomic_store_n(&gmt_retention_marks, g_step > 0 || g_mark_len > 0, __ATOMIC_RELEASE);
    /* the bootstrap tries first; allocations after it try again */
    __atomic_store_n(&gmt_retention_rearm, g_step > 0 || growth, __ATOMIC_RELEASE);
}
