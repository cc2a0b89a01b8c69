"""The one training loop (minGPT-style): it knows nothing about any paper and takes hooks.

Hooks:
  loss_fn(batch) -> Tensor         a scalar, or a (K,) vector of per-task losses for multi-task
  combine(G, losses) -> Tensor     gradient combination for multi-task methods (FairGrad, MGDA, ...):
                                   G is (K, P), one flattened gradient of the shared parameters per
                                   task; returns the (P,) update direction written into .grad
  log(step, **metrics)             per-step callback (the stage forwards it to MLflow and curves.json)
  eval_fn() -> dict                periodic validation, logged with the prefix "val/"

Device (paperflow.device): when the job's device is not the CPU, the `modules` and every batch are moved
there; on the CPU nothing moves, so CPU results do not depend on the setting.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from .device import current as current_device, to_device
from .progress import Progress

GradCombiner = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class LoopResult:
    steps: int
    final_loss: float
    seconds: float


def cosine_lr(step: int, total: int, base_lr: float, warmup: int = 0, min_ratio: float = 0.1) -> float:
    """Linear warm-up then cosine decay to min_ratio * base_lr (nanoGPT's schedule)."""
    if warmup and step < warmup:
        return base_lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def adamw(module: torch.nn.Module, lr: float, weight_decay: float, no_decay: Callable[[str, torch.Tensor], bool] | None = None,
          **kwargs: Any) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices and kernels only (dim >= 2); biases, norm scales, tokens and
    other vectors/scalars are not decayed (the DeiT/GPT convention). `no_decay(name, p)` exempts more."""
    decay, keep = [], []
    for name, p in module.named_parameters():
        (keep if p.dim() < 2 or (no_decay is not None and no_decay(name, p)) else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}],
                             lr=lr, **kwargs)


def train_loop(
    params: Iterable[torch.nn.Parameter],
    batch_fn: Callable[[int], Any],
    loss_fn: Callable[[Any], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    steps: int,
    *,
    log: Callable[..., None] | None = None,
    log_every: int = 10,
    lr_fn: Callable[[int], float] | None = None,
    clip_norm: float | None = None,
    combine: GradCombiner | None = None,
    shared_params: Sequence[torch.nn.Parameter] | None = None,
    eval_fn: Callable[[], Mapping[str, float]] | None = None,
    eval_every: int = 0,
    modules: Sequence[torch.nn.Module] = (),
) -> LoopResult:
    """Run `steps` optimisation steps; batch_fn(step) must be deterministic given the seed.

    `modules` are put in train mode for steps and eval mode around eval_fn.
    With `combine`, loss_fn returns (K,) task losses: the shared parameters get combine(G, losses)
    as their gradient and every other parameter gets the gradient of the summed losses.
    """
    params = [p for p in params if p.requires_grad]
    if combine is not None and not shared_params:
        raise ValueError("train_loop: combine needs shared_params (the parameters the tasks share)")
    shared = list(shared_params or [])
    device = current_device()
    on_cpu = device.type == "cpu"
    if not on_cpu:  # in place: the Parameter objects (and the optimizer's references to them) stay the same
        for m in modules:
            m.to(device)
    start = time.perf_counter()
    loss_value = float("nan")
    progress = Progress("train", steps)  # a throttled line in the job log (paperflow/progress.py)
    for step in range(steps):
        for m in modules:
            m.train()
        if lr_fn is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_fn(step)
        batch = batch_fn(step) if on_cpu else to_device(batch_fn(step), device)
        optimizer.zero_grad(set_to_none=True)
        losses = loss_fn(batch)
        extra: dict[str, float] = {}
        if combine is None:
            loss = losses if losses.dim() == 0 else losses.sum()
            loss.backward()
        else:
            extra = _combined_backward(losses, shared, [p for p in params if all(p is not q for q in shared)], combine)
            loss = losses.sum()
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        optimizer.step()
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"train_loop: loss is {loss_value} at step {step}")
        progress.update(step + 1, loss=loss_value)
        if log is not None and (step % log_every == 0 or step == steps - 1):
            metrics = {"train/loss": loss_value, "train/lr": optimizer.param_groups[0]["lr"], **extra}
            if losses.dim() > 0:
                metrics.update({f"train/loss_task{k}": float(v) for k, v in enumerate(losses.detach())})
            log(step, **metrics)
        if eval_fn is not None and eval_every and ((step + 1) % eval_every == 0 or step == steps - 1):
            for m in modules:
                m.eval()
            with torch.no_grad():
                val = eval_fn()
            if log is not None:
                log(step, **{f"val/{k}": float(v) for k, v in val.items()})
    return LoopResult(steps=steps, final_loss=loss_value, seconds=time.perf_counter() - start)


def _combined_backward(
    losses: torch.Tensor, shared: Sequence[torch.nn.Parameter], others: Sequence[torch.nn.Parameter], combine: GradCombiner
) -> dict[str, float]:
    """Per-task gradients of the shared parameters -> combine -> .grad; task heads get sum-loss grads.

    The heads' gradients come from autograd.grad on the summed loss restricted to `others`, which
    walks only the head part of the graph instead of a third pass through the shared trunk."""
    if losses.dim() != 1:
        raise ValueError(f"train_loop: with combine, loss_fn must return (K,) task losses, got shape {tuple(losses.shape)}")
    rows = []
    for k in range(losses.shape[0]):
        grads = torch.autograd.grad(losses[k], shared, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, shared)]))
    G = torch.stack(rows)  # (K, P)
    if others:
        head_grads = torch.autograd.grad(losses.sum(), list(others), allow_unused=True)
        for p, g in zip(others, head_grads):
            p.grad = g  # None for a head unused by every task
    direction = combine(G, losses.detach())  # (P,)
    offset = 0
    for p in shared:
        n = p.numel()
        p.grad = direction[offset : offset + n].view_as(p).clone()
        offset += n
    return {"train/grad_norm_shared": float(direction.norm())}
