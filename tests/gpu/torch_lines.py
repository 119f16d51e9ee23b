"""A transformer written out in this file, for the Python-stack proof on a
GPU: the peak table must name its lines (attention, feed-forward, the
optimizer's state) with the op beneath, and with --leak the growth report
must flag the loop that keeps every step's un-detached output.

usage: torch_lines.py STEPS [--leak]
Prints one JSON line: losses, step times, torch.cuda.max_memory_allocated().
Lines that allocate are marked "# LINE name" for tests/gpu/gpu_lines_check.py.
Each step is an NVTX range "step" holding "forward", "backward" and
"optimizer": under the launcher they become markers (NVTX injection).
"""
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x)  # LINE attn_qkv
        q, k, v = qkv.view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5  # LINE attn_scores
        att = scores.softmax(dim=-1)  # LINE attn_softmax
        y = (att @ v).transpose(1, 2).reshape(b, t, d)  # LINE attn_mix
        return self.out(y)  # LINE attn_out


class FeedForward(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        h = F.gelu(self.up(x))  # LINE ffn_up
        return self.down(h)  # LINE ffn_down


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ffn = FeedForward(d, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))  # LINE block_attn
        return x + self.ffn(self.ln2(x))  # LINE block_ffn


def main():
    steps = int(sys.argv[1])
    leak = "--leak" in sys.argv
    torch.manual_seed(0)
    d, heads, hidden, layers, batch, seq = 1024, 16, 4096, 6, 16, 512
    model = nn.Sequential(*[Block(d, heads, hidden) for _ in range(layers)]).cuda()
    x = torch.randn(batch, seq, d, device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kept, losses, times = [], [], []
    nvtx = torch.cuda.nvtx  # phases for `gpumemreport phases`, through NVTX
    for _ in range(steps):
        t0 = time.perf_counter()
        nvtx.range_push("step")
        opt.zero_grad(set_to_none=True)
        nvtx.range_push("forward")
        out = model(x)  # LINE model_call
        loss = out.float().pow(2).mean()
        nvtx.range_pop()
        nvtx.range_push("backward")
        loss.backward()  # LINE backward
        nvtx.range_pop()
        nvtx.range_push("optimizer")
        opt.step()  # LINE opt_step
        nvtx.range_pop()
        nvtx.range_pop()
        if leak:
            kept.append(out)  # LINE leak
        losses.append(loss.item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"steps": steps, "losses": losses, "step_times": times,
                      "max_allocated": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
