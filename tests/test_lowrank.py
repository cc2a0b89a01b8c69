"""paperflow.compress.lowrank: factorized layers (W = U V), the conv matrix view, truncated SVD (Eckart-Young)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from paperflow.compress import lowrank as L


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def test_lowrank_linear_has_r_times_m_plus_n_weights_and_is_u_at_v():
    m_out, n_in, r = 7, 11, 3
    layer = L.LowRankLinear(n_in, m_out, r)
    assert layer.u.weight.numel() + layer.v.weight.numel() == r * (m_out + n_in)
    assert sum(p.numel() for p in layer.parameters()) == r * (m_out + n_in) + m_out  # + the output bias
    x = torch.randn(5, n_in, generator=_g())
    W = layer.u.weight @ layer.v.weight  # (m, n) = U V
    torch.testing.assert_close(layer(x), x @ W.T + layer.u.bias)
    torch.testing.assert_close(L.weight_of_factors(layer.u.weight, layer.v.weight), W)
    assert torch.linalg.matrix_rank(W.detach()) == r


@pytest.mark.parametrize("stride", [1, 2])
def test_lowrank_conv_is_the_conv_of_u_at_v(stride):
    c_in, c_out, r = 4, 6, 2
    layer = L.LowRankConv(c_in, c_out, r, stride=stride)
    # matrix view (3 out) x (3 in): r * (m + n) weights
    assert layer.u.weight.numel() + layer.v.weight.numel() == r * (3 * c_out + 3 * c_in)
    x = torch.randn(2, c_in, 9, 9, generator=_g(1))
    W = L.conv_from_factors(layer.u.weight, layer.v.weight)  # (out, in, 3, 3)
    assert W.shape == (c_out, c_in, 3, 3)
    torch.testing.assert_close(layer(x), F.conv2d(x, W, layer.u.bias, stride=stride, padding=1), rtol=1e-5, atol=1e-5)
    assert torch.linalg.matrix_rank(L.conv_matrix(W).detach()) == r


def test_svd_factors_are_exact_for_low_rank_and_optimal_truncation():
    g = _g(2)
    W = torch.randn(6, 2, generator=g) @ torch.randn(2, 5, generator=g)  # rank 2
    A, B = L.svd_factors(W, 2)
    torch.testing.assert_close(A @ B, W, rtol=1e-5, atol=1e-5)
    kernel = torch.randn(5, 3, 3, 3, generator=g)
    u_w, v_w = L.factors_of_conv(kernel, 2)
    approx = L.conv_matrix(L.conv_from_factors(u_w, v_w))
    S = torch.linalg.svdvals(L.conv_matrix(kernel))
    # Eckart-Young: the error of the best rank-2 approximation is sqrt(sum of the dropped s_i^2)
    assert float(torch.linalg.norm(L.conv_matrix(kernel) - approx)) == pytest.approx(float(S[2:].pow(2).sum().sqrt()), rel=1e-4)
    u_pad, v_pad = L.factors_of_conv(kernel, 12)  # rank > min(15, 9): zero-padded, exact
    torch.testing.assert_close(L.conv_from_factors(u_pad, v_pad), kernel, rtol=1e-4, atol=1e-5)


def test_truncate_weight_shapes_fit_the_layers_and_rank_rule():
    g = _g(3)
    lin = L.LowRankLinear(8, 5, 2)
    u, v = L.truncate_weight(torch.randn(5, 8, generator=g), 2)
    assert u.shape == lin.u.weight.shape and v.shape == lin.v.weight.shape
    conv = L.LowRankConv(3, 4, 2)
    u, v = L.truncate_weight(torch.randn(4, 3, 3, 3, generator=g), 2)
    assert u.shape == conv.u.weight.shape and v.shape == conv.v.weight.shape
    with pytest.raises(ValueError, match="2-D or 4-D"):
        L.truncate_weight(torch.randn(3), 1)
    assert L.rank_of(0.25, 32) == 8 and L.rank_of(0.01, 10) == 1
