"""Speed of K small models trained stacked (paperflow.batched) against K separate runs, one thread.

    python benchmarks/bench_batched.py [--k 10] [--steps 100] [--threads 1]
prints, per model size, the milliseconds per step of K separate models (torch.optim.Adam) and of one StackedModels
step over the same K, and the ratio separate / stacked (> 1: stacking is faster). Sizes: the MLPs the papers train
on 28 x 28 images (784-64-10, 784-256-128-10) and a wider one, batch 64 per model, per-model batches.
Then the paper that uses it (mc_ensemble, default sizes, random images: timing only): its members of one kind trained
one at a time (fit_member) and stacked (fit_members): the 3 members of the de / supcon3 variants (per-model batches)
and the 6-lr tuning grid of one kind (one shared batch), seconds for --member-steps steps and the ratio. mc_ensemble
stacks only what this measured faster (its STACKED_GRID).
Measured 2026-12-06 (1 thread): the MLPs with per-model batches 0.93x / 0.68x / 0.37x (stacked SLOWER: CPU batched
matmuls of these shapes lose to separate ones, and a separate small step is only ~0.7 ms of Python); mc_ensemble de
0.86x, supcon3 0.91x, tuning grids ce 1.26x, supcon 1.01x, rot 1.46x, large (768 wide) 0.51x.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from paperflow.batched import StackedAdam, StackedModels

SIZES = {"784-64-10": (784, 64, 10), "784-256-128-10": (784, 256, 128, 10), "784-1024-10": (784, 1024, 10)}


def mlp(widths: tuple[int, ...]) -> nn.Module:
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def per_step_ms(widths: tuple[int, ...], k: int, steps: int, batch: int) -> tuple[float, float]:
    xs, ys = torch.randn(k, batch, widths[0]), torch.randint(0, widths[-1], (k, batch))
    models = [mlp(widths) for _ in range(k)]
    opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in models]
    t0 = time.perf_counter()
    for _ in range(steps):
        for j, (m, o) in enumerate(zip(models, opts)):
            o.zero_grad()
            F.cross_entropy(m(xs[j]), ys[j]).backward()
            o.step()
    separate = (time.perf_counter() - t0) / steps
    stack = StackedModels([mlp(widths) for _ in range(k)])
    opt = StackedAdam(list(stack.parameters()), [1e-3] * k)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = stack(xs, per_model=True)
        loss = F.cross_entropy(out.reshape(-1, widths[-1]), ys.reshape(-1), reduction="none").view(k, -1).mean(1).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    stacked = (time.perf_counter() - t0) / steps
    return separate * 1e3, stacked * 1e3


def mc_ensemble_rows(steps: int) -> None:
    from paperflow.papers import mc_ensemble as mc

    cfg = mc.SPEC.make_config({})
    gen = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 256, (cfg.n_train, 28, 28), dtype=torch.uint8, generator=gen),
            "y_train": torch.randint(0, len(cfg.id_classes), (cfg.n_train,), generator=gen)}
    cases = {"de (3 ce members)": ("ce", [0, 1, 2], [1e-3] * 3), "supcon3 (3 supcon members)": ("supcon", [0, 1, 2], [1e-3] * 3),
             f"tuning grid ({len(cfg.lr_grid)} lrs, ce)": ("ce", [cfg.tune_seed] * len(cfg.lr_grid), list(cfg.lr_grid)),
             f"tuning grid ({len(cfg.lr_grid)} lrs, supcon)": ("supcon", [cfg.tune_seed] * len(cfg.lr_grid), list(cfg.lr_grid))}
    for name, (kind, seeds, lrs) in cases.items():
        t0 = time.perf_counter()
        for s, lr in zip(seeds, lrs):
            mc.fit_member(cfg, data, kind, s, lr, steps, None)
        sep = time.perf_counter() - t0
        t0 = time.perf_counter()
        mc.fit_members(cfg, data, kind, seeds, lrs, steps, None)
        st = time.perf_counter() - t0
        print(f"mc_ensemble {name}: {steps} steps, one at a time {sep:.2f} s, stacked {st:.2f} s, ratio {sep / st:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--member-steps", type=int, default=100, help="steps of the mc_ensemble rows (0: skip them)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name, widths in SIZES.items():
        per_step_ms(widths, args.k, 3, args.batch)  # warm-up
        sep, st = per_step_ms(widths, args.k, args.steps, args.batch)
        print(f"{name}: {args.k} separate {sep:.2f} ms/step, stacked {st:.2f} ms/step, separate/stacked {sep / st:.2f}")
    if args.member_steps:
        mc_ensemble_rows(args.member_steps)


if __name__ == "__main__":
    main()
