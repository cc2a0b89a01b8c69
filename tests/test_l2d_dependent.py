"""l2d_dependent (ICML 2024): the dependent deferral rule against a brute-force Bayes action; each surrogate's minimiser on
hand-computed conditional distributions (found by optimising the implemented loss) against its closed form, and its
decision against the Bayes action (Bayes-consistency at a point); the one-vs-all loss against its formula; the simulated
expert; the metrics on a hand example; a tiny prepare -> train -> compress -> evaluate run through the spec."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from paperflow.papers import l2d_dependent as l2d
from paperflow.spec import Resources
from synthetic_images import fake_fashion

K = l2d.K


def _outcomes(a: np.ndarray, b: np.ndarray):
    """(weight, y, m) for every joint outcome (y = j, expert right / wrong) of a conditional law; a wrong expert says j+1."""
    out = []
    for j in range(K):
        out.append((float(a[j]), j, (j + 1) % K))
        out.append((float(b[j]), j, j))
    return [(w, y, m) for w, y, m in out if w > 0]


def _minimise(variant: str, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
    """Logits minimising the EXPECTED surrogate loss under the conditional law (a, b), by L-BFGS on the loss as coded."""
    outs = _outcomes(a, b)
    w = torch.tensor([o[0] for o in outs], dtype=torch.float64)
    y = torch.tensor([o[1] for o in outs])
    m = torch.tensor([o[2] for o in outs])
    g = torch.zeros(l2d.n_outputs(variant), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([g], lr=1.0, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        losses = torch.stack([l2d.surrogate_loss(variant, g[None], y[i : i + 1], m[i : i + 1]) for i in range(len(outs))])
        loss = (w * losses).sum()
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    return g.detach()


def _law(seed: int, defer_bias: float = 0.0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(2 * K) * 0.7)
    a, b = p[:K].copy(), p[K:].copy()
    if defer_bias:
        b = b + defer_bias
        s = a.sum() + b.sum()
        a, b = a / s, b / s
    return a, b


def _action(variant: str, g: torch.Tensor) -> int:
    h, d = l2d.decide(variant, g[None].float())
    return K if bool(d[0]) else int(h[0])


# hand-computed conditionals: (a, b), the Bayes action (K = defer)
HAND = [
    # eta = (.55, .45, 0, ...), rho = .65: defer; dependent form: sum_{j != 0} b_j = .30 > a_0 = .20
    (np.r_[0.20, 0.15, np.zeros(K - 2)], np.r_[0.35, 0.30, np.zeros(K - 2)], K),
    # eta = (.70, .30), rho = .40: predict class 0; dependent form: b_1 = .20 < a_0 = .50
    (np.r_[0.50, 0.10, np.zeros(K - 2)], np.r_[0.20, 0.20, np.zeros(K - 2)], 0),
    # eta = (.1, .6, .3), rho = .45: predict class 1; b_0 + b_2 = .25 < a_1 = .40
    (np.r_[0.05, 0.40, 0.10, np.zeros(K - 3)], np.r_[0.05, 0.20, 0.20, np.zeros(K - 3)], 1),
]


@pytest.mark.parametrize("a,b,action", HAND)
def test_hand_examples_bayes_and_dependent_rule(a, b, action):
    assert l2d.bayes_action(a + b, b.sum()) == action
    h, d = l2d.dependent_rule(torch.tensor(a)[None], torch.tensor(b)[None])
    assert (K if bool(d[0]) else int(h[0])) == action


def test_dependent_rule_equals_brute_force_bayes_action():
    """The dependent form (only the disagreement events decide) is the classical Bayes rule, on random laws."""
    for seed in range(300):
        a, b = _law(seed, defer_bias=0.05 * (seed % 3))
        h, d = l2d.dependent_rule(torch.tensor(a)[None], torch.tensor(b)[None])
        assert (K if bool(d[0]) else int(h[0])) == l2d.bayes_action(a + b, b.sum()), seed


@pytest.mark.parametrize("a,b,action", HAND)
def test_dep_minimiser_is_the_joint_law_and_its_rule_is_bayes(a, b, action):
    g = _minimise("dep", a, b)
    qa, qb = l2d.joint_probs(g[None])
    support = np.r_[a, b] > 0
    np.testing.assert_allclose(torch.cat([qa, qb], 1)[0].numpy()[support], np.r_[a, b][support], atol=1e-5)
    assert _action("dep", g) == action


@pytest.mark.parametrize("a,b,action", HAND)
def test_baseline_minimisers_match_their_closed_forms_and_are_bayes(a, b, action):
    eta, rho = a + b, b.sum()
    on = eta > 0
    g = _minimise("ce", a, b)  # Mozannar & Sontag: p_j = eta_j / (1 + rho), p_defer = rho / (1 + rho)
    p = torch.softmax(g, 0).numpy()
    np.testing.assert_allclose(p[:K][on], eta[on] / (1 + rho), atol=1e-5)
    assert p[K] == pytest.approx(rho / (1 + rho), abs=1e-5)
    g = _minimise("ova", a, b)  # one-vs-all: sigmoid(g_j) = eta_j, sigmoid(g_defer) = rho
    s = torch.sigmoid(g).numpy()
    np.testing.assert_allclose(s[:K][on], eta[on], atol=1e-4)
    assert s[K] == pytest.approx(rho, abs=1e-4)
    g = _minimise("marg", a, b)  # separate marginals: softmax = eta, sigmoid = rho
    np.testing.assert_allclose(torch.softmax(g[:K], 0).numpy()[on], eta[on], atol=1e-5)
    assert float(torch.sigmoid(g[K])) == pytest.approx(rho, abs=1e-5)
    for v in ("ce", "ova", "marg"):
        assert _action(v, _minimise(v, a, b)) == action, v


def test_losses_against_their_formulas():
    gen = torch.Generator().manual_seed(0)
    y = torch.tensor([0, 3, 7, 9])
    m = torch.tensor([0, 2, 7, 1])  # right, wrong, right, wrong
    g = torch.randn(4, K + 1, generator=gen, dtype=torch.float64)
    phi = lambda z: math.log1p(math.exp(-z))  # noqa: E731
    want = 0.0
    for i in range(4):
        c = int(m[i] == y[i])
        want += sum(phi(float(g[i, j])) if j == y[i] else phi(-float(g[i, j])) for j in range(K))
        want += phi(float(g[i, K])) if c else phi(-float(g[i, K]))
    assert float(l2d.surrogate_loss("ova", g, y, m)) == pytest.approx(want / 4, rel=1e-10)
    want = 0.0
    for i in range(4):
        lp = torch.log_softmax(g[i], 0)
        want += -float(lp[y[i]]) - (float(lp[K]) if m[i] == y[i] else 0.0)
    assert float(l2d.surrogate_loss("ce", g, y, m)) == pytest.approx(want / 4, rel=1e-10)
    g2 = torch.randn(4, 2 * K, generator=gen, dtype=torch.float64)
    want = sum(-float(torch.log_softmax(g2[i], 0)[int(y[i]) + K * int(m[i] == y[i])]) for i in range(4)) / 4
    assert float(l2d.surrogate_loss("dep", g2, y, m)) == pytest.approx(want, rel=1e-10)


def test_simulated_expert_per_class_accuracy():
    y = torch.arange(K).repeat(20000)
    m = l2d.simulate_expert(y, (0, 2), 0.9, 0.2, seed=3)
    for j in range(K):
        acc = float((m[y == j] == j).float().mean())
        assert acc == pytest.approx(0.9 if j in (0, 2) else 0.2, abs=0.01)
    wrong = m[(y == 5) & (m != y)]
    counts = torch.bincount(wrong, minlength=K).float()
    assert counts[5] == 0 and float(counts.max() / counts[counts > 0].min()) < 1.15  # uniform over the 9 others
    assert torch.equal(m, l2d.simulate_expert(y, (0, 2), 0.9, 0.2, seed=3))


def test_metrics_hand_example():
    y = torch.tensor([0, 1, 2, 3])
    pred = torch.tensor([0, 0, 2, 1])  # right, wrong, right, wrong
    m = torch.tensor([1, 1, 0, 3])  # wrong, right, wrong, right
    defer = torch.tensor([False, True, True, False])
    out = l2d.l2d_metrics(pred, defer, y, m)
    assert out["system_acc"] == pytest.approx(50.0)  # right (clf), right (exp), wrong (exp), wrong (clf)
    assert out["coverage"] == pytest.approx(50.0) and out["defer_rate"] == pytest.approx(0.5)
    assert out["clf_acc"] == pytest.approx(50.0) and out["oracle_acc"] == pytest.approx(100.0)
    assert out["dependence"] == pytest.approx(-1.0)  # exactly one of the two is right on every image
    assert out["expert_spread"] == pytest.approx(100.0) and out["defer_gain"] == pytest.approx(0.0)


def test_end_to_end_through_spec(tmp_path):
    rng = np.random.default_rng(0)

    yf, yt = rng.integers(0, 10, 700), rng.integers(0, 10, 300)
    fake_fashion(tmp_path / "f.npz", rng, yf, yt)
    res = Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})
    spec = l2d.SPEC
    cfg = spec.make_config({"n_train": 400, "n_val": 100, "n_test": 200, "hidden": 16, "steps": 30, "batch_size": 32,
                            "lr_grid": [1e-3, 1e-2]})
    data = spec.prepare(cfg, res)
    assert set(data["tuning"]) == set(l2d.VARIANTS) and data["x_test"].shape == (200, 28, 28)
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        met = spec.evaluate(cfg, model, data)
        assert 0 <= met["system_acc"] <= 100 and 0 <= met["defer_rate"] <= 1 and met["grid_edge"] in (0.0, 1.0)
        assert met["coverage"] == pytest.approx(100 * (1 - met["defer_rate"]))
        assert met["n_params"] == 785 * 16 + 17 * l2d.n_outputs(v)
        comp = spec.compress(cfg, model, data, v, 0)
        mats = [t for t in comp["0.80"]["state"].values() if t.dim() >= 2]
        assert sum(int((t == 0).sum()) for t in mats) >= 0.8 * sum(t.numel() for t in mats) - 1
        assert math.isfinite(spec.evaluate(cfg, comp["0.50"], data)["system_acc"])
        again = spec.train(cfg, data, v, 0, None)
        assert all(torch.equal(model["state"][k], again["state"][k]) for k in model["state"])
