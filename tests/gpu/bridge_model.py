"""A small real model's training losses, printed exactly: the program
tests/gpu/gpu-safety.sh runs untraced and traced (a cached bridge cut short
between runs) to show the traced results are the untraced ones.

usage: bridge_model.py [STEPS]
"""
import sys

import torch


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {i} loss {loss.item():.8f}")


if __name__ == "__main__":
    main()
