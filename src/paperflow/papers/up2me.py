"""UP2ME: "Univariate Pre-training to Multivariate Fine-tuning as a General-purpose Framework for Multivariate Time Series
Analysis" (Yunhao Zhang, Minghao Liu, Shengyang Zhou, Junchi Yan), ICML 2024.

What was read. The abstract and the authors' README (`pages` corpus: OpenReview aR3uxWlZhX, the repository's README:
variable window length, channel decoupling, immediate reaction mode, TC layers on a dependency graph); the method section
itself was not retrievable beyond those. The authors' code, github.com/Thinklab-SJTU/UP2ME (fetched):
models/pretrain_model/UP2ME_model.py (patch embedding + learnable position + channel embedding, encoder over the unmasked
patches, enc_2_dec, a learnable mask patch, decoder, RevIN), embed.py, models/finetune_model/UP2ME_forecaster.py
(immediate_forecast: the future patches are the masked ones; forward: graph + TC layers before the frozen decoder),
graph_structure.py (graph_construct), temporal_channel_layer.py. Fidelity "official-code" for the structure, at a far
smaller size.

Method (names as in the code).
  Pre-training (univariate MAE): each step draws a window length L (a whole number of patches in [min_patches,
  max_patches], the same for the batch: "variable window length") and, per instance, an independent channel and start
  ("channel decoupling"); the series is normalised by its own mean/std (RevIN), cut into patches of cfg.patch points,
  a random mask_ratio of the patches is masked; the encoder (Transformer) sees the visible patches (patch embedding +
  position + channel embedding); the decoder sees enc_2_dec(encoded visible) and, at masked positions, the learnable
  mask patch + position + channel embedding; a linear head gives each patch's points; loss = MSE on the masked patches.
  Immediate (frozen) mode: forecasting = the future patches are masked (decode_patch_to_multi with pred_patch_idx);
  imputation = the patches with missing points are masked. No parameter changes.
  Fine-tuning (UP2ME_forecaster.forward): the frozen encoder encodes every channel's visible patches; graph_construct:
  channel_encode = max over the channel's visible patches, cosine similarity between channels, kNN (k = cfg.neighbors)
  AND the top k x C similarities overall; new trainable enc_2_dec, mask patch, position and channel embeddings (copied
  from the pre-trained ones) build the full token grid; cfg.tc_layers Temporal-Channel layers (a Transformer layer over
  each channel's patches, then graph attention over each patch position's channels, restricted to the graph's edges);
  then the frozen decoder and head.
Where we depart (and why): RevIN statistics over the visible points only in pre-training too (the code's pre-training
normalises by the whole window, masked part included; ours matches how the downstream tasks see the data), no RevIN affine
parameters; graph attention as masked dense attention over the C channels (the code's PyG TransformerConv, the same
edges); imputation masks whole patches (the code masks points and treats a patch with any missing point as masked: we mask
patches directly, independently per channel); sizes (d_model 32, 1 encoder layer (the code's default 3-4), 1 decoder
layer, 150 pre-training steps, 50 fine-tuning steps per task: job-time budget).
Variants (every model the same size; one job per variant and seed):
  up2me     pre-trains (seed), then evaluates the frozen model on both tasks and fine-tunes it per task with the
            dependency graph and, as the ablation, with the graph replaced by self-loops only (identity: no cross-channel
            attention, the same parameters); derive() splits its metrics into the views up2me|frozen, up2me|ft and
            up2me|ft_nograph
  scratch   the same encoder-decoder trained from scratch on each task alone (forecasting: the future patches masked;
            imputation: random patches masked), as many steps as pre-training
  naive     forecasting: the last observed value; imputation: linear interpolation inside the channel
  seasonal  forecasting: the last cfg.period values repeated; imputation: the nearest visible value a whole number of
            periods away (linear interpolation if none)
Tasks and metrics (on the test segment, standardised series): forecasting cfg.horizon points from cfg.context points;
imputation of cfg.impute_ratio of the patches of each channel (masks drawn with test_seed, the same for every variant);
fc_mse, imp_mse and rel_mse = mean over the two tasks of the variant's MSE / the naive MSE on the same windows (naive's is
exactly 1), which puts the two tasks on one scale.
Tuning (paperflow.tuning rule, prepare, tune_seed, validation segment only): the Adam lr of pre-training (by the frozen
model's validation rel_mse) and of the from-scratch models (one lr for both tasks, by their validation rel_mse), from the
same cfg.lr_grid; fine-tuning reuses the pre-training lr (not tuned itself, for job time: that can only handicap the
method's fine-tuned rows).
Contract v3. Headline (the abstract's "sensible solutions with frozen parameters", refined by fine-tuning): the frozen
model's rel_mse is within cfg.close_margin (relative) of the from-scratch models'. Mechanism gate (the issue's): the
tasks differ, i.e. the frozen model's per-task errors are not all at the naive baseline (frozen_naive_gap = max over tasks
of |MSE_frozen / MSE_naive - 1| > GAP_MIN). Grid-edge gates on pre-training and scratch. Secondary: fine-tuned better than
from scratch (the "fine-tuned best" half), fine-tuned better than frozen, fine-tuned better than naive and seasonal, and
the ablation fine-tuned with the graph vs without it. Per-task rows as controls.
Compression: the shared global magnitude pruning of the pre-trained encoder/decoder weight matrices; the pruned frozen
model is evaluated on both tasks (fine-tuning is not repeated).
Sizing probes before registration (disclosed): one probe at 400 pre-training / 150 fine-tuning steps, 2 encoder layers,
seed 0, printed test-segment MSEs (forecasting windows as registered; imputation masks drawn with seed 0, not test_seed):
naive fc 0.187 / imp 0.087, seasonal 0.176 / 0.143, frozen 0.103 / 0.089, fine-tuned with graph 0.098 / 0.087, from
scratch 0.097 / 0.084. Later probes read the validation segment only. Changed afterwards for job time only: 150 / 50 steps,
1 encoder layer, fine-tuning batch 16 -> 8, the fine-tuning lr no longer tuned on its own, 8 seeds.
Amendments (in the lock). 1: pre-training and from-scratch both chose the bottom of the registered grid (0.0003, 0.001,
0.003): the grid was widened downward for both and the imputation masks re-drawn (test_seed 4242 -> 4243). 2: with the
re-drawn masks the from-scratch lr landed on the top of (3e-5 ... 3e-3) (validation rel_mse 1.101, 1.017, 0.991, 1.008,
0.980: flat within a few percent, the edge 1.07% better than the best inside): the grid was widened upward to 0.01 for
both and the masks re-drawn again (test_seed 5077); the frozen-vs-scratch test reading of that run (-0.018) was seen.
Data: resource `msft` (pmdarima's daily Microsoft stock, 7,983 trading days): 5 channels log open, high, low, close,
volume, standardised with the training segment's statistics; chronological split train 70% / validation 10% / test 20%.
Substitutions: the paper's eight benchmark sets (ETT, Weather, ECL, Traffic, SMD, PSM, SWaT, NIPS-Water: not
installable offline) -> one real multivariate series shipped with pmdarima; anomaly detection left out; model and
training far smaller.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_models
from ..measure import count_params
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import best_index, grid_edge

VARIANTS = ("up2me", "scratch", "naive", "seasonal")
VIEWS = ("frozen", "ft", "ft_nograph")
GAP_MIN = 0.05  # mechanism: the frozen model's error differs from naive's by more than 5% on at least one task
FLAT_RTOL = 0.01  # an lr edge within 1% (relative) of the best inside validation rel_mse is flat, not an edge
CHANNELS = ("open", "high", "low", "close", "volume")


@dataclass(frozen=True)
class Config:
    n_days: int = 0  # 0 = the whole series; else its last n_days (smoke)
    train_frac: float = 0.7
    val_frac: float = 0.1
    patch: int = 8
    context: int = 96  # forecasting input (points)
    horizon: int = 24  # forecasting output (points)
    impute_len: int = 96  # imputation window (points)
    impute_ratio: float = 0.25  # fraction of each channel's patches missing
    min_patches: int = 6  # pre-training window lengths (in patches)
    max_patches: int = 16
    mask_ratio: float = 0.5
    d_model: int = 32
    heads: int = 4
    e_layers: int = 1
    d_layers: int = 1
    tc_layers: int = 1
    neighbors: int = 2  # k of the kNN dependency graph (of C = 5 channels)
    pretrain_steps: int = 150  # also the from-scratch models' steps (per task)
    finetune_steps: int = 50  # per task and graph setting
    batch: int = 64  # univariate instances per pre-training / from-scratch step
    ft_batch: int = 8  # multivariate windows per fine-tuning step
    lr_grid: tuple = (0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01)
    eval_stride: int = 24
    period: int = 5  # seasonal baselines: a trading week
    close_margin: float = 0.1  # headline: frozen within 10% (relative rel_mse) of from scratch
    tune_seed: int = 1000
    test_seed: int = 5077  # the imputation masks of the validation and test windows
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5

    def __post_init__(self) -> None:
        for name in ("lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        check(self.patch >= 1 and self.context % self.patch == 0 and self.horizon % self.patch == 0
              and self.impute_len % self.patch == 0, "context, horizon and impute_len must be multiples of patch")
        check(1 <= self.min_patches <= self.max_patches, f"need 1 <= min_patches <= max_patches, got {self.min_patches}, {self.max_patches}")
        check((self.context + self.horizon) // self.patch <= 1000 and self.max_patches <= 1000, "at most 1000 patches")
        check(0 < self.mask_ratio < 1 and 0 < self.impute_ratio < 1, "mask_ratio and impute_ratio in (0, 1)")
        check(self.d_model % self.heads == 0, f"d_model must be divisible by heads, got {self.d_model}, {self.heads}")
        check(1 <= self.neighbors <= len(CHANNELS), f"neighbors in [1, {len(CHANNELS)}], got {self.neighbors}")
        check(len(self.lr_grid) >= 1 and list(self.lr_grid) == sorted(set(self.lr_grid)) and self.lr_grid[0] > 0,
              f"lr_grid positive ascending, got {self.lr_grid}")
        check(0 < self.train_frac and 0 < self.val_frac and self.train_frac + self.val_frac < 1, "train_frac + val_frac < 1")
        check(self.pretrain_steps >= 1 and self.finetune_steps >= 1 and self.batch >= 1 and self.ft_batch >= 1, "steps, batches >= 1")
        check(self.close_margin > 0 and self.period >= 1 and self.eval_stride >= 1, "close_margin > 0, period, eval_stride >= 1")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities, "sparsities in [0,1) with compare_level")


# ---------------------------------------------------------------------------------------------- model


def revin(x: torch.Tensor, visible: torch.Tensor, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normalise each row of x (B, T) by the mean/std of its visible points (visible (B, T) bool); masked points -> 0."""
    v = visible.float()
    n = v.sum(1, keepdim=True).clamp_min(1)
    mu = (x * v).sum(1, keepdim=True) / n
    sd = ((((x - mu) * v) ** 2).sum(1, keepdim=True) / n + eps).sqrt()
    return ((x - mu) / sd) * v, mu, sd


class MAE(nn.Module):
    """UP2ME_model at a small size: patch/position/channel embeddings, encoder over visible patches, enc_2_dec, mask
    patch, decoder, linear head."""

    def __init__(self, cfg: Config, channels: int) -> None:
        super().__init__()
        d = cfg.d_model
        self.patch = cfg.patch
        self.patch_embed = nn.Linear(cfg.patch, d, bias=False)
        self.pos = nn.Parameter(torch.randn(1000, d) * 0.02)
        self.chan = nn.Embedding(channels, d)
        layer = lambda: nn.TransformerEncoderLayer(d, cfg.heads, 2 * d, 0.0, batch_first=True)  # noqa: E731
        self.encoder = nn.TransformerEncoder(layer(), cfg.e_layers, enable_nested_tensor=False)
        self.enc_2_dec = nn.Linear(d, d)
        self.mask_patch = nn.Parameter(torch.randn(d) * 0.02)
        self.decoder = nn.TransformerEncoder(layer(), cfg.d_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, cfg.patch)

    def encode(self, xn: torch.Tensor, pmask: torch.Tensor, ch: torch.Tensor) -> torch.Tensor:
        """xn (B, T) normalised, pmask (B, n) True = masked patch, ch (B,): encoder outputs (B, n, d) (rows of masked
        patches are not attended to and are replaced downstream)."""
        b, t = xn.shape
        n = t // self.patch
        tok = self.patch_embed(xn.view(b, n, self.patch)) + self.pos[:n] + self.chan(ch)[:, None, :]
        return self.encoder(tok, src_key_padding_mask=pmask)

    def tokens(self, enc: torch.Tensor, pmask: torch.Tensor, ch: torch.Tensor, emb: "MAE | Tuned") -> torch.Tensor:
        """Decoder input: enc_2_dec(encoded) at visible patches, mask patch + position + channel at masked ones (the
        embeddings of `emb`: the pre-trained model or the fine-tuned copies)."""
        n = enc.shape[1]
        masked = emb.mask_patch + emb.pos[:n] + emb.chan(ch)[:, None, :]
        return torch.where(pmask[..., None], masked, emb.enc_2_dec(enc))

    def decode(self, tok: torch.Tensor) -> torch.Tensor:
        b, n, _ = tok.shape
        return self.head(self.decoder(tok)).reshape(b, n * self.patch)

    def forward(self, x: torch.Tensor, pmask: torch.Tensor, ch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reconstruction of x (B, T) in the original scale and in the normalised one: (recon, recon_norm, target_norm)."""
        vis = ~pmask.repeat_interleave(self.patch, 1)
        xn, mu, sd = revin(x, vis)
        out = self.decode(self.tokens(self.encode(xn, pmask, ch), pmask, ch, self))
        return out * sd + mu, out


def graph_construct(enc: torch.Tensor, pmask: torch.Tensor, k: int) -> torch.Tensor:
    """graph_structure.graph_construct: enc (B, C, n, d), pmask (B, C, n): adjacency (B, C, C), adj[b, i, j] = 1 when j is
    among i's k most similar channels (cosine of the max-pooled visible encodings) and the pair is among the k x C most
    similar pairs of the sample."""
    b, c, n, d = enc.shape
    pooled = enc.masked_fill(pmask[..., None], -1e9).amax(2)
    sim = F.cosine_similarity(pooled[:, :, None, :], pooled[:, None, :, :], dim=-1)
    knn = torch.zeros_like(sim).scatter_(-1, sim.topk(k, dim=-1).indices, 1.0)
    thr = sim.reshape(b, -1).topk(k * c, dim=-1).values[:, -1]
    return knn * (sim >= thr[:, None, None]).float()


class TCLayer(nn.Module):
    """Temporal_Channel_Layer: a Transformer layer over each channel's patches, then attention over the channels of each
    patch position restricted to the graph's edges (post-norm residual + feed-forward)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.temporal = nn.TransformerEncoderLayer(d, heads, 2 * d, 0.0, batch_first=True)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        b, c, n, d = x.shape
        x = self.temporal(x.reshape(b * c, n, d)).reshape(b, c, n, d)
        xc = x.permute(0, 2, 1, 3).reshape(b * n, c, d)
        block = (adj < 0.5).repeat_interleave(n, 0).repeat_interleave(self.attn.num_heads, 0)  # True = no edge
        a, _ = self.attn(xc, xc, xc, attn_mask=block)
        xc = self.n1(xc + a)
        xc = self.n2(xc + self.ff(xc))
        return xc.reshape(b, n, c, d).permute(0, 2, 1, 3)


class Tuned(nn.Module):
    """The fine-tuned parts: copies of enc_2_dec, mask patch, position and channel embeddings, and the TC layers."""

    def __init__(self, cfg: Config, base: MAE) -> None:
        super().__init__()
        self.enc_2_dec = nn.Linear(cfg.d_model, cfg.d_model)
        self.enc_2_dec.load_state_dict(base.enc_2_dec.state_dict())
        self.mask_patch = nn.Parameter(base.mask_patch.detach().clone())
        self.pos = nn.Parameter(base.pos.detach().clone())
        self.chan = nn.Embedding.from_pretrained(base.chan.weight.detach().clone(), freeze=False)
        self.layers = nn.ModuleList(TCLayer(cfg.d_model, cfg.heads) for _ in range(cfg.tc_layers))


def multi_forward(cfg: Config, base: MAE, x: torch.Tensor, pmask: torch.Tensor, tuned: Tuned | None, graph: bool = True):
    """x (B, C, T), pmask (B, C, n): reconstruction (B, C, T). tuned=None: the frozen (immediate) mode; else the
    fine-tuned path (graph=False: self-loops only)."""
    b, c, t = x.shape
    ch = torch.arange(c).repeat(b)
    xf, pf = x.reshape(b * c, t), pmask.reshape(b * c, -1)
    if tuned is None:
        return base(xf, pf, ch)[0].reshape(b, c, t)
    vis = ~pf.repeat_interleave(cfg.patch, 1)
    xn, mu, sd = revin(xf, vis)
    with torch.no_grad():
        enc = base.encode(xn, pf, ch)
    n = enc.shape[1]
    adj = graph_construct(enc.reshape(b, c, n, -1), pmask, cfg.neighbors) if graph else torch.eye(c).expand(b, c, c)
    tok = base.tokens(enc, pf, ch, tuned).reshape(b, c, n, -1)
    for layer in tuned.layers:
        tok = layer(tok, adj)
    out = base.decode(tok.reshape(b * c, n, -1))
    return (out * sd + mu).reshape(b, c, t)


# ---------------------------------------------------------------------------------------------- data and tasks


def load_series(path: str, n_days: int) -> np.ndarray:
    from ..data.resources import load_msft

    d = load_msft(path)
    x = np.stack([np.log(d[k]) for k in CHANNELS[:4]] + [np.log1p(d["volume"].astype(np.float64))])  # (C, T)
    return x[:, -n_days:] if n_days else x


def split_series(cfg: Config, x: np.ndarray) -> dict:
    t = x.shape[1]
    a, b = int(t * cfg.train_frac), int(t * (cfg.train_frac + cfg.val_frac))
    mu, sd = x[:, :a].mean(1, keepdims=True), x[:, :a].std(1, keepdims=True)
    z = torch.from_numpy((x - mu) / sd).float()
    return {"train": z[:, :a], "val": z[:, a:b], "test": z[:, b:]}


def windows(seg: torch.Tensor, length: int, stride: int) -> torch.Tensor:
    """Every stride-th window of `length` points of a (C, T) segment: (W, C, length)."""
    starts = range(0, seg.shape[1] - length + 1, stride)
    return torch.stack([seg[:, s : s + length] for s in starts])


def eval_sets(cfg: Config, seg: torch.Tensor, seed: int) -> dict:
    """The forecasting windows (context + horizon) and imputation windows with their patch masks (drawn with seed)."""
    fc = windows(seg, cfg.context + cfg.horizon, cfg.eval_stride)
    imp = windows(seg, cfg.impute_len, cfg.eval_stride)
    n = cfg.impute_len // cfg.patch
    k = max(1, round(cfg.impute_ratio * n))
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(imp.shape[0], imp.shape[1], n, generator=g)
    pm = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, scores.topk(k, -1).indices, True)
    return {"fc": fc, "imp": imp, "imp_pmask": pm}


def fc_pmask(cfg: Config, b: int, c: int) -> torch.Tensor:
    n_ctx, n_h = cfg.context // cfg.patch, cfg.horizon // cfg.patch
    return torch.cat([torch.zeros(b, c, n_ctx, dtype=torch.bool), torch.ones(b, c, n_h, dtype=torch.bool)], -1)


def naive_predict(cfg: Config, x: torch.Tensor, pmask: torch.Tensor, seasonal: bool) -> torch.Tensor:
    """Baselines on (B, C, T) with patch mask (B, C, n): masked points filled by the last visible value before them
    (forecast-style, when nothing visible follows) or linear interpolation (naive), or the nearest visible value a whole
    number of periods away (seasonal; for a trailing gap: the last period repeated)."""
    miss = pmask.repeat_interleave(cfg.patch, -1)
    out = x.clone()
    t = x.shape[-1]
    xs, ms = x.reshape(-1, t).numpy(), miss.reshape(-1, t).numpy()
    res = out.reshape(-1, t).numpy()
    idx = np.arange(t)
    for r in range(xs.shape[0]):
        vis = ~ms[r]
        if vis.all() or not vis.any():
            continue
        fill = np.interp(idx, idx[vis], xs[r][vis])  # linear inside, constant (last / first value) outside
        if seasonal:
            p = cfg.period
            for i in np.nonzero(~vis)[0]:
                for m in range(1, t // p + 1):
                    j = i - m * p
                    if j >= 0 and vis[j]:
                        fill[i] = xs[r][j]
                        break
                    j = i + m * p
                    if j < t and vis[j]:
                        fill[i] = xs[r][j]
                        break
        res[r][~vis] = fill[~vis]
    return out


def task_mse(pred: torch.Tensor, x: torch.Tensor, pmask: torch.Tensor, patch: int) -> float:
    miss = pmask.repeat_interleave(patch, -1)
    return float(((pred - x) ** 2)[miss].mean())


@torch.no_grad()
def evaluate_tasks(cfg: Config, sets: dict, predict) -> dict:
    """predict(x, pmask) -> reconstruction; MSE on the masked points of each task."""
    fc, imp, ipm = sets["fc"], sets["imp"], sets["imp_pmask"]
    fpm = fc_pmask(cfg, fc.shape[0], fc.shape[1])
    return {"fc_mse": task_mse(predict(fc, fpm, "fc"), fc, fpm, cfg.patch),
            "imp_mse": task_mse(predict(imp, ipm, "imp"), imp, ipm, cfg.patch)}


def naive_ref(cfg: Config, sets: dict) -> dict:
    return evaluate_tasks(cfg, sets, lambda x, pm, task: naive_predict(cfg, x, pm, False))


def relative(m: dict, ref: dict) -> float:
    return 0.5 * (m["fc_mse"] / ref["fc_mse"] + m["imp_mse"] / ref["imp_mse"])


# ---------------------------------------------------------------------------------------------- training


def _uni_batch(cfg: Config, seg: torch.Tensor, n_patches: int, bsz: int, gen: torch.Generator):
    c, t = seg.shape
    length = n_patches * cfg.patch
    ch = torch.randint(c, (bsz,), generator=gen)
    st = torch.randint(t - length + 1, (bsz,), generator=gen)
    x = torch.stack([seg[int(ci), int(s) : int(s) + length] for ci, s in zip(ch, st)])
    return x, ch


def _random_pmask(b: int, n: int, ratio: float, gen: torch.Generator) -> torch.Tensor:
    k = min(n - 1, max(1, round(ratio * n)))
    scores = torch.rand(b, n, generator=gen)
    return torch.zeros(b, n, dtype=torch.bool).scatter_(-1, scores.topk(k, -1).indices, True)


def fit_mae(cfg: Config, seg: torch.Tensor, seed: int, lr: float, task: str = "pretrain") -> MAE:
    """task "pretrain": variable window length and random masks (the MAE objective); "fc": windows of context + horizon
    with the future masked; "imp": impute_len windows with impute_ratio of the patches masked (from-scratch models)."""
    torch.manual_seed(seed)
    net = MAE(cfg, seg.shape[0])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 1)
    for _ in range(cfg.pretrain_steps):
        if task == "pretrain":
            n = int(torch.randint(cfg.min_patches, cfg.max_patches + 1, (1,), generator=gen))
            x, ch = _uni_batch(cfg, seg, n, cfg.batch, gen)
            pm = _random_pmask(len(x), n, cfg.mask_ratio, gen)
        elif task == "fc":
            n = (cfg.context + cfg.horizon) // cfg.patch
            x, ch = _uni_batch(cfg, seg, n, cfg.batch, gen)
            pm = fc_pmask(cfg, len(x), 1).squeeze(1)
        else:
            n = cfg.impute_len // cfg.patch
            x, ch = _uni_batch(cfg, seg, n, cfg.batch, gen)
            pm = _random_pmask(len(x), n, cfg.impute_ratio, gen)
        _, out_n = net(x, pm, ch)
        vis = ~pm.repeat_interleave(cfg.patch, 1)
        _, mu, sd = revin(x, vis)
        loss = (((out_n - (x - mu) / sd) ** 2)[~vis]).mean()  # MSE on the masked patches, normalised scale
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    return net


def fit_tuned(cfg: Config, base: MAE, seg: torch.Tensor, task: str, seed: int, lr: float, graph: bool) -> Tuned:
    """Fine-tune the TC layers and the copied embeddings on multivariate windows of `task` (frozen encoder/decoder)."""
    torch.manual_seed(seed)
    tuned = Tuned(cfg, base)
    for p in base.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(tuned.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 2)
    length = cfg.context + cfg.horizon if task == "fc" else cfg.impute_len
    c, t = seg.shape
    for _ in range(cfg.finetune_steps):
        st = torch.randint(t - length + 1, (cfg.ft_batch,), generator=gen)
        x = torch.stack([seg[:, int(s) : int(s) + length] for s in st])
        if task == "fc":
            pm = fc_pmask(cfg, len(x), c)
        else:
            pm = _random_pmask(len(x) * c, length // cfg.patch, cfg.impute_ratio, gen).reshape(len(x), c, -1)
        pred = multi_forward(cfg, base, x, pm, tuned, graph)
        miss = pm.repeat_interleave(cfg.patch, -1)
        loss = ((pred - x) ** 2)[miss].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for p in base.parameters():
        p.requires_grad_(True)
    tuned.eval()
    return tuned


def frozen_metrics(cfg: Config, base: MAE, sets: dict) -> dict:
    return evaluate_tasks(cfg, sets, lambda x, pm, task: multi_forward(cfg, base, x, pm, None))


def finetuned_metrics(cfg: Config, base: MAE, tuned: dict, sets: dict, graph: bool) -> dict:
    return evaluate_tasks(cfg, sets, lambda x, pm, task: multi_forward(cfg, base, x, pm, tuned[task], graph))


def scratch_metrics(cfg: Config, nets: dict, sets: dict) -> dict:
    return evaluate_tasks(cfg, sets, lambda x, pm, task: multi_forward(cfg, nets[task], x, pm, None))


# ---------------------------------------------------------------------------------------------- stages


def prepare(cfg: Config, res) -> dict:
    x = load_series(res["msft"], cfg.n_days)
    seg = split_series(cfg, x)
    val = eval_sets(cfg, seg["val"], cfg.test_seed + 1)
    test = eval_sets(cfg, seg["test"], cfg.test_seed)
    data = {"train": seg["train"], "val_sets": val, "test_sets": test, "val_naive": naive_ref(cfg, val),
            "test_naive": naive_ref(cfg, test)}
    data["tuning"] = tune_all(cfg, data)
    return data


def tune_all(cfg: Config, data: dict) -> dict:
    """Pre-training lr (frozen validation rel_mse) and the from-scratch lr (validation rel_mse), the same grid, tune_seed.
    Fine-tuning uses the tuned pre-training lr (not tuned on its own: job-time budget; this can only handicap the method)."""
    val, ref, seg, s = data["val_sets"], data["val_naive"], data["train"], cfg.tune_seed
    pre = [relative(frozen_metrics(cfg, fit_mae(cfg, seg, s, lr), val), ref) for lr in cfg.lr_grid]
    ip = best_index(pre, higher=False)
    sc = []
    for lr in cfg.lr_grid:
        nets = {t: fit_mae(cfg, seg, s, lr, t) for t in ("fc", "imp")}
        sc.append(relative(scratch_metrics(cfg, nets, val), ref))
    isc = best_index(sc, higher=False)
    edge = lambda i, v: grid_edge(i, len(cfg.lr_grid), [-x for x in v], FLAT_RTOL)  # noqa: E731 (scores: higher = better)
    return {"pretrain_lr": cfg.lr_grid[ip], "pretrain_edge": edge(ip, pre), "finetune_lr": cfg.lr_grid[ip],
            "scratch_lr": cfg.lr_grid[isc], "scratch_edge": edge(isc, sc), "val_pretrain": pre, "val_scratch": sc}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """up2me: the pre-trained MAE and the fine-tuned parts (per task, with and without the graph); scratch: one MAE per
    task; naive/seasonal: nothing to train."""
    if variant not in VARIANTS:
        raise ValueError(f"up2me: unknown variant {variant!r}; known: {VARIANTS}")
    tu, seg = data["tuning"], data["train"]
    if variant == "up2me":
        base = fit_mae(cfg, seg, seed, tu["pretrain_lr"])
        tuned = {f"{t}_{'g' if g else 'n'}": fit_tuned(cfg, base, seg, t, seed, tu["finetune_lr"], g)
                 for t in ("fc", "imp") for g in (True, False)}
        state = {f"base.{k}": v.detach().clone() for k, v in base.state_dict().items()}
        for name, m in tuned.items():
            state.update({f"tuned_{name}.{k}": v.detach().clone() for k, v in m.state_dict().items()})
        return {"variant": variant, "state": state,
                "train": {"grid_edge": float(tu["pretrain_edge"]), "tuned_lr": float(tu["pretrain_lr"])}}
    if variant == "scratch":
        state = {}
        for t in ("fc", "imp"):
            state.update({f"scratch_{t}.{k}": v.detach().clone() for k, v in fit_mae(cfg, seg, seed, tu["scratch_lr"], t).state_dict().items()})
        return {"variant": variant, "state": state, "train": {"grid_edge": float(tu["scratch_edge"]), "tuned_lr": float(tu["scratch_lr"])}}
    return {"variant": variant, "state": {}, "train": {}}


def _sub(state: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _load_mae(cfg: Config, state: dict) -> MAE:
    net = MAE(cfg, len(CHANNELS))
    net.load_state_dict(state)
    return net.eval()


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Test MSE of forecasting and imputation (standardised series), rel_mse (mean ratio to naive on the same windows);
    up2me: for the frozen model, fine-tuned with and without the graph (suffixes _frozen, _ft, _ft_nograph) and
    frozen_naive_gap; a compressed record (no fine-tuned parts) gives the frozen metrics only."""
    sets, ref = data["test_sets"], data["test_naive"]
    variant, st = model["variant"], model["state"]
    out: dict = {}
    if variant == "up2me":
        base = _load_mae(cfg, _sub(st, "base."))
        views = {"frozen": frozen_metrics(cfg, base, sets)}
        if any(k.startswith("tuned_") for k in st):
            for g, view in ((True, "ft"), (False, "ft_nograph")):
                tuned = {}
                for t in ("fc", "imp"):
                    m = Tuned(cfg, base)
                    m.load_state_dict(_sub(st, f"tuned_{t}_{'g' if g else 'n'}."))
                    tuned[t] = m.eval()
                views[view] = finetuned_metrics(cfg, base, tuned, sets, g)
        for view, m in views.items():
            out.update({f"{k}_{view}": v for k, v in m.items()})
            out[f"rel_mse_{view}"] = relative(m, ref)
        fr = views["frozen"]
        out["frozen_naive_gap"] = max(abs(fr["fc_mse"] / ref["fc_mse"] - 1), abs(fr["imp_mse"] / ref["imp_mse"] - 1))
        out["n_params"] = float(count_params(_sub(st, "base.")))
    else:
        if variant == "scratch":
            nets = {t: _load_mae(cfg, _sub(st, f"scratch_{t}.")) for t in ("fc", "imp")}
            m = scratch_metrics(cfg, nets, sets)
            out["n_params"] = float(count_params(_sub(st, "scratch_fc.")))
        else:
            m = evaluate_tasks(cfg, sets, lambda x, pm, task: naive_predict(cfg, x, pm, variant == "seasonal"))
        out.update(m)
        out["rel_mse"] = relative(m, ref)
    out.update(model.get("train", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int):
    """Global magnitude pruning of the pre-trained model's weight matrices (up2me: base.*, the fine-tuned parts left out of
    the pruned record; scratch: both task models)."""
    if variant == "up2me":
        return magnitude_models({**model, "state": _sub_keep(model["state"], "base.")}, cfg.sparsities, include=("base.",),
                                exclude=(".pos", ".chan."))
    if variant == "scratch":
        return magnitude_models(model, cfg.sparsities, exclude=(".pos", ".chan."))
    return None


def _sub_keep(state: dict, prefix: str) -> dict:
    return {k: v for k, v in state.items() if k.startswith(prefix)}


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """The views up2me|frozen, up2me|ft, up2me|ft_nograph: copies of the up2me rows with <metric>_<view> renamed
    <metric> (dense and every compressed level that has it)."""
    out = [dict(r) for r in rows]
    for r in rows:
        if r.get("variant") != "up2me":
            continue
        for view in VIEWS:
            v = {k: val for k, val in r.items() if not any(k.endswith(f"_{w}") for w in VIEWS)}
            for k, val in r.items():
                if k.endswith(f"_{view}") and not (view == "ft" and k.endswith("_ft_nograph")):
                    v[k[: -len(view) - 1]] = val
            v["variant"] = f"up2me|{view}"
            out.append(v)
    return out


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    differ = Gate(f"the tasks differ: the frozen model's per-task MSE is not all at the naive baseline's (max over tasks "
                  f"of |MSE_frozen / MSE_naive - 1| > {GAP_MIN:g})", variant="up2me", metric="frozen_naive_gap",
                  above=GAP_MIN, kind="mechanism")
    pre_edge = edge_gate("up2me|frozen", "pre-training lr")
    sc_edge = edge_gate("scratch", "from-scratch lr")
    ft_edge = edge_gate("up2me|ft", "pre-training lr (also fine-tuning's)")
    rows = [Comparison("rel_mse", "up2me|frozen", "scratch", better="lower", kind="close", margin=cfg.close_margin,
                       role="headline", gates=(differ, pre_edge, sc_edge),
                       text=f"the frozen pre-trained model solves forecasting and imputation as mask reconstruction within "
                            f"{cfg.close_margin:.0%} of models trained from scratch per task (rel_mse: mean of the two "
                            f"tasks' MSE relative to naive)",
                       refuted_if=f"the paired 95% interval of rel_mse(frozen) - rel_mse(scratch) lies above "
                                  f"{cfg.close_margin:.0%} of scratch's rel_mse while the frozen model's errors are not all "
                                  f"at the naive baseline and both lrs are inside the grid")]
    rows.append(Comparison("rel_mse", "up2me|ft", "scratch", better="lower", role="secondary", gates=(pre_edge, ft_edge, sc_edge),
                           text="fine-tuned UP2ME (dependency graph + TC layers) beats the from-scratch models (\"fine-tuned best\")"))
    rows.append(Comparison("rel_mse", "up2me|ft", "up2me|frozen", better="lower", role="secondary", gates=(ft_edge,),
                           text="fine-tuning improves on the frozen model"))
    rows.append(Comparison("rel_mse", "up2me|ft", "up2me|ft_nograph", better="lower", role="secondary", gates=(ft_edge,),
                           text="ablation: the dependency graph helps (the same fine-tuning with self-loops only)"))
    rows.append(Comparison("rel_mse", "up2me|ft", "seasonal", better="lower", role="secondary",
                           text="fine-tuned UP2ME beats the seasonal baselines"))
    rows.append(Comparison("rel_mse", "up2me|ft", "naive", better="lower", role="control",
                           text="fine-tuned UP2ME beats the naive baselines (rel_mse of naive is 1 by construction)"))
    for task, name in (("fc_mse", "forecasting"), ("imp_mse", "imputation")):
        rows.append(Comparison(task, "up2me|frozen", "scratch", better="lower", kind="close", margin=cfg.close_margin,
                               role="control", text=f"{name}: frozen within {cfg.close_margin:.0%} of from scratch"))
        rows.append(Comparison(task, "up2me|ft", "scratch", better="lower", role="control",
                               text=f"{name}: fine-tuned beats from scratch"))
        rows.append(Comparison(task, "up2me|frozen", "naive", better="lower", role="control",
                               text=f"{name}: frozen beats naive"))
    level = level_name(cfg.compare_level)
    rows.append(Comparison("rel_mse", "up2me|frozen", "scratch", better="lower", kind="close", margin=cfg.close_margin,
                           stage="compressed", level=level, role="control",
                           text=f"with both pruned to {level} (no fine-tuning), the frozen model stays within "
                                f"{cfg.close_margin:.0%} of the from-scratch models"))
    rows.append(Comparison("n_params", "up2me|frozen", "scratch", role="fact",
                           text="parameters of the pre-trained model and of each from-scratch model: the same architecture"))
    return rows


SPEC = register_paper(PaperSpec(
    id="up2me",
    title="UP2ME: Univariate Pre-training to Multivariate Fine-tuning as a General-purpose Framework for Multivariate "
          "Time Series Analysis",
    claim="the frozen pre-trained model is competitive with task-specific models; fine-tuned it is best",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons, derive=derive,
    fidelity="official-code", resources=("msft",),
    data="pmdarima's daily Microsoft stock (resource `msft`, 7,983 trading days 1986-2017): log open/high/low/close/volume, "
         "standardised on the training segment; chronological train 70% / validation 10% / test 20%",
    substitutions="Paper: eight benchmark sets (ETT, Weather, ECL, Traffic, SMD, PSM, SWaT, NIPS-Water), d_model 256, 4 encoder "
                  "layers, up to 500k pre-training steps, anomaly detection as a third task. Here: one real multivariate "
                  "series shipped in pmdarima, d_model 32, 2 + 1 layers, hundreds of steps, forecasting and patch-block "
                  "imputation only; RevIN over visible points without affine parameters; graph attention as masked dense "
                  "attention",
    compression="global magnitude pruning of the pre-trained encoder/decoder weight matrices (shared compressors); the pruned "
                "frozen model is evaluated on both tasks (fine-tuning not repeated); from-scratch models pruned likewise",
    figure="sparsity", weight=1,
))
