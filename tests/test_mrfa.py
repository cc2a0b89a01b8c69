"""mrfa (ICML 2024): the multi-layer rehearsal feature augmentation against per-sample autograd (brute force), its
first-order property (the step raises each replay sample's loss), the random-direction ablation's norm, and a tiny
prepare -> train -> compress -> evaluate run through the spec."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.continual import MLP, mask_unseen
from paperflow.papers import mrfa
from paperflow.spec import Resources
from synthetic_images import fake_fashion


def _setup():
    torch.manual_seed(0)
    model = MLP((6, 5, 4), 10)
    x = torch.randn(7, 784)
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    return model, x, y, [0, 1, 2, 3]


def test_deltas_match_per_sample_autograd():
    model, x, y, seen = _setup()
    beta = 0.05
    d = mrfa.mrfa_deltas(model, x, y, seen, beta, torch.Generator().manual_seed(4))
    g = torch.Generator().manual_seed(4)
    pick = torch.randint(0, 3, (7,), generator=g)
    u = torch.rand(7, generator=g)
    layers = model.feature_layers
    for i in range(7):
        logits, inputs = model(x[i : i + 1], keep_inputs=True)
        loss = F.cross_entropy(mask_unseen(logits, seen), y[i : i + 1])
        for k, l in enumerate(layers):
            (grad,) = torch.autograd.grad(loss, inputs[l], retain_graph=True)
            h = inputs[l].detach()
            expected = beta * float(u[i]) * float(h.pow(2).sum()) * grad[0] if int(pick[i]) == k else torch.zeros_like(grad[0])
            assert torch.allclose(d[l][i], expected, atol=1e-6), (i, l)


def test_one_step_raises_each_replay_loss_and_random_keeps_the_norm():
    model, x, y, seen = _setup()
    d = mrfa.mrfa_deltas(model, x, y, seen, 1e-3, torch.Generator().manual_seed(1))
    with torch.no_grad():
        clean = F.cross_entropy(mask_unseen(model(x), seen), y, reduction="none")
        pert = F.cross_entropy(mask_unseen(model(x, d), seen), y, reduction="none")
    assert (pert >= clean - 1e-7).all() and (pert > clean).any()  # gradient ascent: first order, a small step
    r = mrfa.mrfa_deltas(model, x, y, seen, 1e-3, torch.Generator().manual_seed(1), direction="random")
    for l in d:
        assert torch.allclose(d[l].norm(dim=1), r[l].norm(dim=1), atol=1e-6)
        assert ((d[l].norm(dim=1) > 0) == (r[l].norm(dim=1) > 0)).all()


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    yf, yt = np.repeat(np.arange(10), 40), np.repeat(np.arange(10), 12)
    fake_fashion(tmp_path / "f.npz", rng, yf, yt)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


def test_end_to_end_through_spec(tmp_path):
    spec = mrfa.SPEC
    cfg = spec.make_config({"n_train": 25, "n_val": 10, "n_test": 10, "widths": [16, 16], "mem_per_class": 3,
                            "steps_per_task": 4, "batch_size": 8, "replay_batch": 8, "lr_grid": [1e-3, 3e-3],
                            "shift_grid": [1, 2], "beta_grid": [0.01, 0.1]})
    data = spec.prepare(cfg, _resources(tmp_path))
    assert set(data["tuning"]) == set(mrfa.VARIANTS) and data["x_test"].shape == (100, 28, 28)
    assert {v["tuned_lr"] for v in data["tuning"].values()} == {data["tuning"]["er"]["tuned_knob"]}  # one lr, er's
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        m = spec.evaluate(cfg, model, data)
        assert 0 <= m["final_acc"] <= 100 and np.isfinite(m["memory_gap"]) and m["grid_edge"] == 1.0
        assert m["final_acc"] == pytest.approx(float(model["R"][-1].mean()), abs=1e-4)  # dense: the matrix's last row
        assert len(model["memory"]["y"]) == 3 * 10
        comp = spec.compress(cfg, model, data, v, 0)
        assert np.isfinite(spec.evaluate(cfg, comp["0.50"], data)["final_acc"])
    a, b = spec.train(cfg, data, "mrfa", 0, None), spec.train(cfg, data, "mrfa", 0, None)
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])


def test_comparisons_meet_the_contract():
    from paperflow.contract import contract_problems
    cfg = mrfa.SPEC.make_config({})
    assert contract_problems(mrfa.SPEC, cfg) == []
    heads = [c for c in mrfa.comparisons(cfg) if c.role == "headline"]
    assert len(heads) == 1 and heads[0].mechanism_gates[0].metric == "memory_gap"
