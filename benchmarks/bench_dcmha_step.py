"""Training-step time of DCMHA relative to MHA at equal size (the "mha" and "dcmha" variants).

    python benchmarks/bench_dcmha_step.py --steps 10 --threads 1
prints e.g. "dcmha/mha step-time ratio: 1.43" after the per-variant milliseconds per step.
Sizes default to the paper's default profile (paperflow.papers.dcmha.Config); override with flags.
"""
from __future__ import annotations

import argparse
import time

import torch

from paperflow.papers.dcmha import Config, build_model, make_arch


def step_seconds(cfg: Config, variant: str, steps: int, vocab_size: int = 96) -> float:
    """Median wall time of one forward+backward+AdamW step on random tokens (after 2 warm-up steps)."""
    torch.manual_seed(0)
    net = build_model(make_arch(cfg, variant, vocab_size)).train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randint(0, vocab_size, (cfg.batch_size, cfg.block_size))
    y = torch.randint(0, vocab_size, (cfg.batch_size, cfg.block_size))
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        net.loss(x, y).backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--n-layer", type=int, default=None)
    ap.add_argument("--n-head", type=int, default=None)
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--with-2x", action="store_true", help="also time the mha_2x variant")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in dict(d_model=args.d_model, n_layer=args.n_layer, n_head=args.n_head,
                                       block_size=args.block_size, batch_size=args.batch_size).items() if v is not None}
    cfg = Config(**overrides)
    variants = ("mha", "dcmha", "mha_2x") if args.with_2x else ("mha", "dcmha")
    t = {v: step_seconds(cfg, v, args.steps) for v in variants}
    for v in variants:
        print(f"{v}: {t[v] * 1e3:.1f} ms/step (d_model={cfg.d_model} n_layer={cfg.n_layer} n_head={cfg.n_head} "
              f"T={cfg.block_size} B={cfg.batch_size}, threads={args.threads})")
    print(f"dcmha/mha step-time ratio: {t['dcmha'] / t['mha']:.2f}")
    if args.with_2x:
        print(f"mha_2x/mha step-time ratio: {t['mha_2x'] / t['mha']:.2f}")


if __name__ == "__main__":
    main()
