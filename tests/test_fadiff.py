"""fadiff (ICML 2024): the chain builder against its internal coordinates, planted motifs are rigid, the floating-anchor
projection keeps a motif rigid and is exact on a rigid motion, success / diversity on hand cases, and a tiny
prepare -> train -> compress -> evaluate -> derive run."""
from __future__ import annotations

import math

import torch

from paperflow.diffusion import random_rotations, rmsd_after_superposition
from paperflow.papers import fadiff as P

TINY = dict(n_train=60, steps_T=6, width=16, train_steps=3, batch=8, n_tasks=2, n_samples=2, sparsities=(0.3, 0.6))


def _torsion(a, b, c, d):
    b0, b1, b2 = a - b, c - b, d - c
    b1 = b1 / b1.norm(dim=-1, keepdim=True)
    v = b0 - (b0 * b1).sum(-1, keepdim=True) * b1
    w = b2 - (b2 * b1).sum(-1, keepdim=True) * b1
    x = (v * w).sum(-1)
    y = (torch.linalg.cross(b1, v) * w).sum(-1)
    return torch.atan2(y, x)


def test_nerf_reproduces_internal_coordinates():
    gen = torch.Generator().manual_seed(0)
    th, ph = P.internal_coords(3, 12, gen)
    th, ph = th.double(), ph.double()
    X = P.nerf(th.float(), ph.float()).double()
    bonds = (X[:, 1:] - X[:, :-1]).norm(dim=-1)
    torch.testing.assert_close(bonds, torch.ones_like(bonds), atol=1e-5, rtol=0)
    for i in range(1, 11):  # bond angle at point i
        u, v = X[:, i - 1] - X[:, i], X[:, i + 1] - X[:, i]
        ang = torch.acos((u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1)))
        torch.testing.assert_close(ang, th[:, i], atol=1e-4, rtol=0)
    for i in range(2, 11):  # torsion placing point i + 1
        tor = _torsion(X[:, i - 2], X[:, i - 1], X[:, i], X[:, i + 1])
        diff = torch.remainder(tor - ph[:, i] + math.pi, 2 * math.pi) - math.pi
        assert float(diff.abs().max()) < 1e-3


def test_planted_motif_is_rigid_across_scaffolds():
    cfg = P.Config()
    gen = torch.Generator().manual_seed(1)
    th_m, ph_m = P.internal_coords(1, cfg.n_points, gen)
    s, L = 3, cfg.motif_len
    th_fix = torch.full((1, cfg.n_points), float("nan"))
    ph_fix = th_fix.clone()
    th_fix[0, s + 1: s + L - 1] = th_m[0, s + 1: s + L - 1]
    ph_fix[0, s + 2: s + L - 1] = ph_m[0, s + 2: s + L - 1]
    X = P.draw_chains(cfg, 4, gen, th_fix, ph_fix)
    seg = X[:, s: s + L]
    assert float(rmsd_after_superposition(seg[:1].expand(3, -1, -1), seg[1:]).max()) < 1e-4
    assert float(rmsd_after_superposition(X[:1].expand(3, -1, -1), X[1:]).min()) > 0.1  # the scaffolds differ


def test_rigid_projection_is_exact_on_rigid_motions_and_always_rigid():
    gen = torch.Generator().manual_seed(2)
    M = torch.randn(5, 4, 3, generator=gen)
    M = M - M.mean(1, keepdim=True)
    R = random_rotations(5, gen)
    Q = 0.7 * M @ R.transpose(1, 2) + torch.randn(5, 1, 3, generator=gen)
    posed, R2 = P.rigid_project(Q, M, 0.7)
    torch.testing.assert_close(posed, Q, atol=1e-5, rtol=0)
    noisy = Q + 0.3 * torch.randn(Q.shape, generator=gen)
    posed, _ = P.rigid_project(noisy, M, 0.7)
    assert float(rmsd_after_superposition(0.7 * M, posed).max()) < 1e-5  # a rigid copy of the (scaled) template
    torch.testing.assert_close(posed.mean(1), noisy.mean(1), atol=1e-5, rtol=0)  # at the proposal's centroid
    fixed, _ = P.rigid_project(noisy, M, 0.7, rot=R)  # translation only: the orientation is kept
    torch.testing.assert_close(fixed - fixed.mean(1, keepdim=True), 0.7 * M @ R.transpose(1, 2), atol=1e-5, rtol=0)


def test_judge_on_hand_cases():
    cfg = P.Config(n_tasks=2, n_samples=2)
    tasks = P.make_tasks(cfg, 0, P.draw_chains(cfg, 50, torch.Generator().manual_seed(3)))
    X = tasks["native"].repeat_interleave(2, dim=0)
    out = P.judge(cfg, X, tasks)
    assert out["success"] == 100.0 and out["placed"] == 100.0 and out["motif_rmsd"] < 1e-4 and out["diversity"] < 1e-4
    stretched = X.clone()
    stretched[:, -1] += 5.0  # the last bond broken
    out = P.judge(cfg, stretched, tasks)
    assert out["success"] == 0.0 and out["placed"] == 100.0 and out["valid"] == 0.0


def test_tiny_end_to_end():
    cfg = P.Config(**TINY)
    data = P.prepare(cfg, None)
    model = P.train(cfg, data, "chains", 0, None)
    m = P.evaluate(cfg, model, data)
    for s in P.SAMPLERS:
        assert 0.0 <= m[f"success__{s}"] <= 100.0
    assert m["motif_rmsd__fadiff"] < 1e-3  # floating anchors keep the motifs rigid (the fact row)
    assert m["anchor_harm"] == m["success__inpaint_native"] - m["success__inpaint"]
    comp = P.compress(cfg, model, data, "chains", 0)
    assert set(comp) == {"0.30", "0.60"}
    assert math.isfinite(P.evaluate(cfg, comp["0.60"], data)["diversity__fadiff"])
    rows = P.derive(cfg, [{"paper": "fadiff", "variant": "chains", "seed": 0, **{f"dense/{k}": v for k, v in m.items()}}])
    views = {r["variant"] for r in rows}
    assert {f"chains|{s}" for s in P.SAMPLERS} <= views
    fa = next(r for r in rows if r["variant"] == "chains|fadiff")
    assert fa["dense/success"] == m["success__fadiff"] and fa["dense/anchor_harm"] == m["anchor_harm"]
