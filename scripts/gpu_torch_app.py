"""A PyTorch workload for the framework bridge's GPU checks
(scripts/gpu-framework.sh): runs a model's training or inference steps
and prints, as one JSON line on stdout, PyTorch's own memory figures of
the same run (torch.cuda.memory_stats), for comparison with the trace.

usage: gpu_torch_app.py WORKLOAD [--steps N] [--bf16]
  WORKLOAD: mlp | leaf | linear4 | gpt2 | timm | graph | compile | oom
"""
import argparse
import json
import sys
import time

import torch


def stats():
    s = torch.cuda.memory_stats()
    keys = ["allocation.all.allocated", "allocation.all.freed", "segment.all.allocated",
            "segment.all.freed", "allocated_bytes.all.peak", "reserved_bytes.all.peak",
            "requested_bytes.all.peak", "num_ooms", "num_alloc_retries",
            "active.all.allocated", "active.all.freed"]
    out = {k: s.get(k, 0) for k in keys}
    out["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    out["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    return out


def mlp(args):
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.LayerNorm(256)]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(64, 256, device="cuda")
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()  # SITE mlp_forward
        loss.backward()
        opt.step()
    return float(loss)


def leaf(args):
    x = torch.randn(256 * 1024 * 1024, device="cuda", requires_grad=True)  # SITE leaf_x
    y = 5 * x  # SITE leaf_y
    y.mean().backward()  # SITE leaf_backward
    return float(x.grad[0])


def linear4(args):
    model = torch.nn.Linear(1, 1).cuda()  # SITE linear4_model
    opt = torch.optim.Adam(model.parameters())
    x = torch.ones(1, 1, device="cuda")
    for _ in range(args.steps):
        opt.zero_grad()
        model(x).sum().backward()  # SITE linear4_step
        opt.step()
    return float(model.weight)


def gpt2(args):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=50257, n_positions=512)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda")
    loss = None
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
    return float(loss)


def timm_model(args):
    import timm
    torch.manual_seed(0)
    model = timm.create_model("resnet50", num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (32,), device="cuda")
    loss = None
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return float(loss)


def graph(args):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512)).cuda()
    static_in = torch.randn(64, 512, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = model(static_in)
    total = 0.0
    for i in range(args.steps):
        static_in.copy_(torch.full_like(static_in, float(i) / 10))
        g.replay()
        total += float(static_out.sum())
    return total


def compiled(args):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 256)).cuda()
    f = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(32, 256, device="cuda")
    total = 0.0
    for _ in range(max(args.steps, 5)):
        total += float(f(x).sum())
    return total


def oom(args):
    """Fill the card, catch torch.OutOfMemoryError, free, retry smaller."""
    held = []
    caught = 0
    size = 8 << 30
    while size >= (256 << 20):
        try:
            held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            caught += 1
            size //= 2
    n = len(held)
    del held
    torch.cuda.empty_cache()
    ok = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    return {"caught": caught, "held": n, "after": ok.numel()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--bf16", action="store_true")
    args = ap.parse_args()
    fn = {"mlp": mlp, "leaf": leaf, "linear4": linear4, "gpt2": gpt2, "timm": timm_model,
          "graph": graph, "compile": compiled, "oom": oom}[args.workload]
    torch.cuda.init()
    t = time.perf_counter()
    result = fn(args)
    torch.cuda.synchronize()
    out = {"workload": args.workload, "result": result, "seconds": time.perf_counter() - t}
    out.update(stats())
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
