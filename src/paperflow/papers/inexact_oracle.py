"""Inexact first-order oracles: "A Universal Transfer Theorem for Convex Optimization Algorithms Using Inexact
First-order Oracles" (Kerger, Molinaro, Jiang, Basu), ICML 2024. No official code.

Setting (the paper's, Sec. 1): min {f(x) : x in X}, f convex and M-Lipschitz, X known; a delta-inexact oracle
returns (f~(x), g~(x)) with |f~(x) - f(x)| <= delta and ||g~(x) - g|| <= delta for some g in df(x). An algorithm A
written for EXACT oracles is run unchanged; the transfer answers its queries with exact first-order information
of a modified convex instance h that is close to f, so A's guarantee on h carries over to f.

The transfer as built here (fidelity "reconstruction": only the abstract and summaries of the paper could be read
here, so the construction below is ours, written to the abstract's contract; the docstring's proof is what the
unit tests check). With D = diam(X) and K = delta (2 + D), the t-th query x_t gets the inexact (f~_t, g~_t) and
adds the affine piece
    p_t(y) = f~_t - t K + g~_t . (y - x_t);
the answer is the exact first-order information of h_t = max_{i <= t} p_i at x_t (value h_t(x_t), gradient of
its maximising piece). Consistency: for i < t, p_t(x_i) <= f(x_i) + delta (1 + D) - t K <= f~_i + delta (2 + D)
- t K = p_i(x_i) - (t - i - 1) K <= h_i(x_i), so later pieces never rise above earlier answers and every answer
is exact information of h_T. Each piece is a global minorant of f on X
(p_t <= f + delta (1 + D) - t K <= f), and h = max(h_T, f - C) with C > delta + T K is a convex
(M + delta)-Lipschitz instance consistent with every answer and f - C <= h <= f. So if A returns an
eps-minimiser of every instance consistent with what it saw, f(x_hat) - f* <= eps + C: the error guarantee is
eps + delta (1 + T (2 + D)) = eps + O(T delta), linear in delta at a fixed query budget T (the "O(delta)" of the
catalog's claim).

Algorithms A (both exact-oracle methods, run unchanged): the central-cut ellipsoid method (a cutting-plane
method; box feasibility cuts cost no oracle call; returns the queried point with the best answered value) and
Kelley's cutting-plane method (x_{t+1} = argmin over X of the cutting-plane model, an LP). Variants:
  - "reduction": A behind the transfer above;
  - "direct": the same A fed the inexact (f~, g~) as they come (the catalog's baseline).
Problems (generated; what a seed varies): f(x) = max_j (a_j . x + b_j), m pieces, a_j ~ N(0, I), b_j ~ N(0, 1/4)
on X = [-r, r]^d; f* from an LP (scipy HiGHS) evaluated at its solution. Oracle noise: f~ = f + delta u,
u ~ U[-1, 1]; g~ = g + delta w, w uniform on the unit sphere. Sweep inside one job: every delta of cfg.deltas,
cfg.reps noise draws each (errors averaged), plus delta = 0 (the exact-oracle floor). Fitted quantity: the slope
of log(mean error) on log(delta) per seed (1 = linear growth).
Substitutions: no Frank-Wolfe (it needs a smooth f; the piecewise-linear instances are the cutting-plane setting),
no mixed-integer instances, random (not adversarial) oracle errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

VARIANTS = ("reduction", "direct")
ALGORITHMS = ("ellipsoid", "kelley")


@dataclass(frozen=True)
class Config:
    dim: int = 3  # d
    pieces: int = 20  # m affine pieces of f
    radius: float = 1.0  # X = [-radius, radius]^d
    deltas: tuple = (1e-7, 1e-6, 1e-5, 1e-4)  # oracle inexactness sweep (ascending)
    reps: int = 2  # noise draws per delta (mean error)
    ellipsoid_queries: int = 600  # oracle calls T of the ellipsoid method
    kelley_queries: int = 40  # oracle calls T of Kelley's method
    tolerance: float = 0.15  # |fitted slope - 1| that still counts as linear growth
    floor_max: float = 0.1  # gate: exact-oracle error / error at the smallest delta must stay below this
    resolvable: float = -11.0  # gate: log10 of the error at the smallest delta above this (float64 round-off ~1e-12)

    def __post_init__(self) -> None:
        object.__setattr__(self, "deltas", tuple(float(x) for x in self.deltas))
        check(self.dim >= 1 and self.pieces >= 2, f"inexact_oracle: dim >= 1 and pieces >= 2, got {self.dim}, {self.pieces}")
        check(self.radius > 0, f"inexact_oracle.radius must be > 0, got {self.radius}")
        check(len(self.deltas) >= 2 and all(d > 0 for d in self.deltas) and list(self.deltas) == sorted(set(self.deltas)),
              f"inexact_oracle.deltas must be >= 2 increasing positive values, got {self.deltas}")
        check(self.reps >= 1, f"inexact_oracle.reps must be >= 1, got {self.reps}")
        check(self.ellipsoid_queries >= 1 and self.kelley_queries >= 1, "inexact_oracle: query budgets must be >= 1")
        check(self.tolerance > 0 and self.floor_max > 0, "inexact_oracle: tolerance and floor_max must be > 0")
        check(self.resolvable < 0, f"inexact_oracle.resolvable is a log10 error level < 0, got {self.resolvable}")


# ----------------------------------------------------------------------------------------------- problems
def make_problem(cfg: Config, seed: int) -> dict:
    """f(x) = max_j a_j . x + b_j on [-r, r]^d and its optimal value (LP, evaluated at the LP's point)."""
    from scipy.optimize import linprog

    rng = np.random.default_rng([seed, 17])
    a = rng.standard_normal((cfg.pieces, cfg.dim))
    b = 0.5 * rng.standard_normal(cfg.pieces)
    d = cfg.dim  # LP in (x, t): min t s.t. a_j x + b_j <= t
    res = linprog(np.r_[np.zeros(d), 1.0], A_ub=np.c_[a, -np.ones(cfg.pieces)], b_ub=-b,
                  bounds=[(-cfg.radius, cfg.radius)] * d + [(None, None)], method="highs")
    check(res.status == 0, f"inexact_oracle: LP for f* failed ({res.message})")
    x = np.clip(res.x[:d], -cfg.radius, cfg.radius)
    return {"a": a, "b": b, "f_star": float(np.max(a @ x + b)), "x_star": x}


def value(problem: dict, x: np.ndarray) -> float:
    return float(np.max(problem["a"] @ x + problem["b"]))


def inexact_oracle(problem: dict, delta: float, rng: np.random.Generator):
    """(f~(x), g~(x)) within delta of (f(x), a subgradient): uniform value error, gradient error of norm delta."""
    a, b = problem["a"], problem["b"]

    def oracle(x: np.ndarray) -> tuple[float, np.ndarray]:
        z = a @ x + b
        j = int(np.argmax(z))
        w = rng.standard_normal(a.shape[1])
        return float(z[j] + delta * rng.uniform(-1.0, 1.0)), a[j] + delta * w / np.linalg.norm(w)

    return oracle


class Transfer:
    """The black-box transfer (module docstring): exact first-order answers of h_t = max_i p_i at each query."""

    def __init__(self, oracle, delta: float, diameter: float, dim: int, capacity: int = 64):
        self.oracle, self.shift, self.t = oracle, delta * (2.0 + diameter), 0
        # piece i: offsets[i] + grads[i] . y, i.e. f~_i - i K + g~_i . (y - x_i)
        self.offsets, self.grads = np.empty(capacity), np.empty((capacity, dim))

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        fv, gv = self.oracle(x)
        if self.t == len(self.offsets):
            self.offsets = np.r_[self.offsets, np.empty(self.t)]
            self.grads = np.r_[self.grads, np.empty_like(self.grads)]
        self.t += 1
        self.grads[self.t - 1] = gv
        self.offsets[self.t - 1] = fv - self.t * self.shift - float(gv @ x)
        return self.model(x)

    def model(self, y: np.ndarray) -> tuple[float, np.ndarray]:
        """h_t(y) and the gradient of its maximising piece (an exact subgradient of h_t at y)."""
        pieces = self.offsets[:self.t] + self.grads[:self.t] @ y
        i = int(np.argmax(pieces))
        return float(pieces[i]), self.grads[i].copy()


# ----------------------------------------------------------------------------------------------- algorithms
def ellipsoid(oracle, dim: int, radius: float, queries: int) -> np.ndarray:
    """Central-cut ellipsoid method on [-r, r]^d from the ball of radius r sqrt(d); returns the queried point with
    the best answered value. Box cuts (x outside X) use no oracle call."""
    c, P = np.zeros(dim), np.eye(dim) * radius ** 2 * dim
    best_x, best_v, used = np.zeros(dim), math.inf, 0
    for _ in range(50 * queries):
        out = int(np.argmax(np.abs(c)))
        if abs(c[out]) > radius:
            g = np.zeros(dim)
            g[out] = np.sign(c[out])
        else:
            v, g = oracle(c)
            used += 1
            if v < best_v:
                best_x, best_v = c.copy(), v
            if used >= queries:
                break
        Pg = P @ g
        gPg = float(g @ Pg)
        if gPg <= 0 or not math.isfinite(gPg):
            break  # zero subgradient (exact optimum) or a degenerate ellipsoid
        step = Pg / math.sqrt(gPg)
        c = c - step / (dim + 1)
        P = (dim * dim / (dim * dim - 1.0) if dim > 1 else 1.0) * (P - 2.0 / (dim + 1) * np.outer(step, step))
        P = 0.5 * (P + P.T)
    return best_x


def kelley(oracle, dim: int, radius: float, queries: int) -> np.ndarray:
    """Kelley's cutting-plane method: query, add the cut v + g . (y - x) <= t, move to the LP minimiser of the model
    over [-r, r]^d; returns the queried point with the best answered value."""
    from scipy.optimize import linprog

    x, rows, rhs = np.zeros(dim), [], []
    best_x, best_v = x.copy(), math.inf
    for _ in range(queries):
        v, g = oracle(x)
        if v < best_v:
            best_x, best_v = x.copy(), v
        rows.append(np.r_[g, -1.0])
        rhs.append(float(g @ x - v))
        res = linprog(np.r_[np.zeros(dim), 1.0], A_ub=np.array(rows), b_ub=np.array(rhs),
                      bounds=[(-radius, radius)] * dim + [(None, None)], method="highs")
        if res.status != 0:
            break
        x = np.clip(res.x[:dim], -radius, radius)
    return best_x


def run_once(cfg: Config, problem: dict, variant: str, algorithm: str, delta: float, rng) -> float:
    """Error f(x_hat) - f* of one run of `algorithm` behind `variant` at inexactness delta."""
    oracle = inexact_oracle(problem, delta, rng)
    if variant == "reduction":
        oracle = Transfer(oracle, delta, 2.0 * cfg.radius * math.sqrt(cfg.dim), cfg.dim)
    solve, queries = (ellipsoid, cfg.ellipsoid_queries) if algorithm == "ellipsoid" else (kelley, cfg.kelley_queries)
    x = solve(oracle, cfg.dim, cfg.radius, queries)
    return max(value(problem, x) - problem["f_star"], 0.0)


def fit_slope(xs, ys) -> float:
    """Least-squares slope of log y on log x."""
    return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.maximum(np.asarray(ys, float), 1e-300)), 1)[0])


def guarantee(cfg: Config, delta: float, queries: int) -> float:
    """The transfer's additive error term delta (1 + T (2 + D)) (module docstring)."""
    return delta * (1.0 + queries * (2.0 + 2.0 * cfg.radius * math.sqrt(cfg.dim)))


# ----------------------------------------------------------------------------------------------- stages
def prepare(cfg: Config, res) -> dict:
    """Nothing to prepare: every seed generates its own problem in train()."""
    return {"note": "generated convex problems, one per seed (train)"}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The delta sweep of both algorithms behind `variant` on the seed's problem; returns the metrics."""
    check(variant in VARIANTS, f"inexact_oracle: variant must be one of {VARIANTS}, got {variant!r}")
    problem = make_problem(cfg, seed)
    out: dict[str, float] = {"f_star": problem["f_star"]}
    for algorithm in ALGORITHMS:
        queries = cfg.ellipsoid_queries if algorithm == "ellipsoid" else cfg.kelley_queries
        errors, ratios = [], []
        for i, delta in enumerate((0.0,) + cfg.deltas):
            # the same noise streams for both variants (paired), one per (seed, delta, rep)
            errs = [run_once(cfg, problem, variant, algorithm, delta, np.random.default_rng([seed, i, r, 5]))
                    for r in range(cfg.reps if delta > 0 else 1)]
            err = float(np.mean(errs))
            if delta == 0:
                out[f"floor_{algorithm}"] = err
                continue
            errors.append(err)
            ratios.append(max(errs) / guarantee(cfg, delta, queries))
            out[f"err_{algorithm}@{delta:g}"] = err
            log(i, **{f"err_{algorithm}": err})
        out[f"slope_{algorithm}"] = fit_slope(cfg.deltas, errors)
        out[f"floor_ratio_{algorithm}"] = out[f"floor_{algorithm}"] / max(errors[0], 1e-300)
        out[f"log10_err_min_{algorithm}"] = math.log10(max(errors[0], 1e-300))  # above round-off (~1e-12)?
        out[f"over_guarantee_{algorithm}"] = max(ratios)  # <= 1 where the transfer's guarantee holds (eps ~ 0)
    return {"metrics": out}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    return dict(model["metrics"])


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Per (variant, seed) the reference view "<v>|theory": slope 1 (linear growth) and error / guarantee = 1 (the
    judged "matches" rows use their target; the report shows the view beside the fitted values)."""
    out = [dict(r) for r in rows]
    for r in rows:
        if r["variant"] in VARIANTS:
            out.append({"paper": r.get("paper", "inexact_oracle"), "seed": r["seed"], "variant": f"{r['variant']}|theory",
                        **{f"dense/slope_{a}": 1.0 for a in ALGORITHMS}, "dense/over_guarantee_ellipsoid": 1.0})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    tol, top = cfg.tolerance, f"{cfg.deltas[-1]:g}"
    sweep = f"delta = {cfg.deltas[0]:g}..{cfg.deltas[-1]:g}"

    def floor(v: str, algorithm: str) -> tuple[Gate, Gate]:
        return (Gate(f"{v}: exact-oracle error negligible vs the smallest delta's ({algorithm})", variant=v,
                     metric=f"floor_ratio_{algorithm}", below=cfg.floor_max),
                Gate(f"{v}: errors above float round-off, so a slope can be fitted ({algorithm})", variant=v,
                     metric=f"log10_err_min_{algorithm}", above=cfg.resolvable))

    return [
        Comparison("slope_ellipsoid", "reduction", "reduction|theory", kind="matches", target=1.0, tolerance=tol, role="headline",
                   gates=floor("reduction", "ellipsoid"),
                   text=f"with the transfer, the ellipsoid method's final error grows linearly in delta ({sweep}, "
                        f"T = {cfg.ellipsoid_queries}): fitted log-log slope within {tol:g} of 1"),
        Comparison("slope_kelley", "reduction", "reduction|theory", kind="matches", target=1.0, tolerance=tol, role="secondary",
                   gates=floor("reduction", "kelley"),
                   text=f"with the transfer, Kelley's cutting-plane method's error grows linearly in delta (T = {cfg.kelley_queries})"),
        Comparison("slope_ellipsoid", "direct", "reduction", better="higher", role="secondary",
                   gates=floor("direct", "ellipsoid") + floor("reduction", "ellipsoid"),
                   text="without the transfer (inexact answers fed directly) the ellipsoid method's error grows faster in delta"),
        Comparison("slope_kelley", "direct", "reduction", better="higher", role="secondary",
                   gates=floor("direct", "kelley") + floor("reduction", "kelley"),
                   text="without the transfer Kelley's method's error grows faster in delta"),
        Comparison(f"err_ellipsoid@{top}", "reduction", "direct", better="lower", role="control",
                   text=f"magnitude at delta = {top}: the transfer's ellipsoid error below the direct run's (the "
                        "guarantee is O(T delta), so this may go either way)"),
        Comparison(f"err_kelley@{top}", "reduction", "direct", better="lower", role="control",
                   text=f"magnitude at delta = {top}: the transfer's Kelley error below the direct run's"),
        Comparison("over_guarantee_ellipsoid", "reduction", "reduction|theory", role="fact",
                   text="max over deltas and draws of error / (delta (1 + T (2 + D))): <= 1 where the guarantee holds"),
    ]


SPEC = register_paper(PaperSpec(
    id="inexact_oracle",
    title="A Universal Transfer Theorem for Convex Optimization Algorithms Using Inexact First-order Oracles "
          "(Kerger, Molinaro, Jiang, Basu, ICML 2024)",
    claim="reduction keeps error O(delta)",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare,
    train=train,
    evaluate=evaluate,
    comparisons=comparisons,
    derive=derive,
    compress=None,
    fidelity="reconstruction",
    data="generated max-affine convex problems on a box (one per seed) with a random delta-inexact oracle",
    substitutions="the transfer is our construction to the abstract's contract (the paper's text was not readable "
                  "here); cutting-plane methods only (ellipsoid, Kelley), no Frank-Wolfe or mixed-integer instances; "
                  "random rather than adversarial oracle errors; d = 3, 20 pieces",
    compression="none: no weights exist (convex solvers on generated problems), nothing to compress",
))
