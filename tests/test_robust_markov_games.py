"""robust_markov_games: the core math against independent computations."""
import numpy as np

from paperflow.papers import robust_markov_games as M


def _l1_ball_min_by_lp(c, radius):
    """min c.u over ||u||_1 <= radius by an LP in (u+, u-), independent of vertex enumeration and of norms."""
    from scipy.optimize import linprog

    k = len(c)
    res = linprog(np.concatenate([c, -c]), A_ub=np.ones((1, 2 * k)), b_ub=[radius], bounds=[(0, None)] * (2 * k),
                  method="highs")
    return res.fun


def test_worst_case_by_vertices_matches_lp_and_dual_norm():
    rng = np.random.default_rng(0)
    R = rng.uniform(-1, 1, (4, 3))
    x, y = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(3))
    direct = M.worst_case_payoff(R, x, y, 0.3, 0.2)
    by_lp = x @ R @ y + _l1_ball_min_by_lp(x, 0.3) + _l1_ball_min_by_lp(y, 0.2)
    closed = x @ R @ y - 0.3 * x.max() - 0.2 * y.max()
    assert np.isclose(direct, by_lp, atol=1e-9) and np.isclose(direct, closed, atol=1e-12)


def test_regularized_lp_value_vs_grid_search_on_2x2():
    R = np.array([[0.8, -0.4], [-0.6, 0.5]])
    a1, a2 = 0.3, 0.2
    x_star, v = M.regularized_maxmin(R, a1, a2)
    grid = np.linspace(0, 1, 2001)
    X = np.stack([grid, 1 - grid], 1)
    # f(x, y) = x^T R y - a1 ||x||_inf + a2 ||y||_inf, max over x of min over y (grid on both)
    F = X @ R @ X.T - a1 * X.max(1)[:, None] + a2 * X.max(1)[None, :]
    assert abs(F.min(1).max() - v) < 1e-3
    sol = M.solve_equivalence(R, a1, a2)
    assert np.isclose(sol["value"], sol["value_check"], atol=1e-7)  # minimax theorem: both LPs give one value


def test_equivalence_gives_a_robust_ne_and_the_nominal_ne_does_not():
    rng = np.random.default_rng(1)
    radii = (0.3, 0.2, 0.3, 0.2)
    for _ in range(3):
        R = rng.uniform(-1, 1, (5, 4))
        sol = M.solve_equivalence(R, radii[0], radii[2])
        assert M.robust_gap(R, sol["x"], sol["y"], radii) < 1e-7
        nom = M.nominal_ne(R)
        assert M.robust_gap(R, nom["x"], nom["y"], radii) > 1e-4


def test_linf_ball_is_a_constant_shift_and_exponent_fit():
    rng = np.random.default_rng(2)
    R = rng.uniform(-1, 1, (4, 4))
    nom, li = M.nominal_ne(R), M.solve_equivalence(R, 0.3, 0.1, q="1")
    assert np.isclose(li["value"], nom["value"] - 0.3 + 0.1)
    sizes = [8, 16, 32, 64]
    assert np.isclose(M.fitted_exponent(sizes, [3e-4 * s ** 2.7 for s in sizes]), 2.7)


def test_fictitious_play_baseline_converges_slowly():
    rng = np.random.default_rng(3)
    R = rng.uniform(-1, 1, (4, 4))
    radii = (0.3, 0.2, 0.3, 0.2)
    out = M.direct_br_iteration(R, radii, 60)
    g_half = M.robust_gap(R, out["x_half"], out["y_half"], radii)
    g_end = M.robust_gap(R, out["x"], out["y"], radii)
    assert g_end < 0.2 and g_end <= g_half + 1e-9
