"""A stand-in for the two parts of PyTorch 2 that retention captures at a
step and on growth use (tests/e2e/py/optimhook_app.py): the global
optimizer step hook and torch.cuda.memory_allocated()."""
from . import cuda, optim  # noqa: F401


class Tensor:
    pass
