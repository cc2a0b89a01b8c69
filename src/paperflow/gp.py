"""Gaussian-process helpers shared by the GP papers of issue 29 (cmanp, cellular_gp): stationary kernels on
coordinates, the 1-D GP function sampler of the neural-process benchmarks, and exact GP prediction by Cholesky.

- `rbf`, `matern52`: k(x, x') on batched coordinates (..., N, D) x (..., M, D), per-batch lengthscale and scale.
- `sample_gp_tasks`: the 1-D meta-regression tasks of the NP literature (Kim et al. 2019, Nguyen & Grover 2022, the
  CMANP authors' regression/data/gp.py): x ~ U(x_range), one lengthscale ~ U(0.1, max_length) and scale ~ U(0.1,
  max_scale) per task, y ~ N(0, K + sigma_eps^2 I); the first n_ctx points are the context, the rest the targets. The
  per-task hyperparameters are returned, so the exact posterior (the Bayes-optimal predictor) can be computed.
- `exact_predict`: the GP posterior predictive mean and variance at test inputs from the train/test kernel blocks
  (Rasmussen & Williams 2006, Alg. 2.1: L = chol(K + s^2 I), alpha = L^T \\ (L \\ y), mean = K_*^T alpha,
  var = k_** - ||L \\ K_*||^2), batched; `gaussian_log_prob` the elementwise predictive log density.
- `gp_task_posterior`: `exact_predict` for the sampler's tasks at their true hyperparameters (the oracle).

Plain torch (no gpytorch import), so a paper's job pays nothing for it; float64 for the Cholesky by default.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

LOG_2PI = math.log(2 * math.pi)


def _sqdist(x1: torch.Tensor, x2: torch.Tensor, lengthscale: torch.Tensor | float) -> torch.Tensor:
    """Squared Euclidean distances of x1 (..., N, D) and x2 (..., M, D) after dividing by lengthscale (a number or a
    tensor broadcasting against (..., 1, 1))."""
    ls = torch.as_tensor(lengthscale, dtype=x1.dtype)
    if ls.dim() > 0:
        ls = ls.reshape(*ls.shape, 1, 1) if ls.dim() == x1.dim() - 2 else ls
    d = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).pow(2).sum(-1)
    return d / ls.pow(2)


def _scale(k: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    s = torch.as_tensor(scale, dtype=k.dtype)
    if s.dim() > 0 and s.dim() == k.dim() - 2:
        s = s.reshape(*s.shape, 1, 1)
    return s.pow(2) * k


def rbf(x1: torch.Tensor, x2: torch.Tensor, lengthscale: torch.Tensor | float = 1.0, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """scale^2 exp(-|x - x'|^2 / (2 lengthscale^2)); lengthscale/scale: numbers or one value per batch element."""
    return _scale(torch.exp(-0.5 * _sqdist(x1, x2, lengthscale)), scale)


def matern52(x1: torch.Tensor, x2: torch.Tensor, lengthscale: torch.Tensor | float = 1.0, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """scale^2 (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), r = |x - x'| / lengthscale."""
    r = _sqdist(x1, x2, lengthscale).clamp_min(0).sqrt()
    return _scale((1 + math.sqrt(5.0) * r + 5.0 * r.pow(2) / 3.0) * torch.exp(-math.sqrt(5.0) * r), scale)


KERNELS: dict[str, Callable[..., torch.Tensor]] = {"rbf": rbf, "matern52": matern52}


def sample_gp_tasks(gen: torch.Generator, batch: int, n_ctx: int, n_tar: int, kernel: str = "rbf",
                    x_range: tuple[float, float] = (-2.0, 2.0), max_length: float = 0.6, max_scale: float = 1.0,
                    sigma_eps: float = 2e-2) -> dict[str, torch.Tensor]:
    """`batch` 1-D tasks of n_ctx context and n_tar target points (float32 tensors xc, yc (B, Nc, 1), xt, yt (B, Nt, 1))
    with their hyperparameters lengthscale, scale (B,) and sigma_eps; y = f + noise with cov K + sigma_eps^2 I."""
    if kernel not in KERNELS:
        raise ValueError(f"sample_gp_tasks: unknown kernel {kernel!r}; known: {sorted(KERNELS)}")
    if n_ctx < 1 or n_tar < 1 or batch < 1:
        raise ValueError(f"sample_gp_tasks: batch, n_ctx and n_tar must be >= 1, got {batch}, {n_ctx}, {n_tar}")
    n = n_ctx + n_tar
    lo, hi = x_range
    x = lo + (hi - lo) * torch.rand(batch, n, 1, generator=gen, dtype=torch.float64)
    length = 0.1 + (max_length - 0.1) * torch.rand(batch, generator=gen, dtype=torch.float64)
    scale = 0.1 + (max_scale - 0.1) * torch.rand(batch, generator=gen, dtype=torch.float64)
    cov = KERNELS[kernel](x, x, length, scale) + sigma_eps ** 2 * torch.eye(n, dtype=torch.float64)
    chol = torch.linalg.cholesky(cov + 1e-8 * torch.eye(n, dtype=torch.float64))
    y = chol @ torch.randn(batch, n, 1, generator=gen, dtype=torch.float64)
    return {"xc": x[:, :n_ctx].float(), "yc": y[:, :n_ctx].float(), "xt": x[:, n_ctx:].float(), "yt": y[:, n_ctx:].float(),
            "lengthscale": length.float(), "scale": scale.float(), "sigma_eps": torch.tensor(float(sigma_eps)),
            "kernel": kernel}


def exact_predict(k_train: torch.Tensor, k_cross: torch.Tensor, k_test_diag: torch.Tensor, y: torch.Tensor,
                  noise_var: torch.Tensor | float, jitter: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
    """GP posterior predictive at test points (R&W Alg. 2.1), batched over leading dims.
    k_train (..., N, N), k_cross (..., N, M) = k(train, test), k_test_diag (..., M), y (..., N) -> mean (..., M) and
    the latent variance (..., M) (add noise_var for the predictive variance of a noisy observation)."""
    n = k_train.shape[-1]
    eye = torch.eye(n, dtype=k_train.dtype, device=k_train.device)
    nv = torch.as_tensor(noise_var, dtype=k_train.dtype)
    if nv.dim() > 0:
        nv = nv.reshape(*nv.shape, 1, 1)
    chol = torch.linalg.cholesky(k_train + (nv + jitter) * eye)
    alpha = torch.cholesky_solve(y.unsqueeze(-1), chol)
    mean = (k_cross.transpose(-1, -2) @ alpha).squeeze(-1)
    v = torch.linalg.solve_triangular(chol, k_cross, upper=False)
    var = (k_test_diag - v.pow(2).sum(-2)).clamp_min(0.0)
    return mean, var


def gaussian_log_prob(y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Elementwise log N(y; mean, var)."""
    return -0.5 * (LOG_2PI + torch.log(var) + (y - mean).pow(2) / var)


def gp_task_posterior(task: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact predictive mean and variance (noise included) of each task's targets given its context, at the task's
    true kernel, lengthscale, scale and noise (float64): the Bayes-optimal predictor the NPs approximate."""
    kern = KERNELS[task["kernel"]]
    xc, xt = task["xc"].double(), task["xt"].double()
    ls, sc = task["lengthscale"].double(), task["scale"].double()
    nv = float(task["sigma_eps"]) ** 2
    k_cc = kern(xc, xc, ls, sc)
    k_ct = kern(xc, xt, ls, sc)
    k_tt = sc.pow(2).unsqueeze(-1).expand(-1, xt.shape[1])
    mean, var = exact_predict(k_cc, k_ct, k_tt, task["yc"].double().squeeze(-1), nv)
    return mean, var + nv
