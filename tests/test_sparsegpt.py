"""SparseGPT (compress/sparsegpt.py): Hessian accumulation, the OBS reconstruction against a direct
least-squares solve, the adaptive mask's counts, and the sequential pass on a tiny Llama."""
from __future__ import annotations

import itertools

import pytest
import torch

from paperflow.compress.calibration import hf_llama_inputs, linear_sublayers, sequential_pass
from paperflow.compress.magnitude import layer_magnitude_mask
from paperflow.compress.sparsegpt import (
    block_hessians,
    reconstruction_error,
    sequential_sparsegpt,
    sparsegpt_prune,
    update_hessian,
)
from tiny_llama import tiny_llama


def _layer(rows=6, cols=10, tokens=64, seed=0):
    """A random layer and correlated inputs (so that the OBS update has something to compensate)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(cols, cols, generator=g, dtype=torch.float64)
    X = torch.randn(2, tokens, cols, generator=g, dtype=torch.float64) @ mix  # 2 samples
    W = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    H, n = update_hessian(torch.zeros(cols, cols, dtype=torch.float64), 0, X[:1])
    H, n = update_hessian(H, n, X[1:])
    return W, H, X


def test_hessian_is_two_over_n_xxt():
    W, H, X = _layer()
    flat = X.reshape(-1, X.shape[-1])
    torch.testing.assert_close(H, 2.0 / 2 * flat.T @ flat)  # n = 2 samples, all tokens summed
    Hb, nb = update_hessian(torch.zeros_like(H), 0, X)  # one batch of both: same running mean
    assert nb == 2
    torch.testing.assert_close(Hb, H)


def test_reconstruction_error_is_the_layer_objective():
    W, H, X = _layer()
    W2 = W * (torch.rand(W.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) > 0.5)
    direct = float(((X.reshape(-1, X.shape[-1]) @ (W - W2).T) ** 2).sum())  # ||(W - W') X||^2
    assert reconstruction_error(W, W2, H) == pytest.approx(2.0 / 2 * direct, rel=1e-10)


@pytest.mark.parametrize("percdamp", [0.0, 0.01, 1.0])
@pytest.mark.parametrize("blocksize", [3, 128])
def test_prefix_mask_equals_direct_least_squares(percdamp, blocksize):
    # every pruned weight of a row lies before its kept weights: the sequential OBS steps then reach the
    # exact minimiser of (w - w') H_d (w - w')^T with w'_P = 0, i.e. w'_K = w_K + H_KK^-1 H_KP w_P,
    # where H_d is H with the same damping (percdamp * mean diag) added to its diagonal.
    W, H, _ = _layer(rows=5, cols=9)
    prefix = torch.tensor([4, 2, 6, 0, 3])  # pruned columns per row: the first k
    keep = torch.arange(9).unsqueeze(0) >= prefix.unsqueeze(1)
    new, mask = sparsegpt_prune(W, H, 0.0, blocksize=blocksize, percdamp=percdamp, mask=keep)
    assert torch.equal(mask, keep)
    Hd = H + percdamp * torch.diag(H).mean() * torch.eye(9, dtype=H.dtype)
    for r in range(5):
        K, P = keep[r], ~keep[r]
        expected = torch.zeros(9, dtype=W.dtype)
        if K.any():
            expected[K] = W[r, K] + torch.linalg.solve(Hd[K][:, K], Hd[K][:, P] @ W[r, P])
        torch.testing.assert_close(new[r], expected, rtol=1e-8, atol=1e-10)


def _reference_loop(W, H, keep, blocksize, percdamp):
    """A literal port of IST-DASLab's fasterprune (unstructured, given mask): one column at a time."""
    W, H = W.clone(), H.clone()
    H.diagonal().add_(percdamp * torch.diag(H).mean())
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    for i1 in range(0, W.shape[1], blocksize):
        i2 = min(i1 + blocksize, W.shape[1])
        W1, Q1, Err1, Hinv1 = W[:, i1:i2].clone(), torch.zeros_like(W[:, i1:i2]), torch.zeros_like(W[:, i1:i2]), Hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            w, d = W1[:, i], Hinv1[i, i]
            q = w.clone()
            q[~keep[:, i1 + i]] = 0
            Q1[:, i] = q
            err1 = (w - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])
    return W


@pytest.mark.parametrize("inner", [1, 3, 16])
def test_inner_triangular_solve_equals_reference_loop(inner):
    W, H, _ = _layer(rows=7, cols=20, seed=4)
    keep = torch.rand(W.shape, generator=torch.Generator().manual_seed(0)) > 0.6  # any mask, not only a prefix
    new, _ = sparsegpt_prune(W, H, 0.0, blocksize=8, percdamp=0.01, mask=keep, inner=inner)
    torch.testing.assert_close(new, _reference_loop(W, H, keep, 8, 0.01), rtol=1e-9, atol=1e-9)
    adaptive, k = sparsegpt_prune(W, H, 0.6, blocksize=8, inner=inner)  # the adaptive mask, same numbers
    torch.testing.assert_close(adaptive, _reference_loop(W, H, k, 8, 0.01), rtol=1e-9, atol=1e-9)


def test_lower_layer_error_than_magnitude_and_bounded_by_brute_force():
    # Not a theorem layer by layer (the mask is chosen greedily per column block, and a frozen column cannot
    # be revisited: on strongly correlated random inputs ~5% of layers come out worse than magnitude
    # pruning), so the check is over 50 random layers: better in most, and better on average.
    ratios = []
    for seed in range(50):
        W, H, _ = _layer(rows=8, cols=16, tokens=40, seed=seed)
        new, keep = sparsegpt_prune(W, H, 0.5, blocksize=4, percdamp=0.01)
        ratios.append(reconstruction_error(W, new, H) / reconstruction_error(W, W * layer_magnitude_mask(W, 0.5), H))
    ratios = torch.tensor(ratios)
    assert float((ratios < 1).float().mean()) >= 0.8 and float(ratios.mean()) < 1
    # one row, 6 inputs, 3 pruned: the best of all 20 masks with its least-squares weights is a lower bound,
    # reached by SparseGPT when its mask is the brute-force best and a prefix
    W, H, _ = _layer(rows=1, cols=6, tokens=30, seed=5)
    best = float("inf")
    for pruned in itertools.combinations(range(6), 3):
        P = torch.zeros(6, dtype=torch.bool)
        P[list(pruned)] = True
        K = ~P
        w = torch.zeros(6, dtype=W.dtype)
        w[K] = W[0, K] + torch.linalg.solve(H[K][:, K], H[K][:, P] @ W[0, P])
        best = min(best, reconstruction_error(W, w.unsqueeze(0), H))
    new, _ = sparsegpt_prune(W, H, 0.5, blocksize=6, percdamp=0.0)
    assert reconstruction_error(W, new, H) >= best - 1e-9


def test_adaptive_mask_counts_per_column_block():
    W, H, _ = _layer(rows=6, cols=10)
    new, keep = sparsegpt_prune(W, H, 0.5, blocksize=4)  # blocks of 4, 4, 2 columns
    for i1, i2 in ((0, 4), (4, 8), (8, 10)):
        assert int((~keep[:, i1:i2]).sum()) == int(6 * (i2 - i1) * 0.5)
    assert torch.equal(new == 0, ~keep)  # pruned exactly zero, kept weights non-zero here
    # dead input (a column never active): its weights are dropped, and the rest still works
    H2 = H.clone()
    H2[3, :], H2[:, 3] = 0, 0
    new2, _ = sparsegpt_prune(W, H2, 0.3)
    assert torch.all(new2[:, 3] == 0) and torch.isfinite(new2).all()


def test_block_hessians_and_sequential_pass_on_tiny_llama():
    lm = tiny_llama(seed=1, max_positions=32)
    ids = torch.randint(0, 32, (4, 12), generator=torch.Generator().manual_seed(0))
    inp = hf_llama_inputs(lm, ids)
    block = inp.blocks[0]
    H = block_hessians(block, inp.hidden, inp.kwargs, chunk=3)
    seen = {}

    def grab(i, b, stats):  # Wanda's scaler_row = mean over samples of sum_t x^2 = diag(H) / 2
        seen[i] = stats

    sequential_pass(inp.blocks[:1], inp.hidden, inp.kwargs, grab, chunk=3, rerun=False)
    for name in linear_sublayers(block):
        torch.testing.assert_close(torch.diag(H[name]) / 2, seen[0][name], rtol=1e-5, atol=1e-6)
    assert H["self_attn.q_proj"] is H["self_attn.k_proj"]  # shared input: one product
    assert H["self_attn.o_proj"] is not H["self_attn.q_proj"]
    masks = sequential_sparsegpt(inp.blocks, inp.hidden, inp.kwargs, [0.5, 0.7], chunk=3, blocksize=16)
    for key, keep in masks.items():
        layer, name = key.split(".", 1)
        lin = linear_sublayers(inp.blocks[int(layer)])[name]
        assert torch.equal(lin.weight == 0, ~keep)
        assert abs(float((~keep).float().mean()) - (0.5, 0.7)[int(layer)]) < 0.02
