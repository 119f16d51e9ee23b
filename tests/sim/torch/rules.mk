# tests/sim/torch/rules.mk - build rules of the PyTorch stand-in, included
# by the top-level Makefile (its variables: O, CUDA_INC, SIMLIB, Q, say).
#
# The stand-in lays itself out as a PyTorch install does, because that is
# how gpumemtrace finds what to compile its bridge against: the module that
# calls cudaMalloc is .../lib/libc10_cuda.so, and the headers are in
# .../lib/../include. So:
#
#   $(O)/tests/torch/lib/libc10_cuda.so                     (soname libc10_cuda.so)
#   $(O)/tests/torch/include/c10/cuda/CUDACachingAllocator.h (a copy)
#   $(O)/tests/torch/check_standin                           (its own test)
#   $(O)/tests/torch/lib/libcublas.so.13                     (cuBLAS's own cudaMalloc)
#
# The library links the simulated runtime ($(SIMLIB)) as PyTorch links
# libcudart, found through an rpath relative to itself. There is no
# libc10.so: the bridge's build links it only when it exists.
# Try it alone with:  make -f Makefile -f tests/sim/torch/rules.mk torch-standin
#
# Including this file anywhere leaves the Makefile's default goal alone.

_torch_saved_goal := $(.DEFAULT_GOAL)

TORCH_DIR      := $(O)/tests/torch
TORCH_STANDIN  := $(TORCH_DIR)/lib/libc10_cuda.so
TORCH_HEADER   := $(TORCH_DIR)/include/c10/cuda/CUDACachingAllocator.h
TORCH_CHECK    := $(TORCH_DIR)/check_standin
TORCH_SRC_HDRS := tests/sim/torch/include/c10/cuda/CUDACachingAllocator.h \
                  tests/sim/torch/sim_torch.h tests/sim/torch/c10_cuda_internal.h
# the library's files: c10_cuda_internal.h says what each one owns
TORCH_SRCS     := tests/sim/torch/c10_cuda.cpp tests/sim/torch/c10_cuda_device.cpp \
                  tests/sim/torch/c10_cuda_native.cpp tests/sim/torch/c10_cuda_async.cpp \
                  tests/sim/torch/ops.cpp
TORCH_CXXFLAGS := -std=c++17 -O2 -g -pthread -Wall -Wextra -Werror -Wshadow \
                  -Wno-missing-field-initializers $(CUDA_INC) \
                  -Itests/sim/torch/include -Itests/sim/torch -Itests/sim

TORCH_CUBLAS   := $(TORCH_DIR)/lib/libcublas.so.13

TORCH_TEST_DEPS := $(TORCH_STANDIN) $(TORCH_HEADER) $(TORCH_CHECK) $(TORCH_CUBLAS)

# Hidden by default as PyTorch's libraries are: what the bridge uses is
# marked default in the header (C10_CUDA_API there), the C API where it is
# defined (c10_cuda.cpp, ops.cpp).
$(TORCH_STANDIN): $(TORCH_SRCS) $(TORCH_SRC_HDRS) \
                  tests/sim/simcudart.h $(SIMLIB)
	$(call say,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(TORCH_CXXFLAGS) -fPIC -fvisibility=hidden -shared \
	    -Wl,-soname,libc10_cuda.so -Wl,-z,defs -o $@ $(filter %.cpp,$^) \
	    -L$(O)/sim -Wl,-rpath,'$$ORIGIN/../../../sim' -lcudart

# cuBLAS's own cudaMalloc, as a CUDA library makes its handles' memory
# (tests/sim/torch/cublas.c)
$(TORCH_CUBLAS): tests/sim/torch/cublas.c tests/sim/simcudart.h $(SIMLIB)
	$(call say,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -std=c11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror $(CUDA_INC) \
	    -fPIC -fvisibility=hidden -shared -Wl,-soname,libcublas.so.13 -Wl,-z,defs \
	    -o $@ $< -L$(O)/sim -Wl,-rpath,'$$ORIGIN/../../../sim' -lcudart

$(TORCH_HEADER): tests/sim/torch/include/c10/cuda/CUDACachingAllocator.h
	$(call say,CP,$@)
	@mkdir -p $(@D)
	$(Q)cp $< $@

# Compiled as the bridge is (-fvisibility=hidden, the installed header
# copy, -lc10_cuda from lib/), so that it also checks the layout the
# bridge will see. It reads preload/fw_bridge.h to drive a bridge built
# from preload/fw_torch.cpp (tests/e2e/test_framework.py builds one).
$(TORCH_CHECK): tests/sim/torch/check_standin.cpp $(TORCH_STANDIN) $(TORCH_HEADER) preload/fw_bridge.h
	$(call say,CXX,$@)
	$(Q)$(CXX) $(filter-out -Itests/sim/torch/include,$(TORCH_CXXFLAGS)) \
	    -fvisibility=hidden -I$(TORCH_DIR)/include -Ipreload -o $@ $< \
	    -L$(TORCH_DIR)/lib -L$(O)/sim -Wl,-rpath,'$$ORIGIN/lib' \
	    -Wl,-rpath,'$$ORIGIN/../../sim' -lc10_cuda -lcudart -ldl

torch-standin: $(TORCH_TEST_DEPS)

.PHONY: torch-standin
.DEFAULT_GOAL := $(_torch_saved_goal)
