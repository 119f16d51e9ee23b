"""Real models' runs with faults whose truth is known by construction, for
the labelled corpus the report's verdicts are scored against
(tests/gpu/gpu-verdict-corpus.sh records it; tests/corpus/verdicts/ holds
the traces and their truth files; tests/e2e/test_verdicts.py scores).

usage: verdict_corpus.py WORKLOAD [--fault KIND] [--steps N] [--from K]
                         [--crash-step K] [--crash-in MODULE] [--layers N]
                         [--batch N] [--truth FILE] [--mark]

Workloads (models built from configs, random weights, no download):
  gpt2      transformers GPT2LMHeadModel, 4 layers, bf16 autocast, AdamW
  bert      transformers BertForSequenceClassification, 4 layers, fp32,
            AdamW, a different sequence length every step (dynamic shapes)
  t5        transformers T5ForConditionalGeneration, 4+4 layers, fp32, AdamW
  resnet    timm resnet18, fp16 autocast with GradScaler, SGD
  mobilenet torchvision mobilenet_v3_small, fp32, SGD
  generate  GPT-2 generate() on prompts of a different length each call
  vit-infer timm vit_tiny_patch16_224 inference under no_grad, bf16
  mlp       4 x Linear 1024, fp32, plain SGD by hand (the classic leak's
            program)
  oom       timm resnet50 training at a batch the card cannot hold
  fragoom   an out-of-memory by fragmentation that expandable segments
            avoid (see fragoom())
  trainer   transformers' Trainer on the GPT-2 above (bf16, its own loop
            and AdamW; the fault and the truth from a TrainerCallback)
  lightning Lightning's Trainer on a torchvision resnet18 (fp32, Adam, its
            own loop and data loader; the fault and the truth from the
            module's on_train_batch_end)

Faults, each at one line of this file marked "FAULT <kind>", from step
--from (default 3) on:
  list      a 4 MiB tensor appended to a list every step
  cache     a dict keyed by step keeps a detached copy of an activation
  graph     eval outputs kept with their autograd graph (grad enabled)
  retain    backward(retain_graph=True) and the output's .cpu() kept
  every     a 2 MiB buffer kept every 3rd step
  closure   a closure holding a tensor kept in a list of callbacks
  global    a global tensor grown by concatenation every step
--crash-step K raises an exception inside layer 2's forward in step K
(K = 1: a single crashed forward), or inside --crash-in MODULE's (a
name of model.named_modules(): decoder.block.0 crashes T5 after all of
its encoder's layers ran).

The truth file (JSON, rewritten after every step and at a crash or out
of memory, so a dying run leaves it behind) holds the loop's step count,
the fault (its line, the bytes it keeps per step by construction and by
PyTorch's own counter, its first step and period), PyTorch's
memory_allocated() at the end of every step, what is alive at the end by
kind (parameters, gradients, optimizer state, buffers, the fault's
tensors) and, with --mark, at the last step's mark (state_at_last_mark,
taken just before it), and for an out-of-memory the failing request's size and the
innermost line of this file on its traceback.
"""
import argparse
import json
import os
import re
import sys
import traceback

import torch

HERE = os.path.abspath(__file__)
TRUTH = {}
ARGS = None
HELD = []          # the list, every and closure faults' holders
CACHE = {}         # the cache fault's dict
HISTORY = None     # the global fault's tensor


def fault_line(kind):
    """The line of this file marked FAULT <kind>."""
    with open(HERE) as f:
        for n, text in enumerate(f, 1):
            if re.search(r"#\s*FAULT %s\b" % re.escape(kind), text):
                return n
    raise SystemExit(f"verdict_corpus: no FAULT {kind} line")


def kept_lines(kind):
    """Lines of this file whose allocations the fault keeps alive, where
    they are not the fault's own line (marked KEPT <kind>)."""
    with open(HERE) as f:
        return [n for n, text in enumerate(f, 1)
                if re.search(r"#\s*KEPT %s\b" % re.escape(kind), text)]


def save_truth():
    if ARGS.truth:
        tmp = ARGS.truth + ".tmp"
        with open(tmp, "w") as f:
            json.dump(TRUTH, f, indent=1, sort_keys=True)
        os.replace(tmp, ARGS.truth)


def nbytes(tensors):
    return sum(t.untyped_storage().nbytes() for t in tensors)


def inject(step, model_out):
    """The fault of this run, at step `step` (1-based); returns the bytes
    it newly keeps, by construction (0 when it keeps nothing this step)."""
    global HISTORY
    k = ARGS.fault
    if k is None or step < ARGS.from_step:
        return 0
    if k == "list":
        HELD.append(torch.randn(1 << 20, device="cuda"))  # FAULT list
        return 4 << 20
    if k == "cache":
        CACHE[step] = model_out.detach().float().clone()  # FAULT cache
        return CACHE[step].untyped_storage().nbytes()
    if k == "every":
        if (step - ARGS.from_step) % 3 == 0:
            HELD.append(torch.zeros(1 << 19, device="cuda"))  # FAULT every
            return 2 << 20
        return 0
    if k == "closure":
        kept = torch.ones(1 << 18, device="cuda")  # FAULT closure
        HELD.append(lambda: float(kept.sum()))
        return 1 << 20
    if k == "global":
        if HISTORY is None:
            HISTORY = torch.empty(0, device="cuda")
        new = torch.full((1 << 18,), float(step), device="cuda")
        HISTORY = torch.cat([HISTORY, new])  # FAULT global
        return 1 << 20
    return 0


class Crash(RuntimeError):
    pass


def crash_hook(step_box):
    def hook(module, args, out):
        if ARGS.crash_step and step_box[0] == ARGS.crash_step:
            raise Crash(f"injected failure in step {step_box[0]}")
    return hook


def record_step(step, kept):
    torch.cuda.synchronize()
    TRUTH["steps_done"] = step
    TRUTH["allocated_after_step"].append(torch.cuda.memory_allocated())
    TRUTH.setdefault("kept_by_construction", []).append(kept)
    save_truth()


def model_state(model, opt):
    params = [p for p in model.parameters()]
    grads = [p.grad for p in params if p.grad is not None]
    state = []
    if opt is not None:
        for s in opt.state.values():
            state += [v for v in s.values() if torch.is_tensor(v) and v.is_cuda]
    bufs = [b for b in model.buffers() if b.is_cuda]
    return {"parameters": nbytes(params), "gradients": nbytes(grads),
            "optimizer_state": nbytes(state), "buffers": nbytes(bufs)}


def fault_bytes_alive():
    t = [x for x in HELD if torch.is_tensor(x)]
    t += [c.__closure__[0].cell_contents for c in HELD if callable(c) and c.__closure__]
    t += list(CACHE.values())
    if HISTORY is not None:
        t.append(HISTORY)
    return nbytes(t)


# -- the workloads: each returns (model, optimizer or None, one step(i)) --

def gpt2_model(layers=4):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=layers, n_embd=256, n_head=4, vocab_size=8192, n_positions=256,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg).cuda(), cfg


def gpt2(batch):
    model, cfg = gpt2_model()
    ids = torch.randint(0, cfg.vocab_size, (batch or 4, 128), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(ids, labels=ids)
        out.loss.backward()
        opt.step()
        return out.logits
    return model, opt, step


def bert(batch):
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                     intermediate_size=1024, vocab_size=8192, max_position_embeddings=256,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = BertForSequenceClassification(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n = batch or 8

    def step(i):
        length = 64 + (i * 37) % 128  # a different shape every step
        ids = torch.randint(0, cfg.vocab_size, (n, length), device="cuda")
        labels = torch.randint(0, 2, (n,), device="cuda")
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        opt.step()
        return out.logits
    return model, opt, step


def t5(batch):
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(num_layers=ARGS.layers, num_decoder_layers=ARGS.layers, d_model=256, d_ff=1024, num_heads=4,
                   d_kv=64, vocab_size=8192, dropout_rate=0.0,
                   decoder_start_token_id=0, pad_token_id=0)
    model = T5ForConditionalGeneration(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n = batch or 4
    src = torch.randint(0, cfg.vocab_size, (n, 128), device="cuda")
    tgt = torch.randint(0, cfg.vocab_size, (n, 64), device="cuda")

    def step(i):
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=src, labels=tgt)
        out.loss.backward()
        opt.step()
        return out.logits
    return model, opt, step


def resnet(batch):
    import timm
    model = timm.create_model("resnet18", num_classes=100).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(batch or 16, 3, 128, 128, device="cuda")
    y = torch.randint(0, 100, (batch or 16,), device="cuda")

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return out
    return model, opt, step


def classifier(model, opt, n, size, classes):
    """An image classifier's fp32 training step on one random batch."""
    x = torch.randn(n, 3, size, size, device="cuda")
    y = torch.randint(0, classes, (n,), device="cuda")

    def step(i):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        torch.nn.functional.cross_entropy(out, y).backward()
        opt.step()
        return out
    return model, opt, step


def mobilenet(batch):
    import torchvision
    model = torchvision.models.mobilenet_v3_small(weights=None, num_classes=100).cuda()
    return classifier(model, torch.optim.SGD(model.parameters(), lr=0.01), batch or 16, 160, 100)


def generate(batch):
    model, cfg = gpt2_model()
    model.eval()

    def step(i):
        prompt = torch.randint(0, cfg.vocab_size, (batch or 2, 8 + 5 * i), device="cuda")
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=12, do_sample=False,
                                 pad_token_id=0)
        return out
    return model, None, step


def vit_infer(batch):
    import timm
    model = timm.create_model("vit_tiny_patch16_224", num_classes=100).cuda().eval()
    x = torch.randn(batch or 16, 3, 224, 224, device="cuda")

    def step(i):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return model(x)
    return model, None, step


def mlp(batch):
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()

    def step(i):
        x = torch.randn(batch or 1, 1024, device="cuda")  # KEPT retain
        out = model(x)  # KEPT retain
        loss = out.pow(2).mean()  # KEPT retain
        if ARGS.fault == "retain" and i >= ARGS.from_step:
            loss.backward(retain_graph=True)
            HELD.append(out.cpu())  # FAULT retain
        else:
            loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 1e-4 * p.grad
                p.grad = None
        return out
    return model, None, step


def oom(batch):
    import timm
    model = timm.create_model("resnet50", num_classes=1000).cuda()
    return classifier(model, torch.optim.SGD(model.parameters(), lr=0.1), batch or 2048, 224,
                      1000)


def fragoom(batch):
    """An out-of-memory by fragmentation: the card filled but for 1 GiB,
    which 102 tensors of 8 MiB then take, two to each of PyTorch's 20 MiB
    segments (1020 MiB); every other one is given back (12 MiB free in
    each segment, 612 MiB in all) and a 16 MiB tensor asked for. PyTorch's
    default segments cannot serve it from holes of 12 MiB, and give back
    no segment (each holds a live tensor): out of memory. With
    expandable_segments:True the same requests take 816 MiB, and the
    16 MiB fits."""
    free, _ = torch.cuda.mem_get_info()
    budget = 1 << 30
    ballast = torch.empty(max(free - budget, 0), dtype=torch.uint8, device="cuda")
    TRUTH["fragoom_ballast"] = ballast.numel()
    held = [ballast]  # alive to the end: its memory is no cache to split

    def step(i):
        # the same requests under every setting (whatif's question): as
        # many pairs as the default's 20 MiB segments fit in the budget
        pairs = budget // (20 << 20)
        small = [torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
                 for _ in range(2 * pairs)]
        for j in range(1, 2 * pairs, 2):
            small[j] = None
        held.extend(t for t in small if t is not None)
        TRUTH["fragoom_held"] = len(held) - 1
        TRUTH["fragoom_free_before"] = torch.cuda.mem_get_info()[0]
        big = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")  # FAULT fragoom
        TRUTH["fragoom_fit"] = True
        return big
    return None, None, step


def step_begins(i, model, opt, mark):
    """What the main loop does as step i begins: with --mark, the model's
    state as the mark is made (the truth of memory by kind there)."""
    if mark:
        torch.cuda.synchronize()
        TRUTH["state_at_last_mark"] = dict(model_state(model, opt),
                                           allocated=torch.cuda.memory_allocated(), step=i)
        mark(b"step")


def inner_optimizer(opt):
    """The torch.optim optimizer under a framework's wrapper."""
    return getattr(opt, "optimizer", opt)


def trainer(batch, mark):
    """transformers' Trainer runs the loop: a callback is the loop's body
    here (the mark as a step begins, the fault and the truth as it ends)."""
    import tempfile
    from transformers import Trainer, TrainerCallback, TrainingArguments
    model, cfg = gpt2_model()
    n = batch or 4
    ids = torch.randint(0, cfg.vocab_size, (n * ARGS.steps, 128))
    data = [{"input_ids": x, "labels": x} for x in ids]
    box = {}

    class Truth(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            step_begins(state.global_step + 1, model, box.get("opt"), mark)

        def on_step_end(self, args, state, control, **kw):
            box["opt"] = inner_optimizer(box["t"].optimizer)
            record_step(state.global_step, inject(state.global_step, None))

    args = TrainingArguments(output_dir=tempfile.mkdtemp(), max_steps=ARGS.steps,
                             per_device_train_batch_size=n, bf16=True, learning_rate=1e-4,
                             report_to=[], save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, dataloader_num_workers=0)
    t = box["t"] = Trainer(model=model, args=args, train_dataset=data, callbacks=[Truth()])
    t.train()
    return model, inner_optimizer(t.optimizer)


def lightning(batch, mark):
    """Lightning's Trainer runs the loop, its DataLoader feeding batches
    from the CPU; the module's batch hooks are the loop's body here."""
    try:
        import lightning as L
    except ImportError:
        import pytorch_lightning as L
    import torchvision
    n = batch or 32
    data = torch.utils.data.TensorDataset(torch.randn(n * ARGS.steps, 3, 64, 64),
                                          torch.randint(0, 100, (n * ARGS.steps,)))

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torchvision.models.resnet18(weights=None, num_classes=100)

        def training_step(self, b, i):
            x, y = b
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

        def on_train_batch_start(self, b, i):
            opts = self.trainer.optimizers
            step_begins(self.global_step + 1, self, opts[0] if opts else None, mark)

        def on_train_batch_end(self, out, b, i):
            record_step(self.global_step, inject(self.global_step, None))

    net = Net()
    tr = L.Trainer(max_steps=ARGS.steps, accelerator="gpu", devices=1, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False)
    tr.fit(net, torch.utils.data.DataLoader(data, batch_size=n))
    return net, inner_optimizer(tr.optimizers[0])


# the workloads that run their own loop: (batch, mark) -> (model, optimizer)
OWN_LOOP = {"trainer": trainer, "lightning": lightning}

WORKLOADS = {"fragoom": fragoom, "gpt2": gpt2, "bert": bert, "t5": t5, "resnet": resnet, "mobilenet": mobilenet,
             "generate": generate, "vit-infer": vit_infer, "mlp": mlp, "oom": oom}


def crash_target(model):
    """Layer 2 of the model's repeated blocks (the crash's place), or the
    module --crash-in names."""
    names = [ARGS.crash_in] if ARGS.crash_in else ["transformer.h.1", "bert.encoder.layer.1", "encoder.block.1", "layer2",
             "features.2", "blocks.1", "2"]
    mods = dict(model.named_modules())
    for n in names:
        if n in mods:
            return mods[n]
    raise SystemExit("verdict_corpus: no layer to crash in")


def oom_truth(e):
    TRUTH["oom"] = {"message": str(e).splitlines()[0]}
    m = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)", str(e))
    if m:
        scale = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10, "B": 1}[m.group(2)]
        TRUTH["oom"]["requested_approx"] = int(float(m.group(1)) * scale)
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == HERE]
    if mine:
        TRUTH["oom"]["line"] = mine[-1].lineno
    if frames:
        TRUTH["oom"]["innermost"] = "%s:%d" % (os.path.basename(frames[-1].filename),
                                              frames[-1].lineno)
    TRUTH["oom"]["allocated"] = torch.cuda.memory_allocated()
    TRUTH["oom"]["reserved"] = torch.cuda.memory_reserved()
    TRUTH["oom"]["num_ooms"] = torch.cuda.memory_stats().get("num_ooms", 0)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=sorted(list(WORKLOADS) + list(OWN_LOOP)))
    ap.add_argument("--fault", choices=["list", "cache", "graph", "retain", "every", "closure",
                                        "global"])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--from", dest="from_step", type=int, default=3)
    ap.add_argument("--crash-step", type=int, default=0)
    ap.add_argument("--crash-in", help="the module to crash in (default: layer 2)")
    ap.add_argument("--layers", type=int, default=4, help="T5's layers (encoder and decoder)")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--truth")
    ap.add_argument("--mark", action="store_true", help="mark each step (gpumemtrace_mark)")
    ARGS = ap.parse_args()
    torch.manual_seed(0)
    TRUTH.update({"workload": ARGS.workload, "fault": ARGS.fault, "loop_steps": ARGS.steps,
                  "from_step": ARGS.from_step, "crash_step": ARGS.crash_step,
                  "marked": ARGS.mark, "steps_done": 0, "allocated_after_step": [],
                  "file": os.path.basename(HERE), "torch": torch.__version__})
    if ARGS.fault:
        TRUTH["fault_line"] = fault_line(ARGS.fault)
        TRUTH["kept_lines"] = kept_lines(ARGS.fault)
    mark = None
    if ARGS.mark:
        import ctypes
        mark = getattr(ctypes.CDLL(None), "gpumemtrace_mark", None)
    if ARGS.workload in OWN_LOOP:
        save_truth()
        model, opt = OWN_LOOP[ARGS.workload](ARGS.batch, mark)
        finish(model, opt)
        return
    model, opt, step = WORKLOADS[ARGS.workload](ARGS.batch)
    box = [0]
    if ARGS.crash_step:
        crash_target(model).register_forward_hook(crash_hook(box))
    kept_graph = []
    save_truth()
    try:
        for i in range(1, ARGS.steps + 1):  # the program's loop
            box[0] = i
            step_begins(i, model, opt, mark)
            out = step(i)
            kept = inject(i, out)
            if ARGS.fault == "graph" and i >= ARGS.from_step:
                model.eval()
                kept_graph.append(model(*graph_input(model)))  # FAULT graph
                model.train()
            record_step(i, kept)
    except torch.OutOfMemoryError as e:
        oom_truth(e)
        save_truth()
        raise
    except Crash:
        TRUTH["crashed_in_step"] = box[0]
        save_truth()
        raise
    finish(model, opt)


def finish(model, opt):
    """The truth at the end of a run that finished its loop."""
    torch.cuda.synchronize()
    TRUTH["alive_at_end"] = dict(model_state(model, opt) if model is not None else {},
                                 fault=fault_bytes_alive(),
                                 allocated=torch.cuda.memory_allocated())
    TRUTH["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    TRUTH["max_memory_reserved"] = torch.cuda.max_memory_reserved()
    a = TRUTH["allocated_after_step"]
    if ARGS.fault and len(a) > ARGS.from_step:
        # PyTorch's own count of what a faulty step keeps: the rise of
        # memory_allocated() from the end of the fault's first step to the
        # end of the run, over the steps between
        TRUTH["kept_per_step_torch"] = (a[-1] - a[ARGS.from_step - 1]) / (
            len(a) - ARGS.from_step)
    save_truth()
    print(json.dumps({"workload": ARGS.workload, "fault": ARGS.fault,
                      "steps_done": TRUTH["steps_done"]}))


GRAPH_INPUTS = {}


def graph_input(model):
    """An input for the graph fault's extra eval pass (grad enabled): the
    image models and GPT-2 only."""
    if "x" not in GRAPH_INPUTS:
        if ARGS.workload in ("resnet", "mobilenet"):
            GRAPH_INPUTS["x"] = (torch.randn(4, 3, 128, 128, device="cuda"),)
        elif ARGS.workload == "gpt2":
            GRAPH_INPUTS["x"] = (torch.randint(0, 8192, (2, 64), device="cuda"),)
        else:
            raise SystemExit("verdict_corpus: --fault graph needs gpt2, resnet or mobilenet")
    return GRAPH_INPUTS["x"]


if __name__ == "__main__":
    main()
