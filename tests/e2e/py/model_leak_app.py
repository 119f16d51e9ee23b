"""A loop that keeps one layer's output of a model library every step
(simmodels over the PyTorch stand-in): 12 steps, each calling a one-block
model whose Attention makes 64 KiB (kept) and whose MLP makes 128 KiB
(given back). For the tests of growth's layers.

usage: model_leak_app.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "site-packages"))
import simmodels  # noqa: E402
import simtorch  # noqa: E402

if simtorch.init() != 0:
    sys.exit("model_leak_app: init failed")
model = simmodels.Model(1)
kept = []
for step in range(12):
    outs = model(64 * 1024)  # SITE call
    kept.append(outs[0])
    outs[1].free()
print("ok")
