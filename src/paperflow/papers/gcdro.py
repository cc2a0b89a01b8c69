""""Geometry-Calibrated DRO: Combating Over-Pessimism with Free Energy Implications" (Jiashuo Liu, Jiayun Wu, Tianyu
Wang, Hao Zou, Bo Li, Peng Cui), ICML 2024 (arXiv 2311.05054). Fidelity "reconstruction".

What was read: the abstract (ICML, OpenReview and arXiv listings in the `pages` corpus). The method section, its
equations and the algorithm box were not retrievable (queries: the title, "Algorithm 1", "calibration term",
"free energy", "gradient flow", "kNN graph", "Dirichlet energy"); no authors' code is in the public index (the
catalog says so; `code` corpus and find_repos searched for GCDRO / GDRO). The predecessor, "Distributionally Robust
Optimization with Data Geometry" (GDRO, NeurIPS 2022, same first authors), was found only as its abstract: a
geometric Wasserstein uncertainty set on a kNN graph of the training data, optimised by a gradient flow. So the
objective and the flow below are OUR reconstruction from the abstract's words and the standard graph Wasserstein
gradient flow (Maas 2011; Chow, Huang, Li, Zhou 2012, "Fokker-Planck equations for a free energy functional ... on a
graph"), and every choice is written here.

Reconstruction (q = sample weights on the n training rows, r = n q the density ratio, l_i(theta) the squared loss):
  free-energy risk, maximised over q in the simplex (the "Helmholtz free energy" F = U - T S):
      F(q) = sum_i q_i l_i  -  beta sum_i q_i log q_i  -  (alpha n / k) q^T L q                        (R1)
  L = D - W the Laplacian of the symmetrised kNN graph (k neighbours, on standardised inputs X), so the last term,
  the geometry-calibration term, is alpha / (n k) sum_{i~j} w_ij (r_i - r_j)^2: it charges a worst-case weight that
  differs from its neighbours' (an isolated high-loss row, typically a noisy label) and lets a whole region of high
  loss (a sub-population) gain weight; beta S is the entropy term (temperature = the radius knob).
  With alpha = 0 (R1) is the KL-DRO free energy sum q l - beta KL(q || uniform) + const (the abstract's "extends to
  standard DRO methods"); its maximiser is the Gibbs law q ~ exp(l / beta).
  Wasserstein gradient flow on the graph (ascent of F, mass moved only along edges):
      dq_i/dt = sum_j (w_ij / k) theta_ij(q) (Phi_i - Phi_j),   Phi = dF/dq = l - beta (log q + 1) - (2 alpha n / k) L q,
      theta_ij = (q_i + q_j) / 2                                                                       (R2)
  which conserves mass (antisymmetric), and dF/dt = 1/2 sum_ij (w_ij / k) theta_ij (Phi_i - Phi_j)^2 >= 0. Explicit
  Euler, each step cut to a stability bound (the entropy term makes a small weight next to a large one stiff) and so
  that no weight falls below half its value (weights stay on the simplex exactly). Its fixed points on a connected
  graph are the maximisers of F (alpha = 0: the Gibbs law; tests/test_gcdro.py).
  Minimax (the abstract's "approximate minimax optimization"): per outer step, the weights follow (R2) for
  `flow_time` (warm-started from the previous weights, `flow_substeps` Euler steps), then one gradient step on
  theta for sum_i q_i l_i(theta).

Baselines (the catalog's): ERM (uniform q); KL-DRO, penalised: max_q sum q l - lam KL(q || uniform), closed form
q = softmax(l / lam); chi2-DRO, penalised: max_q sum q l - (lam / 2) chi2(q || uniform), closed form q =
Proj_simplex(1/n + l / (lam n)) (tests: both closed forms against a brute-force constrained solve). Each DRO
baseline takes its best-response weights every outer step (Danskin: gradient descent on the robust objective).
Ablation: gcdro_nocal = the same flow with alpha = 0 (no calibration term): the method reduces to it, so the row
gcdro vs gcdro_nocal isolates the calibration term.
Same tuning: every DRO variant's radius knob (KL lam, chi2 lam, GCDRO beta, GCDRO-without-calibration beta) from the
same grid `radius_grid`, per seed, chosen by the validation worst-group RMSE (paperflow.tuning: best validation
score, ties to the smaller value); grid_edge recorded. alpha, k, flow time and the optimiser are fixed in Config
before any run (not tuned: no extra budget for the method). Same steps, same lr, same data for every variant.

Data (real table, scikit-learn's bundled diabetes set: 442 patients, 10 standardised baseline variables, target =
disease progression after one year; offline, inside the package). How groups, shift and noise are made:
  - groups: tertiles of the target over the whole table (low / mid / high progression);
  - per seed (rng [data_seed, seed]) a random split: test_frac of the rows = test (natural population, clean labels),
    val_frac = validation (natural population, clean labels, used only for tuning), the rest = training pool;
  - sub-population shift: only `minority_keep` of the training pool's high-progression rows are kept (selection
    against severe cases);
  - label noise: a random `noise_frac` of the kept training rows get y + N(0, noise_sd^2) (standardised units);
  - X standardised with the training rows' mean and sd; y in units of the whole table's sd (a fixed unit, so every
    RMSE is in the same unit across seeds).
  The kNN graph is built on the training points z = (standardised x, graph_label_weight * y) (the uncertainty set
  is over the joint law of (x, y); weight sqrt(10) gives the label the weight of all ten inputs together): a row
  whose label is off the data's manifold has neighbours whose losses differ from its own.
Model: linear regression with intercept (11 weights), full-batch gradient descent with step lr / lambda_max of the
weighted Hessian (a fixed lr diverged once DRO weights sat on a few rows).
Settings chosen in exploration (data_seed 7, 3-6 seeds, never the registered data_seed 2811, whose test rows no
setting has seen): features-defined groups (sex, BMI, s5 tertiles) were dropped because reweighting a linear model
cannot lower their worst-group error on this table (an oracle group reweighting did not help: their gap is
irreducible noise); target-tertile groups with the high group subsampled give a reducible gap (oracle 1.15 -> 0.87).
Label noise sd 3 (15%) and sd 2 (15%) made every DRO baseline worse than ERM at every radius (tuned to the grid's
ERM-like edge), so the noise was lowered to sd 1.5 on 10% of the rows and the shift raised to 15% kept, where DRO
helps the worst group and the noise still draws weight; the graph on x alone and alpha 5 were tried and not kept;
the radius grid was extended down to 0.003 because GCDRO's tuned beta sat on the lower edge (the calibration term
makes the flow less aggressive at a given beta). The exploration's best-DRO minus GCDRO difference was within its
noise (GCDRO 0.02-0.04 worse, se 0.04-0.06): no outcome is expected.
Metrics: rmse (test, all rows), wg_rmse (worst of the three groups' test RMSE), rmse_g<k>, val_wg_rmse (tuning
score), tuned_radius, grid_edge, noisy_mass (the final weights' mass on the noisy rows over their share; 1 for
ERM), wg_gap (test worst-group RMSE / test RMSE).
Claims: headline GCDRO's worst-group RMSE below the better DRO baseline's (per seed the one of KL-DRO and chi2-DRO
with the lower VALIDATION worst-group RMSE). Mechanism gates (fixed here before any run): ERM's worst-group RMSE
exceeds its average RMSE by the factor wg_gap_min (the sub-population shift is active); and the chosen DRO baseline
puts at least noisy_focus_min times their share of weight on the noisy rows (the over-pessimism the paper names is
present). Compression: global magnitude pruning of the 10 coefficients (bias kept) at `sparsities`, no refit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import grid_edge

VARIANTS = ("erm", "dro_kl", "dro_chi2", "gcdro", "gcdro_nocal")
DRO = ("dro_kl", "dro_chi2")  # the standard DRO baselines (the headline's "best DRO baseline" view picks one per seed)


@dataclass(frozen=True)
class Config:
    data_seed: int = 2811  # split / shift / noise draws use rng([data_seed, seed]); tuning reads only validation rows
    test_frac: float = 0.3
    val_frac: float = 0.2
    minority_keep: float = 0.15  # share of the training pool's high-progression rows kept (sub-population shift)
    noise_frac: float = 0.1  # share of the kept training rows whose label gets noise
    noise_sd: float = 1.5  # label noise sd, in units of the table's target sd
    steps: int = 300  # full-batch gradient steps on theta (every variant)
    lr: float = 1.0  # step = lr / the largest eigenvalue of the weighted loss's Hessian (every variant)
    knn: int = 8  # neighbours of the kNN graph (symmetrised)
    graph_label_weight: float = 3.0  # the graph is on (X, w y): w = sqrt(10 features) weighs the label like all inputs
    alpha: float = 1.0  # weight of the geometry-calibration term (fixed, not tuned)
    flow_time: float = 0.5  # time of the weight flow per outer step
    flow_substeps: int = 5
    radius_grid: tuple = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)  # KL lam, chi2 lam, GCDRO beta: one grid for all
    wg_gap_min: float = 1.15  # mechanism gate: ERM test worst-group RMSE / test RMSE above this
    noisy_focus_min: float = 1.2  # mechanism gate: the chosen DRO baseline's weight on noisy rows / their share
    sparsities: tuple = (0.5, 0.7)

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius_grid", tuple(float(v) for v in self.radius_grid))
        object.__setattr__(self, "sparsities", tuple(float(v) for v in self.sparsities))
        g = self.radius_grid
        check(len(g) >= 3 and list(g) == sorted(set(g)) and g[0] > 0, f"gcdro.radius_grid: >= 3 increasing positive values, got {g}")
        check(0 < self.test_frac and 0 < self.val_frac and self.test_frac + self.val_frac < 0.9,
              "gcdro: test_frac, val_frac > 0 and test_frac + val_frac < 0.9")
        check(0 < self.minority_keep <= 1 and 0 <= self.noise_frac < 0.5 and self.noise_sd >= 0,
              "gcdro: 0 < minority_keep <= 1, 0 <= noise_frac < 0.5, noise_sd >= 0")
        check(self.steps >= 1 and self.lr > 0 and self.knn >= 1 and self.alpha >= 0, "gcdro: steps, knn >= 1; lr > 0; alpha >= 0")
        check(self.flow_time > 0 and self.flow_substeps >= 1, "gcdro: flow_time > 0 and flow_substeps >= 1")
        check(self.wg_gap_min >= 1 and self.noisy_focus_min > 0, "gcdro: wg_gap_min >= 1, noisy_focus_min > 0")
        check(all(0 < s < 1 for s in self.sparsities), f"gcdro.sparsities in (0, 1), got {self.sparsities}")


# ----------------------------------------------------------------------------------------------- weights
def kl_weights(loss: np.ndarray, lam: float) -> np.ndarray:
    """argmax_q sum q l - lam KL(q || uniform) over the simplex: softmax(l / lam)."""
    z = loss / lam
    z = np.exp(z - z.max())
    return z / z.sum()


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (sort-based, Held et al. / Duchi et al. 2008)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    idx = np.arange(1, len(v) + 1)
    rho = np.nonzero(u - css / idx > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1.0), 0.0)


def chi2_weights(loss: np.ndarray, lam: float) -> np.ndarray:
    """argmax_q sum q l - (lam / 2) chi2(q || uniform), chi2 = n sum (q_i - 1/n)^2: Proj_simplex(1/n + l / (lam n))."""
    n = len(loss)
    return project_simplex(1.0 / n + loss / (lam * n))


def knn_graph(X: np.ndarray, k: int) -> np.ndarray:
    """Symmetrised 0/1 kNN adjacency (i~j if either is among the other's k nearest, Euclidean), zero diagonal."""
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    k = min(k, len(X) - 1)
    nn = np.argsort(d2, axis=1)[:, :k]
    W = np.zeros((len(X), len(X)))
    W[np.repeat(np.arange(len(X)), k), nn.ravel()] = 1.0
    return np.maximum(W, W.T)


def laplacian(W: np.ndarray) -> np.ndarray:
    return np.diag(W.sum(1)) - W


def free_energy(q: np.ndarray, loss: np.ndarray, beta: float, alpha: float, L: np.ndarray, k: int) -> float:
    """(R1): sum q l - beta sum q log q - (alpha n / k) q^T L q."""
    n = len(q)
    return float(q @ loss - beta * np.sum(q * np.log(q)) - alpha * n / k * q @ L @ q)


def potential(q: np.ndarray, loss: np.ndarray, beta: float, alpha: float, L: np.ndarray, k: int) -> np.ndarray:
    """Phi = dF/dq for (R1)."""
    n = len(q)
    return loss - beta * (np.log(q) + 1.0) - 2.0 * alpha * n / k * (L @ q)


def flow_velocity(q: np.ndarray, Phi: np.ndarray, W: np.ndarray, k: int) -> np.ndarray:
    """(R2): dq_i/dt = sum_j (w_ij / k) (q_i + q_j)/2 (Phi_i - Phi_j); sums to 0 (mass conserved)."""
    theta = 0.5 * (q[:, None] + q[None, :])
    return ((W / k) * theta * (Phi[:, None] - Phi[None, :])).sum(1)


def _edges(W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = np.nonzero(W)
    return i, j, W[i, j]


def _flow_velocity_edges(q, Phi, edges, k: int, n: int) -> np.ndarray:
    """flow_velocity over the edge list (the same sum, O(n k) instead of O(n^2))."""
    i, j, w = edges
    return np.bincount(i, weights=(w / k) * 0.5 * (q[i] + q[j]) * (Phi[i] - Phi[j]), minlength=n)


def gcdro_flow(q: np.ndarray, loss: np.ndarray, beta: float, alpha: float, W: np.ndarray, L: np.ndarray, k: int,
               time: float, substeps: int) -> np.ndarray:
    """`substeps` explicit Euler steps of (R2), each of length min(time / substeps, 0.9 / s_max), s_max a Gershgorin
    bound on the flow's stiffness, s_i = sum_j (w_ij / k) theta_ij (beta / q_i + (2 alpha n / k) deg_i) (a small weight
    next to a large one relaxes fast under the entropy term): the discrete flow stays stable and an ascent of F, and
    an outer step covers less than `time` when the bound bites. A step is also cut so no weight loses more than half
    of itself, so q stays strictly positive and on the simplex (the flow conserves mass exactly)."""
    q = q.copy()
    n = len(q)
    dt = time / substeps
    i, j, w = _edges(W)
    deg = W.sum(1)
    cal = 2.0 * alpha * n / k
    for _ in range(substeps):
        Phi = potential(q, loss, beta, alpha, L, k)
        theta = (w / k) * 0.5 * (q[i] + q[j])
        v = np.bincount(i, weights=theta * (Phi[i] - Phi[j]), minlength=n)
        stiff = np.bincount(i, weights=theta * (beta / q[i] + cal * deg[i]), minlength=n)
        h = min(dt, 0.9 / max(float(stiff.max()), 1e-300))
        neg = v < 0
        if neg.any():
            h = min(h, 0.5 * float(np.min(q[neg] / -v[neg])))
        q = q + h * v
        q = np.maximum(q, 1e-300)
        q /= q.sum()  # round-off only: sum(v) = 0
    return q


# ----------------------------------------------------------------------------------------------- data
def load_table() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled diabetes table: X (442, 10) as shipped, y = progression in units of its sd (centred)."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return np.asarray(X, float), (y - y.mean()) / y.std()


def make_split(cfg: Config, seed: int) -> dict:
    """Test / validation rows (natural population, clean labels), training rows with the high-progression group
    subsampled to minority_keep and noise_frac of them with label noise; groups = target tertiles of the table."""
    X, y = load_table()
    groups = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    rng = np.random.default_rng([cfg.data_seed, seed])
    perm = rng.permutation(len(y))
    n_te, n_va = int(round(cfg.test_frac * len(y))), int(round(cfg.val_frac * len(y)))
    te, va, pool = perm[:n_te], perm[n_te:n_te + n_va], perm[n_te + n_va:]
    keep = (groups[pool] != 2) | (rng.random(len(pool)) < cfg.minority_keep)
    tr = pool[keep]
    noisy = np.zeros(len(tr), bool)
    noisy[rng.permutation(len(tr))[:int(round(cfg.noise_frac * len(tr)))]] = True
    y_tr = y[tr] + noisy * cfg.noise_sd * rng.standard_normal(len(tr))
    mu, sd = X[tr].mean(0), X[tr].std(0)

    def design(rows):
        return np.c_[(X[rows] - mu) / sd, np.ones(len(rows))]

    return {"A_tr": design(tr), "y_tr": y_tr, "noisy": noisy, "g_tr": groups[tr],
            "A_va": design(va), "y_va": y[va], "g_va": groups[va],
            "A_te": design(te), "y_te": y[te], "g_te": groups[te]}


def graph_points(cfg: Config, split: dict) -> np.ndarray:
    """The training rows as points z = (standardised x, graph_label_weight * y) for the kNN graph."""
    return np.c_[split["A_tr"][:, :-1], cfg.graph_label_weight * split["y_tr"]]


def group_rmse(A: np.ndarray, y: np.ndarray, g: np.ndarray, w: np.ndarray) -> dict:
    r = A @ w - y
    out = {"rmse": float(np.sqrt(np.mean(r ** 2)))}
    per = [float(np.sqrt(np.mean(r[g == k] ** 2))) for k in range(3) if np.any(g == k)]
    out.update({f"rmse_g{k}": float(np.sqrt(np.mean(r[g == k] ** 2))) for k in range(3) if np.any(g == k)})
    out["wg_rmse"] = max(per)
    return out


# ----------------------------------------------------------------------------------------------- training
def fit(cfg: Config, split: dict, method: str, radius: float, W: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Gradient descent on theta for sum_i q_i l_i(theta), q from the method's weights each step, step lr / lambda_max of
    the weighted Hessian 2 A^T diag(q) A; returns (theta, q)."""
    A, y = split["A_tr"], split["y_tr"]
    n = len(y)
    theta = np.zeros(A.shape[1])
    q = np.full(n, 1.0 / n)
    alpha = cfg.alpha if method == "gcdro" else 0.0
    k = min(cfg.knn, n - 1)
    if method in ("gcdro", "gcdro_nocal"):
        W = knn_graph(graph_points(cfg, split), cfg.knn) if W is None else W
        L = laplacian(W)
    for _ in range(cfg.steps):
        res = A @ theta - y
        loss = res ** 2
        if method == "dro_kl":
            q = kl_weights(loss, radius)
        elif method == "dro_chi2":
            q = chi2_weights(loss, radius)
        elif method in ("gcdro", "gcdro_nocal"):
            q = gcdro_flow(q, loss, radius, alpha, W, L, k, cfg.flow_time, cfg.flow_substeps)
        H = 2.0 * A.T @ (q[:, None] * A)  # Hessian of sum q l: the step is lr / its largest eigenvalue, so weights
        theta = theta - cfg.lr / np.linalg.eigvalsh(H)[-1] * 2.0 * A.T @ (q * res)  # on a few rows cannot diverge
    return theta, q


def prepare(cfg: Config, res) -> dict:
    """Nothing shared: each seed draws its own split, shift and noise in train() (the table ships with scikit-learn)."""
    X, y = load_table()
    return {"note": "scikit-learn diabetes table; per-seed splits in train()", "n_rows": len(y)}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """Tune the radius on the validation worst-group RMSE (DRO variants), refit nothing: keep the chosen run."""
    check(variant in VARIANTS, f"gcdro: variant must be one of {VARIANTS}, got {variant!r}")
    split = make_split(cfg, seed)
    W = knn_graph(graph_points(cfg, split), cfg.knn) if variant.startswith("gcdro") else None
    grid = (0.0,) if variant == "erm" else cfg.radius_grid
    runs = []
    for i, radius in enumerate(grid):
        theta, q = fit(cfg, split, variant, radius, W)
        val = group_rmse(split["A_va"], split["y_va"], split["g_va"], theta)["wg_rmse"]
        runs.append((val, i, theta, q))
        log(i, val_wg_rmse=val)
    val, i, theta, q = min(runs, key=lambda r: (r[0] if math.isfinite(r[0]) else math.inf, r[1]))
    noisy = split["noisy"]
    stats = {"val_wg_rmse": val, "tuned_radius": float(grid[i]), "tuned_index": float(i),
             "grid_edge": 0.0 if variant == "erm" else grid_edge(i, len(grid)),
             "noisy_mass": float(q[noisy].sum() / max(noisy.mean(), 1e-12)) if noisy.any() else 1.0,
             "minority_mass": float(q[split["g_tr"] == 2].sum() / max((split["g_tr"] == 2).mean(), 1e-12)),
             "n_train": float(len(q)), "weight_max_ratio": float(q.max() * len(q))}
    stats.update({f"val_score@{j}": float(r[0]) for j, r in enumerate(sorted(runs, key=lambda r: r[1]))})
    return {"weight": torch.tensor(theta[:-1], dtype=torch.float64)[None, :],
            "bias": torch.tensor(theta[-1:], dtype=torch.float64), "seed": seed, "stats": stats}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the coefficients (standardised features, so magnitude = effect size), bias kept."""
    from ..compress.magnitude import magnitude_levels

    levels = magnitude_levels({"weight": model["weight"], "bias": model["bias"]}, cfg.sparsities, include=("weight",))
    return {lvl: {**model, **state} for lvl, state in levels.items()}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    split = make_split(cfg, int(model["seed"]))
    theta = np.r_[model["weight"].numpy().ravel(), model["bias"].numpy().ravel()]
    out = group_rmse(split["A_te"], split["y_te"], split["g_te"], theta)
    out["wg_gap"] = out["wg_rmse"] / out["rmse"]
    out["nnz"] = float(np.count_nonzero(theta[:-1]))
    out.update({k: float(v) for k, v in model["stats"].items()})
    return out


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """View "dro|best": per seed and stage, the DRO baseline (KL or chi2) with the lower validation worst-group RMSE
    (dense/val_wg_rmse; the test never picks); the compressed views use the same choice."""
    out = [dict(r) for r in rows]
    for seed in sorted({r["seed"] for r in rows}):
        cands = [r for r in rows if r["seed"] == seed and r["variant"] in DRO and r.get("dense/val_wg_rmse") is not None]
        if len(cands) < len(DRO):
            continue
        pick = min(cands, key=lambda r: (r["dense/val_wg_rmse"], DRO.index(r["variant"])))
        out.append({**pick, "variant": "dro|best"})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    lvl = f"{cfg.sparsities[0]:.2f}"
    setting = (f"diabetes table, target-tertile groups, {cfg.minority_keep:g} of the high group kept in training, "
               f"{cfg.noise_frac:g} of training labels + N(0, {cfg.noise_sd:g}^2), linear model")
    shift = Gate(f"sub-population shift active: ERM's test worst-group RMSE exceeds its average RMSE by the factor "
                 f"{cfg.wg_gap_min:g} (measured)", variant="erm", metric="wg_gap", above=cfg.wg_gap_min, kind="mechanism")
    pessimism = Gate(f"over-pessimism present: the chosen DRO baseline puts >= {cfg.noisy_focus_min:g} x their share of "
                     f"weight on the noisy training rows (measured)", variant="dro|best", metric="noisy_mass",
                     above=cfg.noisy_focus_min, kind="mechanism")

    def edge(v: str) -> Gate:
        return edge_gate(v, "tuned radius", "its grid")

    return [
        Comparison("wg_rmse", "gcdro", "dro|best", better="lower", role="headline",
                   gates=(shift, pessimism, edge("gcdro"), edge("dro|best")),
                   text=f"GCDRO has lower test worst-group RMSE than the better standard DRO baseline (KL-DRO or "
                        f"chi2-DRO, chosen per seed on validation), same radius grid and tuning rule ({setting})",
                   refuted_if="the paired difference GCDRO minus the chosen DRO baseline in test worst-group RMSE has "
                              "its 95% interval above 0 (GCDRO worse)"),
        Comparison("wg_rmse", "gcdro", "gcdro_nocal", better="lower", role="secondary",
                   gates=(shift, edge("gcdro"), edge("gcdro_nocal")),
                   text="ablation: the geometry-calibration term lowers worst-group RMSE (GCDRO vs the same flow with "
                        "alpha = 0, i.e. entropy-regularised graph-Wasserstein DRO)"),
        Comparison("wg_rmse", "gcdro", "erm", better="lower", role="secondary", gates=(shift, edge("gcdro")),
                   text="GCDRO has lower test worst-group RMSE than ERM"),
        Comparison("wg_rmse", "gcdro", "dro_kl", better="lower", role="secondary", gates=(edge("gcdro"), edge("dro_kl")),
                   text="GCDRO beats KL-DRO on worst-group RMSE"),
        Comparison("wg_rmse", "gcdro", "dro_chi2", better="lower", role="secondary",
                   gates=(edge("gcdro"), edge("dro_chi2")), text="GCDRO beats chi2-DRO on worst-group RMSE"),
        Comparison("rmse", "gcdro", "dro|best", better="lower", role="secondary",
                   text="GCDRO has lower average test RMSE than the chosen DRO baseline (less over-pessimism)"),
        Comparison("noisy_mass", "gcdro", "gcdro_nocal", better="lower", role="control",
                   text="diagnostic of the paper's mechanism: the calibration term puts less weight on the noisy rows "
                        "than the same flow without it"),
        Comparison("rmse", "gcdro", "erm", better="lower", kind="close", margin=0.05, role="control",
                   text="GCDRO's average test RMSE within 5% of ERM's (robustness not bought with the average)"),
        Comparison("wg_rmse", "gcdro", "dro|best", better="lower", stage="compressed", level=lvl, role="control",
                   text=f"compressed ({lvl} of the coefficients pruned, no refit): GCDRO vs the chosen DRO baseline"),
        Comparison("nnz", "gcdro", "", stage="compressed", level=lvl, role="fact",
                   text=f"non-zero coefficients after pruning {lvl} (of 10)"),
    ]


SPEC = register_paper(PaperSpec(
    id="gcdro",
    title="Geometry-Calibrated DRO: Combating Over-Pessimism with Free Energy Implications (Liu, Wu, Wang, Zou, Li, "
          "Cui, ICML 2024)",
    claim="GCDRO beats standard DRO",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare,
    train=train,
    evaluate=evaluate,
    comparisons=comparisons,
    derive=derive,
    compress=compress,
    fidelity="reconstruction",
    data="scikit-learn's bundled diabetes table (442 x 10, offline): groups = target tertiles; per seed 30% test and 20% "
         "validation rows (natural population, clean labels), training pool with only 20% of the high-progression "
         "rows kept (sub-population shift) and 10% of the kept labels + N(0, 1.5^2) (label noise, target-sd units)",
    substitutions="paper: its own synthetic and real regression sets (not retrievable here) and its exact objective and "
                  "algorithm (method section not retrievable, no public code): the free energy (R1) and graph "
                  "Wasserstein flow (R2) are our reconstruction from the abstract; a linear model; penalised "
                  "(Lagrangian) forms of KL- and chi2-DRO with the same radius grid; injected shift and noise on the "
                  "diabetes table",
    compression="global magnitude pruning of the 10 linear coefficients (bias kept, no refit) at each level",
))
