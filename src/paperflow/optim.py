"""Optimizers shared by the optimization papers (torch.optim.Optimizer subclasses, usable with loop.train_loop).

ExpSGDM   SGD with momentum whose every update is scaled by one Exp(1) draw (Zhang & Cutkosky, "Random Scaling and
          Momentum for Non-smooth Non-convex Optimization", ICML 2024: Exponentiated O2NC instantiated with online
          gradient descent). With Delta_n = -lr * buf_n the iteration is
              x_n = x_{n-1} + s_n Delta_n,   s_n ~ Exp(1) i.i.d.,   g_n = grad f(x_n, z_n),
              Delta_{n+1} = momentum * Delta_n - lr * g_n   (optionally clipped to ||Delta|| <= D, the theory's ball),
          i.e. torch.optim.SGD(momentum, dampening=0) with the step multiplied by s_n: the gradient is taken at the
          randomly scaled iterate itself, and one scalar s_n scales the whole update (all parameter groups).
          `scale=1.0` (a fixed number instead of "exp") is plain SGDM, bit for bit. `scale="uniform"` draws s_n ~ U[0, 2]
          (mean 1 like Exp(1), variance 1/3 instead of 1): the alternative law in the authors' own O2NC code
          (`uniform_scaling`), used as the ablation that keeps a random mean-1 step but drops the exponential law.
PaperAdam Adam in the notation of Cattaneo, Klusowski & Shigida ("On the Implicit Bias of Adam", ICML 2024) and of
          their official code (optimizers.MyAdam): step h, betas (beta, rho), bias-corrected moments and the
          epsilon INSIDE the square root, theta <- theta - h * m_hat / sqrt(nu_hat + eps). `eps_inside=False`
          moves eps outside (torch.optim.Adam); beta = 0 gives the bias-corrected RMSProp of the same notation.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch


class ExpSGDM(torch.optim.Optimizer):
    """SGDM with exponentially distributed random scaling of every update (see the module docstring).

    scale: "exp" (a fresh Exp(1) draw per step, from `generator` or a generator seeded with `seed`), "uniform" (a fresh
    U[0, 2] draw per step, same generator) or a fixed positive number (1.0 = torch.optim.SGD with the same momentum,
    dampening and weight decay).
    max_delta_norm: the radius D of the theory's clipped update ||Delta|| <= D (None: no clipping, as in practice).
    The scalar used by the last step is kept in `last_scale`.
    """

    def __init__(self, params: Iterable, lr: float, momentum: float = 0.9, dampening: float = 0.0,
                 weight_decay: float = 0.0, scale: str | float = "exp", seed: int = 0,
                 generator: torch.Generator | None = None, max_delta_norm: float | None = None):
        if lr <= 0:
            raise ValueError(f"ExpSGDM: lr must be > 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"ExpSGDM: momentum must be in [0, 1), got {momentum}")
        if weight_decay < 0:
            raise ValueError(f"ExpSGDM: weight_decay must be >= 0, got {weight_decay}")
        if scale not in ("exp", "uniform") and not (isinstance(scale, (int, float)) and scale > 0):
            raise ValueError(f"ExpSGDM: scale must be 'exp', 'uniform' or a positive number, got {scale!r}")
        if max_delta_norm is not None and max_delta_norm <= 0:
            raise ValueError(f"ExpSGDM: max_delta_norm must be > 0 or None, got {max_delta_norm}")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay))
        self.scale = scale
        self.generator = generator if generator is not None else torch.Generator().manual_seed(seed)
        self.max_delta_norm = max_delta_norm
        self.last_scale = float("nan")

    def draw(self) -> float:
        """s_n: an Exp(1) draw (inverse CDF of one uniform from the optimizer's generator), a U[0, 2] draw (twice that
        uniform), or the fixed scale."""
        if self.scale not in ("exp", "uniform"):
            return float(self.scale)
        u = float(torch.rand((), generator=self.generator, dtype=torch.float64))
        if self.scale == "uniform":
            return 2.0 * u
        return -math.log1p(-u)  # u in [0, 1): finite

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        bufs = []  # (group, param, momentum buffer) of every parameter with a gradient
        for group in self.param_groups:
            mom, damp, wd = group["momentum"], group["dampening"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad if wd == 0 else p.grad.add(p, alpha=wd)
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if mom == 0:
                    buf = g
                elif buf is None:
                    buf = state["momentum_buffer"] = torch.clone(g).detach()  # torch.optim.SGD: first step, no dampening
                else:
                    buf.mul_(mom).add_(g, alpha=1 - damp)
                bufs.append((group, p, buf))
        if self.max_delta_norm is not None and bufs:
            norm = math.sqrt(sum(float((group["lr"] * b).pow(2).sum()) for group, _, b in bufs))
            if norm > self.max_delta_norm:  # Delta <- Delta * D / ||Delta||, kept in the momentum state
                for _, _, b in bufs:
                    b.mul_(self.max_delta_norm / norm)
        s = self.draw()
        self.last_scale = s
        for group, p, buf in bufs:
            p.add_(buf, alpha=-group["lr"] * s)
        return loss


class PaperAdam(torch.optim.Optimizer):
    """Adam as written by Cattaneo et al. (and their MyAdam): for each coordinate j, at step n = 1, 2, ...
        m_j <- beta m_j + (1 - beta) g_j,   nu_j <- rho nu_j + (1 - rho) g_j^2,
        theta_j <- theta_j - h * (m_j / (1 - beta^n)) / sqrt(nu_j / (1 - rho^n) + eps)   (eps_inside=True)
    and with eps_inside=False the denominator sqrt(nu_j / (1 - rho^n)) + eps of torch.optim.Adam.
    bias_correction=False drops both (1 - beta^n), (1 - rho^n) factors."""

    def __init__(self, params: Iterable, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 eps_inside: bool = True, bias_correction: bool = True):
        beta, rho = betas
        if lr <= 0 or eps < 0 or not (0 <= beta < 1) or not (0 <= rho < 1):
            raise ValueError(f"PaperAdam: need lr > 0, eps >= 0, beta and rho in [0, 1); got {lr}, {eps}, {betas}")
        super().__init__(params, dict(lr=lr, betas=(beta, rho), eps=eps))
        self.eps_inside = eps_inside
        self.bias_correction = bias_correction

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta, rho = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                n, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(p.grad, 1 - beta)  # the same arithmetic as torch.optim.Adam's single-tensor path
                v.mul_(rho).addcmul_(p.grad, p.grad, value=1 - rho)
                bc1 = 1 - beta ** n if self.bias_correction else 1.0
                bc2 = 1 - rho ** n if self.bias_correction else 1.0
                if self.eps_inside:
                    denom = (v / bc2).add_(group["eps"]).sqrt_()
                else:
                    denom = (v.sqrt() / math.sqrt(bc2)).add_(group["eps"])
                p.addcdiv_(m, denom, value=-group["lr"] / bc1)
        return loss
