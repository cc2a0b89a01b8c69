"""bayes_mcts: the max-backup moments against Monte Carlo, the generated trees' values against brute-force path
enumeration, the oracle's coverage (calibrated ~ nominal, permuted below), the searches' bookkeeping, derive and the
Config checks."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from paperflow.papers import bayes_mcts as bm
from paperflow.spec import ConfigError

SMALL = dict(branching=3, depth=3, n_trees=6, n_val_trees=6, budget=8, checkpoints=(4, 8), kappa_grid=(0.5, 1.0, 2.0),
             bts_scale_grid=(1.0, 3.0, 10.0), uct_grid=(0.3, 1.0, 3.0), puct_grid=(0.3, 1.0, 3.0), grid_points=32)


def test_max_moments_match_monte_carlo():
    rng = np.random.default_rng(0)
    mu = rng.normal(size=(5, 4)) * 2
    sd = np.exp(rng.uniform(-2, 1, size=(5, 4)))
    mean, std = bm.max_moments(mu, sd, points=256)
    draws = (mu[None] + sd[None] * rng.standard_normal((400_000, 5, 4))).max(-1)
    np.testing.assert_allclose(mean, draws.mean(0), atol=0.02)
    np.testing.assert_allclose(std, draws.std(0), rtol=0.03, atol=0.01)


def test_max_of_one_dominant_gaussian_is_itself():
    mean, std = bm.max_moments(np.array([[10.0, 0.0, -1.0]]), np.array([[0.5, 0.1, 0.1]]), points=128)
    assert abs(mean[0] - 10.0) < 1e-2 and abs(std[0] - 0.5) < 1e-2


def test_tree_values_match_brute_force_paths():
    cfg = bm.Config(**SMALL)
    trees = bm.make_trees(cfg, np.random.default_rng(3), 2)
    b, D = cfg.branching, cfg.depth
    for t in range(2):
        best = -np.inf
        for actions in itertools.product(range(b), repeat=D):
            node, ret = 0, 0.0
            for a in actions:
                node = b * node + 1 + a
                ret += trees["r"][t, node]
            best = max(best, ret)
        assert abs(trees["V"][t, 0] - best) < 1e-12


def test_coverage_calibrated_and_permuted():
    cfg = bm.Config()
    trees = bm.make_trees(cfg, np.random.default_rng(1), 20)
    cal = bm.coverage(trees, trees["sigma"], cfg)
    mis = bm.coverage(trees, trees["miscal"], cfg)
    assert abs(cal - 0.9) < 0.01  # 20 x 5461 estimates: binomial sd ~ 0.001
    assert mis < 0.8
    # the permutation keeps the marginal of the reported std
    first_leaf = bm.n_nodes(cfg) - cfg.branching**cfg.depth
    np.testing.assert_allclose(np.sort(trees["miscal"][:, :first_leaf], 1), np.sort(trees["sigma"][:, :first_leaf], 1))


@pytest.mark.parametrize("variant", bm.VARIANTS)
def test_search_regret_is_valid_and_full_budget_resolves_small_trees(variant):
    cfg = bm.Config(**{**SMALL, "budget": 60, "checkpoints": (5, 60)})
    trees = bm.make_trees(cfg, np.random.default_rng(2), 6)
    knob = bm.knob_grid(cfg, variant)[1]
    out = bm.search(cfg, trees, variant, knob, np.random.default_rng(0))
    assert out["regret"].shape == (2, 6) and (out["regret"] >= -1e-12).all()
    assert 0 <= out["wasted"] <= 1 and 0 < out["expansions"] <= 13  # 1 + 3 + 9 internal nodes, minus the root
    assert out["nosearch"].shape == (6,)


def test_exhaustive_expansion_gives_zero_regret():
    """With every internal node expanded, the point-estimate max-backup is exact: UCT with a huge constant visits
    every node of a small tree within the budget, so its committed action is optimal."""
    cfg = bm.Config(**{**SMALL, "budget": 200, "checkpoints": (200,)})
    trees = bm.make_trees(cfg, np.random.default_rng(5), 6)
    out = bm.search(cfg, trees, "point_uct", 100.0, np.random.default_rng(0))
    assert out["expansions"] == 12 and np.allclose(out["regret"][-1], 0)


def test_stages_and_derive():
    cfg = bm.Config(**SMALL)
    data = bm.prepare(cfg, None)
    rows = []
    for v in bm.VARIANTS:
        model = bm.train(cfg, data, v, 0, None)
        m = bm.evaluate(cfg, model, data)
        assert set(m) >= {"regret", "coverage", "grid_edge", "val_regret", "regret_T4", "regret_T8"}
        rows.append({"paper": "bayes_mcts", "variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}})
    out = bm.derive(cfg, rows)
    best = [r for r in out if r["variant"] == bm.BEST_POINT]
    assert len(best) == 1
    vals = {r["variant"]: r["dense/val_regret"] for r in rows if r["variant"] in bm.POINT}
    assert best[0]["dense/val_regret"] == min(vals.values())


def test_config_checks():
    with pytest.raises(ConfigError):
        bm.Config(checkpoints=(10, 50))  # must end at budget
    with pytest.raises(ConfigError):
        bm.Config(kappa_grid=(1.0, 0.5, 2.0))
