"""fedmlc_auc (ICML 2024): the square AUC surrogate's min-max form against the pairwise square loss (closed form over
a, b, alpha on a hand example), AUROC against a brute-force pair count, the compositional gradient (Hessian-vector
chain) against autograd through the composition, the federated loop's reductions (rho = 0 is CODA; one step against a
hand computation), and a tiny prepare -> train -> compress -> evaluate run."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from paperflow.papers import fedmlc_auc as P
from paperflow.spec import ConfigError


def test_square_auc_min_max_equals_pairwise_square_loss_on_a_hand_example():
    # 2 positives, 3 negatives: scores by hand
    h = torch.tensor([0.9, 0.4, 0.3, 0.6, 0.1], dtype=torch.float64)
    y = torch.tensor([1, 1, 0, 0, 0])
    p = 2 / 5
    # pairwise by hand: sum over (pos, neg) of (1 - (h+ - h-))^2, 6 pairs
    pairs = [(0.9, 0.3), (0.9, 0.6), (0.9, 0.1), (0.4, 0.3), (0.4, 0.6), (0.4, 0.1)]
    mean_sq = sum((1 - (a - b)) ** 2 for a, b in pairs) / 6
    expected = p * (1 - p) * mean_sq
    assert P.pairwise_square_auc(h, y) == pytest.approx(expected, abs=1e-12)
    value, sol = P.square_auc_closed_form(h, y)
    assert value == pytest.approx(expected, abs=1e-12)
    assert sol["a"] == pytest.approx(0.65) and sol["b"] == pytest.approx(1 / 3) and sol["alpha"] == pytest.approx(1 - (0.65 - 1 / 3))
    # the closed-form point is a saddle: zero gradient, convex in (a, b), concave in alpha
    a, b, al = (torch.tensor(sol[k], dtype=torch.float64, requires_grad=True) for k in ("a", "b", "alpha"))
    f = P.square_auc_loss(h.double(), y.double(), a, b, al, p)
    grads = torch.autograd.grad(f, (a, b, al))
    assert all(abs(float(g)) < 1e-12 for g in grads)
    for da, db, dal in itertools.product((-0.1, 0.1), (-0.1, 0.1), (-0.1, 0.1)):
        up = P.square_auc_loss(h.double(), y.double(), a.detach() + da, b.detach() + db, al.detach(), p)
        down = P.square_auc_loss(h.double(), y.double(), a.detach(), b.detach(), al.detach() + dal, p)
        assert float(up) > value > float(down)


def test_min_max_equals_pairwise_on_random_scores_and_margin():
    gen = torch.Generator().manual_seed(0)
    h = torch.rand(40, generator=gen)
    y = (torch.rand(40, generator=gen) < 0.2).long()
    y[0], y[1] = 1, 0
    for m in (1.0, 0.5):
        assert P.square_auc_closed_form(h, y, m)[0] == pytest.approx(P.pairwise_square_auc(h, y, m), abs=1e-10)


def test_auroc_against_brute_force_pair_count_with_ties():
    rng = np.random.RandomState(1)
    s = rng.randint(0, 6, size=60).astype(float)  # many ties
    y = (rng.rand(60) < 0.3).astype(int)
    pos, neg = s[y == 1], s[y == 0]
    brute = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg) / (len(pos) * len(neg))
    assert P.auroc(s, y) == pytest.approx(brute, abs=1e-12)
    assert P.auroc(np.array([0.1, 0.9, 0.2]), np.array([0, 1, 0])) == 1.0


@pytest.mark.parametrize("levels", [1, 2])
def test_compositional_gradient_equals_autograd_through_the_composition(levels):
    torch.manual_seed(0)
    C, K, H, D, B = 2, 3, 4, 5, 6
    w = {"W1": torch.randn(C, K, H, D), "b1": torch.randn(C, K, H), "w2": torch.randn(C, K, H), "b2": torch.randn(C, K)}
    w = {k: v.double().requires_grad_(True) for k, v in w.items()}
    x = torch.randn(K, B, D).double()
    y = (torch.rand(K, B) < 0.4).double()
    y[:, 0] = 1.0
    rho = torch.tensor([0.3, 0.7], dtype=torch.float64)
    a, b, al = torch.rand(C, K).double(), torch.rand(C, K).double(), torch.rand(C, K).double()
    alive = torch.ones(C, dtype=torch.bool)

    def outer(u):
        return P.square_auc_loss(torch.sigmoid(P.logits(u, x)), y, a, b, al, 0.3).sum()

    u, chain = P.inner_steps(w, x, y, alive, rho, levels, create_graph=True)
    reference = torch.autograd.grad(outer(u), [w[k] for k in P.MODEL_KEYS], retain_graph=True)
    u_det = {k: u[k].detach().requires_grad_(True) for k in P.MODEL_KEYS}
    v = dict(zip(P.MODEL_KEYS, torch.autograd.grad(outer(u_det), [u_det[k] for k in P.MODEL_KEYS])))
    ours = P.chain_vjp(chain, v, rho)
    for k, ref in zip(P.MODEL_KEYS, reference):
        torch.testing.assert_close(ours[k], ref, rtol=1e-9, atol=1e-10)
    # and it differs from the first-order composition (the Jacobian term is not negligible here)
    assert any(not torch.allclose(ours[k], v[k]) for k in P.MODEL_KEYS)


def _tiny_data(n=200, n_val=60, n_test=80, seed=0):
    gen = torch.Generator().manual_seed(seed)
    fine = torch.arange(n) % 10
    data = {"x_train": torch.randint(0, 255, (n, 28, 28), generator=gen, dtype=torch.uint8), "fine_train": fine,
            "y_train": (fine == 6).long(), "x_val": torch.randint(0, 255, (n_val, 28, 28), generator=gen, dtype=torch.uint8),
            "y_val": (torch.arange(n_val) % 10 == 6).long(),
            "x_test": torch.randint(0, 255, (n_test, 28, 28), generator=gen, dtype=torch.uint8),
            "y_test": (torch.arange(n_test) % 10 == 6).long()}
    return data


def _tiny_cfg(**kw):
    base = dict(n_train=200, n_val=60, clients=3, hidden=4, rounds=2, local_steps=3, batch=8, lrs=(0.03, 0.1, 0.3),
                dirichlet_alpha=5.0, log_every=2)
    base.update(kw)
    return P.Config(**base)


def test_rho_zero_is_coda_and_fo_equals_exact_at_rho_zero():
    cfg = _tiny_cfg(rho_ratio=0.0, inner_beta=1.0)
    data = _tiny_data()
    coda = P.fit(cfg, data, "coda_auc", cfg.lrs, seed=2)
    for variant in ("fedcomp_auc", "fedcomp_fo"):
        comp = P.fit(cfg, data, variant, cfg.lrs, seed=2)
        for k in coda["state"]:
            torch.testing.assert_close(comp["state"][k], coda["state"][k], rtol=1e-5, atol=1e-6)
    # batched lrs are independent runs: the middle lr alone gives the same model
    one = P.fit(cfg, data, "coda_auc", (cfg.lrs[1],), seed=2)
    for k in coda["state"]:
        torch.testing.assert_close(one["state"][k][0], coda["state"][k][1], rtol=1e-5, atol=1e-6)


def test_one_averaged_local_step_of_ce_is_one_weighted_fedavg_step():
    cfg = _tiny_cfg(rounds=1, local_steps=1, momentum=0.0)
    data = _tiny_data()
    out = P.fit(cfg, data, "fed_ce", (0.1,), seed=3)
    # rebuild the step by hand: same generator calls as fit
    gen = torch.Generator().manual_seed(10_007 * 3 + 3)
    parts, weights = P._clients(cfg, data, 3)
    init = P.init_mlp(cfg, gen)
    sizes = torch.tensor([len(p) for p in parts])
    pick = (torch.rand(cfg.clients, cfg.batch, generator=gen) * sizes[:, None]).long()
    new = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in init.items()}
    for k_, idx in enumerate(parts):
        sel = idx[pick[k_]]
        w = {k: v.clone().requires_grad_(True) for k, v in init.items()}
        z = P.logits(w, P.to_float(data["x_train"][sel]).flatten(1))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z, data["y_train"][sel].float())
        g = torch.autograd.grad(loss, list(w.values()))
        for (k, v), gk in zip(init.items(), g):
            new[k] += float(weights[k_]) * (v - 0.1 * gk).double()
    for k in P.MODEL_KEYS:
        torch.testing.assert_close(out["state"][k][0], new[k].float(), rtol=1e-5, atol=1e-6)


def test_heterogeneity_measures_on_the_partition():
    cfg = _tiny_cfg(dirichlet_alpha=0.1)
    h = P.heterogeneity(cfg, _tiny_data(), seed=0)
    assert h["train_pos_rate"] == pytest.approx(0.1)
    assert h["client_pos_dispersion"] > 0 and 0 <= h["clients_without_pos"] <= 1
    assert h["client_pos_rate_min"] <= h["train_pos_rate"] <= h["client_pos_rate_max"]


def test_config_spec_and_bad_values():
    cfg = P.Config()
    assert P.SPEC.id == "fedmlc_auc" and tuple(P.SPEC.variants) == P.VARIANTS
    rows = P.comparisons(cfg)
    assert sum(r.role == "headline" for r in rows) == 1
    for bad in (dict(pos_rate=0.2), dict(lrs=(0.3, 0.1)), dict(compare_level=0.3), dict(clients=1), dict(inner_beta=0.0)):
        with pytest.raises(ConfigError):
            P.Config(**bad)


def test_tiny_run_through_the_stages():
    cfg = _tiny_cfg()
    data = _tiny_data()
    data["tuning"] = P.tune_all(cfg, data)
    assert set(data["tuning"]) == set(P.VARIANTS)
    for variant in P.VARIANTS:
        model = P.train(cfg, data, variant, 0, None)
        levels = P.compress(cfg, model, data, variant, 0)
        assert set(levels) == {"0.50", "0.80"}
        assert abs(float((levels["0.80"]["state"]["W1"] == 0).float().mean()) - 0.8) < 0.01
        dense = P.evaluate(cfg, model, data)
        pruned = P.evaluate(cfg, levels["0.50"], data)
        assert 0 <= dense["auc"] <= 1 and math.isfinite(pruned["auc"])
        assert dense["inner_shift"] > 0 if variant.startswith("fedcomp") else dense["inner_shift"] == 0
        for key in ("train_pos_rate", "client_pos_dispersion", "acc_minus_auc", "grid_edge", "tuned_lr", "comm_per_round"):
            assert key in dense
