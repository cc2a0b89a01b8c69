"""lagrangian_gnn (ICML 2024): the knapsack DP against brute force, the Lagrangian bound's order CR <= L(lam_CR) <= LR*
<= OPT on tiny GAP instances solved by enumeration, the supergradient inequality behind the custom gradient, the
untrained network returning the CR duals, and a tiny prepare -> train -> compress -> evaluate run."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from paperflow.papers import lagrangian_gnn as P
from paperflow.spec import ConfigError


def test_knapsack_matches_brute_force():
    rng = np.random.default_rng(0)
    profit, weight, cap = rng.normal(size=(12, 9)), rng.integers(1, 12, size=(12, 9)), rng.integers(0, 40, size=12)
    vals, x = P.knapsack_batch(profit, weight, cap)
    for r in range(12):
        best = max(profit[r] @ np.array(s) for s in itertools.product((0, 1), repeat=9) if weight[r] @ np.array(s) <= cap[r])
        assert vals[r] == pytest.approx(best, abs=1e-9)
        assert profit[r] @ x[r] == pytest.approx(vals[r], abs=1e-9) and weight[r] @ x[r] <= cap[r]


def _opt(inst):
    """GAP optimum by enumerating every assignment of jobs to agents."""
    c, w, b = inst["c"], inst["w"], inst["b"]
    m, n = c.shape
    best = np.inf
    for a in itertools.product(range(m), repeat=n):
        load = np.zeros(m)
        for j, i in enumerate(a):
            load[i] += w[i, j]
        if (load <= b).all():
            best = min(best, sum(c[i, j] for j, i in enumerate(a)))
    return best


def test_bound_order_on_enumerated_instances():
    cfg = P.Config(n_jobs=6, n_agents=3, n_train=8, batch_size=4, n_val=1, n_test=1)
    insts = P.make_set(np.random.default_rng(3), cfg, 5)
    kept, info = P.with_best(cfg, insts)
    assert info["cg_capped"] == 0
    for d in kept:
        inst = {k: d[k][None] for k in ("c", "w", "b")}
        l_cr = P.lagrangian(d["lam_cr"][None], inst)[0][0]
        opt = _opt(d)
        assert d["cr"] - 1e-6 <= l_cr <= d["best"] + 1e-6 <= opt + 2e-6
        # no subgradient iterate beats the column-generation optimum
        sub = P.subgradient(d["lam_cr"][None], inst, 200, 0.1)[0][0]
        assert sub <= d["best"] + 1e-6


def test_supergradient_inequality_and_autograd():
    cfg = P.Config(n_jobs=10, n_agents=3, n_train=8, batch_size=4)
    d = P.make_set(np.random.default_rng(1), cfg, 1)[0]
    inst = {k: d[k][None] for k in ("c", "w", "b")}
    rng = np.random.default_rng(2)
    lam = d["lam_cr"][None] + rng.normal(scale=5.0, size=(1, 10))
    val, x = P.lagrangian(lam, inst)
    g = 1.0 - x.sum(1)
    for _ in range(50):  # L concave: L(mu) <= L(lam) + g.(mu - lam)
        mu = lam + rng.normal(scale=3.0, size=lam.shape)
        assert P.lagrangian(mu, inst)[0][0] <= val[0] + g[0] @ (mu - lam)[0] + 1e-8
    t = torch.tensor(lam, requires_grad=True)
    P.LagrangianBound.apply(t, inst).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), g)


def test_untrained_network_returns_cr_duals():
    cfg = P.Config(n_jobs=7, n_agents=2, n_train=8, batch_size=4, hidden=8)
    s = P.stack_set(P.make_set(np.random.default_rng(0), cfg, 3))
    lam = P.LagrangianGNN(cfg.hidden, cfg.rounds)(s)
    torch.testing.assert_close(lam.double(), s["lam_cr"], atol=1e-4, rtol=1e-5)


def test_config_checks():
    with pytest.raises(ConfigError):
        P.Config(lr_grid=(0.1, 0.01))
    with pytest.raises(ConfigError):
        P.Config(compare_level=0.3)


def test_tiny_run():
    cfg = P.Config(n_jobs=8, n_agents=3, n_train=16, n_val=4, n_test=4, hidden=8, rounds=1, steps=5, batch_size=4,
                   tune_steps=3, subgrad_iters=3, cg_max_iters=100, time_rounds=1, log_every=2)
    data = P.prepare(cfg, None)
    rows = {}
    for v in P.VARIANTS:
        model = P.train(cfg, data, v, 0, None)
        rows[v] = P.evaluate(cfg, model, data)
        comp = P.compress(cfg, model, data, v, 0)
        assert set(comp) == {"0.50", "0.80"}
        P.evaluate(cfg, comp["0.50"], data)
    assert rows["cr"]["gap_closed"] == pytest.approx(0.0, abs=1e-9)
    assert rows["cr_duals"]["gap_closed"] >= -1e-6 and rows["subgrad"]["gap_closed"] >= rows["cr_duals"]["gap_closed"] - 1e-6
    assert rows["gnn"]["cr_gap"] >= 0 and "time_ratio" in rows["gnn"] and rows["subgrad"]["grid_edge"] in (0.0, 1.0)
    cols = {f"dense/{k}" for r in rows.values() for k in r}
    from paperflow.contract import logged_problems
    assert not logged_problems(P.SPEC, cfg, cols)
    assert dataclasses.is_dataclass(cfg)
