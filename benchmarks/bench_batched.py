"""Speed of K small models trained stacked (paperflow.batched) against K separate runs, one thread.

    python benchmarks/bench_batched.py [--k 10] [--steps 100] [--threads 1]
prints, per model size, the milliseconds per step of K separate models (torch.optim.Adam) and of one StackedModels
step over the same K, and the ratio separate / stacked (> 1: stacking is faster). Sizes: the MLPs the papers train
on 28 x 28 images (784-64-10, 784-256-128-10) and a wider one, batch 64 per model, per-model batches.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name, widths in SIZES.items():
        per_step_ms(widths, args.k, 3, args.batch)  # warm-up
        sep, st = per_step_ms(widths, args.k, args.steps, args.batch)
        print(f"{name}: {args.k} separate {sep:.2f} ms/step, stacked {st:.2f} ms/step, separate/stacked {sep / st:.2f}")


if __name__ == "__main__":
    main()
