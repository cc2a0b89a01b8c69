"""private_density: the trigonometric basis is orthonormal (numerical integration), the projection estimator's MISE
against its closed form (Monte Carlo, private and not), the Laplace sensitivity on a hand case, the sampler, the
Lepskii rule on hand cases, the headline's excess slope (a log-ratio fit), the mechanism metrics against the
non-private variant run on the same draws, and the spec/Config (contract v3)."""
from __future__ import annotations

import numpy as np
import pytest

from paperflow.papers import private_density as pd
from paperflow.contract import contract_problems
from paperflow.spec import ConfigError


def test_basis_is_orthonormal():
    x = (np.arange(4096) + 0.5) / 4096  # midpoint rule: exact for trigonometric polynomials of degree < 4096
    phi = np.concatenate([np.ones((1, 4096)), pd.basis(x, 12)[0].T, pd.basis(x, 12)[1].T])  # (25, 4096)
    gram = phi @ phi.T / 4096
    np.testing.assert_allclose(gram, np.eye(25), atol=1e-12)


def test_density_and_sampler():
    cfg = pd.Config(k_true=32)
    theta = pd.make_density(cfg, 3)
    x = np.linspace(0, 1, 2001)
    f = pd.density(theta, x)
    assert f.min() >= 1 - cfg.mass - 1e-12 and f.max() <= 1 + cfg.mass + 1e-12
    assert np.trapezoid(f, x) == pytest.approx(1.0, abs=1e-6)
    sample = pd.sampler(cfg, theta)(200000, np.random.default_rng(0))
    emp = pd.basis(sample, 5).mean(axis=1)  # E phi_k(X) = theta_k
    np.testing.assert_allclose(emp, theta[:, :5], atol=4 * np.sqrt(2 / 200000))


def test_mise_closed_form_matches_monte_carlo():
    cfg = pd.Config(k_true=16, cutoffs=(1, 2, 4, 8, 16))
    theta = pd.make_density(cfg, 1)
    draw, rng = pd.sampler(cfg, theta), np.random.default_rng(0)
    n, N, eps = 200, 4, 2.0
    for private in (False, True):
        errs = []
        for _ in range(3000):
            coef = pd.basis(draw(n, rng), N).mean(axis=1)
            if private:
                coef = coef + rng.laplace(0, pd.laplace_scale(N, n, eps), (2, N))
            errs.append(pd.ise(theta, coef))
        expected = pd.mise(theta, N, n, eps if private else None)
        assert np.mean(errs) == pytest.approx(expected, rel=0.05)


def test_laplace_sensitivity_hand_case():
    n, N = 10, 3
    x = np.full(n, 0.25)
    y = x.copy()
    y[0] = 0.75  # angles differ by pi for odd k: the worst case of |dcos| + |dsin|
    diff = np.abs(pd.basis(x, N).mean(1) - pd.basis(y, N).mean(1)).sum()
    # per frequency k, |sqrt2 (cos a - cos b)| + |sqrt2 (sin a - sin b)| <= 4, attained at a - b = pi/k-shifts with
    # |cos| = |sin|: brute force over pairs (a, b) on a grid, so 4N/n bounds the L1 change of the 2N coefficients
    grid = np.linspace(0, 1, 401)
    phi = pd.basis(grid, N)  # (2, 401, N)
    l1 = np.abs(phi[:, :, None, :] - phi[:, None, :, :]).sum(axis=0)  # (401, 401, N)
    assert l1.max(axis=(0, 1)) == pytest.approx([4.0] * N, rel=1e-3)  # each frequency attains 4
    assert l1.sum(axis=2).max() <= 4 * N + 1e-9
    assert diff <= 4 * N / n + 1e-12
    assert pd.laplace_scale(N, n, 0.5) == pytest.approx(4 * N / n / 0.5)


def test_lepskii_hand_cases():
    cutoffs = (1, 2, 4)
    q = {(j, l): 2.0 for j in range(3) for l in range(j + 1, 3)}
    var = [1.0, 1.0, 1.0]
    small = np.zeros((2, 4))
    assert pd.lepskii(small, cutoffs, var, q) == 0  # no energy beyond N = 1: the smallest member
    big = small.copy()
    big[0, 2] = 3.0  # energy 9 in block 3 (frequencies 3..4): only N = 4 passes
    assert pd.lepskii(big, cutoffs, var, q) == 2
    mid = small.copy()
    mid[0, 1] = 2.5  # energy 6.25 in block 2 > 2 * 1 (vs N=2), and > 2 * 2 (vs N=4): N = 2
    assert pd.lepskii(mid, cutoffs, var, q) == 1
    assert pd.blocks(cutoffs) == [(0, 1), (1, 2), (2, 4)]
    qs = pd.noise_quantiles(cutoffs, 0.99, laplace=True, draws=4000)
    assert qs[(0, 1)] > qs[(0, 2)] > 1  # heavier relative tails with fewer coefficients


def test_rate_fit_and_oracle():
    ns = np.array([100, 1000, 10000])
    assert pd.fit_rate(ns, 5 * ns ** -0.7) == pytest.approx(0.7)
    theta = pd.make_density(pd.Config(), 0)
    n_star = pd.oracle_cutoff(theta, 10000, 1.0, 32)
    assert all(pd.mise(theta, n_star, 10000, 1.0) <= pd.mise(theta, N, 10000, 1.0) for N in range(1, 33))
    assert pd.oracle_cutoff(theta, 10000, 1.0, 32) <= pd.oracle_cutoff(theta, 10000, None, 32)  # privacy: smaller N


def test_config_and_spec_load():
    with pytest.raises(ConfigError, match="cutoffs"):
        pd.Config(cutoffs=(4, 2))
    cfg = pd.SPEC.make_config({"ns": [200, 400], "cutoffs": [1, 2, 4], "fixed_cutoff": 2, "reps": 1, "k_true": 16,
                               "grid": 2048})
    rows = pd.comparisons(cfg)
    head = rows[0]
    assert sum(r.role == "headline" for r in rows) == 1 and head.role == "headline"
    assert (head.metric, head.kind, head.better, head.baseline) == ("excess_slope", "better", "lower", "private|bound")
    assert head.refuted_if and {g.metric for g in head.mechanism_gates} == {"privacy_ratio", "chosen_spread"}
    assert contract_problems(pd.SPEC, cfg) == [] and contract_problems(pd.SPEC, pd.SPEC.make_config({})) == []
    assert any(r.baseline == "private|naive" and r.role == "secondary" for r in rows)
    metrics = {}
    for v in pd.VARIANTS:
        m = pd.evaluate(cfg, pd.train(cfg, pd.prepare(cfg, None), v, 0, lambda step, **k: None), None)
        metrics[v] = {"paper": "private_density", "variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}}
    assert "dense/rate_fixed" in metrics["private"] and "dense/rate_fixed" not in metrics["nonprivate"]
    views = {r["variant"]: r for r in pd.derive(cfg, list(metrics.values()))}
    assert views["private|bound"]["dense/excess_slope"] == cfg.tolerance
    for r in rows:
        assert r.column in views[r.method] and r.column in views[r.baseline], r.text


def test_excess_slope_is_the_log_ratio_slope():
    """MISE_lepskii = 3 n^-0.5 and MISE_oracle = n^-0.6: the ratio grows like n^0.1, so excess_slope = 0.1 = -rate_gap."""
    ns = np.array([1000, 3000, 10000, 30000])
    lep, orc = 3 * ns ** -0.5, ns ** -0.6
    gap = pd.fit_rate(ns, lep) - pd.fit_rate(ns, orc)
    assert -gap == pytest.approx(0.1) and pd.fit_rate(ns, orc / lep) == pytest.approx(0.1)  # fit_rate = -slope


def test_mechanism_metrics_against_the_nonprivate_variant():
    """The private job's non-private Lepskii runs on the same draws as the nonprivate variant, so privacy_ratio@n is
    exactly the ratio of the two variants' Lepskii MISE; chosen_spread and cutoff_shrink follow their definitions."""
    cfg = pd.SPEC.make_config({"ns": [300, 1200, 4800], "cutoffs": [1, 2, 4, 8], "fixed_cutoff": 2, "reps": 3,
                               "k_true": 32, "grid": 4096})
    priv = pd.train(cfg, None, "private", 4, lambda step, **k: None)["metrics"]
    nonp = pd.train(cfg, None, "nonprivate", 4, lambda step, **k: None)["metrics"]
    for n in cfg.ns:
        assert priv[f"privacy_ratio@{n}"] == pytest.approx(priv[f"mise_lepskii@{n}"] / nonp[f"mise_lepskii@{n}"], rel=1e-12)
        assert priv[f"cutoff_shrink@{n}"] == pytest.approx(np.log2(nonp[f"chosen_N@{n}"] / priv[f"chosen_N@{n}"]))
    logs = [np.log(priv[f"privacy_ratio@{n}"]) for n in cfg.ns]
    assert priv["privacy_ratio"] == pytest.approx(np.exp(np.mean(logs)))
    assert priv["chosen_spread"] == pytest.approx(np.log2(priv["chosen_N@4800"] / priv["chosen_N@300"]))
    assert priv["excess_slope"] == pytest.approx(-priv["rate_gap"]) and "privacy_ratio" not in nonp
    assert priv["mise_naive@300"] > 0 and np.isfinite(priv["rate_naive"])
