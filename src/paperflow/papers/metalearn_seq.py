"""metalearn_seq: "An Information-Theoretic Analysis of In-Context Learning" (Jeon, Lee, Lei, Van Roy), ICML 2024.

The paper's tool (its main decomposition): for the Bayes-optimal sequential predictor of M sequences of
length T drawn from a two-level model (meta-parameter psi, per-sequence task theta_m | psi), the average
excess log loss over all M*T tokens (error above the theta-knowing irreducible loss) splits exactly as
    L_{M,T} = I(H_{M,T}; psi) / (M T)   [meta-learning error]   +   I(H_T^(m); theta_m | psi) / T   [intra-task error]
(chain rule of mutual information: the summed sequential log loss of the Bayes predictor is -log p(data)). Its
rates: the meta-learning error decays like (parameters) log(M)/(M T) in the number of sequences, the intra-task
error like d log(T)/T in the sequence length, for general priors (the paper bounds I(H; psi) by rate-distortion
arguments; its examples are transformers and sparse mixtures of transformers). Only the abstract and summaries of
the paper could be read here (search corpus `pages`: title + "Theorem", "meta-learning error", "rate-distortion",
"mixture"; no passage past the abstract was retrievable), so the settings below are our reconstruction.

Contract v3 (issue 24): in a linear-GAUSSIAN model the meta-learning error is a closed form (1/2 logdet(...)) whose
log-log slope over the grid equals the bound's by construction (v2: fitted -0.602/-0.607 against -0.607), so that
slope is now a FACT. The HEADLINE tests the rate where no closed form applies: a non-Gaussian prior on psi.

Setting (what a seed varies: the prior's mixture centres, then psi, the tasks and the sequences of every replicate):
  psi ~ (1/K) sum_k N(c_k, tau^2 I_d), centres c_k ~ N(0, (s_psi^2 - tau^2) I_d) drawn per seed and known to the
  predictor (a K-component mixture prior, total per-coordinate variance about s_psi^2);
  theta_m | psi ~ N(psi, s_theta^2 I_d); x_{m,t} ~ N(0, I_d); y_{m,t} = theta_m^T x_{m,t} + N(0, s^2).
Predictors of y_{m,t} from x_{m,t} and the history (all exact; batched over `replicates` Monte Carlo data sets):
  * Bayes (the method): given the component k the model is linear-Gaussian, so the posterior is a K-component
    mixture of Gaussians: one Kalman filter per component (shared covariance, K means) and the component weights
    updated token by token by their predictive likelihoods; the predictive is the weighted Gaussian mixture;
  * Gaussian-prior predictor (the ablation): the closed-form Bayes predictor of v2 under the moment-matched prior
    N(mean of the c_k, tau^2 I + covariance of the c_k), i.e. the method with the prior's structure thrown away;
  * psi-oracle: theta_m's prior N(psi, s_theta^2 I), then Kalman steps (meta-learning-error free);
  * theta-oracle: N(theta_m^T x, s^2) (irreducible).
Measured per seed: meta-learning error e_meta(M) = mean over the first M sequences of (Bayes - psi-oracle) log loss
per token, M in m_grid at T = t_meta (prefix averages: the predictor of sequence m reads only sequences <= m); the
same for the Gaussian-prior predictor; intra-task error e_intra(T) = (psi-oracle - theta-oracle) per token over the
first T tokens of one long sequence, T in t_grid. Fitted: least-squares log-log slopes per seed.
The predicted rate (our evaluation of the paper's bound for this prior): data processing and the chain rule give
I(H; psi) <= I(theta_{1:M}; psi) = I(theta_{1:M}; k) + I(theta_{1:M}; psi | k) <= log K + (d/2) log(1 + M tau^2/s_theta^2),
so the predicted curve is [log K + (d/2) log(1 + M tau^2/s_theta^2)]/(M T); its log-log slope over m_grid (about
-0.595 at the defaults) is the headline's target. The Gaussian model's rates (d/2) log(1 + M s_psi^2/s_theta^2)/(M T)
and (d/2) log(1 + T s_theta^2/s^2)/T have slopes about -0.607 and -0.804 over the default grids.
Rows: HEADLINE the Bayes predictor's meta-learning error under the mixture prior decays at the predicted rate
(fitted slope within `tolerance` of the target; refuted when the slope's interval lies outside the band). Mechanism
gate: the prior's non-Gaussian structure matters to the predictor (the Gaussian-prior predictor's meta error
exceeds the Bayes one by more than `misspec_min` relative, mean over m_grid, measured in the runs); otherwise the
setting is the closed-form one in disguise and the row is `not testable`. Verifications (controls): the measured
meta error stays below the bound; the Bayes predictor beats the Gaussian-prior one (Bayes optimality). Facts: the
closed-form Gaussian slope (the exact I(H; psi | X)/(M T) of the Gaussian model with prior N(0, s_psi^2 I), on the
same x's) and the intra-task slope (psi known: Gaussian, closed form).
No trained weights (exact Bayes predictors): compress=None.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

VARIANTS = ("bayes",)
THEORY = "bayes|theory"  # derive(): the predicted slopes beside the fitted ones (the "matches" rows use `target`)
ABLATION = "bayes|gaussian_prior"  # derive(): the Gaussian-prior predictor's numbers under the method's names
LOG2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class Config:
    d: int = 8  # dimension of x, theta, psi
    s_psi: float = 1.0  # prior std of the meta-parameter psi (per coordinate, mixture total)
    s_theta: float = 1.0  # std of a task theta_m around psi
    s_noise: float = 1.0  # observation noise std
    mix_k: int = 4  # K components of psi's mixture prior
    mix_tau: float = 0.5  # within-component std of psi (< s_psi)
    m_grid: tuple = (1, 2, 4, 8, 16, 32, 64, 128)  # numbers of sequences (meta-learning sweep)
    t_meta: int = 16  # sequence length of the meta-learning sweep
    t_grid: tuple = (32, 64, 128, 256, 512, 1024)  # sequence lengths (intra-task sweep)
    replicates: int = 200  # Monte Carlo draws of (psi, thetas, data) per seed
    tolerance: float = 0.1  # |fitted slope - predicted slope| allowed by the headline
    misspec_min: float = 0.05  # mechanism gate: Gaussian-prior predictor's meta error / Bayes' - 1 must exceed this

    def __post_init__(self) -> None:
        for name in ("m_grid", "t_grid"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        check(self.d >= 1, f"d must be >= 1, got {self.d}")
        check(min(self.s_psi, self.s_theta, self.s_noise) > 0, "s_psi, s_theta and s_noise must be > 0")
        check(self.mix_k >= 2 and 0 < self.mix_tau < self.s_psi,
              f"mix_k >= 2 and 0 < mix_tau < s_psi, got {self.mix_k}, {self.mix_tau}")
        for name in ("m_grid", "t_grid"):
            g = getattr(self, name)
            check(len(g) >= 2 and g[0] >= 1 and list(g) == sorted(set(g)),
                  f"{name} must hold >= 2 ascending distinct positive ints, got {g}")
        check(self.t_meta >= 1 and self.replicates >= 2, f"t_meta >= 1 and replicates >= 2, got {self.t_meta}, {self.replicates}")
        check(self.tolerance > 0 and self.misspec_min >= 0, "tolerance must be > 0 and misspec_min >= 0")


# ----------------------------------------------------------------------------------------------------
# The predictors (batched over replicates: leading axis R)


def kalman_losses(X: np.ndarray, Y: np.ndarray, mu0: np.ndarray, S0: np.ndarray, s2: float):
    """Sequential Bayes prediction of y_t = theta^T x_t + N(0, s2) under theta ~ N(mu0, S0), token by token.
    X (R, T, d), Y (R, T), mu0 (R, d), S0 (R, d, d). Returns (log losses (R, T) in nats, means (R, T), vars (R, T))."""
    R, T, _ = X.shape
    mu, S = mu0.copy(), S0.copy()
    losses, means, varis = np.empty((R, T)), np.empty((R, T)), np.empty((R, T))
    for t in range(T):
        x = X[:, t]  # (R, d)
        Sx = np.einsum("rij,rj->ri", S, x)
        m = np.einsum("ri,ri->r", x, mu)
        v = np.einsum("ri,ri->r", x, Sx) + s2
        err = Y[:, t] - m
        losses[:, t] = 0.5 * (LOG2PI + np.log(v)) + err**2 / (2 * v)
        means[:, t], varis[:, t] = m, v
        k = Sx / v[:, None]
        mu = mu + k * err[:, None]
        S = S - k[:, :, None] * Sx[:, None, :]
    return losses, means, varis


def mixture_centres(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """The prior's K centres c_k ~ N(0, (s_psi^2 - tau^2) I_d) (K, d): drawn once per seed, known to the predictor."""
    return math.sqrt(cfg.s_psi**2 - cfg.mix_tau**2) * rng.standard_normal((cfg.mix_k, cfg.d))


def sample_data(rng: np.random.Generator, cfg: Config, centres: np.ndarray, R: int, M: int, T: int) -> dict:
    """R replicates of psi ~ mixture, M tasks theta_m ~ N(psi, s_theta^2 I) and their sequences of length T."""
    k = rng.integers(len(centres), size=R)
    psi = centres[k] + cfg.mix_tau * rng.standard_normal((R, cfg.d))
    theta = psi[:, None, :] + cfg.s_theta * rng.standard_normal((R, M, cfg.d))
    X = rng.standard_normal((R, M, T, cfg.d))
    Y = np.einsum("rmtd,rmd->rmt", X, theta) + cfg.s_noise * rng.standard_normal((R, M, T))
    return {"psi": psi, "theta": theta, "X": X, "Y": Y, "k": k}


def sequence_info(X: np.ndarray, Y: np.ndarray, s_theta2: float, s2: float):
    """What one sequence tells about psi (theta integrated out): y | psi ~ N(X psi, s_theta2 X X^T + s2 I).
    Returns (precision P = X^T C^-1 X (R, d, d), information vector X^T C^-1 y (R, d)), via Woodbury."""
    A = np.einsum("rtd,rte->rde", X, X) / s2
    b = np.einsum("rtd,rt->rd", X, Y) / s2
    G = np.linalg.inv(np.eye(X.shape[-1]) / s_theta2 + A)
    AG = A @ G
    return A - AG @ A, b - np.einsum("rde,re->rd", AG, b)


def gaussian_prior_losses(X, Y, mean: np.ndarray, cov: np.ndarray, s_theta2: float, s2: float) -> np.ndarray:
    """Summed log losses per sequence (R, M) of the Bayes predictor under psi ~ N(mean (R, d), cov (R, d, d)):
    psi's posterior after sequences < m (information form) gives theta_m's prior N(mu_psi, S_psi + s_theta2 I),
    tokens of sequence m update it by Kalman steps."""
    R, M, _, d = X.shape
    Lam = np.linalg.inv(cov)
    h = np.einsum("rij,rj->ri", Lam, mean)
    out = np.empty((R, M))
    for m in range(M):
        S_psi = np.linalg.inv(Lam)
        losses, _, _ = kalman_losses(X[:, m], Y[:, m], np.einsum("rij,rj->ri", S_psi, h), S_psi + s_theta2 * np.eye(d), s2)
        out[:, m] = losses.sum(1)
        P, b = sequence_info(X[:, m], Y[:, m], s_theta2, s2)
        Lam, h = Lam + P, h + b
    return out


def mixture_prior_losses(X, Y, centres: np.ndarray, tau2: float, s_theta2: float, s2: float) -> np.ndarray:
    """Summed log losses per sequence (R, M) of the exact Bayes predictor under psi ~ (1/K) sum_k N(c_k, tau2 I).
    Given k all is linear-Gaussian: psi's posterior precision is shared by the components (only the K means differ),
    so one Kalman covariance path with K mean paths; log weights log p(k | history) gain each token's predictive
    log density under k; the predictive is the weighted mixture."""
    R, M, T, d = X.shape
    K = len(centres)
    Lam = np.broadcast_to(np.eye(d) / tau2, (R, d, d)).copy()  # psi | k posterior precision (same for every k)
    h = np.broadcast_to(centres / tau2, (R, K, d)).copy()  # psi | k information vectors
    logw = np.full((R, K), -math.log(K))  # log p(k | history), normalised
    out = np.empty((R, M))
    for m in range(M):
        S = np.linalg.inv(Lam)
        mu = np.einsum("rij,rkj->rki", S, h)  # theta_m | k prior means; covariance S + s_theta2 I
        S = S + s_theta2 * np.eye(d)
        total = np.zeros(R)
        for t in range(T):
            x, y = X[:, m, t], Y[:, m, t]
            Sx = np.einsum("rij,rj->ri", S, x)
            v = np.einsum("ri,ri->r", x, Sx) + s2
            err = y[:, None] - np.einsum("rkd,rd->rk", mu, x)  # (R, K)
            joint = logw - 0.5 * (LOG2PI + np.log(v))[:, None] - err**2 / (2 * v[:, None])
            top = joint.max(1)
            lse = top + np.log(np.exp(joint - top[:, None]).sum(1))  # log predictive density of y
            total -= lse
            logw = joint - lse[:, None]
            gain = Sx / v[:, None]
            mu = mu + err[:, :, None] * gain[:, None, :]
            S = S - gain[:, :, None] * Sx[:, None, :]
        out[:, m] = total
        P, b = sequence_info(X[:, m], Y[:, m], s_theta2, s2)
        Lam, h = Lam + P, h + b[:, None, :]
    return out


def oracle_losses(X, Y, psi: np.ndarray, s_theta2: float, s2: float) -> np.ndarray:
    """Summed log losses per sequence (R, M) of the psi-knowing predictor (theta_m ~ N(psi, s_theta2 I))."""
    R, M, _, d = X.shape
    S0 = np.broadcast_to(s_theta2 * np.eye(d), (R, d, d))
    return np.stack([kalman_losses(X[:, m], Y[:, m], psi, S0, s2)[0].sum(1) for m in range(M)], axis=1)


def gaussian_information(X, s_psi2: float, s_theta2: float, s2: float) -> np.ndarray:
    """Closed form I(H_{1:m}; psi | X) (R, M) for every prefix m in the GAUSSIAN model psi ~ N(0, s_psi2 I):
    1/2 logdet(I + s_psi2 sum_{i <= m} P_i) (P_i from sequence_info; it does not depend on y)."""
    R, M, T, d = X.shape
    acc, out = np.zeros((R, d, d)), np.empty((R, M))
    for m in range(M):
        acc = acc + sequence_info(X[:, m], np.zeros((R, T)), s_theta2, s2)[0]
        out[:, m] = 0.5 * np.linalg.slogdet(np.eye(d) + s_psi2 * acc)[1]
    return out


def slope(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])


def predicted_curves(cfg: Config) -> dict[str, np.ndarray]:
    """The paper's rates in these settings (module docstring): the mixture bound and the Gaussian model's meta bound
    over m_grid, the intra-task bound over t_grid."""
    M, T = np.asarray(cfg.m_grid, float), np.asarray(cfg.t_grid, float)
    return {"mixture": (math.log(cfg.mix_k) + cfg.d / 2 * np.log1p(M * cfg.mix_tau**2 / cfg.s_theta**2)) / (M * cfg.t_meta),
            "gaussian": cfg.d / 2 * np.log1p(M * cfg.s_psi**2 / cfg.s_theta**2) / (M * cfg.t_meta),
            "intra": cfg.d / 2 * np.log1p(T * cfg.s_theta**2 / cfg.s_noise**2) / T}


def predicted_slopes(cfg: Config) -> dict[str, float]:
    curves = predicted_curves(cfg)
    return {name: slope(cfg.t_grid if name == "intra" else cfg.m_grid, c) for name, c in curves.items()}


# ----------------------------------------------------------------------------------------------------
# Stages


def prepare(cfg: Config, res) -> dict:
    """Nothing to load: the data are generated per seed in train (the seed draws the prior's centres, psi, the tasks
    and the sequences)."""
    return {f"predicted_slope_{k}": v for k, v in predicted_slopes(cfg).items()}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """Both sweeps for one seed; returns the error curves (no weights: the predictors are exact)."""
    if variant not in VARIANTS:
        raise ValueError(f"metalearn_seq: unknown variant {variant!r}")
    rng = np.random.default_rng([seed, 29])
    centres = mixture_centres(cfg, rng)
    R, Mmax, T, d = cfg.replicates, max(cfg.m_grid), cfg.t_meta, cfg.d
    st2, s2 = cfg.s_theta**2, cfg.s_noise**2
    data_m = sample_data(rng, cfg, centres, R, Mmax, T)
    X, Y = data_m["X"], data_m["Y"]
    oracle = oracle_losses(X, Y, data_m["psi"], st2, s2)
    bayes = np.cumsum(mixture_prior_losses(X, Y, centres, cfg.mix_tau**2, st2, s2) - oracle, 1)
    cov = cfg.mix_tau**2 * np.eye(d) + np.cov(centres.T, bias=True).reshape(d, d)  # moment-matched Gaussian prior
    gauss = np.cumsum(gaussian_prior_losses(X, Y, np.broadcast_to(centres.mean(0), (R, d)), np.broadcast_to(cov, (R, d, d)),
                                            st2, s2) - oracle, 1)
    info = gaussian_information(X, cfg.s_psi**2, st2, s2)  # the Gaussian model's closed form, same x's
    per = {name: [float(c[:, M - 1].mean() / (M * T)) for M in cfg.m_grid]
           for name, c in (("meta", bayes), ("meta_gauss", gauss), ("meta_closed_form", info))}
    # intra-task sweep: one long sequence per replicate, psi known; prefix averages give every T
    Tmax = max(cfg.t_grid)
    long = sample_data(rng, cfg, centres, R, 1, Tmax)
    Xl, Yl, psi, theta = long["X"][:, 0], long["Y"][:, 0], long["psi"], long["theta"][:, 0]
    lo, _, _ = kalman_losses(Xl, Yl, psi, np.broadcast_to(st2 * np.eye(d), (R, d, d)), s2)
    resid = Yl - np.einsum("rtd,rd->rt", Xl, theta)
    ex = np.cumsum(lo - (0.5 * (LOG2PI + math.log(s2)) + resid**2 / (2 * s2)), 1)
    per["intra"] = [float(ex[:, t - 1].mean() / t) for t in cfg.t_grid]
    for i, M in enumerate(cfg.m_grid):
        log(M, **{f"sweep_m/{k}_error": per[k][i] for k in ("meta", "meta_gauss", "meta_closed_form")})
    for t, e in zip(cfg.t_grid, per["intra"]):
        log(t, **{"sweep_t/intra_error": e})
    return {"m_grid": list(cfg.m_grid), "t_grid": list(cfg.t_grid), **per}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Fitted log-log slopes per seed, the mechanism measure (how much worse the Gaussian-prior predictor is), the
    bound check, and the curves' points."""
    bound = predicted_curves(cfg)["mixture"]
    meta, gauss = np.asarray(model["meta"]), np.asarray(model["meta_gauss"])
    out = {"slope_m": slope(model["m_grid"], meta), "slope_m_gauss_prior": slope(model["m_grid"], gauss),
           "slope_m_closed_form": slope(model["m_grid"], model["meta_closed_form"]),
           "slope_t": slope(model["t_grid"], model["intra"]),
           "misspec_gap": float(np.mean(gauss / meta - 1)),  # > 0: the prior's structure matters (mechanism)
           "over_bound": float(np.max(meta / bound)),  # <= 1: the measured meta error below the mixture bound
           "logmeta": float(np.mean(np.log10(meta))), "logmeta_gauss_prior": float(np.mean(np.log10(gauss)))}
    out.update({f"meta_error_M{M}": e for M, e in zip(model["m_grid"], model["meta"])})
    out.update({f"intra_error_T{T}": e for T, e in zip(model["t_grid"], model["intra"])})
    return out


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Views "bayes|theory" (the predicted slopes and the bound, 1, beside the measured ones) and
    "bayes|gaussian_prior" (the ablation's numbers under the method's metric names)."""
    slopes = predicted_slopes(cfg)
    out = [dict(r) for r in rows]
    for r in rows:
        if r["variant"] != "bayes":
            continue
        out.append({"paper": r["paper"], "seed": r["seed"], "variant": THEORY, "dense/slope_m": slopes["mixture"],
                    "dense/slope_m_closed_form": slopes["gaussian"], "dense/slope_t": slopes["intra"], "dense/over_bound": 1.0})
        ablation = {"paper": r["paper"], "seed": r["seed"], "variant": ABLATION}
        for name in ("slope_m", "logmeta"):
            if f"dense/{name}_gauss_prior" in r:
                ablation[f"dense/{name}"] = r[f"dense/{name}_gauss_prior"]
        out.append(ablation)
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    slopes, tol = predicted_slopes(cfg), cfg.tolerance
    grid = f"M = {cfg.m_grid[0]}..{cfg.m_grid[-1]} sequences of length T = {cfg.t_meta}"
    mechanism = Gate(f"the prior's non-Gaussian structure matters: the moment-matched Gaussian-prior predictor's meta "
                     f"error exceeds the Bayes predictor's by > {cfg.misspec_min:g} (relative, mean over M)",
                     variant="bayes", metric="misspec_gap", above=cfg.misspec_min, kind="mechanism")
    return [
        Comparison("slope_m", "bayes", THEORY, kind="matches", target=slopes["mixture"], tolerance=tol, role="headline",
                   gates=(mechanism,),
                   text=f"under a {cfg.mix_k}-component mixture prior on psi (no closed form), the Bayes predictor's "
                        f"meta-learning error decays in the number of sequences at the predicted rate "
                        f"[log K + (d/2) log(1 + M tau^2/s_theta^2)]/(M T) ({grid}): log-log slope {slopes['mixture']:.3f} "
                        f"within {tol:g}",
                   refuted_if=f"the fitted slope's 95% interval over seeds lies outside {slopes['mixture']:.3f} +- {tol:g}: "
                              "the meta-learning error does not decay at the predicted rate"),
        Comparison("over_bound", "bayes", THEORY, better="lower", role="control",
                   text="verification: the measured meta-learning error stays below the mixture bound at every M "
                        "(max ratio < 1; data processing)"),
        Comparison("logmeta", "bayes", ABLATION, better="lower", role="control",
                   text="verification: the Bayes predictor's meta-learning error is below the moment-matched "
                        "Gaussian-prior predictor's (mean log10 over M; Bayes optimality), the ablation without the "
                        "prior's structure"),
        Comparison("slope_m_closed_form", "bayes", THEORY, role="fact",
                   text=f"closed form: in the Gaussian model (psi ~ N(0, {cfg.s_psi:g}^2 I)) the exact I(H; psi | X)/(M T) "
                        f"has log-log slope vs the bound's {slopes['gaussian']:.3f} (equal by construction)"),
        Comparison("slope_t", "bayes", THEORY, role="fact",
                   text=f"intra-task error (psi known: Gaussian, closed form) over T = {cfg.t_grid[0]}..{cfg.t_grid[-1]}: "
                        f"fitted log-log slope vs the bound's {slopes['intra']:.3f}"),
    ]


SPEC = register_paper(PaperSpec(
    id="metalearn_seq",
    title="An Information-Theoretic Analysis of In-Context Learning",
    claim="the Bayes predictor's meta-learning error decays at the predicted rate in the number of sequences",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=None, evaluate=evaluate,
    comparisons=comparisons, derive=derive, fidelity="reconstruction",
    data="generated linear sequences: psi from a 4-component Gaussian-mixture prior (centres drawn per seed), "
         "theta_m ~ N(psi, I), x ~ N(0, I_8), y = theta^T x + N(0, 1); each seed draws its own prior centres, "
         "meta-parameters, tasks and sequences",
    substitutions="the paper's full text (its examples' constants) was not retrievable offline: the linear setting with "
                  "a mixture prior, its dimensions and the rate expressions (the paper's decomposition evaluated with "
                  "data-processing / chain-rule bounds) are our reconstruction; no transformer is trained (exact Bayes "
                  "predictors); d=8, K=4, M up to 128 sequences of length 16, T up to 1024; 200 Monte Carlo data sets "
                  "per seed",
    compression="none: the predictors are exact Bayes posteriors (Kalman filters), no trained weights",
    figure="sparsity",
))
