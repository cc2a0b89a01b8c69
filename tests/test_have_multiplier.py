"""have_multiplier: the analytic compressor-tree model against hand counts (Dadda's FA/HA counts, a 2x2 multiplier),
bit conservation and legality of every design, the 2-D hypervolume against a brute-force grid count, the agents'
equal sample budgets, the policy gradient against finite differences, the stages and the compress stage."""
from __future__ import annotations

import numpy as np
import pytest

from paperflow.papers import have_multiplier as hm
from paperflow.spec import ConfigError

SMOKE = dict(widths=(6, 8), budget=60, episode_len=5, n_prefs=3, lr_grid=(0.01, 0.03, 0.1), tune_runs=1, eval_steps=3)


@pytest.mark.parametrize("n", [4, 8, 12, 16])
def test_initial_design_has_daddas_counts(n):
    b = hm.build(n, *hm.initial_design(n))
    assert sum(b["fa"]) == n * n - 4 * n + 3 and sum(b["ha"]) == n - 1


def test_two_by_two_multiplier_by_hand():
    # columns (1, 2, 1, 0) bits; no compressor; final adder: HA in column 1 (sum 1 + 2, carry 1 + 1), HA in column 2
    # (bit at 1, carry at 2: sum 4, carry 3), the carry is the top bit: area 3 + 3, delay 4
    b = hm.build(2, *hm.initial_design(2))
    assert b["area"] == 6.0 and b["delay"] == 4.0


@pytest.mark.parametrize("seed", range(5))
def test_random_designs_are_legal_and_conserve_value(seed):
    rng = np.random.default_rng(seed)
    n = 8
    t = rng.integers(1, 3, 2 * n)
    k = rng.integers(0, hm.K_MAX + 1, 2 * n)
    b = hm.build(n, t, k)
    pp = hm.pp_counts(n)
    finals = [len(f) for f in b["finals"]]
    assert all(f <= 2 for f in finals)
    # weighted bit count sum_j 2^j (bits in column j): a FA maps 3 bits of weight 2^j to one of 2^j and one of 2^(j+1)
    # (unchanged), a HA maps 2 to one of each (+ 2^j); carries out of the top column (weight 2^(2n)) are dropped
    C = 2 * n
    before = sum(c << j for j, c in enumerate(pp)) + sum(h << j for j, h in enumerate(b["ha"]))
    after = sum(c << j for j, c in enumerate(finals)) + ((b["fa"][C - 1] + b["ha"][C - 1]) << C)
    assert before == after
    assert b["area"] >= hm.FA_AREA * sum(b["fa"]) + hm.HA_AREA * sum(b["ha"])


def test_hypervolume_against_grid_count():
    rng = np.random.default_rng(0)
    pts = 1.0 + 0.1 * rng.random((12, 2)) - 0.05
    hv = hm.hypervolume(pts)
    g = np.linspace(0.9, hm.REF[0], 801)
    ga, gd = np.meshgrid(0.5 * (g[1:] + g[:-1]), 0.5 * (g[1:] + g[:-1]), indexing="ij")
    dominated = np.zeros_like(ga, dtype=bool)
    for a, d in pts:
        dominated |= (ga >= a) & (gd >= d)
    cell = (g[1] - g[0]) ** 2
    assert abs(hv - dominated.sum() * cell) < 2e-4
    assert hm.hypervolume(np.array([[1.0, 1.0]])) == pytest.approx(hm.HV0)
    assert hm.hypervolume(np.array([[1.2, 0.5]])) == 0.0  # outside the reference box


def test_policy_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    agent = hm.Agent(0.0, rng)
    agent.theta = rng.normal(size=agent.theta.shape)
    n = 6
    t, k = hm.initial_design(n)
    phi = hm.features(n, t, k, hm.build(n, t, k), 0.3)
    a = 7
    j, op = divmod(a, hm.N_OPS)

    def logp(theta):
        z = hm.policy_logits(theta, phi)
        return z[a] - np.log(np.exp(z - z.max()).sum()) - z.max()

    z = hm.policy_logits(agent.theta, phi)
    p = np.exp(z - z.max()); p /= p.sum()
    grad = np.zeros_like(agent.theta)
    grad[op] += phi[j]
    grad -= p.reshape(-1, hm.N_OPS).T @ phi
    eps = 1e-6
    num = np.zeros_like(grad)
    for idx in np.ndindex(*grad.shape):
        e = np.zeros_like(grad); e[idx] = eps
        num[idx] = (logp(agent.theta + e) - logp(agent.theta - e)) / (2 * eps)
    np.testing.assert_allclose(grad, num, atol=1e-6)
    # Agent.update applies exactly this gradient
    agent.baseline = 0.0
    before = agent.theta.copy()
    agent.lr = 0.1
    agent.update([(phi, a, p)], [2.0])
    np.testing.assert_allclose(agent.theta - before, 0.1 * 2.0 * grad, atol=1e-12)


@pytest.mark.parametrize("variant", hm.VARIANTS)
def test_equal_samples_and_front(variant):
    cfg = hm.Config(**SMOKE)
    r = hm.run_width(cfg, 6, variant, 0.03, [0, 6])
    assert r["samples"] == cfg.budget
    front = np.asarray(r["front"])
    assert r["hv"] >= 1.0 - 1e-12  # the start design is in every archive
    assert (np.diff(front[:, 0]) > 0).all() and (np.diff(front[:, 1]) < 0).all()


def test_stages_and_compress():
    cfg = hm.Config(**SMOKE)
    data = hm.prepare(cfg, None)
    for v in hm.VARIANTS:
        model = hm.train(cfg, data, v, 0, None)
        m = hm.evaluate(cfg, model, data)
        assert {"hv", "front_delay_span", "samples", "grid_edge"} <= set(m)
        comp = hm.compress(cfg, model, data, v, 0)
        assert set(comp) == {"0.50", "0.80"}
        if v in hm.LEARNED:
            assert "policy_hv" in m
            mc = hm.evaluate(cfg, comp["0.80"], data)
            assert mc["weight_sparsity"] >= 0.79 and mc["hv"] == m["hv"]


def test_config_checks():
    with pytest.raises(ConfigError):
        hm.Config(budget=10)
    with pytest.raises(ConfigError):
        hm.Config(lr_grid=(0.1, 0.01, 0.03))
