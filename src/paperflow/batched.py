"""K copies of one small model trained as one (issue 27, item 2): seeds or an lr grid stacked along a new leading
axis, one vmapped forward/backward per step instead of K Python loops.

Why: a tiny model (an MLP, a small CNN) trained alone leaves the core idle in Python and dispatcher overhead
(bench_efficiency.py: 0.01-0.1 of the matmul peak for such jobs); K models whose parameters are stacked as
(K, ...) tensors run each layer as one batched kernel. The arithmetic is the same per model, so the result equals
K separate runs within float tolerance (tests/test_batched.py checks it against torch.optim.Adam/AdamW per model).

    models = [make_model(seed) for seed in seeds]          # same architecture, any init
    stack = StackedModels(models)                           # parameters (K, ...), leaf tensors
    opt = StackedAdam(stack.parameters(), lrs=[1e-3] * K)   # one lr per model (an lr grid: different lrs)
    for step in range(steps):
        out = stack(xb)              # xb shared by every model, or stack(xb_k, per_model=True) with xb_k (K, B, ...)
        loss = per_model_losses(out).sum()   # (K,) summed: each model's gradient is its own loss's gradient
        opt.zero_grad(); loss.backward(); opt.step()
    states = stack.state_dicts()     # K ordinary state dicts, one per model, for per-seed results folders

Buffers (BatchNorm running stats) are stacked and read, not updated: use it for models without running buffers
(MLPs, CNNs with GroupNorm/LayerNorm or none), which is what the check in StackedModels enforces.
"""
from __future__ import annotations

import copy
import math
from typing import Sequence

import torch
from torch import nn


class StackedModels(nn.Module):
    """K models of one architecture as one module whose parameters are (K, ...) stacks of theirs."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if not models:
            raise ValueError("StackedModels needs at least one model")
        names = [n for n, _ in models[0].named_parameters()]
        for m in models[1:]:
            if [n for n, _ in m.named_parameters()] != names:
                raise ValueError("StackedModels: every model must have the same parameter names (one architecture)")
        if any(b.numel() for _, b in models[0].named_buffers()):
            raise ValueError("StackedModels: models with buffers (e.g. BatchNorm running statistics) are not supported")
        self.k = len(models)
        self.names = names
        # the architecture without its own storage: functional_call supplies the parameters. Not registered as a
        # submodule, so parameters() yields only the stacks
        object.__setattr__(self, "base", copy.deepcopy(models[0]).to("meta"))
        self.stacked = nn.ParameterList(
            nn.Parameter(torch.stack([dict(m.named_parameters())[n].detach() for m in models]).clone()) for n in names)

    def parameters_by_name(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.stacked))

    def forward(self, *inputs: torch.Tensor, per_model: bool = False) -> torch.Tensor:
        """inputs shared by every model (per_model=False), or one slice per model along dim 0 (per_model=True);
        returns the outputs stacked (K, ...)."""
        from torch.func import functional_call, vmap

        def one(params: dict[str, torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
            return functional_call(self.base, params, xs)

        in_dims = (0,) + ((0 if per_model else None),) * len(inputs)
        return vmap(one, in_dims=in_dims, randomness="different")(self.parameters_by_name(), *inputs)

    def state_dicts(self) -> list[dict[str, torch.Tensor]]:
        """The K models' parameters as ordinary state dicts (detached copies)."""
        return [{n: p[k].detach().clone() for n, p in zip(self.names, self.stacked)} for k in range(self.k)]


class StackedAdam:
    """Adam / AdamW on (K, ...) stacked parameters with one learning rate per model (slice k uses lrs[k]).

    The update is torch.optim.Adam's (default, non-amsgrad) arithmetic, element-wise, so slice k follows exactly the
    trajectory model k would follow under torch.optim.Adam(lr=lrs[k]) (decoupled=True: AdamW's decay lr * wd * p
    applied before the step, as torch.optim.AdamW; decoupled=False: L2 added to the gradient, as torch.optim.Adam)."""

    def __init__(self, params: Sequence[torch.Tensor], lrs: Sequence[float], betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False) -> None:
        self.params = list(params)
        k = self.params[0].shape[0]
        if len(lrs) != k or any(p.shape[0] != k for p in self.params):
            raise ValueError(f"StackedAdam: {len(lrs)} lrs for parameters stacked {k} deep")
        self.lrs = torch.tensor([float(x) for x in lrs], dtype=self.params[0].dtype)
        self.betas, self.eps, self.weight_decay, self.decoupled = betas, eps, weight_decay, decoupled
        self.t = 0
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    def set_lrs(self, lrs: Sequence[float] | torch.Tensor) -> None:
        """Per-model lrs for the next step (a schedule: base lrs x the step's factor)."""
        self.lrs = torch.as_tensor(lrs, dtype=self.params[0].dtype).clone()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        bc1, bc2_sqrt = 1 - b1**self.t, math.sqrt(1 - b2**self.t)
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
            if p.grad is None:
                continue
            lr = self.lrs.view(-1, *([1] * (p.dim() - 1)))  # (K, 1, ..., 1)
            g = p.grad
            if self.weight_decay and self.decoupled:
                p.mul_(1 - lr * self.weight_decay)
            elif self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bc2_sqrt).add_(self.eps)
            p.sub_(lr / bc1 * m / denom)


class ForeachStackedAdam:
    """StackedAdam's update (no weight decay) in torch's foreach kernels, for stacks of many tiny tensors where the
    per-update cost is kernel launches (alh: ~10 kernel calls a step instead of ~7 per tensor). torch.optim.Adam
    (foreach) steps at lr 1, then each model's slice is moved lr_k of the way, p <- p_old + lr_k (p_adam - p_old),
    which is Adam at lr_k because Adam's moments do not depend on lr. Equal to StackedAdam up to float rounding
    (tests/test_batched.py)."""

    def __init__(self, params: Sequence[torch.Tensor], lrs: Sequence[float]) -> None:
        self.params = list(params)
        self.opt = torch.optim.Adam(self.params, lr=1.0, foreach=True)
        lr = torch.tensor([float(x) for x in lrs])
        self.w = [lr.view(-1, *([1] * (q.dim() - 1))).expand_as(q).contiguous() for q in self.params]  # (K, ...) each

    def zero_grad(self) -> None:
        for q in self.params:
            q.grad = None

    @torch.no_grad()
    def step(self) -> None:
        old = torch._foreach_mul(self.params, 1.0)
        self.opt.step()
        torch._foreach_lerp_(old, self.params, self.w)
        torch._foreach_copy_(self.params, old)


def train_stacked(models: Sequence[nn.Module], lrs: Sequence[float], batch_fn, loss_fn, steps: int, *, log=None,
                  log_every: int = 10, shared_inputs: bool = False, what: str = "train") -> list[dict[str, torch.Tensor]]:
    """K models of one architecture trained together with Adam, model k at lrs[k] (paperflow.loop.train_loop's
    contract for each model: zero_grad, loss, backward, step, a finite-loss check, throttled progress, log every
    log_every steps).

    batch_fn(step) -> (inputs, targets): inputs (K, B, ...) one batch per model (shared_inputs=False), or (B, ...) fed
    to every model (shared_inputs=True: an lr grid from one seed); targets as loss_fn reads them.
    loss_fn(outputs (K, B, ...), targets) -> (K,) per-model losses; their sum is backpropagated, so model k's gradient
    is its own loss's gradient. log(step, k, **metrics) per model: "train/loss" and "train/lr", as train_loop logs.
    Returns the K trained state dicts (parameter names of the models)."""
    from .progress import Progress

    stack = StackedModels(models)
    opt = StackedAdam(list(stack.parameters()), lrs)
    progress = Progress(what, steps)
    for step in range(steps):
        inputs, targets = batch_fn(step)
        opt.zero_grad()
        losses = loss_fn(stack(inputs, per_model=not shared_inputs), targets)  # (K,)
        if losses.shape != (stack.k,):
            raise ValueError(f"train_stacked: loss_fn returned shape {tuple(losses.shape)}, expected ({stack.k},)")
        losses.sum().backward()
        opt.step()
        values = losses.detach()
        if not bool(torch.isfinite(values).all()):
            raise FloatingPointError(f"train_stacked: losses {values.tolist()} at step {step}")
        progress.update(step + 1, loss=float(values.mean()))
        if log is not None and (step % log_every == 0 or step == steps - 1):
            for k in range(stack.k):
                log(step, k, **{"train/loss": float(values[k]), "train/lr": float(opt.lrs[k])})
    return stack.state_dicts()
