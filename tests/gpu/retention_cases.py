"""retention_cases.py CASE - real models on a GPU holding CUDA memory
through references the program knows, for tests/gpu/gpu-retention.sh.

Run under the library with GPUMEMTRACE_RETENTION=signal: the program
builds its holders, sends itself SIGUSR2 (the library's capture walks the
objects then), and afterwards measures the truth of each holder with
PyTorch's own counter: torch.cuda.memory_allocated() before and after the
program lets go of that holder (then gc.collect()). It prints one JSON
line: {"case": CASE, "freed": {holder chain: bytes}}. Models are built
from their configurations (random weights: nothing is downloaded).

Cases:
  gpt2-kept    GPT-2 (transformers) in training mode: four forward passes
               outside no_grad whose logits are kept in a list `kept` -
               each keeps its autograd graph's saved activations
  resnet-cache timm's resnet18: the features of four batches, detached,
               cached in a dict CACHE by batch
  opt-state    an MLP trained one step with Adam, then its last layer
               replaced: `opt` keeps the old layer's parameters and every
               parameter's moments
  vit-hook     torchvision's vit_b_16 in eval mode: a forward hook on each
               encoder block appends the block's output to a list it
               closes over (the hook, in the model, holds it)
  bert-frame   BERT (transformers): a function's local holds the outputs
               (with their graphs) while the capture runs
"""
import gc
import json
import os
import signal
import sys
import time

import torch

dev = "cuda"
MiB = 1 << 20


def capture():
    os.kill(os.getpid(), signal.SIGUSR2)
    for _ in range(20):  # the handler runs at the interpreter's next safe point
        time.sleep(0.05)


def live_blocks():
    """PyTorch's allocated blocks now: {address: size}."""
    return {b["address"]: b["size"] for seg in torch.cuda.memory_snapshot()
            for b in seg["blocks"] if b["state"] == "active_allocated"}


def freed(drop, key):
    """Bytes PyTorch's counter drops when the program lets go of a holder;
    the blocks freed, to compare block by block."""
    torch.cuda.synchronize()
    gc.collect()
    before, blocks = torch.cuda.memory_allocated(), live_blocks()
    drop()
    gc.collect()
    torch.cuda.synchronize()
    after = live_blocks()
    out["blocks"][key] = sorted([a, n] for a, n in blocks.items() if a not in after)
    return before - torch.cuda.memory_allocated()


case = sys.argv[1]
out = {"case": case, "freed": {}, "blocks": {}}

if case == "gpt2-kept":
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=4)).to(dev).train()
    kept = []
    for i in range(4):
        ids = torch.randint(0, 50257, (2, 128), device=dev)
        kept.append(model(ids).logits)
    capture()
    out["freed"]["__main__.kept"] = freed(lambda: kept.clear(), "__main__.kept")
elif case == "resnet-cache":
    import timm
    model = timm.create_model("resnet18", pretrained=False).to(dev).eval()
    CACHE = {}
    with torch.no_grad():
        for i in range(4):
            CACHE[i] = model.forward_features(torch.randn(8, 3, 224, 224, device=dev))
    capture()
    out["freed"]["__main__.CACHE"] = freed(lambda: CACHE.clear(), "__main__.CACHE")
elif case == "opt-state":
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(64, 1024, device=dev)).sum().backward()
    opt.step()
    model.zero_grad(set_to_none=True)
    model[2] = torch.nn.Linear(4096, 1024).to(dev)  # the old layer now lives in opt only
    capture()

    def drop_opt():
        global opt
        del opt
    out["freed"]["__main__.opt"] = freed(drop_opt, "__main__.opt")
elif case == "vit-hook":
    import torchvision
    model = torchvision.models.vit_b_16().to(dev).eval()

    def keeper():
        outs = []

        def hook(module, args, output):
            outs.append(output)
        return hook, outs
    hook, _ = keeper()
    del _
    handles = [blk.register_forward_hook(hook) for blk in model.encoder.layers]
    with torch.no_grad():
        model(torch.randn(4, 3, 224, 224, device=dev))
    del hook
    capture()

    def drop_hooks():
        for h in handles:
            h.remove()
    # the hooks' dict entries are the only references to the closure: removing
    # them frees what it kept
    out["freed"]["outs"] = freed(drop_hooks, "outs")
elif case == "bert-frame":
    from transformers import BertConfig, BertModel
    model = BertModel(BertConfig(num_hidden_layers=4)).to(dev).train()

    def work():
        outs = [model(torch.randint(0, 30000, (4, 128), device=dev)).last_hidden_state
                for _ in range(3)]
        capture()
        return outs, None
    o, _ = work()

    def drop_outs():
        global o
        o = None
    out["freed"]["local outs"] = freed(drop_outs, "local outs")
else:
    sys.exit(f"no case {case}")
print(json.dumps(out))
