"""SimPro (paperflow.papers.simpro): the EM pieces against values computed another way, data construction, the
best-baseline view, the claims rows and a tiny end-to-end run."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from paperflow.papers import simpro as sp
from paperflow.spec import ConfigError, Resources


# ---------------------------------------------------------------------------------------------- the math


def test_imb_counts_match_the_authors_profile():
    # make_imb_data(500, 10, 100): mu = 0.01^(1/9); int(500 mu^i), the last class int(500 / 100)
    assert sp.imb_counts(500, 100) == [500, 299, 179, 107, 64, 38, 23, 13, 8, 5]
    assert sp.imb_counts(3000, 1) == [3000] * 10
    cfg = sp.Config()
    assert sp.unlabelled_counts(cfg, "rev") == sp.unlabelled_counts(cfg, "con")[::-1]


def test_bayes_pseudo_labels_are_the_posterior_with_the_prior():
    torch.manual_seed(0)
    f = torch.randn(2, 5, 10)
    pi = torch.softmax(torch.randn(2, 10), -1)
    for tau in (1.0, 2.0):
        q, mask = sp.bayes_pseudo_labels(f, pi, tau, threshold=0.5)
        by_hand = torch.exp(f) * pi.unsqueeze(1) ** tau  # p(y|x) proportional to exp(f_y) pi_y^tau
        torch.testing.assert_close(q, by_hand / by_hand.sum(-1, keepdim=True), rtol=1e-5, atol=1e-6)
        assert torch.equal(mask, (q.max(-1).values >= 0.5).float())


def test_marginal_update_hand_example():
    pi_u, adapt = torch.full((1, 3), 1 / 3), torch.tensor([[0.5, 0.3, 0.2]])
    soft, lab = torch.tensor([[6.0, 2.0, 1.0]]), torch.tensor([[4.0, 2.0, 2.0]])
    new_u, new_a = sp.marginal_update(pi_u, adapt, soft, lab, ema=0.9)
    torch.testing.assert_close(new_u, 0.9 * pi_u + 0.1 * soft / 10.0)  # the code's / (sum + 1): does not sum to 1
    torch.testing.assert_close(new_a, 0.9 * adapt + 0.1 * torch.tensor([[10.0, 4.0, 3.0]]) / 17.0)
    assert float(new_u.sum()) < 1.0


def test_em_fixed_point_is_the_maximum_likelihood_prior():
    """The paper's closed-form M-step (pi = mean posterior under the Bayes classifier f + log pi) iterated from a uniform
    start converges to the maximiser of the unlabelled log-likelihood sum_j log sum_y pi_y p(x_j|y), found here by a
    generic optimiser over the simplex (softmax parameters)."""
    rng = np.random.default_rng(0)
    K, n = 4, 4000
    means = np.array([-3.0, -1.0, 1.0, 3.0])
    true_pi = np.array([0.05, 0.15, 0.3, 0.5])
    y = rng.choice(K, n, p=true_pi)
    x = rng.normal(means[y], 1.0)
    loglik = -0.5 * (x[:, None] - means[None, :]) ** 2  # log p(x|y) up to a constant: the balanced logits f
    f = torch.tensor(loglik, dtype=torch.float64).unsqueeze(0)
    pi = torch.full((1, K), 1.0 / K, dtype=torch.float64)
    for _ in range(500):
        q, _ = sp.bayes_pseudo_labels(f, pi, 1.0, threshold=0.0)
        pi = q.mean(1)  # closed form, no EMA, all samples (the paper's M-step)

    def nll(theta):
        logp = theta - np.logaddexp.reduce(theta)
        return -np.logaddexp.reduce(loglik + logp[None, :], axis=1).sum()

    theta = minimize(nll, np.zeros(K), method="BFGS").x
    mle = np.exp(theta - np.logaddexp.reduce(theta))
    np.testing.assert_allclose(pi[0].numpy(), mle, atol=2e-4)
    assert sp.tv(pi[0], torch.tensor(true_pi)) < 0.05  # and it is near the truth at this n


def test_distribution_alignment_hand_example():
    p = torch.tensor([[[0.6, 0.3, 0.1]]])
    out = sp.distribution_alignment(p, torch.tensor([[0.2, 0.3, 0.5]]), torch.tensor([[0.5, 0.3, 0.2]]))
    raw = torch.tensor([0.6 * 0.4, 0.3 * 1.0, 0.1 * 2.5])
    torch.testing.assert_close(out[0, 0], raw / raw.sum())


def test_tv_and_soft_ce():
    assert sp.tv(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])) == pytest.approx(1.0)
    assert sp.tv(torch.tensor([2.0, 2.0]), torch.tensor([0.5, 0.5])) == pytest.approx(0.0)
    logits, y = torch.randn(1, 6, 10), torch.randint(0, 10, (1, 6))
    torch.testing.assert_close(sp.soft_ce(logits, torch.nn.functional.one_hot(y, 10).float())[0],
                               torch.nn.functional.cross_entropy(logits[0], y[0], reduction="none"))


def test_stacked_forward_matches_one_model():
    gen = torch.Generator().manual_seed(0)
    params = sp.init_params(3, 8, gen)
    x = torch.rand(3, 5, 28, 28)
    rows = sp.to_input(x.reshape(-1, 28, 28)).view(3, 5, -1)
    out = sp.forward(params, rows)
    state = sp.slice_state(params, 1)
    xb = (x[1] * 255).round().to(torch.uint8)
    rows_u8 = sp.to_input(xb.float() / 255.0)
    ref = torch.relu(rows_u8 @ state["w1"] + state["b1"]) @ state["w2"] + state["b2"]
    torch.testing.assert_close(sp.logits_of(sp.Config(), state, xb), ref)
    torch.testing.assert_close(out[1], torch.relu(rows[1] @ state["w1"] + state["b1"]) @ state["w2"] + state["b2"],
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- selection, config


def test_best_baseline_is_chosen_on_validation():
    rows = [{"variant": v, "seed": s, "dense/acc_rev": 50.0 + s + i, "dense/val_acc_rev": vr, "dense/val_acc_con": vc,
             "dense/val_acc_uni": 60.0}
            for s in (0, 1) for i, (v, vr, vc) in enumerate([("simpro", 99, 99), ("simpro_fixed", 98, 98), ("fixmatch", 70, 80),
                                                            ("da", 75, 79)])]
    assert sp.best_baseline(rows, "rev") == "da" and sp.best_baseline(rows, "con") == "fixmatch"
    assert sp.best_baseline(rows, "uni") == "fixmatch"  # ties: BASELINES order
    out = sp.derive(sp.Config(), rows)
    best = [r for r in out if r["variant"] == "ref|best_rev"]
    da = {r["seed"]: r for r in rows if r["variant"] == "da"}
    assert [r["seed"] for r in best] == [0, 1] and all(r["dense/acc_rev"] == da[r["seed"]]["dense/acc_rev"] for r in best)
    assert sp.best_baseline([r for r in rows if r["variant"] != "da"], "rev") is None


def test_config_and_comparisons():
    with pytest.raises(ConfigError, match="tail class"):
        sp.Config(n_l_max=50, gamma_l=100)
    with pytest.raises(ConfigError, match="6000"):
        sp.Config(n_u_max=5800)
    with pytest.raises(ConfigError, match="multiple"):
        sp.Config(n_test=105)
    rows = sp.comparisons(sp.Config())
    assert [r.role for r in rows].count("headline") == 1
    head = rows[0]
    assert (head.method, head.baseline, head.metric) == ("simpro", "ref|best_rev", "acc_rev") and head.refuted_if
    gates = {(g.metric, g.above) for g in head.mechanism_gates}
    assert gates == {("pi_gain_rev", sp.PI_GAIN_MIN), ("pi_move_rev", sp.PI_MOVE_MIN)}
    ablation = [r for r in rows if r.baseline == "simpro_fixed" and r.role == "secondary"]
    assert len(ablation) == 1 and set(ablation[0].mechanism_gates) == set(head.mechanism_gates)


# ---------------------------------------------------------------------------------------------- end to end


def _resources(tmp_path):
    rng = np.random.default_rng(0)

    def images(labels):
        x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
        for i, y in enumerate(labels):
            x[i, 2 * y : 2 * y + 5, 3:9] = 250
        return x

    ytr, yte = np.repeat(np.arange(10), 200), np.repeat(np.arange(10), 20)
    np.savez(tmp_path / "f.npz", x_train=images(ytr), y_train=ytr, x_test=images(yte), y_test=yte)
    return Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})


def test_end_to_end_through_spec(tmp_path):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        spec = sp.SPEC
        section = {"n_l_max": 20, "gamma_l": 10.0, "n_u_max": 100, "gamma_u": 10.0, "n_val_per_class": 5, "n_test": 100,
                   "n_u_eval": 50, "steps": 6, "tune_steps": 4, "lr_grid": [0.001, 0.01], "batch_l": 8, "batch_u": 16,
                   "hidden": 16, "em_every": 2, "threshold": 0.3, "da_window": 3}
        cfg = spec.make_config(section)
        data = spec.prepare(cfg, _resources(tmp_path))
        assert data["y_l"].bincount(minlength=10).tolist() == sp.imb_counts(20, 10.0)
        assert data["y_u_rev"].bincount(minlength=10).tolist() == sp.imb_counts(100, 10.0)[::-1]
        assert data["y_u_uni"].bincount(minlength=10).tolist() == [100] * 10
        assert data["y_val"].bincount(minlength=10).tolist() == [5] * 10
        assert data["y_test"].bincount(minlength=10).tolist() == [10] * 10
        train_rows = {tuple(v.flatten().tolist()) for k in ("x_val", "x_l") for v in data[k]}
        assert not any(tuple(v.flatten().tolist()) in train_rows for s in sp.SETTINGS for v in data[f"x_u_{s}"])
        other = spec.prepare(spec.make_config({**section, "test_seed": 7}), _resources(tmp_path))
        assert torch.equal(other["x_u_rev"], data["x_u_rev"]) and not torch.equal(other["x_test"], data["x_test"])
        assert other["tuning"] == data["tuning"]  # tuning never reads the test draw
        rows = []
        for v in spec.variants:
            model = spec.train(cfg, data, v, 0, None)
            m = spec.evaluate(cfg, model, data)
            assert ("pi_gain_rev" in m) == ("pi_move_con" in m) == (v in sp.METHODS)
            assert {"acc_rev", "acc_few_con", "pl_acc_uni", "tv_pl_rev", "grid_edge_rev", "val_acc_con"} <= set(m)
            row = {"variant": v, "seed": 0, **{f"dense/{k}": x for k, x in m.items()}}
            for level, comp in spec.compress(cfg, model, data, v, 0).items():
                w = comp["states"]["rev"]["w1"]
                assert float((w == 0).float().mean()) >= float(level) - 0.05
                row.update({f"compressed:{level}/{k}": x for k, x in spec.evaluate(cfg, comp, data).items()})
            rows.append(row)
        out = spec.derive(cfg, rows)
        assert sum(r["variant"].startswith("ref|best_") for r in out) == 3
        # the ablation's priors never move; SimPro's do
        fixed = sp.fit(cfg, data, "simpro_fixed", ["rev"], [0.01], 0, 6, None)
        moved = sp.fit(cfg, data, "simpro", ["rev"], [0.01], 0, 6, None)
        torch.testing.assert_close(fixed["pi_u"], torch.full((1, 10), 0.1))
        torch.testing.assert_close(fixed["adapt"], data["pi_l"].float().unsqueeze(0))
        assert not torch.allclose(moved["adapt"], data["pi_l"].float().unsqueeze(0))
        # the code's rule (em_mask): with no confident pseudo-label the estimate is 0 / (0 + 1), so the EMA shrinks pi_u
        # geometrically (0.9 per update), and the training prior is re-estimated from the labelled counts alone
        code_rule = dataclasses.replace(cfg, em_mask=True, threshold=0.999999)
        run = sp.fit(code_rule, data, "simpro", ["rev"], [0.01], 0, 6, None)
        torch.testing.assert_close(run["pi_u"], torch.full((1, 10), 0.1 * 0.9**3))
        # the models of one stacked run are independent (their own inits), even at the same setting and lr
        two = sp.fit(cfg, data, "fixmatch", ["rev", "rev"], [0.01, 0.01], 0, 3, None)
        assert not torch.equal(two["states"][0]["w1"], two["states"][1]["w1"])  # independent inits
    finally:
        torch.set_num_threads(n)
