"""A training loop over the PyTorch stand-in for the tests of memory by
kind: parameters placed by torch.nn's Module.to, a cuBLAS
workspace, activations saved for backward (given back by the autograd
engine's thread during backward), an intermediate gradient (made and
given back within backward), the gradient (kept past backward, given
back by zero_grad), Adam's state (made in the first step, kept) and a
temporary in each optimizer step; and the program's input, made before
the loop and given back after it, and a cuBLAS handle's memory, which the
library takes with cudaMalloc itself. Two steps; the peak is in the second
backward, when the gradient is made:

  parameters 16 MiB, optimizer state 16 MiB, gradients 8 MiB,
  activations 4 MiB, temporaries 2 MiB (the intermediate gradient),
  library workspaces 2 MiB, held across steps 512 KiB (the input): 48.5 MiB

After the loop the trace is marked "end" (summary --kinds-at end):
parameters, optimizer state, the gradient, the workspaces and the input.

With --leave it gives nothing back after the loop and keeps one more
tensor of its own (3 MiB, never given back): at exit the model's state
(parameters, the gradient, the optimizer's state), the workspaces, and
the program's own - the input and that tensor (leaks' split by kind).

usage: train_app.py [--leave]
"""
import ctypes
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.path.join(HERE, "site-packages")
sys.path.insert(0, SITE)
import simmodels  # noqa: E402
import simtorch  # noqa: E402

MiB = 1 << 20


def load(name, *path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SITE, *path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


module = load("standin_module", "torch", "nn", "modules", "module.py")
adam = load("standin_adam", "torch", "optim", "adam.py")


def forward(model):
    act = simmodels.Attention().forward(4 * MiB)  # SITE act (a layer of a library)
    tmp = simtorch.empty(MiB)  # SITE fwd_temp
    tmp.free()
    return act


def main():
    if simtorch.init() != 0:
        sys.exit("train_app: init failed")
    model = module.Module([8 * MiB, 8 * MiB]).to("cuda")  # SITE model
    opt = adam.Adam(model.params, MiB)
    ws = simtorch.lib.sim_torch_workspace(MiB)  # SITE workspace
    cublas = ctypes.CDLL(os.path.join(os.path.dirname(simtorch.lib._name), "libcublas.so.13"))
    cublas.sim_cublas_create.restype = ctypes.c_void_p
    cublas.sim_cublas_create.argtypes = [ctypes.c_size_t]
    handle = cublas.sim_cublas_create(MiB)  # SITE cublas_handle
    data = simtorch.empty(512 * 1024)  # SITE input
    grad = None
    for step in range(2):
        if grad:
            simtorch.lib.sim_torch_free(grad)  # zero_grad(set_to_none=True)
        act = forward(model)
        grad = simtorch.autograd.backward(act, (2 * MiB, 8 * MiB, [act]))  # SITE backward
        opt.step()
    ctypes.CDLL(None).gpumemtrace_mark(b"end")
    if "--leave" in sys.argv:
        kept = [simtorch.empty(3 * MiB)]  # SITE leak
        print("ok")
        return kept
    data.free()
    cublas.sim_cublas_destroy(ctypes.c_void_p(handle))
    simtorch.lib.sim_torch_free(grad)
    simtorch.lib.sim_torch_free(ws)
    for t in model.params + opt.state:
        t.free()
    print("ok")


if __name__ == "__main__":
    main()
