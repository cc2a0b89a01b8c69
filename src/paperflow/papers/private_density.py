"""Private adaptive density estimation: "Privately Learning Smooth Distributions on the Hypercube by Projections"
(Lalanne, Gadat), ICML 2024 (arXiv 2409.10083). No official code.

What was read: the full abstract (arXiv 2409.10083): centrally-private projection estimators of Sobolev densities on
[0, 1]^d, and a data-driven choice "among a finite family of private projection estimators ... by adapting the
Lepskii method for private selection, by adding a new penalization term that makes the estimation privacy-aware".
The paper body was not retrievable here (the `pages` corpus searched by title, arXiv id, "Lepskii", "Theorem",
"penalization"), so fidelity is "reconstruction": the block release, the equal budget split and the quantile
thresholds below are our choices; the privacy-aware penalty (sampling + privacy variance) follows the abstract.

Estimator (the paper's projection estimators, here in dimension d = 1): the trigonometric basis of L2([0, 1]),
phi_0 = 1, phi_{c,k} = sqrt2 cos(2 pi k x), phi_{s,k} = sqrt2 sin(2 pi k x); for a cut-off N,
    f_hat_N = 1 + sum_{k <= N} theta_hat_{c,k} phi_{c,k} + theta_hat_{s,k} phi_{s,k},
    theta_hat = (1/n) sum_i phi(X_i) + Laplace(b) noise on each of the 2N coefficients,
b = Delta_1 / eps with the L1 sensitivity Delta_1 = 4N/n (replacing one X_i moves each (cos, sin) pair of a
frequency by at most sqrt2 * 2 sqrt2 / n in L1): the Laplace mechanism makes f_hat_N eps-DP. By Parseval,
    MISE(N) = sum_{k > N} (theta_{c,k}^2 + theta_{s,k}^2) + sum_{k <= N} (2 - theta_{c,k}^2 - theta_{s,k}^2) / n + 4 N b^2
(bias; sampling variance, since Var phi_c + Var phi_s = 2 - theta_c^2 - theta_s^2 for the trigonometric pair; privacy),
so the best N balances N^(-2 beta) against N/n and N^3/(n eps)^2: rate n^(-2b/(2b+1)) + (n eps)^(-2b/(b+3/2)).

Private Lepskii (adaptive choice of N without knowing beta): a family N_1 < ... < N_m (cfg.cutoffs). The nested
estimators are released once, block by block: block j = the frequencies in (N_{j-1}, N_j] gets budget eps/m and
Laplace noise b_j = 4 |B_j| m / (n eps) (basic composition over the m blocks: the whole family is eps-DP and the
selection is post-processing); f_hat_{N_j} = the blocks 1..j. Privacy-aware variance of blocks j+1..l:
V(j, l) = sum_i 2|B_i|/n + 4|B_i| b_i^2 (sampling + privacy: the paper's privacy-aware penalty). Selection:
N_hat = the smallest N_j with ||f_hat_{N_l} - f_hat_{N_j}||^2 <= q(j, l) V(j, l) for every l > j, where q is the
1 - alpha/(m-1) quantile of ||noise||^2 / E||noise||^2 for pure noise of that many coefficients (Laplace noise for
the private estimator: heavier-tailed than the sampling noise, so conservative; chi-square for the non-private one;
alpha = cfg.alpha). (A first version with one release per member at eps/m and a constant threshold 2 failed on the
Laplace tails: noted in the report.)

Estimators compared, all on the same samples per seed: "nonprivate" variant = the same Lepskii rule without noise;
in the "private" job also the fixed cut-off cfg.fixed_cutoff (whole budget eps), the ablation "naive" = the classical
Lepskii rule (sampling-only penalty 2|B_i|/n, chi-square thresholds) on the same private release (what the paper's
privacy-aware penalty replaces), and the non-private rule on the same draws (for the mechanism gate). Reference: the
oracle = the private projection estimator at the N minimising the closed-form MISE (full eps, knows the density;
tests check the closed form against Monte Carlo). Its MISE(n) curve depends on |theta| only, so it is the same for
every seed (the seed flips signs): the comparison's randomness is the Lepskii estimator's, measured by simulation.
Densities (generated; what a seed varies): f = 1 + sum_{k <= k_true} theta_k phi_k with |theta_{c,k}|, |theta_{s,k}|
proportional to k^-(beta + 1/2) and random signs, scaled so that sum sqrt2 |theta| = mass < 1 (f in [1 - mass,
1 + mass]); samples by inverse CDF on a fine grid. Sweep inside one job: every n of cfg.ns, cfg.reps samples each;
ISE exact by Parseval; MISE = the mean ISE over reps. Rate exponent = -(least-squares slope of log MISE on log n),
per seed; rate_gap = rate(Lepskii) - rate(oracle); excess_slope = -rate_gap = the slope of
log(MISE_Lepskii / MISE_oracle) on log n.

Headline (the quantity the theorem bounds: an oracle inequality, adaptive risk <= C x oracle risk up to log factors,
an upper bound): excess_slope below cfg.tolerance (0.1), one-sided, against the constant view "private|bound";
refuted when its interval lies wholly above 0.1. Mechanism gates, measured in the private job: privacy_ratio = the
private Lepskii MISE over the non-private Lepskii MISE on the same draws (geometric mean over n) above
cfg.min_privacy_ratio (1.5, fixed before measuring; one run of seeds 0-9: mean 1.98, typical seeds 1.14-1.43, the rest
driven by rare Laplace-tail over-selections), and chosen_spread = log2 of the mean selected cut-off at the largest n
over that at the smallest above cfg.min_spread (1: the selection at least doubles; measured mean 2.6). Also logged:
cutoff_shrink = mean over n of log2(N_hat non-private / N_hat private) on the same draws (measured mean 0.64).
Substitutions: d = 1 only (the paper: the hypercube [0, 1]^d), eps fixed at cfg.epsilon (sweep over n only).

Design history (disclosed): Lepskii's release first used one noisy release per family member with a constant
threshold 2 and failed on Laplace tails at eps 0.1/0.3 in a pilot; it was changed to block releases with quantile
thresholds before the final run (eps stayed at the pre-set 1). The median-ISE rate row was added after the first
default run and is labelled post-hoc (control). Contract v3 (issue 24), after the v2 default results existed (v2
headline: rate_gap matches 0 within 0.1, two-sided: +0.308 [0.097, 0.52], inconclusive; the adaptive MISE approached
the oracle's as n grew): the headline was restated one-sided on excess_slope (the theorem is an upper bound; a
two-sided band also fails an estimator that approaches the oracle faster, which no theorem forbids). On the v2
numbers the restated headline reads reproduced; the v2 two-sided row stays as a control. The mechanism gates, the
naive-penalty ablation and its row were added; estimators and the n sweep are unchanged. Because the restatement
was made knowing its v2 verdict, every density, sample and noise draw is re-drawn (Config.draw = 1, mixed into each
random stream; draw 0 reproduces v2's numbers): the registered verdict comes from data no one had seen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

VARIANTS = ("private", "nonprivate")


@dataclass(frozen=True)
class Config:
    beta: float = 1.0  # smoothness of the generated densities
    k_true: int = 256  # frequencies in the generated density
    mass: float = 0.9  # sum sqrt2 |theta| (f >= 1 - mass)
    epsilon: float = 1.0
    ns: tuple = (1000, 2000, 5000, 10000, 20000, 50000, 100000)
    cutoffs: tuple = (1, 2, 4, 8, 16, 32)  # the Lepskii family
    fixed_cutoff: int = 8  # the non-adaptive baseline's N
    alpha: float = 0.05  # Lepskii: total level of the pairwise tests' thresholds
    reps: int = 5  # samples per n (MISE estimate)
    grid: int = 32768  # inverse-CDF grid
    tolerance: float = 0.1  # allowed growth exponent of MISE(adaptive) / MISE(oracle) in n (and the control's band)
    min_rate: float = 0.2  # gate: the oracle's fitted rate must exceed this (a rate to track)
    min_privacy_ratio: float = 1.5  # mechanism gate: private / non-private Lepskii MISE (geometric mean over n)
    min_spread: float = 1.0  # mechanism gate: log2 of the chosen cut-off's growth from the smallest to the largest n
    draw: int = 1  # which draw of densities, samples and noise (v2 and the v3 probes used draw 0; see the history)

    def __post_init__(self) -> None:
        for key in ("ns", "cutoffs"):
            object.__setattr__(self, key, tuple(int(v) for v in getattr(self, key)))
            vals = getattr(self, key)
            check(len(vals) >= 2 and list(vals) == sorted(set(vals)) and vals[0] >= 1,
                  f"private_density.{key} must be >= 2 increasing positive ints, got {vals}")
        check(self.beta > 0 and self.k_true >= 1 and 0 < self.mass < 1, "private_density: need beta > 0, k_true >= 1, 0 < mass < 1")
        check(self.epsilon > 0 and 0 < self.alpha < 1 and self.reps >= 1, "private_density: need epsilon > 0, 0 < alpha < 1, reps >= 1")
        check(1 <= self.fixed_cutoff <= self.k_true and self.cutoffs[-1] <= self.k_true,
              "private_density: fixed_cutoff and cutoffs must lie in [1, k_true]")
        check(self.grid >= 1024 and self.tolerance > 0, "private_density: grid >= 1024 and tolerance > 0")
        check(self.min_privacy_ratio > 0 and self.min_spread > 0, "private_density: min_privacy_ratio, min_spread > 0")


# ----------------------------------------------------------------------------------------------- density
def make_density(cfg: Config, seed: int) -> np.ndarray:
    """theta (2, k_true): rows cos / sin coefficients of frequencies 1..k_true."""
    rng = np.random.default_rng([seed, 23] + ([cfg.draw] if cfg.draw else []))
    k = np.arange(1, cfg.k_true + 1)
    theta = rng.choice([-1.0, 1.0], size=(2, cfg.k_true)) * k ** -(cfg.beta + 0.5)
    return theta * cfg.mass / (math.sqrt(2) * np.abs(theta).sum())


def basis(x: np.ndarray, n_freq: int) -> np.ndarray:
    """(2, len(x), n_freq): sqrt2 cos(2 pi k x), sqrt2 sin(2 pi k x), k = 1..n_freq."""
    ang = 2 * np.pi * np.outer(x, np.arange(1, n_freq + 1))
    return math.sqrt(2) * np.stack([np.cos(ang), np.sin(ang)])


def density(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 1 + np.einsum("jk,jnk->n", theta, basis(x, theta.shape[1]))


def sampler(cfg: Config, theta: np.ndarray):
    """Inverse-CDF sampler: F(x) = x + sum theta_c sqrt2 sin(2pi k x)/(2pi k) + theta_s sqrt2 (1 - cos(2pi k x))/(2pi k)."""
    x = np.linspace(0, 1, cfg.grid + 1)
    k = np.arange(1, theta.shape[1] + 1)
    ang = 2 * np.pi * np.outer(x, k)
    F = x + math.sqrt(2) * (np.sin(ang) @ (theta[0] / (2 * np.pi * k)) + (1 - np.cos(ang)) @ (theta[1] / (2 * np.pi * k)))
    F = np.maximum.accumulate(F)  # monotone (f > 0); guards round-off
    return lambda n, rng: np.interp(rng.uniform(0, 1, n), F, x)


# ----------------------------------------------------------------------------------------------- estimators
def laplace_scale(N: int, n: int, eps: float) -> float:
    """b = Delta_1 / eps, Delta_1 = 4N/n: L1 sensitivity of the 2N empirical coefficients to replacing one sample."""
    return 4.0 * N / (n * eps)


def mise(theta: np.ndarray, N: int, n: int, eps: float | None) -> float:
    """Closed-form MISE of the projection estimator at cut-off N (eps None: non-private)."""
    sq = theta[0] ** 2 + theta[1] ** 2
    privacy = 0.0 if eps is None else 4 * N * laplace_scale(N, n, eps) ** 2
    return float(sq[N:].sum() + (2 * N - sq[:N].sum()) / n + privacy)


def oracle_cutoff(theta: np.ndarray, n: int, eps: float | None, n_max: int) -> int:
    return int(1 + np.argmin([mise(theta, N, n, eps) for N in range(1, n_max + 1)]))


def ise(theta: np.ndarray, coef: np.ndarray) -> float:
    """||f_hat - f||^2 by Parseval; coef (2, N) estimated coefficients of frequencies 1..N."""
    N = coef.shape[1]
    return float(((coef - theta[:, :N]) ** 2).sum() + (theta[:, N:] ** 2).sum())


def blocks(cutoffs) -> list[tuple[int, int]]:
    """Frequency blocks (N_{j-1}, N_j] of the nested family, as half-open index ranges [lo, hi) of 0-based columns."""
    edges = (0,) + tuple(cutoffs)
    return [(edges[j], edges[j + 1]) for j in range(len(cutoffs))]


def noise_quantiles(cutoffs, level: float, laplace: bool, draws: int = 20000) -> dict:
    """{(j, l): q} the `level` quantile of ||xi||^2 / E||xi||^2 for pure noise on the coefficients of blocks j+1..l:
    Laplace with each block's own scale (equal budget: b_i proportional to |B_i|), or Gaussian (chi-square)."""
    from scipy.stats import chi2

    rng = np.random.default_rng(12345)  # fixed: the thresholds are part of the method, not of a seed
    sizes = [hi - lo for lo, hi in blocks(cutoffs)]
    out = {}
    for j in range(len(cutoffs)):
        for l in range(j + 1, len(cutoffs)):
            if laplace:
                energy = sum((rng.laplace(0, sizes[i], (draws, 2 * sizes[i])) ** 2).sum(1) for i in range(j + 1, l + 1))
                out[(j, l)] = float(np.quantile(energy / energy.mean(), level))
            else:
                k = 2 * sum(sizes[j + 1:l + 1])
                out[(j, l)] = float(chi2.ppf(level, k) / k)
    return out


def lepskii(coef: np.ndarray, cutoffs, block_var: list[float], quantiles: dict) -> int:
    """Index j of the smallest member with ||f_{N_l} - f_{N_j}||^2 <= q(j, l) V(j, l) for every l > j; coef (2, N_m)
    the released coefficients, block_var[i] = E||noise of block i||^2."""
    energy = [float((coef[:, lo:hi] ** 2).sum()) for lo, hi in blocks(cutoffs)]
    m = len(cutoffs)
    for j in range(m):
        if all(sum(energy[j + 1:l + 1]) <= quantiles[(j, l)] * sum(block_var[j + 1:l + 1]) for l in range(j + 1, m)):
            return j
    return m - 1


def fit_rate(ns, values) -> float:
    """Rate exponent: -(least-squares slope of log value on log n)."""
    return -float(np.polyfit(np.log(np.asarray(ns, float)), np.log(np.asarray(values, float)), 1)[0])


# ----------------------------------------------------------------------------------------------- stages
def prepare(cfg: Config, res) -> dict:
    """Nothing to prepare: every seed draws its own density in train()."""
    return {"note": "generated Sobolev-type densities, one per seed (train)"}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The n sweep: MISE of the adaptive (Lepskii) estimator and the oracle; for the private variant also the fixed
    cut-off, the classical Lepskii rule on the same private release (sampling-only penalty, chi-square thresholds:
    the ablation of the paper's privacy-aware penalty) and the non-private Lepskii on the same draws (privacy_ratio)."""
    check(variant in VARIANTS, f"private_density: variant must be one of {VARIANTS}, got {variant!r}")
    private = variant == "private"
    theta = make_density(cfg, seed)
    draw = sampler(cfg, theta)
    extra = [cfg.draw] if cfg.draw else []  # draw 0 is v2's stream, kept for reproducing its numbers
    rng = np.random.default_rng([seed, 29] + extra)  # the same samples for both variants at a seed
    noise = np.random.default_rng([seed, 31] + extra)
    m, n_max, eps = len(cfg.cutoffs), cfg.cutoffs[-1], cfg.epsilon
    curves = {"lepskii": [], "oracle": []} | ({"fixed": [], "naive": []} if private else {})
    out: dict[str, float] = {}
    medians: list[float] = []
    level = 1 - cfg.alpha / max(m - 1, 1)
    quantiles = noise_quantiles(cfg.cutoffs, level, laplace=private)
    chi2_q = quantiles if not private else noise_quantiles(cfg.cutoffs, level, laplace=False)
    for step, n in enumerate(cfg.ns):
        errs, chosen = {k: [] for k in curves if k != "oracle"}, []
        nonprivate_errs, nonprivate_chosen = [], []
        scales = [laplace_scale(hi - lo, n, eps / m) if private else 0.0 for lo, hi in blocks(cfg.cutoffs)]
        block_var = [2 * (hi - lo) / n + 4 * (hi - lo) * b ** 2 for (lo, hi), b in zip(blocks(cfg.cutoffs), scales)]
        sampling_var = [2 * (hi - lo) / n for lo, hi in blocks(cfg.cutoffs)]
        for _ in range(cfg.reps):
            x = draw(n, rng)
            emp = basis(x, max(n_max, cfg.fixed_cutoff)).mean(axis=1)  # (2, N_max) empirical coefficients
            coef = emp[:, :n_max].copy()
            if private:  # block i released once with budget eps / m
                for (lo, hi), b in zip(blocks(cfg.cutoffs), scales):
                    coef[:, lo:hi] += noise.laplace(0.0, b, (2, hi - lo))
            j = lepskii(coef, cfg.cutoffs, block_var, quantiles)
            chosen.append(cfg.cutoffs[j])
            errs["lepskii"].append(ise(theta, coef[:, :cfg.cutoffs[j]]))
            if private:
                N = cfg.fixed_cutoff
                errs["fixed"].append(ise(theta, emp[:, :N] + noise.laplace(0.0, laplace_scale(N, n, eps), (2, N))))
                jn = lepskii(coef, cfg.cutoffs, sampling_var, chi2_q)  # privacy-unaware penalty, same release
                errs["naive"].append(ise(theta, coef[:, :cfg.cutoffs[jn]]))
                jp = lepskii(emp[:, :n_max], cfg.cutoffs, sampling_var, chi2_q)  # = the nonprivate variant's choice
                nonprivate_errs.append(ise(theta, emp[:, :cfg.cutoffs[jp]]))
                nonprivate_chosen.append(cfg.cutoffs[jp])
        n_star = oracle_cutoff(theta, n, eps if private else None, n_max)
        values = {k: float(np.mean(v)) for k, v in errs.items()}
        medians.append(float(np.median(errs["lepskii"])))  # typical run (the mean is swayed by rare over-selections)
        values["oracle"] = mise(theta, n_star, n, eps if private else None)
        for k, v in values.items():
            curves[k].append(v)
            out[f"mise_{k}@{n}"] = v
        out[f"chosen_N@{n}"], out[f"oracle_N@{n}"] = float(np.mean(chosen)), float(n_star)
        if private:
            out[f"privacy_ratio@{n}"] = values["lepskii"] / float(np.mean(nonprivate_errs))
            out[f"cutoff_shrink@{n}"] = math.log2(float(np.mean(nonprivate_chosen)) / float(np.mean(chosen)))
        log(step, **{f"mise_{k}": v for k, v in values.items()})
    for k, v in curves.items():
        out[f"rate_{k}"] = fit_rate(cfg.ns, v)
        out[f"logmise_{k}"] = float(np.mean(np.log10(v)))
    out["rate_gap"] = out["rate_lepskii"] - out["rate_oracle"]
    # the oracle inequality's quantity: slope of log(MISE_lepskii / MISE_oracle) on log n (0: a constant factor)
    out["excess_slope"] = -out["rate_gap"]
    out["rate_gap_median"] = fit_rate(cfg.ns, medians) - out["rate_oracle"]  # post-hoc diagnostic (control row)
    out["chosen_spread"] = math.log2(out[f"chosen_N@{cfg.ns[-1]}"] / out[f"chosen_N@{cfg.ns[0]}"])
    if private:  # geometric mean over n of the MISE ratio; mean over n of log2(N non-private / N private)
        out["privacy_ratio"] = float(np.exp(np.mean([np.log(out[f"privacy_ratio@{n}"]) for n in cfg.ns])))
        out["cutoff_shrink"] = float(np.mean([out[f"cutoff_shrink@{n}"] for n in cfg.ns]))
    return {"metrics": out}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    return dict(model["metrics"])


def theory_rates(cfg: Config) -> dict:
    """The rate exponents of the two terms: statistical 2b/(2b+1) and privacy 2b/(b+3/2) (d = 1)."""
    b = cfg.beta
    return {"statistical": 2 * b / (2 * b + 1), "privacy": 2 * b / (b + 1.5)}


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Views "<variant>|<estimator>" (logmise, rate, mise@n under common names), "<variant>|theory" (gap 0) and
    "<variant>|bound" (excess_slope = cfg.tolerance: the headline's allowance, a constant)."""
    out = [dict(r) for r in rows]
    for r in rows:
        if r["variant"] not in VARIANTS:
            continue
        base = {"paper": r.get("paper", "private_density"), "seed": r["seed"]}
        for e in ("lepskii", "oracle", "fixed", "naive"):
            if f"dense/logmise_{e}" not in r:
                continue
            view = {**base, "variant": f"{r['variant']}|{e}", "dense/logmise": r[f"dense/logmise_{e}"],
                    "dense/rate": r[f"dense/rate_{e}"]}
            view.update({f"dense/mise@{k.split('@')[1]}": v for k, v in r.items() if k.startswith(f"dense/mise_{e}@")})
            out.append(view)
        rates = theory_rates(cfg)  # as n grows with eps fixed the slower term dominates: the smaller exponent
        out.append({**base, "variant": f"{r['variant']}|theory", "dense/rate_gap": 0.0, "dense/rate_gap_median": 0.0,
                    "dense/rate": min(rates.values()),
                    **{f"dense/rate_{k}": v for k, v in rates.items()}})
        out.append({**base, "variant": f"{r['variant']}|bound", "dense/excess_slope": cfg.tolerance})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    tol, big = cfg.tolerance, cfg.ns[-1]
    span = f"n = {cfg.ns[0]}..{cfg.ns[-1]}, eps = {cfg.epsilon:g}, beta = {cfg.beta:g}"
    rate_gate = Gate("the oracle MISE decays (a rate to track)", variant="private", metric="rate_oracle", above=cfg.min_rate)
    mechanism = (
        Gate(f"privacy matters: on the same draws, the private Lepskii estimator's MISE is more than {cfg.min_privacy_ratio:g}x "
             "the non-private Lepskii's (geometric mean over n)", variant="private", metric="privacy_ratio",
             above=cfg.min_privacy_ratio, kind="mechanism"),
        Gate(f"adaptation is active: the selected cut-off grows with n, log2(mean N_hat at n = {cfg.ns[-1]} / at n = "
             f"{cfg.ns[0]}) above {cfg.min_spread:g}", variant="private", metric="chosen_spread", above=cfg.min_spread,
             kind="mechanism"),
    )
    return [
        Comparison("excess_slope", "private", "private|bound", better="lower", role="headline", gates=(rate_gate,) + mechanism,
                   text=f"the private Lepskii estimator attains the oracle rate ({span}): its MISE stays within a factor of "
                        f"the oracle's that grows slower than n^{tol:g} (slope of log(MISE_Lepskii / MISE_oracle) on log n "
                        f"below {tol:g}: the oracle inequality's quantity, one-sided)",
                   refuted_if=f"the slope's 95% interval lies wholly above {tol:g}: the adaptive MISE falls behind the "
                              f"oracle's polynomially (its fitted rate exponent more than {tol:g} below the oracle's)"),
        Comparison("logmise", "private|lepskii", "private|fixed", better="lower", role="secondary",
                   text=f"the adaptive private estimator has lower MISE than the fixed cut-off N = {cfg.fixed_cutoff} "
                        "private estimator (mean log10 MISE over n)"),
        Comparison("logmise", "private|lepskii", "private|naive", better="lower", role="secondary",
                   text="method vs ablation: the privacy-aware penalty beats the classical Lepskii penalty (sampling "
                        "variance, chi-square thresholds) on the same private release (mean log10 MISE over n)"),
        Comparison("rate_gap", "private", "private|theory", kind="matches", target=0.0, tolerance=tol, role="control",
                   text=f"the v2 headline, kept for the record (two-sided): the fitted MISE exponent within {tol:g} of the "
                        "oracle's either way (a faster approach to the oracle also fails it, which no theorem forbids)"),
        Comparison("rate_gap_median", "private", "private|theory", kind="matches", target=0.0, tolerance=tol,
                   role="control", text="post-hoc diagnostic: the rate of the MEDIAN ISE over draws (the typical run, "
                                        "without the rare over-selections that dominate the mean) vs the oracle rate"),
        Comparison("rate_gap", "nonprivate", "nonprivate|theory", kind="matches", target=0.0, tolerance=tol, role="control",
                   text="sanity: non-private Lepskii tracks the non-private oracle rate (two-sided)"),
        Comparison("logmise", "nonprivate|lepskii", "private|lepskii", better="lower", role="control",
                   text="the cost of privacy: the non-private estimator has lower MISE (mean log10 MISE over n)"),
        Comparison(f"mise@{big}", "private|lepskii", "private|oracle", better="lower", kind="close", margin=1.0,
                   role="control", text=f"at n = {big}: adaptive MISE within 2x the oracle's (close, margin 1.0)"),
        Comparison("rate", "private|oracle", "private|theory", role="fact",
                   text="the oracle's fitted rate exponent vs the theory's asymptotic one, min(2b/(2b+1), 2b/(b+3/2)) "
                        "(closed-form MISE: the same for every seed, since it depends on |theta| only)"),
    ]


SPEC = register_paper(PaperSpec(
    id="private_density",
    title="Privately Learning Smooth Distributions on the Hypercube by Projections (Lalanne, Gadat, ICML 2024)",
    claim="adaptive estimator tracks the oracle rate",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare,
    train=train,
    evaluate=evaluate,
    comparisons=comparisons,
    derive=derive,
    compress=None,
    fidelity="reconstruction",
    data="generated densities on [0, 1] with trigonometric coefficients decaying like k^-(beta + 1/2), beta = 1, "
         "random signs per seed",
    substitutions="d = 1 (the paper: [0, 1]^d); Laplace mechanism on the trigonometric coefficients; Lepskii family "
                  "released block by block with eps/m each (basic composition), penalty = sampling + privacy variance with a noise-quantile threshold; "
                  "the oracle knows the density (closed-form MISE); eps = 1 fixed, n = 1e3..1e5",
    compression="none: closed-form projection estimators, no weights exist",
))
