"""A torch.distributed training job for the multi-rank GPU checks
(tests/gpu/gpu-ranks.py), started by torchrun (one process per rank).

usage: torchrun --standalone --nproc_per_node 2 tests/gpu/dist_train.py
           [--backend gloo|nccl] [--mode ddp|fsdp|plain] [--model gpt2|mlp]
           [--steps N] [--device-per-rank | --shared-device] [--out DIR]
           [--marks auto|gmt|nvtx|none]

Models: gpt2 (transformers GPT2LMHeadModel built from a config, no
download: 4 layers, n_embd 512, vocab 8192, 256 positions, eager attention,
no dropout) or mlp (12 x Linear 512); AdamW under bf16 autocast on random
token ids (random inputs for the MLP). Rank r trains on batches of
4 + 2 * r sequences, so the ranks' peaks differ.

Modes: plain (no wrapper: each rank's gradients averaged by hand, one
all_reduce per parameter), ddp (DistributedDataParallel), fsdp
(torch.distributed.fsdp.fully_shard, FSDP2, on every GPT-2 block / Linear
and the root; FullyShardedDataParallel where FSDP2 is missing).
--device-per-rank: rank r uses cuda:r (the default); --shared-device: all
ranks use cuda:0 (gloo only: NCCL refuses two ranks on one GPU).

Every step is marked "step": with gpumemtrace's markers
(preload/gpumemtrace_markers.py) when the library is loaded, else with
torch.cuda.nvtx.mark (which the launcher's NVTX injection records too);
--marks picks one. Seeded and deterministic: the same command gives the
same losses traced and untraced. PyTorch's peak statistics are never reset.

At the end each rank writes DIR/rank<r>.json: rank, pid, device,
torch.cuda.max_memory_allocated(), max_memory_reserved(), memory_stats()'s
allocation.all.allocated / allocation.all.freed, the last loss and all
losses, and max_memory_allocated() after each step (from which the step of
the peak follows). A "stats" marker is recorded just before the figures
are read; nothing is allocated through PyTorch's allocator after it.
"""
import argparse
import json
import os
import sys
import time

# Multicast / NVLink SHARP off in every process (the device machines ask for
# it; harmless elsewhere). Set before torch and NCCL are loaded.
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # determinism

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "preload"))
try:
    import gpumemtrace_markers as gmt
except ImportError:  # the script copied elsewhere: NVTX only
    gmt = None

SEED = 1234


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="nccl")
    ap.add_argument("--mode", choices=["ddp", "fsdp", "plain"], default="ddp")
    ap.add_argument("--model", choices=["gpt2", "mlp"], default="gpt2")
    ap.add_argument("--steps", type=int, default=10)
    dev = ap.add_mutually_exclusive_group()
    dev.add_argument("--device-per-rank", dest="shared", action="store_false",
                     help="rank r uses cuda:r (default)")
    dev.add_argument("--shared-device", dest="shared", action="store_true",
                     help="every rank uses cuda:0")
    ap.add_argument("--out", default=".", help="directory for rank<r>.json")
    ap.add_argument("--marks", choices=["auto", "gmt", "nvtx", "none"], default="auto",
                    help="how steps are marked (auto: gpumemtrace's markers when the "
                         "library is loaded, else NVTX)")
    ap.add_argument("--seq", type=int, default=256, help="tokens per sequence (gpt2)")
    return ap.parse_args()


def marker(how):
    """The function that marks a step."""
    import torch
    if how == "auto":
        how = "gmt" if gmt is not None and gmt.loaded() else "nvtx"
    if how == "gmt" and gmt is not None:
        return "gmt", gmt.mark
    if how in ("gmt", "nvtx"):
        return "nvtx", torch.cuda.nvtx.mark
    return "none", lambda name: None


def build(args, rank, dev):
    """(model, batches on the CPU, loss function, description)."""
    import torch
    torch.manual_seed(SEED)  # the same initial weights on every rank
    batch = 4 + 2 * rank
    g = torch.Generator().manual_seed(SEED + 1 + rank)  # each rank its own data
    if args.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192,
                         n_positions=args.seq, resid_pdrop=0.0, embd_pdrop=0.0,
                         attn_pdrop=0.0, use_cache=False)
        try:  # plain matmuls and softmax: deterministic backward (SDPA's may not be)
            cfg._attn_implementation = "eager"
        except Exception:
            pass
        model = GPT2LMHeadModel(cfg)
        data = torch.randint(0, cfg.vocab_size, (args.steps, batch, args.seq), generator=g)

        def loss_fn(m, ids):
            return m(input_ids=ids, labels=ids).loss
        attn = getattr(model.config, "_attn_implementation", None)
        desc = {"layers": cfg.n_layer, "n_embd": cfg.n_embd, "vocab": cfg.vocab_size,
                "seq": args.seq, "attn": attn}
    else:
        layers = []
        for _ in range(12):
            layers += [torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.LayerNorm(512)]
        model = torch.nn.Sequential(*layers)
        data = torch.randn(args.steps, batch * 16, 512, generator=g)

        def loss_fn(m, x):
            return m(x).float().square().mean()
        desc = {"layers": 12, "width": 512}
    desc["batch"] = batch
    desc["params"] = sum(p.numel() for p in model.parameters())
    return model.to(dev), data, loss_fn, desc


def wrap(model, args, dev):
    """The model as the mode wants it; and which wrapper was used."""
    import torch
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[dev.index], output_device=dev.index), "DistributedDataParallel"
    if args.mode == "plain":
        return model, "none"
    fully_shard = None
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            pass
    if args.model == "gpt2":
        units = list(model.transformer.h)
    else:
        units = [m for m in model if isinstance(m, torch.nn.Linear)]
    if fully_shard is not None:
        for u in units:
            fully_shard(u)
        fully_shard(model)
        return model, "fully_shard (FSDP2)"
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    return (FSDP(model, device_id=dev, auto_wrap_policy=ModuleWrapPolicy({type(units[0])}),
                 use_orig_params=True), "FullyShardedDataParallel")


def nccl_version():
    import torch
    try:
        v = torch.cuda.nccl.version()
    except Exception as e:  # noqa: BLE001 - informational only
        return f"unknown ({type(e).__name__})"
    return ".".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)


def main():
    args = parse()
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if args.shared and args.backend == "nccl" and world > 1:
        sys.exit("dist_train: NCCL cannot run two ranks on one GPU; use --backend gloo "
                 "with --shared-device")
    if args.mode == "fsdp" and args.backend == "gloo":
        print("dist_train: FSDP over gloo (works, but slow)", file=sys.stderr)
    dev = torch.device("cuda", 0 if args.shared else local)
    torch.cuda.set_device(dev)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    kw = {"device_id": dev} if args.backend == "nccl" else {}
    dist.init_process_group(args.backend, **kw)
    os.makedirs(args.out, exist_ok=True)

    kind, mark = marker(args.marks)
    model, data, loss_fn, desc = build(args, rank, dev)
    model, wrapper = wrap(model, args, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    losses, step_peaks, times = [], [], []
    for step in range(args.steps):
        mark("step")
        t0 = time.perf_counter()
        x = data[step].to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model, x)
        loss.backward()
        if args.mode == "plain" and world > 1:
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad.div_(world)
        opt.step()
        losses.append(float(loss.detach()))
        torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
        step_peaks.append(torch.cuda.max_memory_allocated(dev))
    dist.barrier()
    torch.cuda.synchronize(dev)
    if gmt is not None:  # traced: PyTorch's figures below cover everything before this
        gmt.mark("stats")
    s = torch.cuda.memory_stats(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    out = {
        "rank": rank, "local_rank": local, "world_size": world, "pid": os.getpid(),
        "device": str(dev), "backend": args.backend, "mode": args.mode, "wrapper": wrapper,
        "model": args.model, "model_desc": desc, "steps": args.steps, "marks": kind,
        "traced": bool(gmt is not None and gmt.loaded()),
        "max_memory_allocated": peak,
        "max_memory_reserved": torch.cuda.max_memory_reserved(dev),
        "allocation.all.allocated": s.get("allocation.all.allocated", 0),
        "allocation.all.freed": s.get("allocation.all.freed", 0),
        "segment.all.allocated": s.get("segment.all.allocated", 0),
        "num_ooms": s.get("num_ooms", 0),
        "loss": losses[-1] if losses else None, "losses": losses,
        "step_max_allocated": step_peaks,
        "peak_step": next((i for i, v in enumerate(step_peaks) if v == peak), None),
        "step_times": times,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": nccl_version() if args.backend == "nccl" else None,
    }
    dist.destroy_process_group()
    path = os.path.join(args.out, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)
    print(f"dist_train: rank {rank} pid {out['pid']} {dev} {args.backend}/{args.mode}/"
          f"{args.model} batch {desc['batch']}: loss {out['loss']!r}, max allocated {peak}, "
          f"max reserved {out['max_memory_reserved']}", flush=True)


if __name__ == "__main__":
    main()
