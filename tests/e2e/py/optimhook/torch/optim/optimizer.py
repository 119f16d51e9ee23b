"""torch.optim.optimizer's global post hook, as PyTorch 2 calls it: after
every step of every optimizer, hook(optimizer, args, kwargs)."""
_hooks = []


def register_optimizer_step_post_hook(hook):
    _hooks.append(hook)


class Optimizer:
    def step(self):
        for hook in list(_hooks):
            hook(self, (), {})
