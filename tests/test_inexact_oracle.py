"""inexact_oracle: the transfer's answers are exact information of one convex minorant of f (brute-force checks of
the interpolation conditions), the adversarial oracle stays within delta and hurts where it should, the exact-oracle
solvers converge, the slope fit, and the spec/Config."""
from __future__ import annotations

import math

import numpy as np
import pytest

from paperflow.papers import inexact_oracle as io
from paperflow.spec import ConfigError


def _answers(cfg, problem, delta, n=60, seed=0):
    rng = np.random.default_rng(seed)
    raw = io.inexact_oracle(problem, delta, np.random.default_rng(seed + 1))
    transfer = io.Transfer(raw, delta, 2 * cfg.radius * math.sqrt(cfg.dim), cfg.dim, capacity=4)  # grows its buffers
    xs = rng.uniform(-cfg.radius, cfg.radius, (n, cfg.dim))
    return xs, [transfer(x) for x in xs], transfer


def test_transfer_answers_are_exact_information_of_one_convex_function():
    cfg = io.Config(dim=3, pieces=8)
    problem = io.make_problem(cfg, 0)
    delta = 1e-2
    xs, ans, transfer = _answers(cfg, problem, delta)
    v = np.array([a[0] for a in ans])
    g = np.array([a[1] for a in ans])
    # interpolation conditions of a convex function: v_j >= v_i + g_i . (x_j - x_i) for every pair (i, j)
    gap = v[None, :] - (v[:, None] + np.einsum("id,ijd->ij", g, xs[None] - xs[:, None]))
    assert gap.min() >= -1e-12
    # and each answer is the final h_T's value there (later pieces never rise above earlier answers)
    assert all(transfer.model(x)[0] == pytest.approx(vi, abs=1e-12) for x, vi in zip(xs, v))
    # h_T <= f on X (every piece a minorant), f - C <= h_T at the queried points, C = delta + T K
    ys = np.random.default_rng(3).uniform(-cfg.radius, cfg.radius, (500, cfg.dim))
    assert all(transfer.model(y)[0] <= io.value(problem, y) + 1e-12 for y in ys)
    C = io.guarantee(cfg, delta, len(xs))
    assert all(io.value(problem, x) - C <= vi for x, vi in zip(xs, v))


def test_raw_inexact_answers_violate_consistency():
    cfg = io.Config(dim=3, pieces=8)
    problem = io.make_problem(cfg, 0)
    rng = np.random.default_rng(0)
    raw = io.inexact_oracle(problem, 1e-2, np.random.default_rng(1))
    xs = rng.uniform(-1, 1, (60, 3))
    ans = [raw(x) for x in xs]
    v, g = np.array([a[0] for a in ans]), np.array([a[1] for a in ans])
    gap = v[None, :] - (v[:, None] + np.einsum("id,ijd->ij", g, xs[None] - xs[:, None]))
    assert gap.min() < -1e-4  # why the transfer is needed: no convex function has these answers
    f_vals = np.array([io.value(problem, x) for x in xs])
    assert np.abs(v - f_vals).max() <= 1e-2 and np.abs(np.linalg.norm(g - problem["a"][np.argmax(xs @ problem["a"].T + problem["b"], 1)], axis=1) - 1e-2).max() < 1e-12


def test_exact_transfer_is_the_identity_and_solvers_converge():
    cfg = io.Config(dim=3, pieces=10, ellipsoid_queries=400, kelley_queries=40)
    problem = io.make_problem(cfg, 1)
    x_lp = problem["x_star"]
    assert problem["f_star"] == pytest.approx(io.value(problem, x_lp))
    rng = np.random.default_rng(0)
    for x in rng.uniform(-1, 1, (20, 3)):  # the LP optimum is a lower bound of f on the box
        assert io.value(problem, x) >= problem["f_star"] - 1e-9
    for alg in io.ALGORITHMS:
        assert io.run_once(cfg, problem, "reduction", alg, 0.0, np.random.default_rng(0)) < 1e-8
        assert io.run_once(cfg, problem, "direct", alg, 0.0, np.random.default_rng(0)) < 1e-8
    # at delta = 0 the transfer answers exactly (f(x), a subgradient)
    t = io.Transfer(io.inexact_oracle(problem, 0.0, rng), 0.0, 1.0, 3)
    x = np.array([0.3, -0.2, 0.1])
    val, grad = t(x)
    assert val == pytest.approx(io.value(problem, x))
    np.testing.assert_allclose(grad, problem["a"][np.argmax(problem["a"] @ x + problem["b"])])


def test_ellipsoid_on_hand_problem():
    # f(x) = |x1 - 0.3| + |x2 + 0.5| on [-1, 1]^2 written as a max of 4 affine pieces: f* = 0 at (0.3, -0.5)
    a = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]], float)
    b = np.array([-0.3 + 0.5, -0.3 - 0.5, 0.3 + 0.5, 0.3 - 0.5])
    problem = {"a": a, "b": b, "f_star": 0.0}
    x = io.ellipsoid(io.inexact_oracle(problem, 0.0, np.random.default_rng(0)), 2, 1.0, 200)
    np.testing.assert_allclose(x, [0.3, -0.5], atol=1e-6)


def test_slope_fit_and_guarantee():
    d = np.array([1e-6, 1e-5, 1e-4])
    assert io.fit_slope(d, 3 * d) == pytest.approx(1.0)
    assert io.fit_slope(d, d ** 2) == pytest.approx(2.0)
    cfg = io.Config(dim=4, radius=0.5)  # D = 2 r sqrt(d) = 2
    assert io.guarantee(cfg, 0.1, 10) == pytest.approx(0.1 * (1 + 10 * 4))


def test_adversarial_oracle_is_a_delta_oracle_and_hand_case():
    cfg = io.Config(dim=3, pieces=8)
    problem = io.make_problem(cfg, 0)
    delta = 1e-3
    adv = io.adversarial_oracle(problem, delta)
    for x in np.random.default_rng(0).uniform(-1, 1, (200, 3)):
        v, g = adv(x)
        j = int(np.argmax(problem["a"] @ x + problem["b"]))
        assert abs(v - io.value(problem, x)) == pytest.approx(delta)  # every value lie uses the full budget
        assert np.linalg.norm(g - problem["a"][j]) == pytest.approx(delta)  # and so does every gradient tilt
    # hand case f(x) = |x| on [-1, 1], x* = 0, delta = 0.1: at x = 0.5 the value is lowered (0.5 - 0.1) and the
    # slope tilted towards x* (1 - 0.1); at x = 0.05 (f - f* < delta) the value is raised (0.15)
    hand = {"a": np.array([[1.0], [-1.0]]), "b": np.zeros(2), "f_star": 0.0, "x_star": np.zeros(1)}
    v, g = io.adversarial_oracle(hand, 0.1)(np.array([0.5]))
    assert v == pytest.approx(0.4) and g == pytest.approx([0.9])
    v, g = io.adversarial_oracle(hand, 0.1)(np.array([0.05]))
    assert v == pytest.approx(0.15) and g == pytest.approx([0.9])


def test_adversary_hurts_direct_use_and_the_transfer_keeps_its_bound():
    """The mechanism the headline's gate reads: under the adversary the direct ellipsoid's error grows ~ delta (it
    returns a point up to ~2 delta from optimal); with the transfer the error stays below the guarantee."""
    cfg = io.Config(ellipsoid_queries=300, kelley_queries=20)
    problem = io.make_problem(cfg, 0)
    for delta in (1e-6, 1e-4):
        direct = io.run_once(cfg, problem, "direct", "ellipsoid", delta, None)
        assert 0.5 * delta < direct <= 2 * delta + 1e-12
        for alg, T in (("ellipsoid", 300), ("kelley", 20)):
            assert io.run_once(cfg, problem, "reduction", alg, delta, None) <= io.guarantee(cfg, delta, T)
    # the v2 random oracle barely hurts direct use (the reason for the adversary)
    rnd = io.Config(ellipsoid_queries=300, oracle="random")
    adv = io.run_once(cfg, problem, "direct", "ellipsoid", 1e-6, None)
    assert io.run_once(rnd, problem, "direct", "ellipsoid", 1e-6, np.random.default_rng(0)) < 0.1 * adv


def test_config_and_spec_load():
    with pytest.raises(ConfigError, match="deltas"):
        io.Config(deltas=(1e-4, 1e-5))
    with pytest.raises(ConfigError, match="oracle"):
        io.Config(oracle="noisy")
    cfg = io.SPEC.make_config({"deltas": [1e-6, 1e-5], "ellipsoid_queries": 50, "kelley_queries": 5})
    rows = io.comparisons(cfg)
    heads = [r for r in rows if r.role == "headline"]
    assert len(heads) == 1 and heads[0].metric == "over_guarantee_ellipsoid" and heads[0].refuted_if
    assert heads[0].mechanism_gates[0].variant == "direct"
    assert all(r.role == "fact" for r in rows if r.metric.startswith("slope_"))  # slope 1 is construction, not a claim
    out = io.evaluate(cfg, io.train(cfg, io.prepare(cfg, None), "reduction", 0, lambda step, **m: None), None)
    assert {"slope_ellipsoid", "slope_kelley", "err_ellipsoid@1e-05", "floor_ratio_kelley", "logerr_kelley",
            "over_guarantee_kelley"} <= set(out)
    assert all(isinstance(v, float) for v in out.values())
