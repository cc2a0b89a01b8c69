"""Tests of the MoLA paper module (papers/mola.py): MoLA-Grad's gradient separation, the TwD loss on a
hand-computed case, router weights on the simplex, the E=1 layer against the shared LoRA, equal alpha / r for every
adapter (the wide LoRA as a sum of rank-r experts), the compress stage's per-tensor pruning, a tiny spec run,
Config validation."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from paperflow.nn.adapters import LoRALinear
from paperflow.papers import mola
from paperflow.registry import get_paper
from paperflow.spec import ConfigError, Resources

torch.set_num_threads(1)

TINY = dict(n_train=24, n_test=10, n_pretrain=40, pretrain_steps=3, hidden=(16, 8), rank=2, steps=4,
            batch_per_task=4, router_hidden=8, twd_dim=4, eval_batch=7, log_every=1)


def _resources(tmp_path):
    rng = np.random.default_rng(0)
    img = lambda n: rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    lab = lambda n: rng.integers(0, 10, size=n).astype(np.int64)
    np.savez(tmp_path / "fashion.npz", x_train=img(100), y_train=lab(100), x_test=img(30), y_test=lab(30))
    np.savez(tmp_path / "mnist.npz", x=img(100), y=lab(100))
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "fashion.npz"),
                                                "mnist10k": str(tmp_path / "mnist.npz")})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = mola.Config(**TINY)
    return cfg, get_paper("mola").prepare(cfg, _resources(tmp_path_factory.mktemp("mola")))


def _net(cfg, data, variant, seed=0):
    torch.manual_seed(seed)
    net = mola.build(mola.arch_of(cfg, variant))
    mola.load_pretrained(net, data["pretrained"])
    for layer in net.backbone.layers:  # non-zero B so every expert's output (and A's gradient) is live
        nn.init.normal_(layer.lora_B, std=0.1)
    return net


def test_mola_grad_routes_each_tasks_gradient_to_its_own_adapter_only(tiny):
    cfg, data = tiny
    net = _net(cfg, data, "mola_grad")
    x = torch.rand(5, 784)
    for t in range(len(mola.TASKS)):
        net.zero_grad(set_to_none=True)
        task = torch.full((5,), t, dtype=torch.long)
        net(x, task).square().sum().backward()
        for layer in net.backbone.layers:
            for p in (layer.lora_A, layer.lora_B):
                norms = p.grad.flatten(1).norm(dim=1)  # one norm per expert
                assert norms[t] > 0
                assert torch.all(norms[torch.arange(len(norms)) != t] == 0)  # exactly zero for other tasks' experts
            assert layer.base.weight.grad.norm() > 0  # the shared backbone learns from every task
        for k, head in enumerate(net.heads):  # heads also by task id
            assert (head.weight.grad is not None and head.weight.grad.norm() > 0) == (k == t)


def test_mola_grad_mixed_batch_splits_gradients_by_task(tiny):
    """On a mixed batch, expert t's gradient equals the gradient from the task-t samples alone."""
    cfg, data = tiny
    net = _net(cfg, data, "mola_grad")
    x, task = torch.rand(6, 784), torch.tensor([0, 1, 2, 0, 1, 2])
    net(x, task).square().sum().backward()
    full = [l.lora_A.grad.clone() for l in net.backbone.layers]
    for t in range(3):
        net.zero_grad(set_to_none=True)
        sel = task == t
        net(x[sel], task[sel]).square().sum().backward()
        for g, layer in zip(full, net.backbone.layers):
            torch.testing.assert_close(g[t], layer.lora_A.grad[t], rtol=1e-5, atol=1e-7)


def test_twd_loss_hand_computed():
    # h1 = h2 = (1, 0) (h1 unnormalised: normalisation must remove the 2), h3 = (0, 1); tasks (0, 0, 1).
    # Positive pairs (1,2), (2,1); anchor 1: -log(e / (e + 1)) = log(1 + 1/e); the same for anchor 2;
    # sample 3 has no positive. Mean over the two pairs = log(1 + e^-1).
    f = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 0, 1])
    assert mola.twd_loss(f, y, tau=1.0).item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    # tau = 0.5 doubles the logits: log(1 + e^-2)
    assert mola.twd_loss(f, y, tau=0.5).item() == pytest.approx(math.log(1 + math.exp(-2)), rel=1e-6)


def test_twd_loss_matches_the_codes_double_loop():
    """Against a direct transcription of the pair loop (mean over all positive pairs, diagonal excluded)."""
    g = torch.Generator().manual_seed(0)
    f, y, tau = torch.randn(9, 5, generator=g), torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1]), 0.7
    h = f / f.norm(dim=1, keepdim=True)
    s = torch.exp(h @ h.t() / tau)
    s = s - torch.diag(torch.diag(s))
    terms = [-torch.log(s[j, i] / s[:, i].sum()) for i in range(9) for j in range(9) if y[j] == y[i] and j != i]
    assert mola.twd_loss(f, y, tau).item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)


def test_twd_loss_needs_a_positive_pair():
    with pytest.raises(ValueError):
        mola.twd_loss(torch.randn(3, 4), torch.tensor([0, 1, 2]))


def test_router_weights_sum_to_one_and_are_shared_by_every_layer(tiny):
    cfg, data = tiny
    net = _net(cfg, data, "mola_router")
    x = torch.rand(7, 784)
    w, scores = net.gate(x, torch.zeros(7, dtype=torch.long))
    assert w.shape == (7, cfg.n_router_experts) and scores.shape == w.shape
    assert torch.all(w >= 0)
    torch.testing.assert_close(w.sum(1), torch.ones(7))
    # the task id does not enter the router's weights (target-agnostic)
    w2, _ = net.gate(x, torch.full((7,), 2, dtype=torch.long))
    torch.testing.assert_close(w, w2)


def test_mola_linear_with_given_weights_is_the_weighted_sum_of_experts():
    torch.manual_seed(0)
    layer = mola.MoLALinear(nn.Linear(6, 5), n_experts=3, r=2, alpha=4.0)
    nn.init.normal_(layer.lora_B)
    x, w = torch.randn(4, 6), torch.softmax(torch.randn(4, 3), 1)
    ref = layer.base(x) + sum(w[:, e : e + 1] * 2.0 * (x @ layer.lora_A[e].t() @ layer.lora_B[e].t()) for e in range(3))
    torch.testing.assert_close(layer(x, w), ref)


def test_single_expert_equals_the_shared_lora_linear():
    torch.manual_seed(0)
    base = nn.Linear(6, 5)
    ours = mola.MoLALinear(base, n_experts=1, r=2, alpha=16.0)
    ref = LoRALinear(nn.Linear(6, 5), r=2, alpha=16.0)
    ref.base.load_state_dict(base.state_dict())
    with torch.no_grad():
        ours.lora_B.normal_()
        ref.lora_A.copy_(ours.lora_A[0])
        ref.lora_B.copy_(ours.lora_B[0])
    x = torch.randn(3, 6)
    torch.testing.assert_close(ours(x), ref(x))
    assert ours.base.weight.requires_grad  # MoLA trains the backbone too


def test_lora_wide_has_the_same_adapter_budget_as_mola_grad(tiny):
    cfg, data = tiny
    counts = {v: mola.count_trainable(mola.build(mola.arch_of(cfg, v, "mnist"))) for v in mola.VARIANTS}
    assert counts["lora_wide"]["adapter_params"] == counts["mola_grad"]["adapter_params"] == 3 * counts["lora"]["adapter_params"]
    assert counts["full"]["adapter_params"] == 0 and counts["mola_router"]["router_params"] > 0
    assert counts["stl"]["adapter_params"] == counts["lora"]["adapter_params"]  # one task's model: one rank-r LoRA


def test_every_adapter_has_the_same_scale_alpha_over_r(tiny):
    """Equal alpha / r for every adapter variant: lora_wide (rank 3r) is not scaled down 3-fold."""
    cfg, _ = tiny
    scales = set()
    for v in ("mola_grad", "mola_router", "lora", "lora_wide", "stl"):
        net = mola.build(mola.arch_of(cfg, v, "fashion"))
        scales |= {layer.scale for layer in net.backbone.layers}
        assert all(layer.r == (3 * cfg.rank if v == "lora_wide" else cfg.rank) for layer in net.backbone.layers)
    assert scales == {cfg.lora_alpha / cfg.rank}


def test_lora_wide_at_equal_scale_equals_the_sum_of_three_rank_r_experts():
    """A rank-3r LoRA with alpha' = 3 alpha is three rank-r experts (its row blocks) each at s = alpha / r, summed:
    s' (x A^T) B^T = (3 alpha / 3r) sum_k (x A_k^T) B_k^T."""
    torch.manual_seed(0)
    base = nn.Linear(6, 5)
    wide = mola.MoLALinear(base, n_experts=1, r=6, alpha=3 * 8.0)
    nn.init.normal_(wide.lora_B)
    x = torch.randn(4, 6)
    A, B = wide.lora_A[0], wide.lora_B[0]
    ref = base(x) + sum((8.0 / 2) * (x @ A[2 * k : 2 * k + 2].t() @ B[:, 2 * k : 2 * k + 2].t()) for k in range(3))
    torch.testing.assert_close(wide(x), ref)


def test_compress_prunes_every_backbone_and_head_tensor_to_the_level(tiny):
    cfg, data = tiny
    for v in ("mola_router", "stl"):
        model = mola.train(cfg, data, v, 0, None)
        levels = mola.compress(cfg, model, data, v, 0)
        assert sorted(levels) == ["0.50", "0.80"]
        parts = model.get("per_task", [model])
        for level, pruned in levels.items():
            for dense, sparse in zip(parts, pruned.get("per_task", [pruned])):
                for name, w in dense["state"].items():
                    p = sparse["state"][name]
                    if name.startswith(("backbone.", "heads.")) and w.dim() >= 2:  # base, lora_A, lora_B, head weights
                        assert int((p == 0).sum()) == int(w.numel() * float(level)), name
                        assert torch.equal(p[p != 0], w[p != 0])
                    else:  # biases and the router stay dense
                        assert torch.equal(p, w), name
            m = mola.evaluate(cfg, pruned, data)
            assert 0 <= m["acc_mean"] <= 100


def logged_steps(logged, variant):
    return [(v, m["step"]) for v, m in logged if v == variant]


def test_tiny_spec_run(tiny):
    cfg, data = tiny
    spec = get_paper("mola")
    assert spec.compress is not None
    assert set(mola.TASKS) <= set(data) and data["mnist_inv"]["x_train"].dtype == torch.uint8
    # mnist and mnist_inv use disjoint MNIST images: inverted test images are 255 - x of other pool images
    logged = []
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: logged.append((v, {"step": step, **m})))
        torch.save(model, "/dev/null")
        again = spec.train(cfg, data, v, 0, None)
        for a, b in zip(model.get("per_task", [model]), again.get("per_task", [again])):  # deterministic
            assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])
        m = spec.evaluate(cfg, model, data)
        assert {f"acc_{t}" for t in mola.TASKS} | {"acc_mean", "trainable_params"} <= set(m)
        assert all(0 <= m[f"acc_{t}"] <= 100 for t in mola.TASKS)
        assert m["acc_mean"] == pytest.approx(sum(m[f"acc_{t}"] for t in mola.TASKS) / 3)
        assert ("route_purity" in m) == ("route_tv" in m) == (v == "mola_router")
        assert ("swap_drop" in m) == (v == "mola_grad")
    assert any(v == "mola_router" and "train/loss_task3" in m for v, m in logged)  # the TwD term is logged
    # stl: three single-task models, each with one head and one task's data; their steps are logged one after another
    stl = spec.train(cfg, data, "stl", 0, None)
    assert [m["arch"]["tasks"] for m in stl["per_task"]] == [[t] for t in mola.TASKS]
    assert max(step for v, step in logged_steps(logged, "stl")) >= 2 * cfg.steps
    rows = spec.comparisons(cfg)
    assert [r.role for r in rows].count("headline") == 1
    assert all(r.gates for r in rows if r.role in ("headline", "secondary"))  # every MoLA row needs negative transfer
    assert "dense/acc_mean" in {c.column for c in rows}


def test_route_tv_by_hand():
    """Tasks sent to disjoint experts: each task's TV from the mean (1/3 each) is (2/3 + 1/3 + 1/3) / 2 = 2/3 = 1 - 1/T;
    every task with the same mixture: 0; two tasks swapped on two experts, one uniform: by hand 1/3 * (0.5 + 0.5 + 0)."""
    assert mola.route_tv(torch.eye(3)) == pytest.approx(2 / 3)
    assert mola.route_tv(torch.tensor([[0.2, 0.5, 0.3]] * 3)) == pytest.approx(0.0)
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])  # mean (0.5, 0.5): TVs 0.5, 0.5, 0
    assert mola.route_tv(w) == pytest.approx(1 / 3)


def test_swap_drop_is_zero_for_interchangeable_experts_and_swap_uses_the_next_expert(tiny):
    """swap_logits routes task t through expert t+1 with task t's head; with every expert a copy of expert 0 the
    swap changes nothing (swap_drop exactly 0), with distinct experts it changes the logits."""
    cfg, data = tiny
    net = _net(cfg, data, "mola_grad")
    x, T = torch.rand(5, 784), len(mola.TASKS)
    for t in range(T):
        nxt = torch.full((5,), (t + 1) % T, dtype=torch.long)
        ref = net.heads[t](net.backbone(x, torch.nn.functional.one_hot(nxt, T).float()))
        torch.testing.assert_close(mola.swap_logits(net, x, t), ref)
        assert not torch.allclose(mola.swap_logits(net, x, t), net(x, torch.full((5,), t, dtype=torch.long)))
    with torch.no_grad():
        for layer in net.backbone.layers:
            layer.lora_A[1:] = layer.lora_A[0]
            layer.lora_B[1:] = layer.lora_B[0]
    model = {"state": net.state_dict(), "arch": mola.arch_of(cfg, "mola_grad"), "variant": "mola_grad"}
    assert mola.evaluate(cfg, model, data)["swap_drop"] == 0.0


@pytest.mark.parametrize("bad", [dict(rank=0), dict(n_router_experts=1), dict(batch_per_task=1),
                                 dict(n_train=3000, n_test=2500), dict(twd_tau=0.0), dict(hidden=()),
                                 dict(sparsities=(0.5, 1.0))])
def test_config_validation(bad):
    with pytest.raises(ConfigError):
        mola.Config(**bad)
