# gpumemtrace - top-level build.
#
#   make            build the preload library, the report tool, the tests' helpers
#   make test       build and run the test suite (CPU only, simulated CUDA runtime)
#   make asan       the end-to-end tests again, the library under ASan and UBSan
#   make install    PREFIX=/usr/local DESTDIR= (lib, bin, include/gpumemtrace.h)
#   make generate   rewrite the files generated from preload/gen-hooks.py's table
#   make clean
#   V=1             show full commands; CC=clang to build with clang
#
# The CUDA toolkit's headers are found through CUDA_HOME. The library does not
# link libcudart: it finds the program's own runtime at run time.

CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
O         ?= build
VERSION   := $(shell cat VERSION)
REVISION  := $(shell git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)

ifeq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
$(error CUDA toolkit headers not found in CUDA_HOME=$(CUDA_HOME); set CUDA_HOME)
endif

ifeq ($(V),1)
Q :=
say :=
else
Q := @
say = @printf '  %-8s %s\n' $(1) $(2);
endif

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-missing-field-initializers
CFLAGS   ?= -O2 -g
BASE     := -std=c11 -D_GNU_SOURCE -pthread -MMD -MP $(WARN)
CUDA_INC := -isystem $(CUDA_HOME)/include

LIB      := $(O)/libgpumemtrace.so
REPORT   := $(O)/gpumemreport
LAUNCHER := $(O)/gpumemtrace
SIMLIB   := $(O)/sim/libcudart.so.13

PRELOAD_SRC := $(wildcard preload/*.c)
PRELOAD_OBJ := $(PRELOAD_SRC:%.c=$(O)/%.o) $(O)/preload/fw_src.o $(O)/preload/retention_src.o \
               $(O)/gen/version_pic.o
LAUNCHER_SRC := $(wildcard report/launcher/*.c)
# libgmttrace (report/trace/), the trace-reading library: read a trace
# (reader, defs, names, stacks), replay it (replay*, backward, kinds,
# poolview), name its frames (symbols, opnames, pyclass), with the
# messages and JSON strings they print (output). The report commands, the
# launcher, the unit tests, the fuzzers and the benches link it; it is
# compiled without the commands' folder on its include path, so nothing in
# it can include a command's header.
TRACE_SRC   := $(wildcard report/trace/*.c)
TRACE_LIB   := $(O)/libgmttrace.a
TRACE_INC   := -Ipreload -Ireport/trace
# The commands: report/, and the wings with a folder each.
CMD_SRC     := $(wildcard report/*.c report/check/*.c report/export/*.c report/html/*.c report/whatif/*.c)
CMD_INC     := $(TRACE_INC) -Ireport
REPORT_SRC  := $(CMD_SRC) $(TRACE_SRC)
REPORT_OBJ  := $(CMD_SRC:%.c=$(O)/%.o) $(O)/gen/version.o
HTML_PAGE   := $(O)/report/html_page.c
# The caching pool's core (preload/pool*.c, no CUDA): the library's, and
# linked into the report tool for `whatif --policy gmt-pool`.
POOL_SRC    := $(addprefix preload/,pool.c pool_vmm.c pool_sync.c pool_trim.c pool_index.c)
POOL_OBJ    := $(POOL_SRC:%.c=$(O)/%.o)
REPORT_OBJ  += $(O)/report/html_page.o
SIM_SRC     := $(filter-out tests/sim/selftest%.c tests/sim/sim_driver.c tests/sim/sim_drv_%.c tests/sim/sim_nvml.c,$(wildcard tests/sim/*.c))
SIMNVML     := $(O)/sim/libnvidia-ml.so.1
SIMDRV      := $(O)/sim/libcuda.so.1
SIM_OBJ     := $(SIM_SRC:%.c=$(O)/%.o)
PROG_SRC    := $(wildcard tests/progs/*.c)
PROGS       := $(PROG_SRC:tests/progs/%.c=$(O)/tests/%)
TESTLIB_SRC := $(wildcard tests/progs/libs/*.c)
TESTLIBS    := $(TESTLIB_SRC:tests/progs/libs/%.c=$(O)/tests/lib%.so)
UNIT_SRC    := $(wildcard tests/unit/test_*.c)
UNITS       := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/unit/%)

all: $(LIB) $(REPORT) $(LAUNCHER)

# --version: VERSION and the git revision, in a source rewritten only when
# they change (a commit relinks the programs, nothing more).
$(O)/gen/version.c: FORCE
	@mkdir -p $(@D)
	@printf 'const char gmt_version[] = "%s (%s)";\n' '$(VERSION)' '$(REVISION)' > $@.tmp; \
	  if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(O)/gen/version.o: $(O)/gen/version.c
	$(Q)$(CC) $(BASE) $(CFLAGS) -c $< -o $@
$(O)/gen/version_pic.o: $(O)/gen/version.c
	$(Q)$(CC) $(BASE) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@
.PHONY: FORCE
FORCE:

# ---- generated sources ----------------------------------------------------
# preload/hooks.c and preload/gmt_api.h are generated from the table of
# hooked entry points in preload/gen-hooks.py, and committed. `make generate`
# rewrites them; check-generated fails, naming the stale file, while one
# differs from what the table makes. The library's build and `make test`
# run the check (CI runs both).
generate:
	$(Q)python3 preload/gen-hooks.py
check-generated:
	$(Q)python3 preload/gen-hooks.py --check
$(O)/gen/api-checked: preload/gen-hooks.py preload/hooks.c preload/gmt_api.h
	$(Q)python3 preload/gen-hooks.py --check
	@mkdir -p $(@D) && touch $@
$(LIB): $(O)/gen/api-checked
.PHONY: generate check-generated

# ---- the preload library --------------------------------------------------
# Hidden by default; exports.map lets out only the hooked CUDA entry points,
# dlsym and gpumemtrace_*.
# RUNPATH $ORIGIN: a libunwind copied next to the library is found (GPU hosts).
# Frame pointers always: stack.c's unwind cache follows them through the
# library's own frames to where the program's begin.
$(O)/preload/%.o: preload/%.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -fPIC -fvisibility=hidden -fno-omit-frame-pointer -c $< -o $@

# dlsym's RTLD_NEXT path must be a tail call (see driver.c), even in -O0 builds.
$(O)/preload/driver.o: override CFLAGS += -O2 -foptimize-sibling-calls

# The PyTorch bridge is compiled at run time against the program's own
# PyTorch (preload/fw_build.c): the library carries its source as strings.
$(O)/preload/fw_src.c: preload/fw_torch.cpp preload/fw_bridge.h
	$(call say,GEN,$@)
	@mkdir -p $(@D)
	$(Q){ echo '/* generated from preload/fw_torch.cpp and fw_bridge.h */'; \
	  for f in fw_torch.cpp:gmt_fw_torch_cpp fw_bridge.h:gmt_fw_bridge_h; do \
	    echo "const char $${f#*:}[] ="; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' preload/$${f%%:*}; \
	    echo ';'; \
	  done; } > $@.tmp && mv $@.tmp $@

$(O)/preload/fw_src.o: $(O)/preload/fw_src.c
	$(call say,CC,$@)
	$(Q)$(CC) $(BASE) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

# The walk of the Python objects that hold the tensors (preload/retention.c
# runs it in the traced interpreter): its source as a string.
$(O)/preload/retention_src.c: preload/retention.py
	$(call say,GEN,$@)
	@mkdir -p $(@D)
	$(Q){ echo '/* generated from preload/retention.py */'; \
	  echo "const char gmt_retention_py[] ="; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/    "/' -e 's/$$/\\n"/' \
	      preload/retention.py; \
	  echo ';'; } > $@.tmp && mv $@.tmp $@

$(O)/preload/retention_src.o: $(O)/preload/retention_src.c
	$(call say,CC,$@)
	$(Q)$(CC) $(BASE) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(LIB): $(PRELOAD_OBJ) preload/exports.map
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -shared -pthread -o $@ $(PRELOAD_OBJ) \
	    -Wl,--version-script=preload/exports.map -Wl,-z,defs -Wl,-e,gmt_lib_main \
	    -Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN' -lunwind -ldl

# ---- the report tool --------------------------------------------------------
# -O3 after CFLAGS: the reader and replay loops gain ~10% over -O2
# (scripts/bench-report.sh, docs/benchmarks.md). -fwrapv: sums over a
# hostile trace's sizes wrap instead of being undefined behaviour.
REPORT_CFLAGS = $(BASE) $(CFLAGS) -O3 -fwrapv
$(O)/report/trace/%.o: report/trace/%.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(REPORT_CFLAGS) $(TRACE_INC) -c $< -o $@

# The launcher, like the library, sees only libgmttrace's headers.
$(O)/report/launcher/%.o: report/launcher/%.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(REPORT_CFLAGS) $(TRACE_INC) -c $< -o $@

$(O)/report/%.o: report/%.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(REPORT_CFLAGS) $(CMD_INC) -c $< -o $@

$(TRACE_LIB): $(TRACE_SRC:%.c=$(O)/%.o)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(REPORT): $(REPORT_OBJ) $(TRACE_LIB) $(POOL_OBJ)
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -pthread -o $@ $(REPORT_OBJ) $(TRACE_LIB) $(POOL_OBJ) -ldw -lelf -ldl -lm

# `gpumemreport html` carries its page (report/html/) as C strings: each
# line a literal, with \ " and ? escaped (no trigraphs, no escapes by accident).
$(HTML_PAGE): report/html/report.html report/html/report.css report/html/report.js
	$(call say,GEN,$@)
	@mkdir -p $(@D)
	$(Q){ echo '/* generated from report/html/ by the Makefile */'; \
	  for f in report.html:gmt_html_page report.css:gmt_html_css report.js:gmt_html_js; do \
	    echo "const char $${f#*:}[] ="; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/    "/' -e 's/$$/\\n"/' \
	        report/html/$${f%%:*}; \
	    echo ';'; \
	  done; } > $@.tmp && mv $@.tmp $@

$(O)/report/html_page.o: $(HTML_PAGE)
	$(call say,CC,$@)
	$(Q)$(CC) $(BASE) $(CFLAGS) -c $< -o $@

# The launcher (report/launcher/) checks options by the library's table and
# rules (preload/gmt_options.h, option_values.c) and reads this run's
# traces with libgmttrace alone; its full report (--report) is the
# gpumemreport beside it, run as a program.
LAUNCHER_OBJ := $(LAUNCHER_SRC:%.c=$(O)/%.o) $(O)/preload/option_values.o $(O)/gen/version.o
$(LAUNCHER): $(LAUNCHER_OBJ) $(TRACE_LIB)
	$(call say,LD,$@)
	$(Q)$(CC) $(CFLAGS) -pthread -o $@ $^ -ldw -lelf -ldl -lm

# The launcher's unit test compiles launcher.c in (tests/unit/test_launcher.c),
# so it links the launcher's other object besides the report code.
$(O)/tests/unit/test_launcher: $(O)/report/launcher/launch_traces.o $(O)/preload/option_values.o
$(O)/tests/unit/test_launcher: UNIT_OBJ += $(O)/report/launcher/launch_traces.o $(O)/preload/option_values.o

# ---- tests: simulated runtime, test programs, unit tests ---------------------
$(O)/tests/sim/%.o: tests/sim/%.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -Wno-deprecated-declarations -fPIC -c $< -o $@

$(SIMLIB): $(SIM_OBJ) tests/sim/libcudart.map
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -shared -pthread -o $@ $(SIM_OBJ) \
	    -Wl,-soname,libcudart.so.13 -Wl,--version-script=tests/sim/libcudart.map
	$(Q)ln -sf libcudart.so.13 $(O)/sim/libcudart.so

# The simulated driver: what a statically linked runtime, or a program that
# calls the driver API, finds as libcuda.so.1.
$(SIMDRV): tests/sim/sim_driver.c $(wildcard tests/sim/sim_drv_*.c) tests/sim/sim_drv_internal.h tests/sim/sim_env.h \
           tests/sim/libcuda.map
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -fPIC -shared -o $@ $(filter %.c,$^) \
	    -Wl,-soname,libcuda.so.1 -Wl,--version-script=tests/sim/libcuda.map
	$(Q)ln -sf libcuda.so.1 $(O)/sim/libcuda.so

# The simulated NVML: this process's own device memory (preload/nvml.c).
$(SIMNVML): tests/sim/sim_nvml.c tests/sim/sim_env.h tests/sim/simcudart.h
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -fPIC -shared -o $@ $< -ldl

# Driver API programs: no runtime at all. drv_calls finds the driver as a
# static cudart does (dlopen + cuGetProcAddress); drv_linked links -lcuda;
# nexter checks that dlsym(RTLD_NEXT) still starts after its caller.
DRV_PROGS := $(O)/tests/drv_calls $(O)/tests/drv_linked $(O)/tests/nexter \
             $(O)/tests/rt_dlclose
$(O)/tests/drv_calls: tests/progs/driver/drv_calls.c $(SIMDRV)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -o $@ $< -Wl,-rpath,'$$ORIGIN/../sim' -ldl

$(O)/tests/drv_linked: tests/progs/driver/drv_linked.c $(SIMDRV)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -o $@ $< -L$(O)/sim \
	    -Wl,-rpath,'$$ORIGIN/../sim' -lcuda

# Not linked to the runtime: it dlopens it, and dlcloses it before exit.
$(O)/tests/rt_dlclose: tests/progs/driver/rt_dlclose.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) -o $@ $< -ldl

$(O)/tests/libnext_%.so: tests/progs/driver/next_%.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -fPIC -shared -o $@ $< -ldl

$(O)/tests/nexter: tests/progs/driver/nexter.c $(O)/tests/libnext_a.so $(O)/tests/libnext_b.so
	$(call say,CC,$@)
	$(Q)$(CC) $(BASE) $(CFLAGS) -o $@ $< -L$(O)/tests -Wl,-rpath,'$$ORIGIN' \
	    -Wl,--no-as-needed -lnext_a -lnext_b -ldl

# Test programs link the simulated runtime exactly as a CUDA program links the
# real one (-lcudart, dynamic), and keep frame info for the stack tests.
$(O)/tests/%: tests/progs/%.c $(SIMLIB)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) -O1 -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls $(PROG_FLAGS) $(CUDA_INC) \
	    -Wno-deprecated-declarations -Itests/sim -Ipreload -o $@ $< \
	    -L$(O)/sim -Wl,-rpath,'$$ORIGIN/../sim' -lcudart -ldl

# Without frame pointers, as most libraries ship: the unwind cache keeps no
# chain through a frame that keeps one (stack.c), and this test needs it to.
$(O)/tests/samesp: PROG_FLAGS = -fomit-frame-pointer

$(O)/tests/lib%.so: tests/progs/libs/%.c $(SIMLIB)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) -O1 -fno-inline $(CUDA_INC) -Itests/sim -fPIC -shared -o $@ $< \
	    -L$(O)/sim -Wl,-rpath,'$$ORIGIN/../sim' -lcudart

# Unit tests link the report tool's objects and the library's pure cores.
UNIT_OBJ := $(filter-out $(O)/report/main.o,$(REPORT_OBJ)) $(TRACE_LIB) $(POOL_OBJ) $(O)/preload/pool_check.o
$(O)/tests/unit/%: tests/unit/%.c $(UNIT_OBJ)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CMD_INC) -Ireport/launcher -o $@ $< $(UNIT_OBJ) -ldw -lelf -ldl -lm

$(O)/tests/sim-selftest: $(wildcard tests/sim/selftest*.c) $(SIMLIB)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CUDA_INC) -Wno-deprecated-declarations -Itests/sim \
	    -o $@ $(filter %.c,$^) -L$(O)/sim -Wl,-rpath,'$$ORIGIN/../sim' -lcudart

# Benchmarks of the library's cores (no CUDA): tests/bench/*.c
$(O)/tests/bench_%: tests/bench/bench_%.c $(POOL_OBJ)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) -Ipreload -o $@ $< $(POOL_OBJ)

$(O)/tests/gen_trace: tests/bench/gen_trace.c
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) -Ipreload -o $@ $<

$(O)/tests/replay_pool: tests/bench/replay_pool.c $(POOL_OBJ) $(O)/report/whatif/whatif_async.o $(TRACE_LIB)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(BASE) $(CFLAGS) $(CMD_INC) -o $@ $< $(POOL_OBJ) $(O)/report/whatif/whatif_async.o $(TRACE_LIB) -ldw -lelf -ldl -lm

BENCHES := $(patsubst tests/bench/%.c,$(O)/tests/%,$(wildcard tests/bench/*.c))

# The fuzz smoke run of the suite: the libFuzzer entry point under ASan and
# UBSan, driven by tests/fuzz/smoke.c (clang: its sanitizer runtime is the
# one install-deps.sh provides).
FUZZ_SRC := tests/fuzz/fuzz_reader.c $(TRACE_SRC)
REPORT_H := $(wildcard report/*.h report/*/*.h)
$(O)/tests/fuzz_smoke: tests/fuzz/smoke.c $(FUZZ_SRC) $(REPORT_H) preload/gmt_format.h preload/gmt_api.h
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)clang -std=c11 -D_GNU_SOURCE -g -O1 -fwrapv -fsanitize=address,undefined \
	    -fno-sanitize-recover=all $(TRACE_INC) -o $@ tests/fuzz/smoke.c $(FUZZ_SRC) \
	    -ldw -lelf -ldl -lm

# The same smoke run for the command layer (every command in-process on
# the input as a trace) and for check's baseline reader (the JSON parser).
FUZZ_CMD_SRC := $(filter-out report/main.c,$(REPORT_SRC)) $(POOL_SRC) $(HTML_PAGE)
$(O)/tests/fuzz_smoke_%: tests/fuzz/smoke.c tests/fuzz/fuzz_%.c $(FUZZ_CMD_SRC) $(REPORT_H) preload/gmt_format.h preload/gmt_api.h
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)clang -std=c11 -D_GNU_SOURCE -g -O1 -fwrapv -fsanitize=address,undefined \
	    -fno-sanitize-recover=all $(CMD_INC) -o $@ tests/fuzz/smoke.c \
	    tests/fuzz/fuzz_$*.c $(FUZZ_CMD_SRC) -ldw -lelf -ldl -lm

# The report tool under ASan and UBSan, every command, for the e2e tests
# (tests/e2e/test_sanitized.py): undefined behaviour on ordinary traces
# fails them. Linked whole here, as the smoke test is, with clang.
SAN_REPORT := $(O)/tests/gpumemreport-san
$(SAN_REPORT): $(REPORT_SRC) $(POOL_SRC) $(HTML_PAGE) $(O)/gen/version.c $(REPORT_H) preload/gmt_format.h preload/gmt_api.h preload/pool.h preload/pool_internal.h
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)clang -std=c11 -D_GNU_SOURCE -g -O1 -fwrapv -fsanitize=address,undefined \
	    -fno-sanitize-recover=all $(CMD_INC) -o $@ $(REPORT_SRC) $(POOL_SRC) $(HTML_PAGE) $(O)/gen/version.c \
	    -ldw -lelf -ldl -lm

# The PyTorch stand-in that the framework bridge's tests attach to.
include tests/sim/torch/rules.mk

tests: all $(SIMLIB) $(SIMDRV) $(SIMNVML) $(PROGS) $(DRV_PROGS) $(TESTLIBS) $(UNITS) $(BENCHES) \
       $(TORCH_TEST_DEPS) $(SAN_REPORT) \
       $(O)/tests/sim-selftest \
       $(O)/tests/fuzz_smoke $(O)/tests/fuzz_smoke_commands $(O)/tests/fuzz_smoke_baseline

test: check-generated tests
	$(Q)tests/run.sh $(O)

# The end-to-end suite again with the library built under ASan and UBSan,
# preloaded after gcc's sanitizer runtime (tests/e2e/gmt.py): a sanitizer
# report in the traced programs fails the test. CI runs it after `make test`.
ASAN_O := $(O)/asan-lib
asan: tests
	$(Q)$(MAKE) --no-print-directory CC=gcc O=$(ASAN_O) \
	    CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    $(ASAN_O)/libgpumemtrace.so
	$(Q)GMT_SANITIZED_PRELOAD="$$(gcc -print-file-name=libasan.so) $(abspath $(ASAN_O))/libgpumemtrace.so" \
	    tests/run.sh $(O) -k e2e/

# ---- install ------------------------------------------------------------------
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/libgpumemtrace.so
	install -m 0644 preload/gpumemtrace.h $(DESTDIR)$(PREFIX)/include/gpumemtrace.h
	install -m 0755 $(REPORT) $(DESTDIR)$(PREFIX)/bin/gpumemreport
	install -m 0755 $(LAUNCHER) $(DESTDIR)$(PREFIX)/bin/gpumemtrace
	@# the markers module, where python3 imports from under PREFIX (Debian:
	@# lib/python3.X/dist-packages), else PREFIX's standard site-packages
	$(Q)site=$$(python3 -c 'import os, sys; p = sys.argv[1]; \
	  d = [x for x in sys.path if x.startswith(p + "/lib/") and x.endswith(("-packages"))]; \
	  print(d[0] if d else os.path.join(p, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))' \
	  '$(PREFIX)' 2>/dev/null) && [ -n "$$site" ] && \
	  install -d "$(DESTDIR)$$site" && \
	  install -m 0644 preload/gpumemtrace_markers.py "$(DESTDIR)$$site/gpumemtrace_markers.py" && \
	  echo "  INSTALL  $$site/gpumemtrace_markers.py" || \
	  echo "  (no python3: preload/gpumemtrace_markers.py not installed)"

# scripts/fuzz.sh builds its targets from the same lists as the smoke runs
# (a list of its own missed the pool's core when whatif linked it)
trace-sources:
	@echo $(TRACE_SRC)
command-sources:
	@echo $(FUZZ_CMD_SRC)
trace-includes:
	@echo $(TRACE_INC)
command-includes:
	@echo $(CMD_INC)

clean:
	rm -rf $(O)

.PHONY: all test tests asan install clean trace-sources command-sources trace-includes command-includes
.DELETE_ON_ERROR:

-include $(shell find $(O) -name '*.d' 2>/dev/null)
