"""PyTorch workloads for the framework bridge's GPU checks and benchmark
(tests/gpu/gpu-framework.py, scripts/bench-framework-gpu.py): each runs
with PyTorch's caching allocator as configured and prints one JSON line
on stdout: its result (the last loss, or a checksum of outputs), the time
of each step (synchronized) and of its launch (until the step's work is
queued: near the step time, the step is bound by the CPU), and PyTorch's
own memory figures of the same run (torch.cuda.memory_stats), for
comparison with the trace. Traced, each step starts with a "step" mark.

usage: torch_models.py WORKLOAD [--steps N] [--bf16] [--batch N]
  training:  transformer (TransformerEncoder 6 x d=1024, batch 16x512,
             AdamW, fp32), mlp (12 x Linear 256, batch 64, Adam),
             gpt2 (transformers GPT2LMHeadModel, 6 layers, batch 8x512,
             AdamW), timm (resnet50, batch 32, SGD), tv-vit
             (torchvision vit_b_16, batch 32, AdamW), gpt2-infer,
             timm-infer (inference under no_grad), bert (transformers
             BertForMaskedLM, 6 layers, batch 16x256, AdamW), llama
             (transformers LlamaForCausalLM, 6 layers, d=1024, GQA 16/4
             heads, batch 8x512, AdamW), effnet (timm efficientnet_b0,
             batch 64, AdamW)
  checks:    leaf (1 GiB leaf, y = 5 * x, y.mean().backward()), linear4
             (Linear(1, 1) + Adam), graph (torch.cuda.graph capture and
             replay), compile (torch.compile(mode="reduce-overhead")), oom
             (fill the card, catch torch.OutOfMemoryError, retry smaller)
"""
import argparse
import ctypes
import json
import sys
import time

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # determinism
import torch  # noqa: E402


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


def train(model, opt, batch, loss_fn, args):
    """A step closure: forward under autocast (--bf16), backward, step."""
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_fn(model, batch)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def infer(model, batch, fn):
    model.eval()

    def step():
        with torch.no_grad():
            return fn(model, batch).float().sum()
    return step


def transformer(args):
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                             batch_first=True, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 512, 1024, device="cuda")
    return train(model, opt, x, lambda m, b: m(b).float().pow(2).mean(), args)


def mlp(args):
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.LayerNorm(256)]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(64, 256, device="cuda")
    return train(model, opt, x, lambda m, b: m(b).float().square().mean(), args)


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


def gpt2_model(batch=None):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=50257, n_positions=512)
    return GPT2LMHeadModel(cfg).cuda(), torch.randint(0, cfg.vocab_size, (batch or 8, 512),
                                                      device="cuda")


def gpt2(args):
    model, ids = gpt2_model(args.batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return train(model, opt, ids, lambda m, b: m(b, labels=b).loss, args)


def gpt2_infer(args):
    model, ids = gpt2_model(args.batch)
    return infer(model, ids, lambda m, b: m(b).logits)


def timm_model(batch=None):
    import timm
    model = timm.create_model("resnet50", num_classes=1000).cuda()
    x = torch.randn(batch or 32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch or 32,), device="cuda")
    return model, (x, y)


def timm_train(args):
    model, batch = timm_model(args.batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return train(model, opt, batch,
                 lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), args)


def timm_infer(args):
    model, batch = timm_model(args.batch)
    return infer(model, batch, lambda m, b: m(b[0]))


def tv_vit_model(batch=None):
    import torchvision
    model = torchvision.models.vit_b_16(weights=None, num_classes=1000).cuda()
    x = torch.randn(batch or 32, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch or 32,), device="cuda")
    return model, (x, y)


def tv_vit(args):
    model, batch = tv_vit_model(args.batch)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return train(model, opt, batch,
                 lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), args)


def bert(args):
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(num_hidden_layers=6, hidden_size=768, num_attention_heads=12,
                     intermediate_size=3072, vocab_size=30522, max_position_embeddings=512)
    model = BertForMaskedLM(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (args.batch or 16, 256), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return train(model, opt, ids, lambda m, b: m(input_ids=b, labels=b).loss, args)


def llama(args):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6,
                      num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                      max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (args.batch or 8, 512), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return train(model, opt, ids, lambda m, b: m(input_ids=b, labels=b).loss, args)


def effnet(args):
    import timm
    model = timm.create_model("efficientnet_b0", num_classes=1000).cuda()
    n = args.batch or 64
    x = torch.randn(n, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (n,), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return train(model, opt, (x, y),
                 lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), args)


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
    ap.add_argument("--batch", type=int, default=None,
                    help="batch size of the real models (default: see above)")
    args = ap.parse_args()
    training = {"transformer": transformer, "mlp": mlp, "gpt2": gpt2, "timm": timm_train,
                "gpt2-infer": gpt2_infer, "timm-infer": timm_infer, "tv-vit": tv_vit, "bert": bert,
                "llama": llama, "effnet": effnet}
    checks = {"leaf": leaf, "linear4": linear4, "graph": graph, "compile": compiled,
              "oom": oom}
    if args.workload not in training and args.workload not in checks:
        sys.exit(f"torch_models: unknown workload {args.workload}")
    torch.manual_seed(0)
    torch.cuda.init()
    t = time.perf_counter()
    times, launched = [], []
    mark = getattr(ctypes.CDLL(None), "gpumemtrace_mark", None)  # traced: mark each step
    if args.workload in training:
        step = training[args.workload](args)
        for _ in range(args.steps):
            if mark:
                mark(b"step")
            t0 = time.perf_counter()
            result = step()
            launched.append(time.perf_counter() - t0)  # the CPU's part: all work queued
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        result = float(result)
    else:
        result = checks[args.workload](args)
    torch.cuda.synchronize()
    try:  # traced: PyTorch's figures below are of everything before this mark
        ctypes.CDLL(None).gpumemtrace_mark(b"stats")
    except AttributeError:
        pass
    out = {"workload": args.workload, "result": result, "seconds": time.perf_counter() - t,
           "step_times": times, "launch_times": launched}
    out.update(stats())
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
