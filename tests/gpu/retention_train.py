"""retention_train.py MODEL MODE STEPS - real training loops for the
retention captures taken at a step and on growth
(tests/gpu/gpu-retention-train.sh).

MODEL:
  gpt2     GPT-2 (transformers, random weights from its configuration),
           batch 8 x 128 tokens, AdamW, a plain loop
  resnet   timm's resnet18, batch 32 at 224 px, SGD with momentum
  trainer  GPT-2 under transformers' Trainer (max_steps=STEPS), batch 8

MODE:
  clean    nothing kept between steps: no capture on growth may be taken
  leak     after each step an evaluation forward outside no_grad, its loss
           kept in `history`: that graph is never backwarded, so every
           step keeps its saved activations (not under the Trainer)

At the end, in leak mode, the program asks for a capture itself
(gpumemtrace_markers.retention("before drop")) and then measures the truth
with PyTorch's own counter: torch.cuda.memory_allocated() before and after
it lets go of `history`. It prints one JSON line: the step times (ms),
the high-water mark of its host memory (VmHWM, KiB) after each step, and
in leak mode the bytes freed.
"""
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "preload"))
import gpumemtrace_markers as gmt  # noqa: E402

dev = "cuda"


def hwm_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def gpt2_parts():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 128), device=dev)

    def loss_of():
        return model(input_ids=ids, labels=ids).loss
    return opt, loss_of


def resnet_parts():
    import timm
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (32,), device=dev)

    def loss_of():
        return torch.nn.functional.cross_entropy(model(x), y)
    return opt, loss_of


history = []


def loop(model, mode, steps):
    opt, loss_of = gpt2_parts() if model == "gpt2" else resnet_parts()
    times, hwm = [], []
    for step in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if mode == "leak":
            # an evaluation forward outside no_grad, its loss kept: the
            # graph is never backwarded, so its saved activations stay
            history.append(loss_of())
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        hwm.append(hwm_kib())
    return times, hwm


def trainer(steps):
    import tempfile
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, \
        TrainingArguments
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config())

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 8 * steps

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            ids = torch.randint(0, 50257, (128,), generator=g)
            return {"input_ids": ids, "labels": ids}

    times, hwm, last = [], [], [None]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            torch.cuda.synchronize()
            last[0] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            torch.cuda.synchronize()
            times.append((time.perf_counter() - last[0]) * 1e3)
            hwm.append(hwm_kib())

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                 report_to=[], save_strategy="no", logging_strategy="no",
                                 disable_tqdm=True, dataloader_num_workers=0)
        Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Clock()]).train()
    return times, hwm


def main():
    model, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.cuda.init()
    if model == "trainer":
        times, hwm = trainer(steps)
    else:
        times, hwm = loop(model, mode, steps)
    out = {"model": model, "mode": mode, "steps": steps, "step_ms": times, "hwm_kib": hwm}
    # what the hook for growth adds to a step: one memory_allocated() call
    t0 = time.perf_counter()
    for _ in range(10000):
        torch.cuda.memory_allocated()
    out["memory_allocated_us"] = (time.perf_counter() - t0) * 1e6 / 10000
    if mode == "leak":
        gmt.retention("before drop")
        torch.cuda.synchronize()
        gc.collect()
        before = torch.cuda.memory_allocated()
        history.clear()
        gc.collect()
        torch.cuda.synchronize()
        out["freed"] = {"history": before - torch.cuda.memory_allocated()}
    print(json.dumps(out))


main()
