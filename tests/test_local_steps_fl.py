"""local_steps_fl (ICML 2024): the synthetic feature-noise data model as generated, the CNN and the feature-learning
measure on hand-built filters, Local GD's averaging against closed forms (one step of full-batch GD, FedAvg),
the official feature-heterogeneity split, and a tiny prepare -> train -> compress -> evaluate run."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from paperflow.federated import local_gd, local_gd_batched
from paperflow.papers import local_steps_fl as P
from paperflow.spec import ConfigError


def test_data_model_as_generated():
    cfg = P.Config(n_per_client=30)
    syn = P.synthetic_data(cfg, seed=3)
    w = syn["world"]
    V, partners = w["V"], w["partners"]
    # features orthogonal with norm mu_norm; each client's feature-noise partner is another client
    torch.testing.assert_close(V @ V.T, cfg.mu_norm ** 2 * torch.eye(cfg.clients), atol=1e-4, rtol=0)
    assert all(int(p) != k for k, p in enumerate(partners))
    X, y = syn["train"]
    assert X.shape == (cfg.clients, 30, 2, cfg.dim) and set(y.unique().tolist()) <= {-1.0, 1.0}
    # signal patch is exactly y v_k; the noise patch's feature components are exactly -alpha y v_pi(k)
    torch.testing.assert_close(X[:, :, 0], y[..., None] * V[:, None, :])
    coef = X[:, :, 1] @ V.T / cfg.mu_norm ** 2  # (K, n, K) coordinates along each feature
    expect = torch.zeros_like(coef)
    for k in range(cfg.clients):
        expect[k, :, int(partners[k])] = -cfg.alpha * y[k]
    torch.testing.assert_close(coef, expect, atol=1e-4, rtol=0)
    # the Gaussian part has per-coordinate variance sigma_p^2 on the d - K dimensional complement
    resid = X[:, :, 1] - coef @ V
    var = float(resid.pow(2).sum(-1).mean()) / (cfg.dim - cfg.clients)
    assert abs(var - cfg.sigma_p ** 2) < 0.05
    # another seed is another draw (features, partners or noise)
    assert not torch.equal(P.synthetic_data(cfg, seed=4)["train"][0], X)


def test_cnn_and_feature_corr_on_hand_built_filters():
    d, q = 6, 3
    V = torch.eye(d)[:2] * 2.0  # two features of norm 2
    W = torch.zeros(2, 3, d)
    W[0, 0] = 0.5 * V[0] / 2  # positive filter along +v_0 with <w, v_0>/||v_0|| = 0.5
    W[0, 1] = 0.2 * V[1] / 2
    W[1, 2] = -0.7 * V[0] / 2  # negative filter along -v_0
    W[1, 0] = -0.1 * V[1] / 2
    corr = P.feature_corr(W, V)
    torch.testing.assert_close(corr, torch.tensor([min(0.5, 0.7), min(0.2, 0.1)]))
    # f(x) for x = [v_0, -v_1] by hand: F_+ = (1/3) relu(<w,v0>)^3, F_- = (1/3) relu(<w,-v1>)^3
    X = torch.stack([V[0], -V[1]])[None, None]  # (K=1, n=1, 2, d)
    Fp = (1.0 ** 3) / 3  # <W[0,0], v_0> = 0.5 * 2 = 1
    Fm = (0.2 ** 3) / 3  # <W[1,0], -v_1> = 0.1 * 2 = 0.2
    torch.testing.assert_close(P.cnn(W, X, q), torch.tensor([[Fp - Fm]]))


def test_one_local_step_averaged_equals_one_gd_step_closed_form():
    # logistic regression on K clients: averaging one local GD step from a common point is one GD step
    # along the mean gradient, whose closed form is -mean_k (1/n) sum_i sigmoid(-y w.x) y x
    gen = torch.Generator().manual_seed(0)
    K, n, d, lr = 3, 5, 4, 0.3
    X, y = torch.randn(K, n, d, generator=gen), torch.randint(0, 2, (K, n), generator=gen).float() * 2 - 1
    w0 = torch.randn(d, generator=gen)
    W = torch.nn.Parameter(w0.expand(K, d).clone())
    local_gd([W], lambda s: F.softplus(-y * torch.einsum("kd,knd->kn", W, X)).mean(1), steps=1, interval=1, lr=lr)
    grad = -(torch.sigmoid(-y * (X @ w0))[..., None] * y[..., None] * X).mean(1).mean(0)
    torch.testing.assert_close(W.data, (w0 - lr * grad).expand(K, d))
    # on identical clients, Local GD with any interval equals centralized GD (every copy sees the same data)
    Xs, ys = X[:1].expand(K, n, d), y[:1].expand(K, n)
    W1 = torch.nn.Parameter(w0.expand(K, d).clone())
    local_gd([W1], lambda s: F.softplus(-ys * torch.einsum("kd,knd->kn", W1, Xs)).mean(1), steps=4, interval=2, lr=lr)
    w = w0.clone()
    for _ in range(4):
        w = w + lr * (torch.sigmoid(-ys[0] * (Xs[0] @ w))[:, None] * ys[0][:, None] * Xs[0]).mean(0)
    torch.testing.assert_close(W1.data[0], w)


def test_config_spec_and_bad_values():
    cfg = P.Config()
    assert P.SPEC.id == "local_steps_fl" and P.SPEC.variants == P.VARIANTS
    rows = P.comparisons(cfg)
    assert sum(r.role == "headline" for r in rows) == 1
    with pytest.raises(ConfigError):
        P.Config(clients=1)
    with pytest.raises(ConfigError):
        P.Config(lrs=(0.3, 0.1))
    with pytest.raises(ConfigError):
        P.Config(compare_level=0.3)


def test_tiny_run_through_the_stages():
    cfg = P.Config(n_per_client=10, n_val_per_client=10, n_test_per_client=20, rounds=2, local_steps=3, lrs=(0.1, 0.3),
                   f_train=60, f_val=20, f_test=20, f_rounds=2, f_local_steps=2, f_lrs=(0.1,), dim=20, filters=3)
    gen = torch.Generator().manual_seed(0)
    data = {"x_train": torch.randint(0, 255, (60, 28, 28), generator=gen, dtype=torch.uint8),
            "fine_train": torch.arange(60) % 10, "x_val": torch.randint(0, 255, (20, 28, 28), generator=gen, dtype=torch.uint8),
            "x_test": torch.randint(0, 255, (20, 28, 28), generator=gen, dtype=torch.uint8)}
    data.update(y_train=data["fine_train"] % 2, y_val=torch.arange(20) % 2, y_test=torch.arange(20) % 2,
                tuning={a: {"tuned_lr": 0.1, "grid_edge": 1.0} for a in P.ALGS["fashion"]})
    rows = []
    for variant in P.VARIANTS:
        model = P.train(cfg, data, variant, 0, None)
        levels = P.compress(cfg, model, data, variant, 0)
        assert set(levels) == {"0.50", "0.80"}
        dense = P.evaluate(cfg, model, data)
        pruned = P.evaluate(cfg, levels["0.80"], data)
        for alg in P.ALGS[variant]:
            assert 0 <= dense[f"acc__{alg}"] <= 100 and math.isfinite(pruned[f"acc__{alg}"])
        if variant == "synthetic":  # equal gradient evaluations across algorithms
            assert len({dense[f"grad_evals__{a}"] for a in P.ALGS[variant]}) == 1
            W = levels["0.80"]["models"]["local_gd"]
            assert abs(float((W == 0).float().mean()) - 0.8) < 0.01
        rows.append({"paper": "local_steps_fl", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}})
    views = {r["variant"]: r for r in P.derive(cfg, rows)}
    assert views["synthetic|local_gd"]["dense/acc"] == rows[0]["dense/acc__local_gd"]
    hits = torch.bincount(P.world(cfg, 0)["partners"], minlength=cfg.clients)  # data property shared by the views
    assert views["synthetic|parallel_gd"]["dense/cancelled_feature"] == float(int(hits.max()) * cfg.alpha ** cfg.power >= 1)
    assert views["synthetic|local_gd"]["dense/cancel_margin"] == pytest.approx(int(hits.max()) * cfg.alpha ** cfg.power)
    assert "dense/grid_edge" in views["fashion|parallel_sgd"]


def test_cancel_margin_is_hits_times_alpha_to_the_q():
    cfg = P.Config(alpha=0.8, power=3)
    partners = torch.tensor([1, 0, 1, 1])  # feature 1 in 3 clients' noise, feature 0 in 1, features 2 and 3 in none
    torch.testing.assert_close(P.cancel_margin(cfg, partners), torch.tensor([0.512, 1.536, 0.0, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("alpha,q", [(0.8, 3), (0.6, 3), (0.9, 2)])
def test_global_update_drift_on_a_feature_is_one_minus_hits_alpha_q(alpha, q):
    """The derivation behind cancel_margin, on a hand-built case (no Gaussian noise, tiny filters so that every
    -l' = sigmoid(-y f) is 1/2): the averaged (global) gradient along v_1 of a +1 filter with gamma = <w, v_1>/|v_1| > 0
    is (1 - hits_1 alpha^q) times client 1's own, where hits_1 = 2 (clients 0 and 2 carry -alpha y v_1 noise)."""
    mu, eps, d = 4.0, 1e-3, 6
    V = torch.eye(d)[:3] * mu
    partners = [1, 0, 1]
    y = torch.tensor([[1.0, -1.0]] * 3)
    X = torch.zeros(3, 2, 2, d)
    for k in range(3):
        for i in range(2):
            X[k, i, 0] = y[k, i] * V[k]
            X[k, i, 1] = -alpha * y[k, i] * V[partners[k]]
    W = torch.zeros(3, 2, 1, d)  # K copies, classes, m = 1 filter
    W[:, 0, 0] = eps * V[1] / mu  # +1 filter along v_1, gamma = eps; the -1 filter is 0
    W.requires_grad_(True)
    g = torch.autograd.grad(P.client_losses(W, X, y, q).sum(), W)[0]  # (K, 2, 1, d): each client's own gradient
    along = -g[:, 0, 0] @ (V[1] / mu)  # GD's change of gamma per client (descent direction)
    assert float(along[1]) > 0 and float(along[0]) < 0 and float(along[2]) < 0
    ratio = float(along.sum() / along[1])  # global update = mean over clients; relative to client 1's growth
    margin = P.cancel_margin(P.Config(clients=3, alpha=alpha, power=q), torch.tensor(partners))[1]
    assert ratio == pytest.approx(1 - float(margin), rel=1e-4)


def test_noisiest_rel_corr_on_hand_built_filters_with_tied_noisiest_features():
    cfg = P.Config(clients=4, dim=12, n_per_client=4, n_val_per_client=4, n_test_per_client=4, filters=4)
    syn = P.synthetic_data(cfg, seed=0)
    V, partners = syn["world"]["V"], syn["world"]["partners"]
    c = torch.tensor([1.0, 0.5, 0.25, 0.8])  # feature k's correlation in both classes
    unit = V / V.norm(dim=1, keepdim=True)
    W = torch.stack([c[:, None] * unit, -c[:, None] * unit])  # (2, m=4, d): filter r along +-v_r
    torch.testing.assert_close(P.feature_corr(W, V), c)
    model = {"variant": "synthetic", "seed": 0, "models": {a: W for a in P.ALGS["synthetic"]},
             "tuning": {a: {"tuned_lr": 0.1, "grid_edge": 0.0} for a in P.ALGS["synthetic"]}}
    m = P.evaluate(cfg, model, None)
    hits = torch.bincount(partners, minlength=4)
    top = hits == hits.max()
    assert m["noisiest_rel_corr__local_gd"] == pytest.approx(float(c[top].mean()) / 1.0)
    assert m["min_rel_corr__parallel_gd"] == pytest.approx(0.25)


def test_batched_local_gd_is_local_gd_per_run():
    gen = torch.Generator().manual_seed(1)
    K, n, d = 3, 5, 4
    X, y = torch.randn(K, n, d, generator=gen), torch.randint(0, 2, (K, n), generator=gen).float() * 2 - 1
    w0 = torch.randn(d, generator=gen)
    runs = [(1, 0.1), (3, 0.3), (8, 0.2), (2, 1e6)]  # (interval, lr); the last diverges
    loss = lambda W: F.softplus(-y * torch.einsum("ckd,knd->ckn", W, X)).pow(3).mean(-1)  # noqa: E731
    Wb, diverged = local_gd_batched(w0.expand(len(runs), K, d), loss, steps=8, intervals=[i for i, _ in runs], lrs=[lr for _, lr in runs])
    assert diverged.tolist() == [False, False, False, True] and torch.isnan(Wb[3]).all()
    for c, (interval, lr) in enumerate(runs[:3]):
        W = torch.nn.Parameter(w0.expand(K, d).clone())
        local_gd([W], lambda s: F.softplus(-y * torch.einsum("kd,knd->kn", W, X)).pow(3).mean(1), steps=8, interval=interval, lr=lr)
        torch.testing.assert_close(Wb[c], W.data[0], rtol=1e-5, atol=1e-6)
