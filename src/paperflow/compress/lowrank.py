"""Low-rank factorized layers and truncated SVD (DESIGN.md "Shared efficiency tooling").

A factorized layer stores W = U V with rank r and never forms W:
  LowRankLinear(in, out, r):  v = Linear(in, r, bias=False), u = Linear(r, out): r (in + out) weights;
  LowRankConv(in, out, r):    a k x k kernel W (out, in, k, k) viewed as the matrix
                              M[(o, kh), (i, kw)] of shape (k out, k in), M = U V with
                              v = (1 x k) conv in -> r (no bias), u = (k x 1) conv r -> out (bias):
                              r k (in + out) weights instead of k^2 in out
                              (FedLMT's official model/resnetv1.py::FactorizedConv and its `recover`;
                              the stride s is split as (1, s) on v and (s, 1) on u).
Truncation: `svd_factors(M, r)` gives the best rank-r approximation (Eckart-Young) as A = U_r sqrt(S_r),
B = sqrt(S_r) V_r^T (the official `decom`), zero-padded when r exceeds min(M.shape) (then exact);
`truncate_weight` does the same for a linear (2-D) or conv (4-D) weight in the matrix view above.
"""
from __future__ import annotations

import torch
import torch.nn as nn


class LowRankLinear(nn.Module):
    """Linear with W = U V: v = Linear(in, r, bias=False), u = Linear(r, out)."""

    def __init__(self, d_in: int, d_out: int, rank: int):
        super().__init__()
        self.v = nn.Linear(d_in, rank, bias=False)
        self.u = nn.Linear(rank, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.u(self.v(x))


class LowRankConv(nn.Module):
    """k x k conv (padding k // 2) with W = U V in the matrix view M[(o, kh), (i, kw)]:
    v: (1 x k) conv in -> r, stride (1, s), no bias;  u: (k x 1) conv r -> out, stride (s, 1), bias."""

    def __init__(self, c_in: int, c_out: int, rank: int, stride: int = 1, kernel: int = 3):
        super().__init__()
        p = kernel // 2
        self.v = nn.Conv2d(c_in, rank, (1, kernel), stride=(1, stride), padding=(0, p), bias=False)
        self.u = nn.Conv2d(rank, c_out, (kernel, 1), stride=(stride, 1), padding=(p, 0), bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.u(self.v(x))


def rank_of(ratio: float, out: int) -> int:
    """FedLMT's rank rule: round(ratio * out), at least 1."""
    return max(1, int(round(ratio * out)))


def conv_matrix(weight: torch.Tensor) -> torch.Tensor:
    """(out, in, kh, kw) -> M (kh out, kw in), M[(o, kh), (i, kw)] = W[o, i, kh, kw]."""
    o, i, kh, kw = weight.shape
    return weight.permute(0, 2, 1, 3).reshape(o * kh, i * kw)


def conv_from_factors(u_w: torch.Tensor, v_w: torch.Tensor) -> torch.Tensor:
    """The full (out, in, kh, kw) kernel of a LowRankConv from u_w (out, r, kh, 1), v_w (r, in, 1, kw)."""
    out, r, kh, _ = u_w.shape
    _, c_in, _, kw = v_w.shape
    U = u_w.permute(0, 2, 1, 3).reshape(out * kh, r)
    V = v_w.reshape(r, c_in * kw)
    return (U @ V).reshape(out, kh, c_in, kw).permute(0, 2, 1, 3)


def svd_factors(M: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """M ~ A B, A = U_r sqrt(S_r) (m, r), B = sqrt(S_r) V_r^T (r, n); computed in float64, zero-padded
    when rank > min(M.shape)."""
    U, S, Vh = torch.linalg.svd(M.double(), full_matrices=False)
    k = min(rank, S.numel())
    s = S[:k].sqrt()
    A = torch.zeros(M.shape[0], rank, dtype=torch.float64)
    B = torch.zeros(rank, M.shape[1], dtype=torch.float64)
    A[:, :k], B[:k] = U[:, :k] * s, s[:, None] * Vh[:k]
    return A.to(M.dtype), B.to(M.dtype)


def factors_of_conv(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-`rank` SVD of a conv kernel's matrix view: (u_w (out, r, kh, 1), v_w (r, in, 1, kw))."""
    out, c_in, kh, kw = weight.shape
    U, V = svd_factors(conv_matrix(weight), rank)  # (kh out, r), (r, kw in)
    return U.reshape(out, kh, rank, 1).permute(0, 2, 1, 3).contiguous(), V.reshape(rank, c_in, 1, kw).contiguous()


def truncate_weight(weight: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(u weight, v weight) of the best rank-`rank` factorization of a linear (out, in) or conv
    (out, in, kh, kw) weight, shaped for LowRankLinear / LowRankConv."""
    if weight.dim() == 4:
        return factors_of_conv(weight, rank)
    if weight.dim() != 2:
        raise ValueError(f"truncate_weight: expected a 2-D or 4-D weight, got shape {tuple(weight.shape)}")
    A, B = svd_factors(weight, rank)
    return A.contiguous(), B.contiguous()


def weight_of_factors(u_w: torch.Tensor, v_w: torch.Tensor) -> torch.Tensor:
    """The dense weight U V of a LowRankLinear (2-D factors) or LowRankConv (4-D factors)."""
    return conv_from_factors(u_w, v_w) if u_w.dim() == 4 else u_w @ v_w
