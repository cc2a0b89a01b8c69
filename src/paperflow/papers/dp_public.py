"""Public + private mean estimation: "Optimal Differentially Private Model Training with Public Data" (Lowy, Li,
Huang, Razaviyayn), ICML 2024. No official code for the mean-estimation part was found.

Problem (the paper's mean estimation): n samples x_i in the unit ball of R^d (||x|| <= 1), n_pub = frac n of them
public (no privacy), n_priv = n - n_pub private; estimate mu = E x under (eps, delta)-DP of the private samples.
The paper's point: the optimal worst-case rates are attained by either discarding the private data or treating
the public data as private, and its new algorithms are "even more optimal" by combining both with the right weights.

Estimators built here, all unbiased and all using only the bound E||x - mu||^2 <= V = var_bound (V = 1 from
||x|| <= 1; the data's own variance is never read):
  local model (each private user releases z_i = x_i + N(0, s^2 I), s the analytic Gaussian mechanism's noise for
  L2 sensitivity 2 at (eps, delta), Balle & Wang 2018):
    - weighted (the paper's local algorithm, reconstructed as the minimum-variance unbiased combination):
      w xbar_pub + (1 - w) zbar_priv with w = v_priv / (v_pub + v_priv), v_pub = V / n_pub, v_priv = (V + d s^2) / n_priv;
    - public_only: xbar_pub (discard the private data);
    - all_private: every sample, public ones too, privatised and averaged (treat public as private).
  central model (a trusted curator, the Gaussian mechanism):
    - weighted: alpha sum_pub x + beta sum_priv x + N(0, (2 beta c)^2 I), c = analytic-Gaussian noise per unit
      sensitivity (replacing one private x moves the sum by <= 2 beta); alpha n_pub + beta n_priv = 1 (unbiased),
      beta = V n_priv / (V n_priv n + 4 d c^2 n_pub) minimises the MSE bound V (alpha^2 n_pub + beta^2 n_priv) + 4 d beta^2 c^2;
    - public_only; all_private: the Gaussian mechanism on the mean of all n (sensitivity 2 / n).
Fidelity "reconstruction": the paper's text could not be read here (abstract only); the weighted estimators are our
formulation of "combine public and private samples with optimal weights", judged against the two baselines the
abstract names. Pure DP (Laplace / PrivUnit) is not built: approximate DP only (delta = cfg.dp_delta).

Data (generated; what a seed varies): mu with ||mu|| = mean_norm in a random direction, x = mu + (1 - mean_norm) u,
u uniform on the unit sphere (so ||x|| <= 1 and E x = mu exactly); cfg.reps independent data sets per seed. Sweep
inside one job: every (eps, public fraction) of the model's grid; MSE = mean over reps of ||mu_hat - mu||^2, all
estimators on the same draws (paired). Variants = the two privacy models; derive() splits each job's estimators into
views "<model>|weighted", "<model>|public_only", "<model>|all_private" and "<model>|best_baseline" (per seed and
setting, the better of the two baselines on the same draws: a conservative reference).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("local", "central")
ESTIMATORS = ("weighted", "public_only", "all_private")


@dataclass(frozen=True)
class Config:
    dim: int = 10
    n: int = 2000  # samples, public + private
    fracs: tuple = (0.01, 0.02, 0.05, 0.1, 0.2)  # public fraction n_pub / n
    eps_local: tuple = (0.5, 1.0, 2.0, 4.0, 8.0)
    eps_central: tuple = (0.02, 0.05, 0.1, 0.2, 0.5)
    dp_delta: float = 1e-5
    var_bound: float = 1.0  # V: the estimators' bound on E||x - mu||^2 (||x|| <= 1)
    mean_norm: float = 0.3
    reps: int = 100  # data sets per seed (MSE estimate)

    def __post_init__(self) -> None:
        for key in ("fracs", "eps_local", "eps_central"):
            object.__setattr__(self, key, tuple(float(v) for v in getattr(self, key)))
            vals = getattr(self, key)
            check(len(vals) >= 2 and list(vals) == sorted(set(vals)), f"dp_public.{key} must be >= 2 increasing values, got {vals}")
        check(all(0 < f < 1 for f in self.fracs), f"dp_public.fracs must lie in (0, 1), got {self.fracs}")
        check(all(e > 0 for e in self.eps_local + self.eps_central), "dp_public: every epsilon must be > 0")
        check(self.dim >= 1 and self.n >= 10, f"dp_public: dim >= 1 and n >= 10, got {self.dim}, {self.n}")
        check(all(1 <= round(f * self.n) < self.n for f in self.fracs), "dp_public: every fraction must leave >= 1 public and private sample")
        check(0 < self.dp_delta < 1 and self.var_bound > 0, "dp_public: need 0 < dp_delta < 1 and var_bound > 0")
        check(0 <= self.mean_norm < 1 and self.reps >= 2, "dp_public: need 0 <= mean_norm < 1 and reps >= 2")


# ----------------------------------------------------------------------------------------------- mechanisms
def gaussian_delta(sigma: float, eps: float, sens: float) -> float:
    """The exact delta of the Gaussian mechanism N(0, sigma^2) at L2 sensitivity sens (Balle & Wang 2018, Thm 8)."""
    from scipy.stats import norm

    a, b = sens / (2 * sigma), eps * sigma / sens
    return float(norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b))


def gaussian_sigma(eps: float, delta: float, sens: float = 1.0) -> float:
    """Smallest sigma with gaussian_delta(sigma) <= delta (analytic Gaussian mechanism; linear in sens)."""
    from scipy.optimize import brentq

    lo, hi = 1e-6, 1.0
    while gaussian_delta(hi, eps, 1.0) > delta:
        hi *= 2
    return sens * brentq(lambda s: gaussian_delta(s, eps, 1.0) - delta, lo, hi, xtol=1e-12)


def local_weight(n_pub: int, n_priv: int, dim: int, sigma: float, V: float) -> float:
    """Weight of the public mean in the local-model combination (inverse-variance, minimises the MSE bound)."""
    v_pub, v_priv = V / n_pub, (V + dim * sigma ** 2) / n_priv
    return v_priv / (v_pub + v_priv)


def central_weights(n_pub: int, n_priv: int, dim: int, c: float, V: float) -> tuple[float, float, float]:
    """(alpha, beta, noise sd) of the central weighted estimator alpha sum_pub + beta sum_priv + N(0, (2 beta c)^2 I)."""
    n = n_pub + n_priv
    beta = V * n_priv / (V * n_priv * n + 4 * dim * c ** 2 * n_pub)
    alpha = (1 - beta * n_priv) / n_pub
    return alpha, beta, 2 * beta * c


def mse_bounds(model: str, n_pub: int, n_priv: int, dim: int, sigma1: float, V: float) -> dict:
    """Worst-case (variance = V) MSE of each estimator; sigma1 = the mechanism's noise at unit sensitivity."""
    n = n_pub + n_priv
    if model == "local":
        s2 = (2 * sigma1) ** 2
        w = local_weight(n_pub, n_priv, dim, 2 * sigma1, V)
        return {"public_only": V / n_pub, "all_private": (V + dim * s2) / n,
                "weighted": w ** 2 * V / n_pub + (1 - w) ** 2 * (V + dim * s2) / n_priv}
    alpha, beta, sd = central_weights(n_pub, n_priv, dim, sigma1, V)
    return {"public_only": V / n_pub, "all_private": V / n + dim * (2 * sigma1 / n) ** 2,
            "weighted": V * (alpha ** 2 * n_pub + beta ** 2 * n_priv) + dim * sd ** 2}


def sample(cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(mu, x (reps, n, d)): ||mu|| = mean_norm, x = mu + (1 - mean_norm) u, u uniform on the sphere."""
    mu = rng.standard_normal(cfg.dim)
    mu *= cfg.mean_norm / np.linalg.norm(mu)
    u = rng.standard_normal((cfg.reps, cfg.n, cfg.dim))
    u /= np.linalg.norm(u, axis=2, keepdims=True)
    return mu, mu + (1 - cfg.mean_norm) * u


def estimates(cfg: Config, model: str, x: np.ndarray, n_pub: int, eps: float, rng) -> dict:
    """Every estimator on the data sets x (reps, n, d); returns {estimator: (reps, d)}."""
    reps, n, d = x.shape
    n_priv, V = n - n_pub, cfg.var_bound
    s_pub, s_priv = x[:, :n_pub].sum(1), x[:, n_pub:].sum(1)
    c = gaussian_sigma(eps, cfg.dp_delta, 1.0)
    out = {"public_only": s_pub / n_pub}
    if model == "local":
        sigma = 2 * c  # each user's release x_i + N(0, sigma^2 I): L2 sensitivity 2 in the unit ball
        noise_priv = rng.standard_normal((reps, d)) * sigma * math.sqrt(n_priv)  # sum of the private users' noises
        noise_pub = rng.standard_normal((reps, d)) * sigma * math.sqrt(n_pub)  # (public users' noise: baseline only)
        z_priv = (s_priv + noise_priv) / n_priv
        w = local_weight(n_pub, n_priv, d, sigma, V)
        out["weighted"] = w * out["public_only"] + (1 - w) * z_priv
        out["all_private"] = (s_pub + s_priv + noise_priv + noise_pub) / n
    else:
        alpha, beta, sd = central_weights(n_pub, n_priv, d, c, V)
        out["weighted"] = alpha * s_pub + beta * s_priv + rng.standard_normal((reps, d)) * sd
        out["all_private"] = (s_pub + s_priv) / n + rng.standard_normal((reps, d)) * (2 * c / n)
    return out


def key(eps: float, frac: float) -> str:
    return f"eps{eps:g}_pub{frac:g}"


# ----------------------------------------------------------------------------------------------- stages
def prepare(cfg: Config, res) -> dict:
    """Nothing to prepare: every seed draws its own mean and data sets in train()."""
    return {"note": "generated data, one mean and cfg.reps data sets per seed (train)"}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """MSE of every estimator at every (eps, public fraction) of the variant's privacy model."""
    check(variant in VARIANTS, f"dp_public: variant must be one of {VARIANTS}, got {variant!r}")
    rng = np.random.default_rng([seed, 41])
    mu, x = sample(cfg, rng)  # the same data for both models at a seed
    noise_rng = np.random.default_rng([seed, 43, VARIANTS.index(variant)])
    eps_grid = cfg.eps_local if variant == "local" else cfg.eps_central
    out: dict[str, float] = {}
    logs = {e: [] for e in ESTIMATORS + ("best_baseline",)}
    for step, eps in enumerate(eps_grid):
        for frac in cfg.fracs:
            n_pub = int(round(frac * cfg.n))
            est = estimates(cfg, variant, x, n_pub, eps, noise_rng)
            mse = {e: float(np.mean(np.sum((v - mu) ** 2, axis=1))) for e, v in est.items()}
            mse["best_baseline"] = min(mse["public_only"], mse["all_private"])
            for e, v in mse.items():
                out[f"mse_{e}@{key(eps, frac)}"] = v
                logs[e].append(math.log10(v))
            bound = mse_bounds(variant, n_pub, cfg.n - n_pub, cfg.dim, gaussian_sigma(eps, cfg.dp_delta), cfg.var_bound)
            out[f"bound_gain@{key(eps, frac)}"] = bound["weighted"] / min(bound["public_only"], bound["all_private"])
        log(step, **{f"mse_{e}": out[f"mse_{e}@{key(eps, cfg.fracs[0])}"] for e in ESTIMATORS})
    for e, values in logs.items():
        out[f"logmse_{e}"] = float(np.mean(values))  # mean over the grid of log10 MSE
    return {"metrics": out}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    return dict(model["metrics"])


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Views "<model>|<estimator>" (and "|best_baseline") with the estimator's numbers under common names:
    dense/logmse (grid mean of log10 MSE) and dense/mse@<setting>."""
    out = [dict(r) for r in rows]
    for r in rows:
        if r["variant"] not in VARIANTS:
            continue
        for e in ESTIMATORS + ("best_baseline",):
            view = {"paper": r.get("paper", "dp_public"), "seed": r["seed"], "variant": f"{r['variant']}|{e}"}
            prefix = f"dense/mse_{e}@"
            view.update({f"dense/mse@{k[len(prefix):]}": v for k, v in r.items() if k.startswith(prefix)})
            if f"dense/logmse_{e}" in r:
                view["dense/logmse"] = r[f"dense/logmse_{e}"]
            out.append(view)
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    lo_f, hi_f = cfg.fracs[0], cfg.fracs[-1]
    rows = [
        Comparison("logmse", "local|weighted", "local|best_baseline", better="lower", role="headline",
                   text=f"local DP: the public+private weighted estimator has lower MSE than the better of "
                        f"discarding private data and treating public data as private (mean log10 MSE over "
                        f"eps {cfg.eps_local[0]:g}..{cfg.eps_local[-1]:g} x public fraction {lo_f:g}..{hi_f:g})"),
        Comparison("logmse", "central|weighted", "central|best_baseline", better="lower", role="secondary",
                   text="central DP: the weighted estimator has lower MSE than the better baseline (grid mean)"),
        Comparison("logmse", "local|weighted", "local|all_private", better="lower", role="secondary",
                   text="local DP: weighted beats treating public data as private (grid mean)"),
        Comparison("logmse", "central|weighted", "central|public_only", better="lower", role="secondary",
                   text="central DP: weighted beats discarding the private data (grid mean)"),
    ]
    for model, grid in (("local", cfg.eps_local), ("central", cfg.eps_central)):
        small, large = key(grid[0], hi_f), key(grid[-1], lo_f)
        rows += [
            Comparison(f"mse@{small}", f"{model}|public_only", f"{model}|all_private", better="lower", role="control",
                       text=f"crossover, {model}: at eps {grid[0]:g} with {hi_f:g} public, discarding private data beats "
                            "treating public as private"),
            Comparison(f"mse@{large}", f"{model}|all_private", f"{model}|public_only", better="lower", role="control",
                       text=f"crossover, {model}: at eps {grid[-1]:g} with {lo_f:g} public, treating public as private "
                            "beats discarding private data"),
        ]
    return rows


SPEC = register_paper(PaperSpec(
    id="dp_public",
    title="Optimal Differentially Private Model Training with Public Data (Lowy, Li, Huang, Razaviyayn, ICML 2024)",
    claim="new algorithms beat both baselines",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare,
    train=train,
    evaluate=evaluate,
    comparisons=comparisons,
    derive=derive,
    compress=None,
    fidelity="reconstruction",
    data="generated unit-ball data (d = 10, n = 2000) with a random mean per seed, split into public and private parts",
    substitutions="mean estimation only (no ERM/SCO or DP-SGD experiments); approximate (eps, delta)-DP with the "
                  "analytic Gaussian mechanism in both models (no pure-DP Laplace/PrivUnit); the weighted estimators are "
                  "our minimum-variance reconstruction of the paper's algorithms (its text was not readable here)",
    compression="none: closed-form estimators, no weights exist",
))
