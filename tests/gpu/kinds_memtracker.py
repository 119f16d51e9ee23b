"""A check of `gpumemreport summary`'s memory by kind against
PyTorch's own answer: runs a real model's training steps inside PyTorch's
MemTracker (torch.distributed._tools.mem_tracker) and prints, as one JSON
line, MemTracker's breakdown at its peak (bytes by kind, each tensor
storage rounded up to 512 bytes as MemTracker does) and the exact sizes
of the parameters, buffers, gradients and optimizer state at the end.

Run it under gpumemtrace (tests/gpu/gpu-kinds.sh does) and compare with
`gpumemreport summary --json`'s "kinds": both see the same process. Each
time MemTracker's peak rises, the trace gets a mark "memtracker-peak", so
`summary --kinds-at memtracker-peak` is taken at the same instant as
MemTracker's peak; the mark "end" follows the last step, where the
gradients, parameters and optimizer state are the program's own.

usage: kinds_memtracker.py gpt2|timm [--bf16] [--steps N] [--batch N]
"""
import argparse
import ctypes
import json
import sys

import torch
from torch.distributed._tools.mem_tracker import MemTracker

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import torch_models  # noqa: E402


def storage_bytes(tensors):
    """[exact bytes, bytes each rounded up to 512 as MemTracker counts them,
    storages] of the distinct CUDA storages of tensors."""
    seen = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.is_cuda:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return [sum(seen.values()), sum(-(-b // 512) * 512 for b in seen.values()), len(seen)]


try:
    MARK = ctypes.CDLL(None).gpumemtrace_mark
except AttributeError:  # untraced
    MARK = None


class MarkedMemTracker(MemTracker):
    """MemTracker that marks the trace whenever its peak rises."""

    def _update_peak_stats(self, peak_state):
        before = dict(self._peak_mem)
        super()._update_peak_stats(peak_state)
        if MARK is not None and self._peak_mem != before:
            MARK(b"memtracker-peak")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["gpt2", "timm"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--batch", type=int, default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.cuda.init()
    if args.workload == "gpt2":
        model, batch = torch_models.gpt2_model(args.batch)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        inputs = [batch]

        def loss_fn():
            return model(batch, labels=batch).loss
    else:
        model, batch = torch_models.timm_model(args.batch)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        inputs = list(batch)

        def loss_fn():
            return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

    mt = MarkedMemTracker()
    mt.track_external(model, opt, *inputs)
    with mt:
        for i in range(args.steps):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
                loss = loss_fn()
            loss.backward()
            opt.step()
            mt.reset_mod_stats()  # MemTracker refuses a second forward otherwise
        current = mt.get_tracker_snapshot("current")
    torch.cuda.synchronize()
    loss = float(loss)
    if MARK is not None:
        MARK(b"end")

    def on_gpu(snapshot):
        for dev, snap in snapshot.items():
            if str(dev).startswith("cuda"):
                return {getattr(k, "value", str(k)): v for k, v in snap.items()}
        return {}
    params = storage_bytes(model.parameters())
    buffers = storage_bytes(model.buffers())
    grads = storage_bytes(p.grad for p in model.parameters())
    state = storage_bytes(v for s in opt.state.values() for v in s.values())
    print(json.dumps({
        "workload": args.workload, "bf16": args.bf16, "steps": args.steps, "loss": loss,
        "memtracker_peak": on_gpu(mt.get_tracker_snapshot("peak")),
        "memtracker_end": on_gpu(current),
        "end": {"parameters": params, "buffers": buffers, "gradients": grads,
                "optimizer_state": state},
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
    }))


if __name__ == "__main__":
    sys.exit(main())
