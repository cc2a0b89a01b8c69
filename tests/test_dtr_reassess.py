"""dtr_reassess: the core math against values computed another way (scipy's minimiser for CQL's per-state problem,
per-decision IS for DR with a zero value model, on-policy averages for WIS, Monte Carlo for the exact true value, a
hand count for Kendall tau and the baseline-win counts)."""
from __future__ import annotations

import numpy as np
import pytest

from paperflow.papers import dtr_reassess as d


@pytest.fixture(scope="module")
def icu(repo_resources) -> str:
    return str(repo_resources / "icu_sepsis.npz")


def test_cql_state_solve_matches_scipy():
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    alpha = 0.7
    pb = np.array([[0.5, 0.3, 0.2, 0.0], [0.1, 0.0, 0.0, 0.9]])
    y = rng.normal(size=pb.shape) * 3
    q = d.cql_state_solve(y, pb, alpha, steps=200)
    for row in range(2):
        seen = pb[row] > 0

        def obj(x):  # alpha logsumexp(q) - alpha pb.q + 1/2 sum pb (q - y)^2 over the seen actions
            return alpha * np.log(np.exp(x).sum()) - alpha * pb[row, seen] @ x + 0.5 * pb[row, seen] @ (x - y[row, seen]) ** 2

        ref = minimize(obj, y[row, seen], method="BFGS", options={"gtol": 1e-10}).x
        assert np.allclose(q[row, seen], ref, atol=1e-5)
        assert np.all(np.isneginf(q[row, ~seen]))
        # the paper's fixed point q_a = y_a - alpha (softmax(q)_a / pb_a - 1)
        sm = np.exp(q[row, seen]) / np.exp(q[row, seen]).sum()
        assert np.allclose(q[row, seen], y[row, seen] - alpha * (sm / pb[row, seen] - 1), atol=1e-6)


def _toy_cohort() -> dict:
    # two episodes: (s0, a0) -> s1 (a1) -> survival; (s0, a1) -> death
    c = {"ep": np.array([0, 0, 1]), "t": np.array([0, 1, 0]), "s": np.array([3, 5, 3]), "a": np.array([0, 2, 1]),
         "s2": np.array([5, d.SURVIVAL, d.DEATH]), "n": 2}
    return c


def test_dr_with_zero_q_is_per_decision_is_and_wis_hand_example():
    cfg = d.Config()
    c = _toy_cohort()
    rew = np.array([0.0, 1.0, -1.0])
    pi = np.full((d.S, d.A), 1.0 / d.A)
    pi[3] = 0.0
    pi[3, 0], pi[3, 1] = 0.8, 0.2
    pi[5] = 0.0
    pi[5, 2] = 1.0
    # behaviour by counts: state 3: a0 1/2, a1 1/2; state 5: a2 1
    rho = np.array([0.8 / 0.5, 1.0, 0.2 / 0.5])
    assert np.allclose(d.ratios(cfg, c, pi), rho)
    pdis = np.mean([rho[0] * rew[0] + cfg.gamma * rho[0] * rho[1] * rew[1], rho[2] * rew[2]])
    assert d.doubly_robust(cfg, c, rew, pi, np.zeros((d.S, d.A))) == pytest.approx(pdis)
    G = np.array([cfg.gamma * 1.0, -1.0])
    w = np.array([rho[0] * rho[1], rho[2]])
    est, ess = d.wis(cfg, c, rew, pi)
    assert est == pytest.approx((w * G).sum() / w.sum())
    assert ess == pytest.approx(w.sum() ** 2 / (w ** 2).sum())


def test_wis_of_the_estimated_behaviour_is_the_on_policy_mean(icu):
    cfg = d.Config()
    c = d.simulate(icu, 300, np.random.default_rng(1), cfg.max_len)
    _, r = d.true_mdp(icu, "outcome", cfg.gamma)
    rew = d.rewards(c, r)
    N = d.counts(c)
    pb = np.where(N.sum(1, keepdims=True) > 0, N / np.maximum(N.sum(1, keepdims=True), 1), 1.0 / d.A)
    G = np.bincount(c["ep"], weights=rew * cfg.gamma ** c["t"], minlength=c["n"])
    est, ess = d.wis(cfg, c, rew, pb)
    assert est == pytest.approx(G.mean())
    assert ess == pytest.approx(c["n"])


def test_exact_true_value_matches_monte_carlo_of_the_clinicians_policy(icu):
    cfg = d.Config()
    c = d.simulate(icu, 4000, np.random.default_rng(2), 200)
    for f in d.FORMULATIONS:
        _, r = d.true_mdp(icu, f, cfg.gamma)
        G = np.bincount(c["ep"], weights=d.rewards(c, r) * cfg.gamma ** c["t"], minlength=c["n"])
        exact = d.true_value(icu, f, cfg.gamma, d.load_icu_sepsis(icu)["beh"])
        assert abs(G.mean() - exact) < 4 * G.std() / np.sqrt(len(G))


def test_reward_matrix_sofa_terms(icu):
    sofa = d.load_icu_sepsis(icu)["sofa"]
    r = d.reward_matrix("sofa", sofa)
    i, j = 0, 1
    same = round(sofa[i]) == round(sofa[j]) and round(sofa[j]) > 0
    assert r[i, j] == pytest.approx(d.SOFA_C0 * same + d.SOFA_C1 * (sofa[j] - sofa[i]))
    assert r[i, d.SURVIVAL] == 15.0 and r[i, d.DEATH] == -15.0 and not r[d.DEATH:].any()
    ro = d.reward_matrix("outcome", sofa)
    assert ro[7, d.SURVIVAL] == 100.0 and ro[7, d.DEATH] == -100.0 and ro[:, : d.N_LIVE].sum() == 0


def test_bcq_with_tau_near_one_is_behaviour_cloning(icu):
    cfg = d.Config()
    c = d.simulate(icu, 400, np.random.default_rng(3), cfg.max_len)
    _, r = d.true_mdp(icu, "outcome", cfg.gamma)
    rew = d.rewards(c, r)
    N = d.counts(c)
    unique_top = (N > 0).any(1) & ((N == N.max(1, keepdims=True)).sum(1) == 1)
    bcq = d.fit_policy(cfg, c, rew, "bcq", 0.999, "outcome")
    bc = d.fit_policy(cfg, c, rew, "bc", 0.0, "outcome")
    assert np.array_equal(bcq[unique_top], bc[unique_top])


def test_kendall_and_derived_counts():
    assert d.kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0
    assert d.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert d.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6)
    cfg = d.Config()
    rows = []
    # truth: every RL policy beats both baselines; WIS: random beats everything; FQE and DR agree with the truth
    for v, tv in zip(d.VARIANTS, (3.0, 4.0, 5.0, 2.0, 1.0)):
        m = {}
        for f in d.FORMULATIONS:
            m.update({f"dense/true_{f}": tv, f"dense/fqe_{f}": tv, f"dense/dr_{f}": tv,
                      f"dense/wis_{f}": 10.0 if v == "random" else tv})
        rows.append({"paper": "dtr_reassess", "variant": v, "seed": 0, **m})
    views = {r["variant"]: r for r in d.derive(cfg, rows)[len(rows):]}
    assert views["ref|true"]["dense/baseline_wins"] == 0.0
    assert views["ref|wis"]["dense/baseline_wins"] == 6.0  # random above the 3 RL methods, 2 formulations
    assert views["ref|fqe"]["dense/baseline_wins"] == 0.0
    assert views["ref|ope_mean"]["dense/baseline_wins"] == pytest.approx(2.0)
    gap = np.mean([abs(b - r) / d.TERMINAL_REWARD[f] for f in d.FORMULATIONS for r in (3, 4, 5) for b in (2, 1)])
    assert views["ref|true"]["dense/true_gap"] == pytest.approx(gap)
    assert views["ref|far_tau"]["dense/kendall"] == cfg.far_tau
