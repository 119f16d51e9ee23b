"""A program that allocates through the stand-in's op and autograd layers
(tests/sim/torch/ops.cpp, through the simtorch package in site-packages/
here), for the tests of how gpumemtrace names allocations.
Every allocation's line carries a "# SITE name" comment.

  leaf      x = 64 MiB; y = 5 * x (simtorch.mul); y.backward(): the seed
            on this thread, MeanBackward0's and MulBackward0's 64 MiB
            gradients on the engine's thread "pt_autograd_0"
  model     a 2-block model from simmodels (site-packages): each block's
            Attention makes 1 MiB and its MLP 2 MiB, all under the one
            line of this file that calls the model

All of it is held until the end (the peak), then freed - but with
--keep-model the model's blocks are left allocated (a leak) - and prints
"ok". With --dispatch-mode, leaf() runs inside simtorch.DispatchMode (as
under PyTorch's MemTracker): its mul ops, forward and backward, go
through the framework's Python and a boxed kernel call.

usage: ops_app.py [--keep-model] [--dispatch-mode]
"""
import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import simtorch  # noqa: E402
import simmodels  # noqa: E402

MiB = 1 << 20


def leaf():
    x = simtorch.empty(64 * MiB)  # SITE leaf_x
    y = simtorch.mul(x)  # SITE leaf_y
    grads = y.backward()  # SITE leaf_backward
    return [x, y] + grads


def model():
    m = simmodels.Model(2)
    return m(MiB)  # SITE model_call


def main():
    if simtorch.init() != 0:
        sys.exit("ops_app: init failed")
    mode = simtorch.DispatchMode() if "--dispatch-mode" in sys.argv else contextlib.nullcontext()
    with mode:
        grads = leaf()
    outs = model()
    for t in grads + ([] if "--keep-model" in sys.argv else outs):
        t.free()
    print("ok")


if __name__ == "__main__":
    main()
