"""local_steps_fl: "Provable Benefits of Local Steps in Heterogeneous Federated Learning for Neural Networks: A
Feature Learning Perspective" (Yajie Bao, Michael Crawshaw, Mingrui Liu), ICML 2024.

The paper's text beyond its abstract was not retrievable here (searched again for contract v3: the stored copies of
the PMLR page, OpenReview, the ICML page and the PMLR PDF return the abstract only, whatever the query: data model,
Theorem, Algorithm 1, feature noise); the authors' repository
(github.com/MingruiLiu-ML-Lab/Provable-Benefit-Local-Steps-Feature-Learning) holds only the real-data
experiments (FeatureCIFAR, ResNet-18), which were read and followed for the image part. So:

* Synthetic part (fidelity: reconstruction). A two-patch data model in the style the feature-learning theory
  the paper builds on (Cao et al. 2022 / Kou et al. 2023, "signal patch + noise patch"), with the
  heterogeneity the abstract and the official code describe: client k's label-related feature is its own
  pattern v_k (K orthogonal vectors, ||v_k|| = mu_norm, a random rotation per seed), and its data carry
  *feature noise* along another client's pattern (the official Sec. F.2 protocol: every client i picks one
  random other client j and its data are shifted by -rho x client j's data). Client k, label y ~ U{-1, +1}:
      x = [ y v_k ,  xi - alpha y v_{pi(k)} ],   xi ~ N(0, sigma_p^2 (I - sum_j v_j v_j^T / ||v_j||^2)),
  pi(k) != k uniform. Two-layer CNN (Cao et al. 2022): f(W, x) = F_{+1} - F_{-1},
  F_j = (1/m) sum_r sum_p relu(<w_{j,r}, x_p>)^q, logistic loss, Gaussian init N(0, sigma_0^2), full-batch GD.
  Feature learning is measured as the theory does, by the correlation of the filters with each feature:
  corr_k = min_j max_r <w_{j,r}, j v_k> / ||v_k||, reported relative to the model's best feature.
* Why global updates miss a feature (derived here for relu^q, `cancel_margin`; tested on a hand case): while the
  feature components dominate the activations, GD raises gamma = <w_{j,r}, j v_c> at a rate proportional to
  gamma^{q-1} on client c (its signal patch) and lowers it at alpha^q gamma^{q-1} on every client whose noise patch
  carries -alpha y v_c; the global update averages them, so the drift is (1 - hits_c alpha^q) gamma^{q-1} / K and
  feature c is cancelled when hits_c alpha^q >= 1. (v2 used hits x alpha, the q = 1 case, and at alpha = 0.6,
  q = 3 no draw of K = 4 clients met the relu^q condition; parallel GD learned that feature on seeds 0 and 1.)
  Local GD lets client c's own winner-take-all growth run for local_steps steps before the averaging.
  This condition is config arithmetic, so it is only a fact row (cancelled_feature, cancel_margin); the headline
  is gated on what the runs MEASURE: parallel GD's correlation with the noisiest feature (the one in the most
  clients' noise; ties: their mean) below MISSED_BELOW x its best feature's (premise), and Local GD's above
  parallel GD's, paired (the mechanism, also a secondary row). alpha = 0.8 (hits >= 2 cancel: 0.8^3 x 2 = 1.02,
  89% of draws) was set from the filters' correlations on probe seeds 100-109 (not evaluation seeds; no test
  number seen): parallel GD's noisiest-feature correlation 0.07 (relative, mean; 2 of 10 above 0.25), Local GD's
  0.40, higher than parallel GD's in all 10; at alpha 0.6 and the same grid, where no draw meets the condition,
  parallel GD 0.30 (4 of 10 above 0.6) and Local GD 0.85. K stays 4 (the premise holds; a step costs K).
* Algorithms at equal gradient evaluations (rounds x local_steps steps, K full-batch client gradients per step;
  paperflow.federated.local_gd on stacked client copies; local_gd_batched runs the synthetic grid): Local GD (average every local_steps), one-shot
  averaging (average once at the end), parallel GD with global updates (average every step = GD on the average
  of the client losses).
* Fashion-MNIST part (fidelity: official code's protocol; the CNN differs): labels binarized (class % 2, the
  official FeatureCIFAR --binarize-classes), the official feature-heterogeneity partition
  (federated.feature_heterogeneity_split, H = heterogeneity), a one-conv-layer CNN (the official SimpleCNN with
  n_cnn_layers=1: conv 5x5 stride 2 + ReLU + linear) instead of ResNet-18; Local SGD (batch per client, average
  every local_steps) vs parallel SGD (average every step: minibatch SGD with K x batch examples per step), same
  steps and batch, plain SGD (no augmentation, no weight decay, no lr decay), no feature noise (main experiment).
* Equal tuning (paperflow.tuning): every algorithm gets the same lr grid and keeps the lr with the highest
  validation accuracy of its final global model (ties to the smaller lr; a diverged run scores nan):
  synthetic in every job on a validation draw of that seed, Fashion-MNIST once in prepare() with tune_seed
  on held-out training images. tuned_lr and grid_edge go into the metrics. (History: the rule was first the
  lowest validation loss, which put parallel GD at the grid's lower edge; it became accuracy, and after the
  grid-edge gate still failed for parallel GD the grid was extended down to 0.01, for every algorithm; in v3, at
  alpha 0.8, down to 0.001 for the same reason, seen on probe seeds' validation accuracy.)
* A seed varies the synthetic draw (features, noise, feature-noise partners, splits) and the init; for Fashion-MNIST
  the partition, init and minibatches. Compression: global magnitude pruning of each final global CNN, no fine-tuning.

Substitutions: K=4, d=100, 40 examples per client, m=10, q=3, alpha=0.8, 300 GD steps (5 rounds of 60), the 7-value lr grid
0.001..1 run for all three algorithms at once (federated.local_gd_batched: the same math as local_gd, one batched
forward/backward for the 21 runs; the grid was widened down from v2's 0.01..1 after parallel GD chose its lower edge
on the probe seeds' validation accuracy at alpha 0.8); Fashion-MNIST: 5 clients,
4000 images, 200 steps of batch 32. A job runs all algorithms of its data set; derive() makes views "<variant>|<alg>".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_levels
from ..data.images import load_fashion, to_float
from ..federated import feature_heterogeneity_split, local_gd, local_gd_batched
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("synthetic", "fashion")
ALGS = {"synthetic": ("local_gd", "one_shot", "parallel_gd"), "fashion": ("local_sgd", "parallel_sgd")}
MISSED_BELOW = 0.5  # mechanism gate: a feature at < 0.5 x the model's best feature correlation is not learned (learned_frac's rule)
SEP = "__"  # metric column "<metric>__<algorithm>" in a job's row; derive() makes the view "<variant>|<algorithm>"


@dataclass(frozen=True)
class Config:
    # synthetic data model and CNN
    clients: int = 4
    dim: int = 100  # patch dimension d
    n_per_client: int = 40  # training examples per client
    n_val_per_client: int = 100  # validation draw per client (lr choice)
    n_test_per_client: int = 500
    mu_norm: float = 8.0  # ||v_k||
    sigma_p: float = 1.0  # noise patch std per coordinate
    alpha: float = 0.8  # feature-noise strength (fraction of a pattern); 0.8^3 x 2 hits >= 1 (see cancel_margin)
    filters: int = 10  # m, per class
    power: int = 3  # q of relu(z)^q
    sigma_0: float = 0.05  # init std
    rounds: int = 5
    local_steps: int = 60  # steps between averagings (Local GD)
    lrs: tuple = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)  # the same grid for every algorithm
    # Fashion-MNIST
    f_clients: int = 5
    f_train: int = 4000
    f_val: int = 1000
    f_test: int = 2000
    heterogeneity: float = 0.5  # official H (fraction of the non-iid pool)
    f_channels: int = 10  # official SimpleCNN MNIST width
    f_rounds: int = 8
    f_local_steps: int = 25
    f_batch: int = 32
    f_lrs: tuple = (0.03, 0.1, 0.3)
    data_seed: int = 0  # Fashion-MNIST subsets
    tune_seed: int = 1000  # Fashion-MNIST lr tuning run (not an evaluation seed)
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    learned_ratio: float = 0.5  # a feature counts as learned at >= this fraction of the model's best feature corr
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("lrs", "f_lrs", "sparsities"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        check(self.clients >= 2 and self.f_clients >= 2, "clients and f_clients must be >= 2 (feature noise needs another client)")
        check(self.dim > self.clients, f"dim must exceed clients (orthogonal features + noise), got {self.dim}")
        check(min(self.n_per_client, self.n_val_per_client, self.n_test_per_client) >= 2, "per-client sizes must be >= 2")
        check(self.mu_norm > 0 and self.sigma_p >= 0 and self.alpha >= 0 and self.sigma_0 > 0, "mu_norm, sigma_0 > 0; sigma_p, alpha >= 0")
        check(self.filters >= 1 and self.power >= 1, "filters and power must be >= 1")
        check(min(self.rounds, self.local_steps, self.f_rounds, self.f_local_steps, self.f_batch) >= 1, "rounds, steps and batch must be >= 1")
        for name in ("lrs", "f_lrs"):
            g = getattr(self, name)
            check(len(g) >= 1 and list(g) == sorted(g) and g[0] > 0, f"{name} must be an ascending list of positive lrs, got {g}")
        check(0 <= self.heterogeneity <= 1, f"heterogeneity must be in [0, 1], got {self.heterogeneity}")
        check(self.f_train // self.f_clients >= 2 and self.f_val >= 1 and self.f_test >= 1, "f_train >= 2 f_clients, f_val, f_test >= 1")
        check(self.f_train + self.f_val <= 60000 and self.f_test <= 10000, "f_train + f_val <= 60000 and f_test <= 10000")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities,
              f"sparsities in [0, 1) and compare_level among them, got {self.sparsities}, {self.compare_level}")
        check(0 < self.learned_ratio < 1, "learned_ratio must be in (0, 1)")


# ----------------------------------------------------------------------------------------------------
# Synthetic data model and two-layer CNN


def world(cfg: Config, seed: int) -> dict:
    """Features V (K, d) with ||v_k|| = mu_norm (random orthonormal directions), feature-noise partners pi(k) != k,
    and the projector removing the features from the noise."""
    gen = torch.Generator().manual_seed(10_007 * seed + 1)
    q, _ = torch.linalg.qr(torch.randn(cfg.dim, cfg.dim, generator=gen, dtype=torch.float64))
    basis = q[:, : cfg.clients].T.float()  # (K, d) orthonormal
    shift = torch.randint(1, cfg.clients, (cfg.clients,), generator=gen)
    partners = (torch.arange(cfg.clients) + shift) % cfg.clients
    return {"V": basis * cfg.mu_norm, "partners": partners, "proj": torch.eye(cfg.dim) - basis.T @ basis}


def draw(cfg: Config, w: dict, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n examples per client: X (K, n, 2, d) = [signal patch y v_k, noise patch xi - alpha y v_pi(k)], y (K, n) in +-1."""
    K, d = cfg.clients, cfg.dim
    y = torch.randint(0, 2, (K, n), generator=gen).float() * 2 - 1
    xi = (torch.randn(K, n, d, generator=gen) * cfg.sigma_p) @ w["proj"]
    signal = y[..., None] * w["V"][:, None, :]
    noise = xi - cfg.alpha * y[..., None] * w["V"][w["partners"]][:, None, :]
    return torch.stack([signal, noise], dim=2), y


def synthetic_data(cfg: Config, seed: int) -> dict:
    w = world(cfg, seed)
    out = {"world": w}
    for i, (name, n) in enumerate((("train", cfg.n_per_client), ("val", cfg.n_val_per_client), ("test", cfg.n_test_per_client))):
        out[name] = draw(cfg, w, n, torch.Generator().manual_seed(10_007 * seed + 2 + i))
    return out


def cnn(W: torch.Tensor, X: torch.Tensor, q: int) -> torch.Tensor:
    """f = F_{+1} - F_{-1}, F_j = (1/m) sum_r sum_p relu(<w_{j,r}, x_p>)^q; X (K, n, 2, d). W (2, m, d) is one model for
    every client, W (*lead, K, 2, m, d) one copy per client (lead: independent runs) -> (*lead, K, n)."""
    W = W.expand(X.shape[0], *W.shape) if W.dim() == 3 else W
    lead = W.shape[:-4]
    F_ = (torch.relu(torch.einsum("ckjmd,knpd->cknjmp", W.reshape(-1, *W.shape[-4:]), X)) ** q).sum(-1).mean(-1)
    return (F_[..., 0] - F_[..., 1]).reshape(*lead, *F_.shape[1:3])


def client_losses(W: torch.Tensor, X: torch.Tensor, y: torch.Tensor, q: int) -> torch.Tensor:
    """(*lead, K) mean logistic loss log(1 + exp(-y f)) of each client (copy k on client k's data)."""
    return F.softplus(-y * cnn(W, X, q)).mean(-1)


def feature_corr(W: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """(K,) corr_k = min_{j in +-1} max_r <w_{j,r}, j v_k> / ||v_k|| (W (2, m, d): index 0 is j=+1, 1 is j=-1)."""
    unit = V / V.norm(dim=1, keepdim=True)
    return torch.minimum((W[0] @ unit.T).max(0).values, (W[1] @ (-unit).T).max(0).values)


def cancel_margin(cfg: Config, partners: torch.Tensor) -> torch.Tensor:
    """(K,) hits_c x alpha^q: the relu^q cancellation condition of each feature c under global updates.

    Filter w_{j,r} with gamma = <w_{j,r}, j v_c> > 0, while the feature components dominate the patch activations.
    Client c's signal patch y v_c activates it on its y = j half: GD raises gamma at (q/m) ||v_c||^2 gamma^{q-1} x
    (-l'); a client k with pi(k) = c has the noise patch -alpha y v_c + xi, which activates it on the y = -j half at
    alpha gamma, and GD lowers gamma at (q/m) ||v_c||^2 alpha^q gamma^{q-1} x (-l'). The global update averages the
    K clients, so at equal loss derivatives (at init -l' = 1/2 everywhere) gamma's drift is proportional to
    (1 - hits_c alpha^q) gamma^{q-1} / K: feature c is cancelled (drift <= 0) when hits_c alpha^q >= 1.
    (The v2 premise used hits x alpha, the q = 1 case.) Local GD runs each client's own growth for local_steps
    steps first; gamma^{q-1} growth is winner-take-all, so client c's copy outgrows the others' decrease."""
    hits = torch.bincount(partners, minlength=cfg.clients).to(torch.float64)
    return hits * cfg.alpha ** cfg.power


def interval_of(cfg: Config, alg: str) -> int:
    steps = cfg.rounds * cfg.local_steps if alg in ALGS["synthetic"] else cfg.f_rounds * cfg.f_local_steps
    return {"local_gd": cfg.local_steps, "local_sgd": cfg.f_local_steps, "one_shot": steps}.get(alg, 1)


def fit_synthetic(cfg: Config, data: dict, seed: int) -> dict:
    """Every (algorithm, lr) of the grid from the same init, in one batched run (federated.local_gd_batched: the same
    math as local_gd per run). Returns {alg: [final global filters (2, m, d) or None if diverged, one per lr]}."""
    X, y = data["train"]
    W0 = torch.randn(2, cfg.filters, cfg.dim, generator=torch.Generator().manual_seed(10_007 * seed + 9)) * cfg.sigma_0
    runs = [(alg, lr) for alg in ALGS["synthetic"] for lr in cfg.lrs]
    W, diverged = local_gd_batched(W0.expand(len(runs), cfg.clients, *W0.shape), lambda W: client_losses(W, X, y, cfg.power),
                                   steps=cfg.rounds * cfg.local_steps, intervals=[interval_of(cfg, a) for a, _ in runs],
                                   lrs=[lr for _, lr in runs])
    out: dict = {alg: [] for alg in ALGS["synthetic"]}
    for i, (alg, _) in enumerate(runs):
        out[alg].append(None if bool(diverged[i]) else W[i].clone())
    return out


# ----------------------------------------------------------------------------------------------------
# Fashion-MNIST: binarized labels, feature-heterogeneous clients, one-conv-layer CNN on stacked client copies


def init_cnn(cfg: Config, gen: torch.Generator) -> dict:
    """PyTorch's default (kaiming-uniform) init of conv(1 -> C, 5x5) and linear(C*14*14 -> 2)."""
    C, fan = cfg.f_channels, cfg.f_channels * 14 * 14
    u = lambda shape, fan_in: (torch.rand(*shape, generator=gen) * 2 - 1) / fan_in ** 0.5  # noqa: E731
    return {"conv": u((C, 1, 5, 5), 25), "conv_b": u((C,), 25), "fc": u((2, fan), fan), "fc_b": u((2,), fan)}


def cnn_logits(state: dict, x: torch.Tensor) -> torch.Tensor:
    """Stacked copies: state tensors with a leading K, x (K, b, 1, 28, 28) -> (K, b, 2); or one model, x (b, 1, 28, 28)."""
    if state["conv"].dim() == 4:
        h = torch.relu(F.conv2d(x, state["conv"], state["conv_b"], stride=2, padding=2)).flatten(1)
        return h @ state["fc"].T + state["fc_b"]
    K, b = x.shape[:2]
    C = state["conv"].shape[1]
    h = F.conv2d(x.transpose(0, 1).reshape(b, K, 28, 28), state["conv"].reshape(K * C, 1, 5, 5),
                 state["conv_b"].reshape(-1), stride=2, padding=2, groups=K)
    h = torch.relu(h).reshape(b, K, -1).transpose(0, 1)  # (K, b, C*196)
    return torch.einsum("kbf,kof->kbo", h, state["fc"]) + state["fc_b"][:, None, :]


def fit_fashion(cfg: Config, data: dict, alg: str, lr: float, seed: int, log=None) -> dict:
    gen = torch.Generator().manual_seed(10_007 * seed + 11)
    parts = torch.stack(feature_heterogeneity_split(data["y_train"], data["fine_train"], cfg.f_clients, cfg.heterogeneity, gen))
    state0 = init_cnn(cfg, gen)
    params = {k: torch.nn.Parameter(v.expand(cfg.f_clients, *v.shape).clone()) for k, v in state0.items()}
    K, n = parts.shape

    def losses(step: int) -> torch.Tensor:
        idx = parts.gather(1, torch.randint(0, n, (K, cfg.f_batch), generator=gen))
        x = to_float(data["x_train"][idx.reshape(-1)]).reshape(K, cfg.f_batch, 1, 28, 28)
        logits = cnn_logits(params, x)
        return F.cross_entropy(logits.reshape(-1, 2), data["y_train"][idx].reshape(-1), reduction="none").view(K, -1).mean(1)

    local_gd(list(params.values()), losses, steps=cfg.f_rounds * cfg.f_local_steps, interval=interval_of(cfg, alg), lr=lr,
             log=log, log_every=cfg.log_every)
    return {k: p[0].detach().clone() for k, p in params.items()}


@torch.no_grad()
def fashion_scores(state: dict, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(accuracy %, mean cross-entropy) of one global model on uint8 images x."""
    logits = torch.cat([cnn_logits(state, to_float(x[a:a + 1000])) for a in range(0, x.shape[0], 1000)])
    return 100.0 * float((logits.argmax(-1) == y).float().mean()), float(F.cross_entropy(logits, y))


def _guarded(fit):
    def run(lr: float):
        try:
            return fit(lr)
        except FloatingPointError:  # diverged (non-finite loss): never chosen
            return None, float("nan")
    return run


def prepare(cfg: Config, res) -> dict:
    """Fashion-MNIST subsets (binary label = class % 2, fine class kept for the partition) and the lr each
    algorithm keeps (validation accuracy of a tune_seed run over the grid)."""
    d = load_fashion(res["fashion_mnist"])
    gen = torch.Generator().manual_seed(cfg.data_seed)
    tr = torch.randperm(d["x_train"].shape[0], generator=gen)[: cfg.f_train + cfg.f_val]
    te = torch.randperm(d["x_test"].shape[0], generator=gen)[: cfg.f_test]
    x, y = d["x_train"][tr].contiguous(), d["y_train"][tr].long()
    data = {"x_train": x[: cfg.f_train], "fine_train": y[: cfg.f_train], "y_train": y[: cfg.f_train] % 2,
            "x_val": x[cfg.f_train:], "y_val": y[cfg.f_train:] % 2,
            "x_test": d["x_test"][te].contiguous(), "y_test": d["y_test"][te].long() % 2}
    tuning = {}
    for alg in ALGS["fashion"]:
        def fit(lr: float, alg=alg):
            state = fit_fashion(cfg, data, alg, lr, cfg.tune_seed)
            return state, fashion_scores(state, data["x_val"], data["y_val"])[0]
        _, tuning[alg] = tune(cfg.f_lrs, _guarded(fit))
    return {**data, "tuning": tuning}


# ----------------------------------------------------------------------------------------------------
# Stages


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"local_steps_fl: unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")
    out = {"variant": variant, "seed": seed, "models": {}, "tuning": {}}
    if variant == "fashion":
        for alg in ALGS["fashion"]:
            info = data["tuning"][alg]
            tagged = None if log is None else (lambda step, alg=alg, **m: log(step, **{f"{alg}/{k}": v for k, v in m.items()}))
            out["models"][alg] = fit_fashion(cfg, data, alg, info["tuned_lr"], seed, tagged)
            out["tuning"][alg] = info
        return out
    syn = synthetic_data(cfg, seed)
    Xv, yv = syn["val"]
    fits = fit_synthetic(cfg, syn, seed)
    for alg in ALGS["synthetic"]:
        def fit(lr: float, alg=alg):
            W = fits[alg][cfg.lrs.index(lr)]
            if W is None:  # diverged: never chosen
                return None, float("nan")
            with torch.no_grad():
                return W, 100.0 * float(((cnn(W, Xv, cfg.power) * yv) > 0).float().mean())
        W, info = tune(cfg.lrs, fit)
        out["models"][alg], out["tuning"][alg] = W, info
        if log is not None:
            log(0, **{f"{alg}/tuned_lr": info["tuned_lr"]})
    return out


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    m: dict[str, float] = {}
    if model["variant"] == "fashion":
        steps = cfg.f_rounds * cfg.f_local_steps
        for alg, state in model["models"].items():
            acc, loss = fashion_scores(state, data["x_test"], data["y_test"])
            m.update({f"acc{SEP}{alg}": acc, f"test_loss{SEP}{alg}": loss,
                      f"grad_evals{SEP}{alg}": float(steps * cfg.f_clients * cfg.f_batch)})
    else:
        syn = synthetic_data(cfg, model["seed"])
        (X, y), (Xt, yt), V = syn["train"], syn["test"], syn["world"]["V"]
        steps, margin = cfg.rounds * cfg.local_steps, cancel_margin(cfg, syn["world"]["partners"])
        noisiest = margin == margin.max()  # the feature(s) in the most clients' feature noise (ties: their mean)
        m["cancel_margin"] = float(margin.max())  # fact (config + draw): relu^q condition hits x alpha^q
        m["cancelled_feature"] = float(margin.max() >= 1.0)
        for alg, W in model["models"].items():
            with torch.no_grad():
                acc = 100.0 * ((cnn(W, Xt, cfg.power) * yt) > 0).float().mean(1)  # per client
                train_acc = 100.0 * float(((cnn(W, X, cfg.power) * y) > 0).float().mean())
                corr = feature_corr(W, V)
            best = float(corr.max())
            m.update({f"acc{SEP}{alg}": float(acc.mean()), f"worst_acc{SEP}{alg}": float(acc.min()),
                      f"train_acc{SEP}{alg}": train_acc, f"min_corr{SEP}{alg}": float(corr.min()),
                      f"min_rel_corr{SEP}{alg}": float(corr.min()) / best if best > 0 else 0.0,
                      f"noisiest_rel_corr{SEP}{alg}": float(corr[noisiest].mean()) / best if best > 0 else 0.0,
                      f"learned_frac{SEP}{alg}": float((corr >= cfg.learned_ratio * best).float().mean()) if best > 0 else 0.0,
                      f"grad_evals{SEP}{alg}": float(steps * cfg.clients * cfg.n_per_client)})
            m.update({f"corr_feature{k}{SEP}{alg}": float(c) for k, c in enumerate(corr)})
    for alg, info in model["tuning"].items():
        m.update({f"tuned_lr{SEP}{alg}": info["tuned_lr"], f"grid_edge{SEP}{alg}": info["grid_edge"]})
    return m


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of every algorithm's final global CNN (filters; conv + linear weights)."""
    levels = {level_name(s): {**model, "models": {}} for s in cfg.sparsities}
    for alg, state in model["models"].items():
        pruned = magnitude_levels({"W": state} if variant == "synthetic" else state, cfg.sparsities)
        for level, st in pruned.items():
            levels[level]["models"][alg] = st["W"] if variant == "synthetic" else st
    return levels


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Views "<variant>|<algorithm>": the columns "<stage>/<metric>__<algorithm>" renamed "<stage>/<metric>"."""
    out = list(rows)
    for r in rows:
        key = {k: v for k, v in r.items() if "/" not in k or SEP not in k}  # ids, timing, data properties
        for alg in ALGS.get(r["variant"], ()):
            cols = {c[: -len(SEP + alg)]: v for c, v in r.items() if c.endswith(SEP + alg)}
            out.append({**key, "variant": f"{r['variant']}|{alg}", **cols})
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    loc, one, par = "synthetic|local_gd", "synthetic|one_shot", "synthetic|parallel_gd"
    floc, fpar = "fashion|local_sgd", "fashion|parallel_sgd"
    fitted = Gate("parallel GD fits its training data (train acc > 90%)", variant=par, metric="train_acc", above=90.0)
    missed = Gate(f"premise, measured: global updates miss the noisiest feature (parallel GD's filter correlation with the "
                  f"feature in the most clients' feature noise < {MISSED_BELOW} x its best feature's, mean over seeds)",
                  variant=par, metric="noisiest_rel_corr", below=MISSED_BELOW, kind="mechanism")
    local_learns = Comparison("noisiest_rel_corr", loc, par, better="higher", role="secondary", gates=(edge_gate(loc), edge_gate(par)),
                              text="Local GD learns the feature that global updates miss: its filters' correlation with the "
                                   "noisiest feature (relative to its best feature) is higher than parallel GD's")
    learns = Gate("Local GD learns the noisiest feature more than parallel GD (paired noisiest_rel_corr, reproduced)",
                  comparison=local_learns, kind="mechanism")
    level = level_name(cfg.compare_level)
    return [
        Comparison("acc", loc, par, better="higher", role="headline",
                   gates=(edge_gate(loc), edge_gate(par), fitted, missed, learns),
                   refuted_if="parallel GD's test accuracy is higher than Local GD's (paired 95% interval of Local GD - "
                              "parallel GD below 0) while parallel GD measurably misses the noisiest feature and Local GD "
                              "learns it more",
                   text="synthetic feature-noise data: Local GD (averaging every local_steps) reaches higher test accuracy "
                        "(mean over clients) than parallel GD with global updates at equal gradient evaluations"),
        local_learns,
        Comparison("acc", one, par, better="higher", role="secondary", gates=(edge_gate(one), edge_gate(par), fitted),
                   not_testable="the paper proves the one-shot result in a different parameter setting, given in the text "
                                "that was not retrievable; here one-shot runs in the Local GD setting (values reported)",
                   text="one-shot averaging of Local GD beats parallel GD in test accuracy"),
        Comparison("min_rel_corr", loc, par, better="higher", role="secondary", gates=(edge_gate(loc), edge_gate(par)),
                   text="Local GD learns all features: the least-learned feature's filter correlation, relative to the "
                        "best-learned one, is higher than under parallel GD"),
        Comparison("acc", floc, fpar, better="higher", role="secondary", gates=(edge_gate(floc), edge_gate(fpar),
                   Gate("parallel SGD above chance (60%)", variant=fpar, metric="acc", above=60.0)),
                   text="Fashion-MNIST (binarized, feature-heterogeneous clients): Local SGD beats parallel SGD in test "
                        "accuracy at equal gradient evaluations"),
        Comparison("worst_acc", loc, par, better="higher", role="control",
                   text="control: worst client's test accuracy, Local GD vs parallel GD"),
        Comparison("learned_frac", loc, par, better="higher", role="control",
                   text=f"control: fraction of features learned (corr >= {cfg.learned_ratio} x the best feature's), Local GD vs parallel GD"),
        Comparison("acc", loc, par, better="higher", stage="compressed", level=level, role="control",
                   text=f"control: Local GD's advantage after magnitude pruning of the global CNN to sparsity {level}"),
        Comparison("cancelled_feature", par, "", role="fact",
                   text="fact (config and draw, not measured): fraction of draws whose noisiest feature meets the relu^q "
                        "cancellation condition hits x alpha^q >= 1 (cancel_margin: the value per draw)"),
        Comparison("cancel_margin", par, "", role="fact",
                   text="fact (config and draw): hits x alpha^q of the noisiest feature, mean over draws"),
        Comparison("grad_evals", loc, par, role="fact", text="gradient evaluations (examples), Local GD vs parallel GD"),
        Comparison("grad_evals", floc, fpar, role="fact", text="gradient evaluations (examples), Local SGD vs parallel SGD"),
    ]


SPEC = register_paper(PaperSpec(
    id="local_steps_fl",
    title="Provable Benefits of Local Steps in Heterogeneous Federated Learning for Neural Networks: A Feature Learning Perspective",
    claim="local steps learn all features and generalize better",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons, derive=derive,
    resources=("fashion_mnist",),
    data="synthetic two-patch feature-noise data model (4 clients, a fresh draw per seed); Fashion-MNIST: 4000 training "
         "images, labels binarized (class % 2), split over 5 clients by the official feature-heterogeneity partition "
         "(H=0.5), 1000 held-out training images for the lr choice, 2000 test images",
    substitutions="Paper text unavailable: the synthetic data model is reconstructed from the abstract and the official "
                  "feature-noise protocol (see the module docstring); d=100, 40 examples per client, 10 filters per class, "
                  "relu^3, feature noise alpha=0.8 (cancels a feature in >= 2 clients' noise under relu^3), 300 full-batch "
                  "GD steps. Real data: Fashion-MNIST and a one-conv-layer CNN instead of CIFAR-10 "
                  "and ResNet-18, 200 steps, plain SGD with the lr chosen on validation from the same grid for both",
    compression="global magnitude pruning of each algorithm's final global CNN at sparsities 0.5 and 0.8, no fine-tuning",
    figure="sparsity",
    fidelity="reconstruction",
    weight=1,
))
