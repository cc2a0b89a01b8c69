"""STATA: "Towards Efficient Spiking Transformer: a Token Sparsification Framework for Training and
Inference Acceleration" (Zhengyang Zhuge, Peisong Wang, Xingting Yao, Jian Cheng), ICML 2024 (PMLR 235).

Official code: none found in the public index (searched code / issues / pages / docs). Only the paper's
abstract was readable (PMLR pdf, mlresearch/v235 assets/zhuge24b); the method's equations are therefore
NOT taken from the paper. Everything below is our own formulation of the two named components,
"Timestep-wise Anchor Token" and "dual (Intra and Inter) Alignments of the attention maps", written from
the abstract and the catalog description; every definition is stated here so it can be checked.

Spiking ViT (small, Spikformer-shaped, "spike-driven": every linear layer except the patch embedding and
the classifier head receives binary spikes)
  * multi-step LIF neuron (spikingjelly's LIFNode with decay_input=True, v_reset=0, detach_reset=True):
        H_t = V_{t-1} + (X_t - V_{t-1}) / tau,   S_t = Theta(H_t - V_th),   V_t = H_t (1 - S_t)     (hard reset)
    with the sigmoid surrogate dS/dH = a sig(a (H - V_th)) (1 - sig(a (H - V_th))), a = 4.
  * tokens: paperflow.nn.vit.PatchEmbed (p x p conv) + BN + positions, one class token (CLS); the static
    image is fed at each of T timesteps (direct encoding); the residual stream x has shape (T, B, N, D).
  * Spiking self-attention (Spikformer, Zhou et al. ICLR 2023, Eq. 9-12) with a membrane shortcut (the
    LIF sits at the start of each branch, as in Spike-driven Transformer / Spikformer-V2):
        s = LIF(x);  Q = LIF(BN(s W_q)), K = LIF(BN(s W_k)), V = LIF(BN(s W_v))      (binary)
        SSA = LIF_{V_th=0.5}( Q K^T V * scale ),  scale = 0.125 (no softmax)
        x <- x + BN(SSA W_o);   then MLP:  x <- x + BN(LIF(BN(LIF(x) W_1)) W_2)
    Without softmax, Q K^T V = Q (K^T V), which is how it is computed (O(N d^2)).
  * head: the residual stream averaged over timesteps and (kept) tokens -> LayerNorm -> Linear (global
    average pooling as Spikformer; the CLS token is kept as the query of the conventional scorer).
  * spiking attention map of timestep t, head h: A_t,h = Q_t,h K_t,h^T (co-spike counts, >= 0).

Token sparsification (EViT-style placement: at the blocks in cfg.prune_layers the attention runs on all
tokens, then only the top-k patch tokens go on to the MLP and later blocks; k = ceil(keep_ratio * N_patch);
CLS (and the anchor) are always kept). Because LIF membranes are per token and carried across timesteps,
one token set is selected per sample and shared by all T timesteps (exactly k patch tokens per timestep).

  token_prune (conventional baseline, EViT/DynamicViT-like hard drop without fusion):
        score(j) = (1/T) sum_t (1/H) sum_h A_t,h[CLS, j]                   (raw CLS attention, time-averaged)
  stata, Timestep-wise Anchor Token (our formulation):
        a learnable anchor token per timestep e_t (T x D, a second special token next to CLS);
        r_t(j)   = (1/H) sum_h A_t,h[anchor, j]                        (the anchor's spiking attention row)
        z_t(j)   = (r_t(j) - mean_j r_t) / (std_j r_t + eps)           (standardized within each timestep)
        score(j) = (1/T) sum_t z_t(j)
    The standardization makes the criterion comparable across timesteps whose firing rates (hence the
    scale of the softmax-free attention) differ, so a low-firing timestep is not drowned by a high one.
  stata, dual Alignments (our formulation), at every pruning block, with p = (r + 1) / sum_j (r_j + 1) the
  attention row over the patch tokens normalized with a Laplace pseudo-count (softmax-free attention; an
  all-zero row is uniform; the pseudo-count bounds KL gradients), sg = stop-grad, and the anchor row
  computed from detached keys (the anchor is the student; it must not move the keys of its own target):
        L_intra = (1/T) sum_t KL( sg(p^CLS_t) || p^anchor_t )      anchor aligned with the full CLS map
                                                                    within the same timestep
        L_inter = (1/T) sum_t KL( sg(mean_t' p^CLS_t') || p^CLS_t ) each timestep's CLS map aligned with the
                                                                    consensus over timesteps (pulls the
                                                                    inferior timesteps' attention)
        loss = CE + lambda_intra L_intra + lambda_inter L_inter     (gradients reach Q, K through the surrogate)
  Both are 0 iff the maps are identical (KL), positive otherwise.

Variants: dense (no dropping), stata, token_prune (same layers and keep ratio as stata). Each variant trains
with its own sparsification and is evaluated with it (the dense stage IS the sparsified model).
compress(): inference-time token dropping at cfg.infer_keep_ratios with the variant's own scorer (the
dense model uses the conventional CLS scorer: "train dense, prune at inference"); level name = fraction of
patch tokens dropped at each pruning block.

Metrics (evaluate): acc (%), tokens (mean tokens per sub-layer = attention + MLP of each block, CLS/anchor
included), synops (synaptic-op proxy per image: sum over spike-input layers of spike count x fan-out, plus
Q (K^T V) accumulates: nnz(K) x d_head + nnz(Q) x d_head), train_s_per_epoch (wall time of train_loop per
epoch, perf_counter) and train_cpu_s_per_epoch (process_time, less sensitive to a shared machine), both
stored by train(); derive() adds train_speedup = dense / method time per seed.

Substitutions for laptop scale: Fashion-MNIST subset instead of CIFAR/ImageNet/DVS; a 4-block d=32 spiking
ViT with T=2, v_th=0.5 and SSA scale 0.5 (Spikformer: v_th=1, scale 0.125 at d=384; at d=32 those fire ~4% and
~0.2% at init and the net does not train in a few hundred steps) instead of Spikformer-8-384/768 with T=4; a few epochs on one CPU thread instead of hundreds on
GPUs; hard dropping without EViT's token fusion; the anchor / alignment formulas above are ours (paper text
unavailable); wall time on a shared machine is noisy.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..data.images import fashion_subsets, to_float
from ..loop import cosine_lr, train_loop
from ..nn.vit import PatchEmbed, ViTConfig
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("dense", "stata", "token_prune")
SCORERS = {"dense": "none", "stata": "anchor", "token_prune": "cls"}


@dataclass(frozen=True)
class Config:
    n_train: int = 6000  # Fashion-MNIST train images (fixed subset, data_seed)
    n_test: int = 2000  # Fashion-MNIST test images
    data_seed: int = 0
    patch_size: int = 4  # 28/4 -> 49 patch tokens
    d_model: int = 32
    n_layer: int = 4
    n_head: int = 4
    mlp_ratio: float = 4.0
    timesteps: int = 2  # T
    tau: float = 2.0  # LIF membrane time constant
    v_th: float = 0.5  # LIF threshold (Spikformer uses 1.0 with d=384; 0.5 fires at ~10-20% here at init)
    attn_v_th: float = 0.5  # threshold of the LIF after Q K^T V (0.5 as Spikformer)
    surrogate_alpha: float = 4.0  # sigmoid surrogate sharpness
    attn_scale: float = 0.5  # SSA scale (Spikformer: 0.125 for d_head=48; larger for d_head=8)
    prune_layers: tuple = (1, 2)  # blocks after whose attention tokens are dropped
    keep_ratio: float = 0.6  # fraction of patch tokens kept at each pruning block (train and eval)
    infer_keep_ratios: tuple = (0.4,)  # compress(): inference-time keep ratios
    lambda_intra: float = 1.0
    lambda_inter: float = 1.0
    epochs: int = 3
    batch_size: int = 64
    lr: float = 2e-3  # AdamW, cosine
    weight_decay: float = 0.01
    warmup: int = 20
    eval_batch: int = 500
    log_every: int = 20

    def __post_init__(self) -> None:
        for name in ("prune_layers", "infer_keep_ratios"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.n_train > 0 and self.n_test > 0, f"n_train and n_test must be > 0, got {self.n_train}, {self.n_test}")
        check(28 % self.patch_size == 0, f"patch_size must divide 28, got {self.patch_size}")
        check(self.d_model > 0 and self.n_head > 0 and self.d_model % self.n_head == 0,
              f"d_model must be a positive multiple of n_head, got d_model={self.d_model}, n_head={self.n_head}")
        check(self.n_layer > 0 and self.mlp_ratio > 0, f"n_layer and mlp_ratio must be > 0, got {self.n_layer}, {self.mlp_ratio}")
        check(self.timesteps >= 2, f"timesteps must be >= 2 (inter-timestep alignment needs two), got {self.timesteps}")
        check(self.tau > 1.0, f"tau must be > 1 (LIF decay 1/tau in (0, 1)), got {self.tau}")
        check(self.v_th > 0 and self.attn_v_th > 0 and self.surrogate_alpha > 0 and self.attn_scale > 0,
              "v_th, attn_v_th, surrogate_alpha and attn_scale must be > 0")
        check(len(self.prune_layers) > 0 and all(0 <= l < self.n_layer for l in self.prune_layers)
              and len(set(self.prune_layers)) == len(self.prune_layers),
              f"prune_layers must be distinct block indices in [0, n_layer={self.n_layer}), got {self.prune_layers}")
        check(0 < self.keep_ratio < 1, f"keep_ratio must be in (0, 1), got {self.keep_ratio}")
        check(all(0 < r < 1 for r in self.infer_keep_ratios), f"infer_keep_ratios must be in (0, 1), got {self.infer_keep_ratios}")
        check(self.lambda_intra >= 0 and self.lambda_inter >= 0, "lambda_intra and lambda_inter must be >= 0")
        check(self.epochs > 0 and self.batch_size > 0 and self.lr > 0, "epochs, batch_size and lr must be > 0")
        check(self.weight_decay >= 0 and self.warmup >= 0, "weight_decay and warmup must be >= 0")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


def level_name(keep: float) -> str:
    return f"{1.0 - keep:.2f}"  # fraction of patch tokens dropped at each pruning block


# ----------------------------------------------------------------------------------------------------
# Data


def prepare(cfg: Config, res) -> dict:
    """Fixed Fashion-MNIST subsets (uint8 images), the same for every variant and seed."""
    return fashion_subsets(res["fashion_mnist"], cfg.n_train, cfg.n_test, cfg.data_seed)


# ----------------------------------------------------------------------------------------------------
# Spiking neuron


class _SigmoidSpike(torch.autograd.Function):
    """Heaviside forward, sigmoid-surrogate backward: d/dx = a sig(a x)(1 - sig(a x))."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, alpha: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        return (x >= 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        sg = torch.sigmoid(ctx.alpha * x)
        return grad * ctx.alpha * sg * (1 - sg), None


def spike_fn(x: torch.Tensor, alpha: float = 4.0) -> torch.Tensor:
    return _SigmoidSpike.apply(x, alpha)


def lif_multistep(x: torch.Tensor, tau: float = 2.0, v_th: float = 1.0, alpha: float = 4.0,
                  return_v: bool = False):
    """Multi-step LIF over the leading time axis of x (T, ...): H_t = V + (X_t - V)/tau, S_t = Theta(H_t -
    v_th), V_t = H_t (1 - S_t) (hard reset to 0, reset detached). Returns spikes (T, ...) [and the
    post-reset membranes V_t]."""
    v = torch.zeros_like(x[0])
    spikes, vs = [], []
    for t in range(x.shape[0]):
        h = v + (x[t] - v) / tau
        s = spike_fn(h - v_th, alpha)
        v = h * (1.0 - s.detach())
        spikes.append(s)
        vs.append(v)
    out = torch.stack(spikes)
    return (out, torch.stack(vs)) if return_v else out


class LIF(nn.Module):
    def __init__(self, tau: float, v_th: float, alpha: float) -> None:
        super().__init__()
        self.tau, self.v_th, self.alpha = tau, v_th, alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lif_multistep(x, self.tau, self.v_th, self.alpha)


# ----------------------------------------------------------------------------------------------------
# Model


class Counter:
    """Synaptic-op and token counters filled during evaluation (off while training)."""

    def __init__(self) -> None:
        self.on = False
        self.synops = 0.0
        self.token_sum = 0.0  # sum over sub-layers of tokens processed (per sample)
        self.sublayers = 0

    def add_synops(self, value: torch.Tensor | float) -> None:
        if self.on:
            self.synops += float(value)


class SpikeLinear(nn.Module):
    """Linear (no bias) + BatchNorm over the feature axis, applied to spikes (T, B, N, Din); counts
    spikes x fan-out as synaptic operations."""

    def __init__(self, din: int, dout: int, counter: Counter) -> None:
        super().__init__()
        self.fc = nn.Linear(din, dout, bias=False)
        self.bn = nn.BatchNorm1d(dout)
        self.counter = counter

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        if self.counter.on:
            self.counter.add_synops(s.detach().sum() * self.fc.out_features)
        shape = s.shape
        y = self.bn(self.fc(s.reshape(-1, shape[-1])))
        return y.view(*shape[:-1], -1)


def standardize(r: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """z-score over the last (token) axis; a constant row -> zeros."""
    mu = r.mean(-1, keepdim=True)
    sd = r.std(-1, keepdim=True, unbiased=False)
    return (r - mu) / (sd + eps)


def kl_rows(p: torch.Tensor, q: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Mean over leading axes of KL(p || q) along the last axis."""
    return (p * (torch.log(p + eps) - torch.log(q + eps))).sum(-1).mean()


def align_dist(r: torch.Tensor, eps: float = 1.0) -> torch.Tensor:
    """Softmax-free attention row(s) (co-spike counts >= 0) -> distribution over tokens by L1
    normalization with a Laplace pseudo-count, (r + 1) / sum(r + 1); an all-zero row gives the uniform
    distribution. The pseudo-count keeps q_j away from 0, so KL(p || q) has bounded gradients (with a tiny
    eps, a token with zero co-spikes but target mass gets a ~1/eps gradient through the surrogate)."""
    r = r.clamp_min(0) + eps
    return r / r.sum(-1, keepdim=True)


def intra_alignment(cls_rows: torch.Tensor, anchor_rows: torch.Tensor) -> torch.Tensor:
    """L_intra = (1/T) sum_t KL(sg(p^CLS_t) || p^anchor_t); rows (T, B, Np)."""
    return kl_rows(align_dist(cls_rows).detach(), align_dist(anchor_rows))


def inter_alignment(cls_rows: torch.Tensor) -> torch.Tensor:
    """L_inter = (1/T) sum_t KL(sg(mean_t' p_t') || p_t); rows (T, B, Np)."""
    p = align_dist(cls_rows)
    target = p.mean(0, keepdim=True).detach().expand_as(p)
    return kl_rows(target, p)


def token_scores(rows: torch.Tensor, scorer: str) -> torch.Tensor:
    """(T, B, Np) head-averaged attention rows -> (B, Np) importance. "cls": raw time average
    (conventional); "anchor": time average of the per-timestep standardized rows (STATA)."""
    if scorer == "cls":
        return rows.mean(0)
    if scorer == "anchor":
        return standardize(rows).mean(0)
    raise ValueError(f"unknown scorer {scorer!r}")


def select_tokens(x: torch.Tensor, scores: torch.Tensor, n_special: int, k: int) -> torch.Tensor:
    """Keep the special tokens (CLS, anchor) and the top-k patch tokens by score, the same set at every
    timestep, in their original order: x (T, B, N, D), scores (B, N - n_special) -> (T, B, n_special + k, D)."""
    idx = scores.topk(k, dim=-1).indices.sort(dim=-1).values + n_special  # (B, k)
    T, B, _, D = x.shape
    kept = torch.gather(x, 2, idx[None, :, :, None].expand(T, B, k, D))
    return torch.cat([x[:, :, :n_special], kept], dim=2)


class SpikingBlock(nn.Module):
    def __init__(self, d: int, n_head: int, hidden: int, cfg: dict, counter: Counter) -> None:
        super().__init__()
        self.n_head, self.hd = n_head, d // n_head
        self.scale = cfg["attn_scale"]
        lif = lambda th=cfg["v_th"]: LIF(cfg["tau"], th, cfg["surrogate_alpha"])  # noqa: E731
        self.lif_in, self.lif_q, self.lif_k, self.lif_v = lif(), lif(), lif(), lif()
        self.lif_attn = lif(cfg["attn_v_th"])
        self.q, self.k, self.v = (SpikeLinear(d, d, counter) for _ in range(3))
        self.o = SpikeLinear(d, d, counter)
        self.lif_mlp_in, self.lif_hidden = lif(), lif()
        self.fc1 = SpikeLinear(d, hidden, counter)
        self.fc2 = SpikeLinear(hidden, d, counter)
        self.counter = counter

    def heads(self, z: torch.Tensor) -> torch.Tensor:
        T, B, N, D = z.shape
        return z.view(T, B, N, self.n_head, self.hd).transpose(2, 3)  # (T, B, H, N, hd)

    def attention(self, x: torch.Tensor):
        """Spiking self-attention branch; returns (x + branch, Q, K) with Q, K (T, B, H, N, hd) spikes."""
        s = self.lif_in(x)
        q, k, v = (self.heads(lif(lin(s))) for lin, lif in ((self.q, self.lif_q), (self.k, self.lif_k), (self.v, self.lif_v)))
        kv = k.transpose(-2, -1) @ v  # (T, B, H, hd, hd)
        y = (q @ kv) * self.scale  # = (Q K^T) V * scale, no softmax
        if self.counter.on:
            self.counter.add_synops((k.detach().sum() + q.detach().sum()) * self.hd)
        T, B, H, N, hd = y.shape
        y = self.lif_attn(y.transpose(2, 3).reshape(T, B, N, H * hd))
        return x + self.o(y), q, k

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lif_hidden(self.fc1(self.lif_mlp_in(x)))
        return x + self.fc2(h)


class SpikingViT(nn.Module):
    def __init__(self, arch: dict) -> None:
        super().__init__()
        self.arch = arch
        vcfg = ViTConfig(image_size=28, patch_size=arch["patch_size"], d_model=arch["d_model"], n_layer=arch["n_layer"],
                         n_head=arch["n_head"], mlp_ratio=arch["mlp_ratio"], pool="cls")
        self.counter = Counter()
        self.patch = PatchEmbed(vcfg)
        self.patch_bn = nn.BatchNorm1d(vcfg.d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, vcfg.d_model))
        self.pos = nn.Parameter(0.02 * torch.randn(1, vcfg.n_tokens, vcfg.d_model))
        self.use_anchor = arch["scorer"] == "anchor"
        if self.use_anchor:  # one anchor embedding per timestep
            self.anchor = nn.Parameter(0.02 * torch.randn(arch["timesteps"], 1, vcfg.d_model))
        self.blocks = nn.ModuleList(SpikingBlock(vcfg.d_model, vcfg.n_head, vcfg.hidden, arch, self.counter)
                                    for _ in range(vcfg.n_layer))
        self.norm = nn.LayerNorm(vcfg.d_model)
        self.head = nn.Linear(vcfg.d_model, vcfg.n_classes)
        self.n_patches = vcfg.n_patches
        self.n_special = 2 if self.use_anchor else 1
        self.keep_ratio = arch["keep_ratio"]  # 1.0 = no dropping
        self.scorer = arch["scorer"]

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 1, 28, 28) -> residual stream (T, B, N, D): [CLS, (anchor_t), patches] + positions."""
        T = self.arch["timesteps"]
        p = self.patch(images)  # (B, Np, D)
        B, Np, D = p.shape
        p = self.patch_bn(p.reshape(-1, D)).view(B, Np, D)
        x = torch.cat([self.cls_token.expand(B, -1, -1), p], dim=1) + self.pos  # (B, 1+Np, D)
        x = x.unsqueeze(0).expand(T, -1, -1, -1)
        if self.use_anchor:
            a = self.anchor[:, None].expand(T, B, 1, D)  # (T, B, 1, D), timestep-wise
            x = torch.cat([x[:, :, :1], a, x[:, :, 1:]], dim=2)
        return x

    def forward(self, images: torch.Tensor):
        """Returns (logits, aux) with aux["intra"], aux["inter"] alignment losses (0 when unused)."""
        x = self.embed(images)
        ns = self.n_special
        intra = x.new_zeros(())
        inter = x.new_zeros(())
        prune = self.keep_ratio < 1.0 and self.scorer != "none"
        for l, block in enumerate(self.blocks):
            self.counter.token_sum += x.shape[2] * self.counter.on
            x, q, k = block.attention(x)
            if prune and l in self.arch["prune_layers"]:
                kp = k[:, :, :, ns:]  # (T, B, H, Np', hd) patch keys
                cls_rows = (q[:, :, :, :1] @ kp.transpose(-2, -1)).squeeze(-2).mean(2)  # (T, B, Np')
                rows = cls_rows
                if self.use_anchor:
                    # the anchor reads detached keys: it is the student of L_intra and must not move the
                    # keys its (detached) CLS target is computed from
                    rows = (q[:, :, :, 1:2] @ kp.detach().transpose(-2, -1)).squeeze(-2).mean(2)
                    if self.training:
                        intra = intra + intra_alignment(cls_rows, rows)
                        inter = inter + inter_alignment(cls_rows)
                if prune:
                    n_now = x.shape[2] - ns
                    k_keep = max(1, math.ceil(self.keep_ratio * n_now))
                    x = select_tokens(x, token_scores(rows.detach(), self.scorer), ns, k_keep)
            self.counter.token_sum += x.shape[2] * self.counter.on
            self.counter.sublayers += 2 * self.counter.on
            x = block.mlp(x)
        feat = self.norm(x.mean(dim=(0, 2)))  # residual stream averaged over timesteps and kept tokens
        return self.head(feat), {"intra": intra, "inter": inter}


def make_arch(cfg: Config, variant: str) -> dict:
    return {"patch_size": cfg.patch_size, "d_model": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
            "mlp_ratio": cfg.mlp_ratio, "timesteps": cfg.timesteps, "tau": cfg.tau, "v_th": cfg.v_th, "attn_v_th": cfg.attn_v_th,
            "surrogate_alpha": cfg.surrogate_alpha, "attn_scale": cfg.attn_scale,
            "prune_layers": list(cfg.prune_layers), "scorer": SCORERS[variant],
            "keep_ratio": 1.0 if variant == "dense" else cfg.keep_ratio}


def build_model(model: dict) -> SpikingViT:
    net = SpikingViT(model["arch"])
    net.load_state_dict(model["state"])
    if "keep_ratio" in model:  # inference-time override (compress levels)
        net.keep_ratio = float(model["keep_ratio"])
        if net.scorer == "none":
            net.scorer = "cls"  # dense model pruned at inference with the conventional scorer
    return net


# ----------------------------------------------------------------------------------------------------
# Train / compress / evaluate


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"stata: unknown variant {variant!r}; variants: {VARIANTS}")
    torch.manual_seed(seed)
    arch = make_arch(cfg, variant)
    net = SpikingViT(arch)
    x, y = data["x_train"], data["y_train"]
    n = x.shape[0]
    steps_per_epoch = max(1, math.ceil(n / cfg.batch_size))
    steps = cfg.epochs * steps_per_epoch
    gen = torch.Generator().manual_seed(seed)
    perm = [None]

    def batch_fn(step: int):
        if step % steps_per_epoch == 0:
            perm[0] = torch.randperm(n, generator=gen)
        idx = perm[0][(step % steps_per_epoch) * cfg.batch_size:(step % steps_per_epoch + 1) * cfg.batch_size]
        return to_float(x[idx]), y[idx]

    lam_intra = cfg.lambda_intra if variant == "stata" else 0.0
    lam_inter = cfg.lambda_inter if variant == "stata" else 0.0
    last = {}

    def loss_fn(batch):
        xb, yb = batch
        logits, aux = net(xb)
        ce = F.cross_entropy(logits, yb)
        last.update(ce=float(ce.detach()), intra=float(aux["intra"].detach()), inter=float(aux["inter"].detach()))
        return ce + lam_intra * aux["intra"] + lam_inter * aux["inter"]

    def log_fn(step: int, **metrics: float) -> None:
        if log is not None:
            extra = {"train/ce": last["ce"]}
            if variant == "stata":
                extra.update({"train/l_intra": last["intra"], "train/l_inter": last["inter"]})
            log(step, **metrics, **extra)

    params = list(net.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    train_loop(params, batch_fn, loss_fn, opt, steps, log=log_fn, log_every=cfg.log_every,
               lr_fn=lambda s: cosine_lr(s, steps, cfg.lr, cfg.warmup), modules=[net])
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {"state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "arch": arch,
            "train_s_per_epoch": wall / cfg.epochs, "train_cpu_s_per_epoch": cpu / cfg.epochs,
            "steps": steps, "epochs": cfg.epochs}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Inference-time token dropping at each of cfg.infer_keep_ratios with the variant's own scorer (the
    dense model with the conventional CLS scorer); no retraining. Level = fraction of patch tokens dropped."""
    return {level_name(r): {**model, "keep_ratio": float(r)} for r in cfg.infer_keep_ratios}


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    net = build_model(model)
    net.eval()
    c = net.counter
    c.on, c.synops, c.token_sum, c.sublayers = True, 0.0, 0.0, 0
    x, y = data["x_test"], data["y_test"]
    correct, batches = 0, 0
    for a in range(0, x.shape[0], cfg.eval_batch):
        logits, _ = net(to_float(x[a:a + cfg.eval_batch]))
        correct += int((logits.argmax(-1) == y[a:a + cfg.eval_batch]).sum())
        batches += 1
    n = x.shape[0]
    return {"acc": 100.0 * correct / n,
            "tokens": c.token_sum / max(1, c.sublayers),
            "synops": c.synops / n,
            "train_s_per_epoch": float(model.get("train_s_per_epoch", float("nan"))),
            "train_cpu_s_per_epoch": float(model.get("train_cpu_s_per_epoch", float("nan")))}


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """<stage>/train_speedup = dense time / this variant's time per epoch (same seed), wall and CPU."""
    dense = {r["seed"]: r for r in rows if r["variant"] == "dense"}
    out = []
    for row in rows:
        row = dict(row)
        ref = dense.get(row["seed"])
        if ref is not None:
            for metric, name in (("train_s_per_epoch", "train_speedup"), ("train_cpu_s_per_epoch", "train_cpu_speedup")):
                col = f"dense/{metric}"
                if row.get(col) and ref.get(col):
                    row[f"dense/{name}"] = float(ref[col]) / float(row[col])
        out.append(row)
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    # margin fixed before any result was seen: 2% relative accuracy
    return [
        Comparison(metric="acc", method="stata", baseline="dense", better="higher", kind="close", margin=0.02,
                   text="STATA accuracy within 2% (relative) of the dense spiking ViT"),
        Comparison(metric="train_s_per_epoch", method="stata", baseline="dense", better="lower",
                   text="STATA trains faster per epoch than dense (wall time, 1 thread, noisy shared machine)"),
        Comparison(metric="train_cpu_s_per_epoch", method="stata", baseline="dense", better="lower",
                   text="STATA uses less CPU time per training epoch than dense"),
        Comparison(metric="acc", method="stata", baseline="token_prune", better="higher",
                   text="STATA is more accurate than conventional CLS-attention token pruning at the same keep ratio"),
        Comparison(metric="synops", method="stata", baseline="dense", better="lower",
                   text="STATA needs fewer synaptic operations per image (energy proxy) than dense"),
    ]


SPEC = register_paper(PaperSpec(
    id="stata",
    title="Towards Efficient Spiking Transformer: a Token Sparsification Framework for Training and Inference Acceleration",
    claim="~1.5x training speedup at similar accuracy",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons, derive=derive,
    resources=("fashion_mnist",),
    data="Fashion-MNIST (fixed train/test subsets), static images fed at every timestep (direct encoding)",
    substitutions="Paper: Spikformer / Spike-driven Transformer on CIFAR-10/100, ImageNet and DVS, T=4, GPUs. Here: a "
                  "4-block d=32 spike-driven ViT (LIF, sigmoid surrogate, softmax-free spiking self-attention), T=2, 4x4 "
                  "patches, a few epochs on one CPU thread. The paper's equations were not available (no official code "
                  "found, only the abstract): the timestep-wise anchor (learnable per-timestep token whose attention row, "
                  "z-scored within each timestep and averaged, ranks tokens) and the intra (anchor vs CLS map, same "
                  "timestep) / inter (each timestep's CLS map vs the timestep consensus) KL alignments are our "
                  "formulation. One token set is shared by all timesteps; hard dropping without EViT fusion. Wall time "
                  "on a shared machine is noisy; CPU time is also reported.",
    compression="token sparsification during training and inference is the variant itself (stata, token_prune); the "
                "compress stage additionally drops tokens at inference only, at keep ratios infer_keep_ratios, with each "
                "variant's own scorer (dense: conventional CLS scorer); level = fraction of patch tokens dropped per "
                "pruning block",
    tradeoff=("synops", "acc"),
    weight=1,
))
