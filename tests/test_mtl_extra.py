"""paperflow.mtl additions: ExcessMTL, DWA, GroupDRO (stateful combiners), Nash-MTL, and the BayesAgg-MTL math
(Laplace posterior of a softmax head, Monte-Carlo gradient moments, precision-weighted aggregation)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow import mtl


def _G(K=2, P=6, seed=0):
    return torch.randn(K, P, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- ExcessMTL


def test_excessmtl_hand_example():
    eta = 0.5
    comb = mtl.make_combiner("excessmtl", step_size=eta)
    G1 = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    d1 = comb(G1, torch.zeros(2))
    # first step: a = g^2, w_k = sum g^2 / sqrt(g^2 + 1e-7) ~ |g|_1 -> (2, 1); weights stay 1
    np.testing.assert_allclose(comb.first.numpy(), [4 / math.sqrt(4 + 1e-7), 1 / math.sqrt(1 + 1e-7)], rtol=1e-12)
    torch.testing.assert_close(d1, G1.sum(0))
    G2 = torch.tensor([[1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    d2 = comb(G2, torch.zeros(2))
    w2 = np.array([1 / math.sqrt(5 + 1e-7), 9 / math.sqrt(10 + 1e-7)])  # accumulators 4+1, 1+9
    ratio = w2 / comb.first.numpy()
    lam = np.exp(eta * ratio)
    lam = 2 * lam / lam.sum()
    np.testing.assert_allclose(comb.weights.numpy(), lam, rtol=1e-12)
    torch.testing.assert_close(d2, torch.as_tensor(lam) @ G2)
    assert comb.weights[1] > comb.weights[0]  # task b is further from convergence: more weight


def test_excessmtl_weights_compound_and_sum_to_k():
    comb = mtl.make_excessmtl(step_size=0.1)
    for s in range(5):
        comb(_G(K=3, seed=s), torch.zeros(3))
    assert float(comb.weights.sum()) == pytest.approx(3.0) and bool((comb.weights > 0).all())


# ---------------------------------------------------------------------------------------------- DWA, GroupDRO


def test_dwa_weights_closed_form_over_epochs():
    T = 2.0
    comb = mtl.make_combiner("dwa", period=2, temperature=T)
    G = _G()
    epoch_losses = [[2.0, 1.0], [1.0, 0.9], [0.5, 0.8]]
    weights = []
    for e, (la, lb) in enumerate(epoch_losses):
        for jitter in (-0.1, 0.1):  # two steps per epoch; the epoch mean is (la, lb)
            d = comb(G, torch.tensor([la + jitter, lb - jitter], dtype=torch.float64))
            weights.append(comb.last_weights.copy())
    np.testing.assert_allclose(weights[:4], np.ones((4, 2)))  # epochs 0 and 1: weights 1
    r = np.array([1.0 / 2.0, 0.9 / 1.0])
    expected = 2 * np.exp(r / T) / np.exp(r / T).sum()
    np.testing.assert_allclose(weights[4], expected, rtol=1e-12)
    np.testing.assert_allclose(weights[5], expected, rtol=1e-12)
    torch.testing.assert_close(d, torch.as_tensor(expected) @ G)
    np.testing.assert_allclose(mtl.dwa_weights([1.0, 1.0], [1.0, 1.0], T), [1.0, 1.0])


def test_groupdro_exponentiated_gradient_on_losses():
    eta = 0.3
    comb = mtl.make_combiner("groupdro", step_size=eta)
    G = _G()
    L1, L2 = np.array([1.0, 2.0]), np.array([0.5, 3.0])
    comb(G, torch.as_tensor(L1))
    d = comb(G, torch.as_tensor(L2))
    lam = np.exp(eta * (L1 + L2))  # the product of the updates; renormalisation does not change ratios
    lam = 2 * lam / lam.sum()
    np.testing.assert_allclose(comb.weights.numpy(), lam, rtol=1e-12)
    torch.testing.assert_close(d, torch.as_tensor(lam) @ G)


# ---------------------------------------------------------------------------------------------- Nash-MTL


@pytest.mark.parametrize("K,seed", [(2, 0), (3, 1), (4, 2)])
def test_nashmtl_weights_satisfy_bargaining_condition(K, seed):
    G = _G(K=K, P=20, seed=seed)
    A = mtl.gram(G)
    alpha = mtl.nashmtl_weights(A)
    assert np.all(alpha > 0)
    An = A / np.linalg.norm(A)
    np.testing.assert_allclose(An @ alpha, 1.0 / alpha, rtol=1e-6)  # official normalised condition
    w = alpha / math.sqrt(np.linalg.norm(A))
    np.testing.assert_allclose(A @ w, 1.0 / w, rtol=1e-6)  # (G G^T w)_k = 1 / w_k on the raw Gram matrix


def test_nashmtl_orthogonal_closed_form_and_clip():
    G = torch.diag(torch.tensor([1.0, 2.0], dtype=torch.float64))  # A = diag(1, 4), ||A||_F = sqrt(17)
    alpha = mtl.nashmtl_weights(mtl.gram(G))
    n = math.sqrt(17.0)
    np.testing.assert_allclose(alpha, [math.sqrt(n / 1.0), math.sqrt(n / 4.0)], rtol=1e-6)  # a_k^2 A_kk / n = 1
    d = mtl.make_nashmtl(max_norm=0.0)(G, torch.zeros(2))
    torch.testing.assert_close(d, torch.as_tensor(alpha) @ G)
    clipped = mtl.make_combiner("nashmtl")(G, torch.zeros(2))
    assert float(clipped.norm()) == pytest.approx(1.0, rel=1e-5)


# ---------------------------------------------------------------------------------------------- BayesAgg


def _head_problem(B=12, D=4, C=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(B, D, generator=g, dtype=torch.float64)
    y = torch.randint(0, C, (B,), generator=g)
    theta = 0.5 * torch.randn(C, D + 1, generator=g, dtype=torch.float64)
    return h, y, theta


def _sum_ce(theta_flat, h, y, C):
    th = theta_flat.view(C, -1)
    return F.cross_entropy(h @ th[:, :-1].T + th[:, -1], y, reduction="sum")


def test_ggn_equals_exact_hessian_of_softmax_head():
    h, y, theta = _head_problem()
    C = theta.shape[0]
    probs = torch.softmax(h @ theta[:, :-1].T + theta[:, -1], 1)
    H = torch.autograd.functional.hessian(lambda t: _sum_ce(t, h, y, C), theta.reshape(-1))
    torch.testing.assert_close(mtl.ggn_multiclass(h, probs), H)  # logits are linear in theta: GGN = Hessian


def test_laplace_posterior_is_one_newton_step():
    h, y, theta = _head_problem(seed=1)
    C, n = theta.shape[0], theta.numel()
    mu0 = 0.1 * torch.ones(n, dtype=torch.float64)
    prec0 = 2.0 * torch.eye(n, dtype=torch.float64)

    def objective(t):
        return _sum_ce(t, h, y, C) + 0.5 * (t - mu0) @ prec0 @ (t - mu0)

    flat = theta.reshape(-1)
    grad = torch.autograd.functional.jacobian(objective, flat)
    hess = torch.autograd.functional.hessian(objective, flat)
    mean, L = mtl.laplace_multiclass_posterior(h, y, theta, mu0, prec0)
    torch.testing.assert_close(L @ L.T, hess)
    torch.testing.assert_close(mean, flat - torch.linalg.solve(hess, grad))


def test_precision_sampler_covariance():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    L = torch.linalg.cholesky(A)
    s = mtl.sample_gaussian_precision(torch.tensor([1.0, -2.0], dtype=torch.float64), L, 200000, torch.Generator().manual_seed(0))
    np.testing.assert_allclose(s.mean(0).numpy(), [1.0, -2.0], atol=0.01)
    np.testing.assert_allclose(torch.cov(s.T).numpy(), torch.linalg.inv(A).numpy(), atol=0.005)


def test_mc_gradient_moments_match_autograd_on_the_same_samples():
    h, y, theta = _head_problem(B=5, D=3, C=4, seed=2)
    C, D = theta.shape[0], h.shape[1]
    mean = theta.reshape(-1)
    L = torch.linalg.cholesky(10.0 * torch.eye(mean.numel(), dtype=torch.float64))
    S = 50
    mu, var = mtl.mc_grad_moments_multiclass(h, y, mean, L, S, torch.Generator().manual_seed(3))
    samples = mtl.sample_gaussian_precision(mean, L, S, torch.Generator().manual_seed(3))
    grads = []
    for t in samples:  # per-example gradient of the (summed) cross-entropy w.r.t. h, by autograd
        hh = h.clone().requires_grad_()
        (g,) = torch.autograd.grad(_sum_ce(t, hh, y, C), hh)
        grads.append(g)
    grads = torch.stack(grads)  # (S, B, D)
    torch.testing.assert_close(mu, grads.mean(0))
    torch.testing.assert_close(var, grads.var(0, unbiased=False))
    assert mu.shape == (5, D)


def test_bayesagg_aggregate_hand_example():
    means = torch.tensor([[[1.0, 4.0]], [[3.0, 0.0]]])  # (K=2, B=1, D=2)
    variances = torch.tensor([[[1.0, 1.0]], [[1.0, 4.0]]])
    out = mtl.bayesagg_aggregate(means, variances, sqrt_power=1.0)
    torch.testing.assert_close(out, torch.tensor([[2.0, (4.0 * 1.0 + 0.0 * 0.25) / 1.25]]))
    out_half = mtl.bayesagg_aggregate(means, variances, sqrt_power=0.5)  # precisions 1 and 1/2 on dimension 2
    torch.testing.assert_close(out_half[0, 1], torch.tensor(4.0 / 1.5))
    two = mtl.bayesagg_aggregate(means.repeat(1, 2, 1), variances.repeat(1, 2, 1), 1.0)
    torch.testing.assert_close(two, out.repeat(2, 1) / 2)  # divided by the batch size
