"""A shared Gaussian diffusion core (issue 31: ndm, fadiff): a discrete variance-preserving schedule, the forward
marginal, the posterior q(z_s | z_t, x) in the DDIM form that NDM generalises (an ancestral step is that mean plus
sqrt(post_var) noise: the samplers write it themselves), the Gaussian KL of two equal-variance Gaussians, the
discretized data likelihood of the last step, a small time-conditioned MLP, and rigid superposition (Kabsch, RMSD,
uniform random rotations) for fadiff's point chains.

Notation (Kingma et al. 2021, "Variational Diffusion Models"; Ho et al. 2020): times t_i = i / T, i = 0..T;
log-SNR gamma_i = gamma_min + (gamma_max - gamma_min) t_i is the noise level (linear in t, VDM's fixed schedule),
alpha_i^2 = sigmoid(-gamma_i), sigma_i^2 = sigmoid(gamma_i), so alpha^2 + sigma^2 = 1 and q(z_i | x) = N(alpha_i x,
sigma_i^2 I). For s = i - 1 < t = i: alpha_{t|s} = alpha_t / alpha_s, sigma_{t|s}^2 = sigma_t^2 - alpha_{t|s}^2
sigma_s^2 (the Markov step), and the DDPM posterior variance sigma~^2_{s|t} = sigma_{t|s}^2 sigma_s^2 / sigma_t^2.

The posterior mean is written in the DDIM form (Song et al. 2021, Eq. 7): mean = alpha_s x_s' + sqrt(sigma_s^2 -
sigma~^2) (z_t - alpha_t x_t') / sigma_t, where x_s' and x_t' are the data as seen at times s and t. DDPM has
x_s' = x_t' = x; NDM (Bartosh et al. 2024) puts the learned transformation there: x_s' = F(x, s), x_t' = F(x, t).
With x_s' = x_t' = x this is exactly DDPM's posterior mean (alpha_{t|s} sigma_s^2 / sigma_t^2) z_t +
(alpha_s sigma_{t|s}^2 / sigma_t^2) x, which tests/test_diffusion.py checks.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn


class Schedule:
    """Discrete VP schedule with T steps, log-SNR linear in t from gamma_min (t = 0) to gamma_max (t = 1)."""

    def __init__(self, steps: int, gamma_min: float = -10.0, gamma_max: float = 6.0):
        if steps < 1:
            raise ValueError(f"Schedule: steps must be >= 1, got {steps}")
        if not gamma_min < gamma_max:
            raise ValueError(f"Schedule: gamma_min must be < gamma_max, got {gamma_min}, {gamma_max}")
        self.steps = steps
        t = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64)
        self.t = t
        self.gamma = gamma_min + (gamma_max - gamma_min) * t
        self.alpha = torch.sigmoid(-self.gamma).sqrt()
        self.sigma = torch.sigmoid(self.gamma).sqrt()
        s, u = slice(0, steps), slice(1, steps + 1)  # s = i - 1, t = i for i = 1..T (index i - 1)
        a_ts = self.alpha[u] / self.alpha[s]
        var_ts = self.sigma[u] ** 2 - a_ts ** 2 * self.sigma[s] ** 2
        self.post_var = var_ts * self.sigma[s] ** 2 / self.sigma[u] ** 2  # sigma~^2_{s|t}, index i - 1
        self.post_c = (self.sigma[s] ** 2 - self.post_var).clamp_min(0).sqrt() / self.sigma[u]  # sqrt(sigma_s^2 - sigma~^2) / sigma_t
        self.a_ts, self.var_ts = a_ts, var_ts

    def at(self, name: str, i: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The schedule quantity `name` at integer steps i (B,), shaped to broadcast against `like` (B, ...)."""
        v = getattr(self, name)[i].to(like.dtype)
        return v.view(-1, *([1] * (like.dim() - 1)))

    def q_sample(self, x: torch.Tensor, i: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """z_i = alpha_i x + sigma_i eps (x may already be a transformed F(x, t_i))."""
        return self.at("alpha", i, x) * x + self.at("sigma", i, x) * eps

    def posterior_mean(self, z_t: torch.Tensor, i: torch.Tensor, x_s: torch.Tensor, x_t: torch.Tensor) -> torch.Tensor:
        """Mean of q(z_{i-1} | z_i, x) in the DDIM form with the data seen as x_s at time i - 1 and x_t at time i
        (i >= 1): alpha_s x_s + sqrt(sigma_s^2 - sigma~^2)/sigma_t (z_t - alpha_t x_t)."""
        s = i - 1
        return self.at("alpha", s, z_t) * x_s + self.at("post_c", s, z_t) * (z_t - self.at("alpha", i, z_t) * x_t)

    def ddpm_posterior_mean(self, z_t: torch.Tensor, i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """DDPM's closed form (Ho et al. 2020, Eq. 7): (alpha_{t|s} sigma_s^2 / sigma_t^2) z_t + (alpha_s sigma_{t|s}^2 /
        sigma_t^2) x; equal to posterior_mean(z_t, i, x, x) (a test checks it)."""
        s = i - 1
        sig_t2 = self.at("sigma", i, z_t) ** 2
        return (self.at("a_ts", s, z_t) * self.at("sigma", s, z_t) ** 2 / sig_t2) * z_t + \
            (self.at("alpha", s, z_t) * self.at("var_ts", s, z_t) / sig_t2) * x

    def v_target(self, x: torch.Tensor, i: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """v = alpha_i eps - sigma_i x (Salimans & Ho 2022), a target of unit scale at every noise level."""
        return self.at("alpha", i, x) * eps - self.at("sigma", i, x) * x

    def x_from_v(self, z: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """x_hat = alpha_i z_i - sigma_i v_hat (exact for alpha^2 + sigma^2 = 1)."""
        return self.at("alpha", i, z) * z - self.at("sigma", i, z) * v

    def x_from_eps(self, z: torch.Tensor, i: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """x_hat = (z_i - sigma_i eps_hat) / alpha_i."""
        return (z - self.at("sigma", i, z) * eps) / self.at("alpha", i, z)


def kl_equal_var(mean_q: torch.Tensor, mean_p: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """KL(N(mean_q, var I) || N(mean_p, var I)) summed over all but the first dim: ||mean_q - mean_p||^2 / (2 var)."""
    return ((mean_q - mean_p) ** 2).flatten(1).sum(1) / (2 * var.flatten())


def kl_std_normal(mean: torch.Tensor, var: float) -> torch.Tensor:
    """KL(N(mean, var I) || N(0, I)) summed over all but the first dim."""
    d = mean[0].numel()
    return 0.5 * ((mean ** 2).flatten(1).sum(1) + d * (var - 1.0 - math.log(var)))


def discrete_decoder_nll(z0: torch.Tensor, x: torch.Tensor, levels: torch.Tensor, alpha0: float, sigma0: float) -> torch.Tensor:
    """-log p(x | z_0) summed over dims, VDM's decoder for discrete data: p(x_j = v_k | z_0) proportional to
    exp(-(z_0,j / alpha_0 - v_k)^2 alpha_0^2 / (2 sigma_0^2)) over the data's levels v_k (a softmax per dimension).
    x must hold values from `levels` (1-D, sorted)."""
    logits = -((z0[..., None] / alpha0 - levels) ** 2) * (alpha0 ** 2 / (2 * sigma0 ** 2))
    idx = torch.bucketize(x.contiguous(), levels.contiguous()).clamp(max=levels.numel() - 1)
    logp = logits.log_softmax(-1).gather(-1, idx[..., None]).squeeze(-1)
    return -logp.flatten(1).sum(1)


def time_features(t: torch.Tensor, n: int = 16) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1] (B,) -> (B, n)."""
    freqs = torch.exp(torch.linspace(0.0, math.log(200.0), n // 2, dtype=t.dtype, device=t.device))
    ang = t[:, None] * freqs[None, :] * math.pi
    return torch.cat([ang.sin(), ang.cos()], dim=1)


class TimeMLP(nn.Module):
    """f(x, t): concat(x, time features) -> `depth` hidden SiLU layers of `width` -> out_dim. zero_out: the last layer
    starts at zero (NDM's transformation then starts at the identity through its skip)."""

    def __init__(self, dim: int, width: int, depth: int = 2, out_dim: int | None = None, zero_out: bool = False, n_time: int = 16):
        super().__init__()
        self.n_time = n_time
        layers, d = [], dim + n_time
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.SiLU()]
            d = width
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(d, out_dim or dim)
        if zero_out:
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(torch.cat([x, time_features(t, self.n_time).to(x.dtype)], dim=1)))


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def kabsch(P: torch.Tensor, Q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotation R (B, 3, 3) and translation c (B, 3) minimising sum_k ||R P_k + c - Q_k||^2 for point sets
    P, Q (B, k, 3) (Kabsch 1976, proper rotations only: det R = +1)."""
    pc, qc = P.mean(1, keepdim=True), Q.mean(1, keepdim=True)
    H = (P - pc).transpose(1, 2) @ (Q - qc)  # (B, 3, 3)
    U, _, Vh = torch.linalg.svd(H)
    d = torch.sign(torch.linalg.det(Vh.transpose(1, 2) @ U.transpose(1, 2)))
    D = torch.diag_embed(torch.stack([torch.ones_like(d), torch.ones_like(d), d], dim=1))
    R = Vh.transpose(1, 2) @ D @ U.transpose(1, 2)
    c = qc.squeeze(1) - (R @ pc.transpose(1, 2)).squeeze(2)
    return R, c


def rmsd_after_superposition(P: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """(B,) RMSD between point sets P and Q (B, k, 3) after the best rigid superposition of P onto Q."""
    R, c = kabsch(P, Q)
    fitted = P @ R.transpose(1, 2) + c[:, None, :]
    return ((fitted - Q) ** 2).sum(-1).mean(-1).sqrt()


def random_rotations(n: int, gen: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """(n, 3, 3) rotations uniform on SO(3) (QR of a Gaussian matrix with the sign fix, det +1)."""
    A = torch.randn(n, 3, 3, generator=gen, dtype=torch.float64)
    Q, R = torch.linalg.qr(A)
    Q = Q * torch.sign(torch.diagonal(R, dim1=1, dim2=2))[:, None, :]
    Q[torch.linalg.det(Q) < 0, :, 0] *= -1
    return Q.to(dtype)
