"""ID-guided vision-language pruning: "Exploring Intrinsic Dimension for Vision-Language Model Pruning"
(Hanzhang Wang, Jiawen Zhang, Qingyuan Ma), ICML 2024.
Official code: https://github.com/Nofear18/ID_VL_Pruning (ComputeID.py: TwoNN estimator and the per-layer
ID pass; ID_pruner.py::Pruner: PLATON importance x ID; train_caption.py: pruning during fine-tuning).

What is implemented.
  1. A two-modality model trained here (the paper prunes a pretrained BLIP): an image encoder
     (paperflow.nn.vit.ViT, its head = projection into the joint space) and a text encoder (a small
     bidirectional transformer built from paperflow.nn.vit.Block over word tokens of label descriptions
     written in this module, e.g. "a photo of a trousers, a garment for the legs"), aligned CLIP-style:
         logits = exp(t) * norm(f_img) norm(f_txt)^T,   L = (CE(logits, P) + CE(logits^T, P^T)) / 2
     with a learned temperature t (init log(1/0.07), exp(t) clamped at 100 as in CLIP). A step sees 64 images
     and k = 2 training descriptions of every class (20 texts); since many images share a class, the
     targets P are multi-positive (uniform over the same-class texts / images of the batch, as in UniCL)
     instead of the identity; that is the only change to InfoNCE.
  2. TwoNN intrinsic dimension (Facco et al. 2017) of every prunable nn.Linear's output on a calibration
     batch (ComputeID.py::getDepths selects every Linear; the output (B, tokens, out) is flattened to
     (B, tokens * out) as in its main()). For points with nearest-neighbour distances r1 < r2,
         mu = r2 / r1,  F(mu) = 1 - mu^(-d)  =>  -log(1 - F_emp(mu_(i))) = d log mu_(i),
     d = slope of a least-squares line through the origin (ComputeID.py::estimate). Official-code
     details followed: points with r1 = 0 or r1 = r2 are dropped; the `fraction` argument is IGNORED by the
     authors' code: the fit uses all sorted ratios but the two largest (x = log mu[:-2]); and
     block_analysis() splits the n points into b = 1..20 random disjoint subsets (sizes n, n/2, ..., n/20),
     averages the estimate over the b subsets and reports the MEAN over b (estimate_ID_2nn returns
     np.average(dim)), not the n -> infinity extrapolation of the TwoNN paper. Subsets with <= 3 good points
     (the official code only prints a warning there) give nan and are left out of the mean.
  3. Pruning during a short fine-tune with the PLATON schedule of ID_pruner.py::schedule_threshold_comb
     (remaining ratio 1 for the first ft_warmup steps, cubic decay r = r_f + (1 - r_f) (1 - progress)^3,
     masks applied every delta_t steps, and every step over the last ft_final steps at the target) and the
     PLATON score of update_ipt_with_local_window / mask_with_threshold (beta2 in (0, 1) branch):
         I_t = |W * dL/dW| (averaged over a local window of delta_t steps),
         Ibar = b1 Ibar + (1 - b1) I,   U = b2 U + (1 - b2) |I - Ibar|,
         S_ij = Ibar_ij * U_ij * ID_l                     (variant "id_weighted", useID=True)
         S_ij = Ibar_ij * U_ij                            (variant "importance", useID=False: the ablation)
     with ONE threshold over all pruned matrices (kthvalue over the concatenated scores), so the raw,
     unnormalised ID of layer l (train_caption.py passes the raw TwoNN values) shifts sparsity between
     layers and, when both towers are pruned, between the modalities (the paper's asymmetric sparsity).
     Baseline "uniform_magnitude": |W| with the same sparsity in every matrix, same schedule and fine-tune.
     Pruned matrices: attn.qkv, attn.proj, ffn.fc1, ffn.fc2 of every block of the pruned tower(s), as
     the official mask_param_name (embeddings, patch embedding, norms and projections are not pruned).
     After the fine-tune a final mask at exactly the target sparsity is applied (keep_mask_lowest).

Levels (compress): "<s>" = both towers pruned to s jointly (one threshold over both; numeric, plotted),
"v<s>" = vision tower only, "t<s>" = text tower only, s in cfg.sparsities. evaluate() returns the
zero-shot accuracy (images vs class embeddings built from HELD-OUT descriptions, never seen in training),
the measured nonzero parameters of the whole model (paperflow.measure.count_nonzero), the measured sparsity
of each tower's prunable matrices, and (compressed models) the mean per-layer ID of each tower.
derive() adds pseudo-variant rows "<variant>|vision_only" / "<variant>|text_only" whose "compressed@<s>"
columns are the v<s> / t<s> results, so "vision more sensitive" is a paired per-seed comparison
(acc after pruning only text > acc after pruning only vision, same sparsity).

Substitutions for laptop scale: BLIP (ViT-B + BERT, COCO/NLVR2/Flickr30k) -> a ~0.22M-parameter dual
encoder trained here on Fashion-MNIST images paired with generated label descriptions (10 classes, 54
train and 18 held-out descriptions per class); captioning/VQA/retrieval metrics -> zero-shot
classification accuracy; PLATON's multi-epoch pruning fine-tune -> ft_steps = 40 steps per level with the
same cubic schedule (10 warm-up steps, 20 cubic, 10 at the target) and delta_t = 1 (official deltaT = 10
over ~14k-step warm-ups; with 40 steps a 10-step window would leave the EMAs unwarmed), fine-tune lr = the
final lr of training; levels 30/50/70% (the issue's range, claims at 70%) plus a 90% stress level; ID on n_calib images / descriptions (official: 600 samples); biases are not pruned (the
official code also masks the biases of the pruned Linears). The dense model does not depend on the
variant (variants are pruning criteria), so each (variant, seed) job retrains the same seed's model:
3x training cost, but exactly paired dense models per seed.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import apply_masks, keep_mask_lowest, layer_magnitude_mask, prunable_weights
from ..data.images import load_fashion, subset, to_float
from ..loop import cosine_lr, train_loop
from ..measure import count_nonzero
from ..nn.vit import MLP, Block, SelfAttention, ViT, ViTConfig
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("id_weighted", "importance", "uniform_magnitude")
TOWERS = {"v": ("vision.",), "t": ("text.",), "vt": ("vision.", "text.")}
PRUNED = (".attn.qkv.", ".attn.proj.", ".ffn.fc1.", ".ffn.fc2.")  # official mask_param_name analogue
PSEUDO = {"v": "vision_only", "t": "text_only"}

# ----------------------------------------------------------------------------------------------------
# Label descriptions: template x noun x phrase per class (72 per class); 1 in 4 combinations held out.

TEMPLATES = ("a photo of a {n}, {p}", "a picture of the {n}, {p}", "an image of a {n} {p}", "{n}, {p}",
             "a {n} {p}", "a grayscale photo of a {n}, {p}")
CLASS_TEXT = (
    (("t-shirt", "top", "tee"), ("with short sleeves", "worn on the upper body", "a light casual garment", "with a round neck")),
    (("trousers", "pants", "slacks"), ("a garment for the legs", "with two long legs", "worn from the waist down", "long and narrow")),
    (("pullover", "sweater", "jumper"), ("with long sleeves", "a warm knitted top", "pulled on over the head", "for cold weather")),
    (("dress", "gown", "frock"), ("a one piece garment", "worn by women", "with a long skirt", "for a party")),
    (("coat", "jacket", "overcoat"), ("with buttons down the front", "worn over other clothes", "for cold weather", "with long sleeves and a collar")),
    (("sandal", "flip flop", "slipper"), ("an open shoe with straps", "worn in summer", "a light shoe for the feet", "showing the toes")),
    (("shirt", "blouse", "button shirt"), ("with a collar and buttons", "worn on the upper body", "with long sleeves", "a formal top")),
    (("sneaker", "trainer", "running shoe"), ("a sports shoe with laces", "a low shoe for the feet", "with a rubber sole", "for running")),
    (("bag", "handbag", "purse"), ("with a handle", "for carrying things", "a leather accessory", "with a strap")),
    (("ankle boot", "boot", "bootie"), ("a shoe that covers the ankle", "with a heel", "a high shoe for the feet", "for winter")),
)
N_CLASSES = len(CLASS_TEXT)


def descriptions() -> list[tuple[str, int, bool]]:
    """(text, class, held_out) for every template x noun x phrase; held out when (t + n + p) % 4 == 0."""
    out = []
    for c, (nouns, phrases) in enumerate(CLASS_TEXT):
        for ti, tmpl in enumerate(TEMPLATES):
            for ni, noun in enumerate(nouns):
                for pi, phrase in enumerate(phrases):
                    out.append((tmpl.format(n=noun, p=phrase), c, (ti + ni + pi) % 4 == 0))
    return out


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9\-]+", text.lower())


def tokenize(texts: list[str], max_len: int) -> tuple[torch.Tensor, list[str]]:
    """Word ids (len(texts), max_len), 0 = padding; vocabulary sorted for determinism."""
    vocab = ["<pad>"] + sorted({w for t in texts for w in words(t)})
    index = {w: i for i, w in enumerate(vocab)}
    ids = torch.zeros(len(texts), max_len, dtype=torch.long)
    for r, t in enumerate(texts):
        toks = [index[w] for w in words(t)]
        if len(toks) > max_len:
            raise ValueError(f"description {t!r} has {len(toks)} words > max_len={max_len}")
        ids[r, : len(toks)] = torch.tensor(toks)
    return ids, vocab


@dataclass(frozen=True)
class Config:
    # data
    n_train: int = 20000  # Fashion-MNIST training images used (subset, data_seed)
    n_test: int = 2000  # test images for zero-shot accuracy
    n_calib: int = 400  # calibration images for the per-layer ID (official: 600 samples)
    n_calib_text: int = 400  # calibration descriptions (distinct training descriptions, <= 540)
    data_seed: int = 0
    max_len: int = 14  # word tokens per description (longest is 12)
    # dual encoder
    patch_size: int = 7  # 28x28 -> 16 patches + cls
    d_vision: int = 64
    vision_layers: int = 3
    d_text: int = 48
    text_layers: int = 2
    n_head: int = 4
    mlp_ratio: float = 4.0
    embed_dim: int = 64  # joint embedding
    init_temp: float = 0.07  # CLIP initial temperature (logit scale = 1 / 0.07)
    # contrastive training
    steps: int = 500
    batch_size: int = 64  # images per step
    texts_per_class: int = 2  # descriptions per class per step (20 texts)
    lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.05
    log_every: int = 50
    # pruning (PLATON schedule and score, ID_pruner.py)
    sparsities: tuple = (0.3, 0.5, 0.7, 0.9)  # 0.9: a stress level beyond the 30-70%
    compare_level: float = 0.7  # level of the claims rows
    stress_level: float = 0.9  # extra id_weighted-vs-uniform row (0 = none)
    ft_steps: int = 40  # pruning fine-tune steps per level
    ft_lr: float = 2e-4  # = the training schedule's final lr (cosine to 0.1 x lr)
    ft_warmup: int = 10  # steps before pruning starts (initial_warmup * warmup_steps)
    ft_final: int = 10  # last steps at the target (final_warmup * warmup_steps)
    delta_t: int = 1  # PLATON local window / masking interval (official deltaT 10 over thousands of steps)
    beta1: float = 0.85  # PLATON beta1 (official default)
    beta2: float = 0.95  # PLATON beta2 (official default)
    id_blocks: int = 20  # TwoNN subsample sizes n/1 .. n/id_blocks (official 20)
    eval_batch: int = 1000

    def __post_init__(self) -> None:
        object.__setattr__(self, "sparsities", tuple(float(s) for s in self.sparsities))
        n_train_desc = sum(1 for _, _, h in descriptions() if not h)
        check(self.n_train > 0 and self.n_test > 0, f"n_train and n_test must be > 0, got {self.n_train}, {self.n_test}")
        check(self.n_calib >= 4 * self.id_blocks, f"n_calib must be >= 4 * id_blocks = {4 * self.id_blocks} (TwoNN needs > 3 points per subset), got {self.n_calib}")
        check(4 * self.id_blocks <= self.n_calib_text <= n_train_desc,
              f"n_calib_text must be in [{4 * self.id_blocks}, {n_train_desc}] (distinct training descriptions), got {self.n_calib_text}")
        check(self.id_blocks >= 1, f"id_blocks must be >= 1, got {self.id_blocks}")
        check(self.max_len >= 12, f"max_len must be >= 12 (longest description), got {self.max_len}")
        check(28 % self.patch_size == 0, f"patch_size must divide 28, got {self.patch_size}")
        check(self.d_vision % self.n_head == 0 and self.d_text % self.n_head == 0,
              f"d_vision and d_text must be divisible by n_head={self.n_head}")
        check(self.vision_layers > 0 and self.text_layers > 0, "vision_layers and text_layers must be > 0")
        check(self.embed_dim > 0 and self.mlp_ratio > 0, "embed_dim and mlp_ratio must be > 0")
        check(0 < self.init_temp < 1, f"init_temp must be in (0, 1), got {self.init_temp}")
        check(self.steps > 0 and self.batch_size > 1, f"steps must be > 0 and batch_size > 1, got {self.steps}, {self.batch_size}")
        check(1 <= self.texts_per_class <= 54, f"texts_per_class must be in [1, 54] (training descriptions per class), got {self.texts_per_class}")
        check(self.lr > 0 and self.ft_lr > 0, "lr and ft_lr must be > 0")
        check(self.sparsities and all(0 < s < 1 for s in self.sparsities), f"sparsities must be in (0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}, got {self.compare_level}")
        check(self.stress_level == 0 or self.stress_level in self.sparsities,
              f"stress_level must be 0 or one of sparsities {self.sparsities}, got {self.stress_level}")
        check(self.ft_steps > 0 and self.ft_warmup >= 0 and self.ft_final >= 1 and self.ft_warmup + self.ft_final < self.ft_steps,
              f"need ft_steps > ft_warmup + ft_final, ft_final >= 1; got {self.ft_steps}, {self.ft_warmup}, {self.ft_final}")
        check(self.delta_t >= 1, f"delta_t must be >= 1, got {self.delta_t}")
        check(0 <= self.beta1 < 1 and 0 < self.beta2 < 1, f"beta1 must be in [0, 1), beta2 in (0, 1); got {self.beta1}, {self.beta2}")
        check(self.eval_batch > 0 and self.log_every > 0 and self.warmup >= 0, "eval_batch, log_every must be > 0, warmup >= 0")


def level_name(prefix: str, s: float) -> str:
    return f"{'' if prefix == 'vt' else prefix}{s:.2f}"


# ----------------------------------------------------------------------------------------------------
# Data


def prepare(cfg: Config, res) -> dict:
    """Fashion-MNIST subsets (uint8) and the tokenized descriptions (train / held-out)."""
    fm = load_fashion(res["fashion_mnist"])
    x_tr, y_tr = subset(fm["x_train"], fm["y_train"].long(), cfg.n_train + cfg.n_calib, cfg.data_seed)
    x_te, y_te = subset(fm["x_test"], fm["y_test"].long(), cfg.n_test, cfg.data_seed + 1)
    n_cal = min(cfg.n_calib, x_tr.shape[0] // 2)
    desc = descriptions()
    ids, vocab = tokenize([d[0] for d in desc], cfg.max_len)
    return {"x_train": x_tr[n_cal:], "y_train": y_tr[n_cal:], "x_calib": x_tr[:n_cal],
            "x_test": x_te, "y_test": y_te,
            "text_ids": ids, "text_class": torch.tensor([d[1] for d in desc]),
            "text_heldout": torch.tensor([d[2] for d in desc]), "vocab": vocab}


# ----------------------------------------------------------------------------------------------------
# Model


class TextEncoder(nn.Module):
    """Word embedding + positions + class token -> pre-norm Blocks (paperflow.nn.vit) -> norm -> proj(cls)."""

    def __init__(self, vocab: int, max_len: int, d: int, layers: int, heads: int, mlp_ratio: float, embed_dim: int):
        super().__init__()
        vcfg = ViTConfig(image_size=1, patch_size=1, d_model=d, n_layer=layers, n_head=heads, mlp_ratio=mlp_ratio)
        self.tok = nn.Embedding(vocab, d)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(0.02 * torch.randn(1, max_len + 1, d))
        self.blocks = nn.ModuleList(Block(vcfg, nn.LayerNorm, lambda dd, h, n: SelfAttention(dd, h, n),
                                          lambda dd, hid: MLP(dd, hid)) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, embed_dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.cls_token.expand(ids.shape[0], -1, -1), self.tok(ids)], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.proj(self.norm(x)[:, 0])  # (B, embed_dim)


class DualEncoder(nn.Module):
    def __init__(self, arch: dict):
        super().__init__()
        self.vision = ViT(ViTConfig(image_size=28, patch_size=arch["patch_size"], d_model=arch["d_vision"],
                                    n_layer=arch["vision_layers"], n_head=arch["n_head"], mlp_ratio=arch["mlp_ratio"],
                                    n_classes=arch["embed_dim"]))  # head = image projection
        self.text = TextEncoder(arch["vocab"], arch["max_len"], arch["d_text"], arch["text_layers"], arch["n_head"],
                                arch["mlp_ratio"], arch["embed_dim"])
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / arch["init_temp"])))

    def encode_image(self, x_uint8: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.vision(to_float(x_uint8)), dim=-1)

    def encode_text(self, ids: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.text(ids), dim=-1)


def build(model: dict) -> DualEncoder:
    net = DualEncoder(model["arch"])
    net.load_state_dict(model["state"])
    net.eval()
    return net


def contrastive_loss(img: torch.Tensor, txt: torch.Tensor, img_labels: torch.Tensor, txt_labels: torch.Tensor,
                     logit_scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE (CLIP) on normalized embeddings, multi-positive targets over same-class pairs:
    image -> text over the batch's texts, text -> image over the batch's images (texts whose class has no
    image in the batch are left out of that direction)."""
    logits = logit_scale.exp().clamp(max=100.0) * img @ txt.T  # (B, T)
    pos = (img_labels[:, None] == txt_labels[None, :]).float()  # every image has >= 1 positive text
    i2t = F.cross_entropy(logits, pos / pos.sum(1, keepdim=True))
    has = pos.sum(0) > 0
    t2i = F.cross_entropy(logits.T[has], (pos.T[has] / pos.T[has].sum(1, keepdim=True)))
    return 0.5 * (i2t + t2i)


def _batch_sampler(cfg: Config, data: dict, seed: int):
    """batch_fn(step) -> (images uint8 (B,), labels, description ids (10 k,), their classes): a random image
    batch and k = texts_per_class random training descriptions of every class (text tower cost is then
    independent of the image batch size)."""
    gen = torch.Generator().manual_seed(seed)
    train_desc = (~data["text_heldout"]).nonzero().flatten()
    by_class = [train_desc[data["text_class"][train_desc] == c] for c in range(N_CLASSES)]
    x, y = data["x_train"], data["y_train"]
    k = cfg.texts_per_class
    t_cls = torch.arange(N_CLASSES).repeat_interleave(k)

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        tid = torch.cat([d[torch.randperm(d.numel(), generator=gen)[:k]] for d in by_class])
        return x[idx], y[idx], data["text_ids"][tid], t_cls

    return batch_fn


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """CLIP-style contrastive training of the dual encoder (identical for every variant of one seed)."""
    if variant not in VARIANTS:
        raise ValueError(f"id_vl_pruning: unknown variant {variant!r}; variants: {VARIANTS}")
    torch.manual_seed(seed)
    arch = {"patch_size": cfg.patch_size, "d_vision": cfg.d_vision, "vision_layers": cfg.vision_layers,
            "d_text": cfg.d_text, "text_layers": cfg.text_layers, "n_head": cfg.n_head, "mlp_ratio": cfg.mlp_ratio,
            "embed_dim": cfg.embed_dim, "init_temp": cfg.init_temp, "vocab": len(data["vocab"]), "max_len": cfg.max_len}
    net = DualEncoder(arch)
    batch_fn = _batch_sampler(cfg, data, seed)

    def loss_fn(batch):
        xb, yb, tb, cb = batch
        return contrastive_loss(net.encode_image(xb), net.encode_text(tb), yb, cb, net.logit_scale)

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    train_loop(list(net.parameters()), batch_fn, loss_fn, opt, cfg.steps, log=log, log_every=cfg.log_every,
               lr_fn=lambda s: cosine_lr(s, cfg.steps, cfg.lr, cfg.warmup), clip_norm=1.0, modules=[net])
    return {"state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "arch": arch}


# ----------------------------------------------------------------------------------------------------
# Evaluate


@torch.no_grad()
def class_embeddings(net: DualEncoder, data: dict) -> torch.Tensor:
    """(10, E): mean of the normalized embeddings of each class's HELD-OUT descriptions, renormalized."""
    held = data["text_heldout"]
    emb = net.encode_text(data["text_ids"][held])
    cls = data["text_class"][held]
    return F.normalize(torch.stack([emb[cls == c].mean(0) for c in range(N_CLASSES)]), dim=-1)


def _tower_sparsity(state: dict, tower: str) -> float:
    w = prunable_weights(state, include=PRUNED)
    w = {k: v for k, v in w.items() if k.startswith(tower)}
    return sum(int((v == 0).sum()) for v in w.values()) / max(1, sum(v.numel() for v in w.values()))


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Zero-shot accuracy (%) on the test images vs held-out class descriptions, measured nonzero
    parameters of the whole model, measured sparsity of each tower's prunable matrices."""
    net = build(model)
    cls = class_embeddings(net, data)
    x, y = data["x_test"], data["y_test"]
    correct = 0
    for a in range(0, x.shape[0], cfg.eval_batch):
        correct += int(((net.encode_image(x[a : a + cfg.eval_batch]) @ cls.T).argmax(-1) == y[a : a + cfg.eval_batch]).sum())
    out = {"acc": 100.0 * correct / x.shape[0], "nonzero_params": float(count_nonzero(model["state"])),
           "sparsity_v": _tower_sparsity(model["state"], "vision."), "sparsity_t": _tower_sparsity(model["state"], "text.")}
    for tower, ids in model.get("ids", {}).items():
        out[f"id_mean_{tower}"] = float(np.mean(list(ids.values())))
    return out


# ----------------------------------------------------------------------------------------------------
# TwoNN intrinsic dimension (ComputeID.py::estimate, block_analysis, estimate_ID_2nn)


def twonn_fit(dist: np.ndarray) -> float:
    """TwoNN on a (m, m) distance matrix: slope through the origin of -log(1 - F_emp) vs log(r2 / r1),
    all sorted ratios but the two largest (as ComputeID.py::estimate, whose `fraction` is unused)."""
    Y = np.sort(dist, axis=1)
    r1, r2 = Y[:, 1], Y[:, 2]
    good = (r1 != 0) & (r1 != r2)  # official: drop r1 = 0 (duplicates) and r1 = r2 (degeneracies)
    mu = np.sort(r2[good] / r1[good])
    n = mu.shape[0]
    if n <= 3:
        return float("nan")
    femp = np.arange(1, n + 1, dtype=np.float64) / n
    xs, ys = np.log(mu[:-2]), -np.log(1.0 - femp[:-2])
    return float(xs @ ys / (xs @ xs))


def twonn_id(x: torch.Tensor, blocks: int = 20, seed: int = 0) -> float:
    """Mean over b = 1..blocks of the mean TwoNN estimate on b disjoint random subsets of n // b points
    (ComputeID.py::block_analysis + estimate_ID_2nn: np.average over the subsample sizes)."""
    x = x.reshape(x.shape[0], -1).double()
    dist = torch.cdist(x, x).numpy()
    rng = np.random.default_rng(seed)
    n, dims = x.shape[0], []
    for b in range(1, blocks + 1):
        m = n // b
        idx = rng.permutation(n)[: m * b].reshape(b, m)
        est = [twonn_fit(dist[np.ix_(i, i)]) for i in idx]
        est = [e for e in est if math.isfinite(e)]
        if est:
            dims.append(float(np.mean(est)))
    return float(np.mean(dims)) if dims else float("nan")


@torch.no_grad()
def layer_ids(cfg: Config, net: DualEncoder, data: dict, seed: int) -> dict[str, float]:
    """{param name of each prunable weight: TwoNN ID of its Linear's output} on the calibration batch
    (images for the vision tower, distinct training descriptions for the text tower)."""
    names = {n[: -len(".weight")] for n in prunable_weights(net.state_dict(), include=PRUNED)}
    feats: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, name=name: feats.__setitem__(name, out.detach()))
             for name, m in net.named_modules() if name in names]
    net.eval()
    net.vision(to_float(data["x_calib"]))
    train_desc = (~data["text_heldout"]).nonzero().flatten()
    perm = torch.randperm(train_desc.numel(), generator=torch.Generator().manual_seed(seed))[: cfg.n_calib_text]
    net.text(data["text_ids"][train_desc[perm]])
    for h in hooks:
        h.remove()
    ids = {f"{n}.weight": twonn_id(feats[n], cfg.id_blocks, seed) for n in sorted(names)}
    finite = [v for v in ids.values() if math.isfinite(v)]
    fill = float(np.mean(finite)) if finite else 1.0
    return {k: (v if math.isfinite(v) else fill) for k, v in ids.items()}


# ----------------------------------------------------------------------------------------------------
# Compress: pruning during a short fine-tune (ID_pruner.py::Pruner)


def remaining_ratio(step: int, cfg: Config, target: float) -> tuple[float, bool]:
    """(remaining ratio, mask now?) at step: ID_pruner.py::schedule_threshold_comb with
    initial_warmup*warmup_steps = ft_warmup, final_warmup*warmup_steps = ft_final, deltaT = delta_t."""
    final = 1.0 - target
    if step <= cfg.ft_warmup:
        return 1.0, False
    if step > cfg.ft_steps - cfg.ft_final:
        return final, True
    mul = 1.0 - (step - cfg.ft_warmup) / (cfg.ft_steps - cfg.ft_warmup - cfg.ft_final)
    return final + (1.0 - final) * mul ** 3, step % cfg.delta_t == 0


class PlatonScore:
    """PLATON importance with local window (ID_pruner.py::update_ipt_with_local_window, beta2 in (0, 1))."""

    def __init__(self, params: dict[str, torch.Tensor], beta1: float, beta2: float, delta_t: int):
        self.b1, self.b2, self.dt = beta1, beta2, delta_t
        self.ipt = {n: torch.zeros_like(p) for n, p in params.items()}
        self.avg = {n: torch.zeros_like(p) for n, p in params.items()}
        self.unc = {n: torch.zeros_like(p) for n, p in params.items()}

    def update(self, step: int, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor]) -> None:
        local = step % self.dt
        for n, p in params.items():
            s = (p.detach() * grads[n]).abs()
            if local == 0:
                self.avg[n] = self.b1 * self.avg[n] + (1 - self.b1) * self.ipt[n]
                self.unc[n] = self.b2 * self.unc[n] + (1 - self.b2) * (self.ipt[n] - self.avg[n]).abs()
                self.ipt[n] = s
            else:
                self.ipt[n] = (self.ipt[n] * local + s) / (local + 1)

    def scores(self) -> dict[str, torch.Tensor]:
        return {n: self.avg[n] * self.unc[n] for n in self.avg}


def criterion_masks(variant: str, params: dict[str, torch.Tensor], platon: PlatonScore | None,
                    ids: dict[str, float], sparsity: float) -> dict[str, torch.Tensor]:
    """Keep masks pruning exactly int(total * sparsity) weights (uniform: int(numel * sparsity) per matrix)."""
    if variant == "uniform_magnitude":
        return {n: layer_magnitude_mask(p, sparsity) for n, p in params.items()}
    scores = platon.scores()
    if variant == "id_weighted":
        scores = {n: s * ids[n] for n, s in scores.items()}  # ID_pruner.py::mask_with_threshold, useID
    names = list(scores)
    flat = torch.cat([scores[n].reshape(-1) for n in names])
    keep = keep_mask_lowest(flat.view(1, -1), int(flat.numel() * sparsity)).view(-1)
    masks, off = {}, 0
    for n in names:
        masks[n] = keep[off : off + scores[n].numel()].view_as(scores[n])
        off += scores[n].numel()
    return masks


def prune_finetune(cfg: Config, model: dict, data: dict, variant: str, seed: int, towers: str,
                   sparsity: float, ids: dict[str, float]) -> dict:
    """Fine-tune with the contrastive loss while pruning the towers' matrices on the PLATON schedule."""
    net = DualEncoder(model["arch"])
    net.load_state_dict(model["state"])
    named = dict(net.named_parameters())
    pnames = [n for n in prunable_weights(model["state"], include=PRUNED) if n.startswith(TOWERS[towers])]
    params = {n: named[n] for n in pnames}
    grads: dict[str, torch.Tensor] = {n: torch.zeros_like(p) for n, p in params.items()}
    handles = [p.register_hook(lambda g, n=n: grads.__setitem__(n, g.detach().clone())) for n, p in params.items()]
    platon = None if variant == "uniform_magnitude" else PlatonScore(params, cfg.beta1, cfg.beta2, cfg.delta_t)
    sampler = _batch_sampler(cfg, data, 10_000 + seed)

    def apply(masks):
        with torch.no_grad():
            for n, m in masks.items():
                params[n].mul_(m.to(params[n].dtype))

    def loss_fn(batch):
        step = batch[-1]
        if platon is not None and step > 0:
            platon.update(step - 1, params, grads)  # after optimizer.step, as update_and_pruning
        ratio, now = remaining_ratio(step, cfg, sparsity)
        if now and ratio < 1.0:
            apply(criterion_masks(variant, params, platon, ids, 1.0 - ratio))
        xb, yb, tb, cb, _ = batch
        return contrastive_loss(net.encode_image(xb), net.encode_text(tb), yb, cb, net.logit_scale)

    opt = torch.optim.AdamW(net.parameters(), lr=cfg.ft_lr, weight_decay=0.0)
    train_loop(list(net.parameters()), lambda s: (*sampler(s), s), loss_fn, opt, cfg.ft_steps, modules=[net])
    if platon is not None:
        platon.update(cfg.ft_steps - 1, params, grads)
    for h in handles:
        h.remove()
    masks = criterion_masks(variant, params, platon, ids, sparsity)
    state = apply_masks({k: v.detach().clone() for k, v in net.state_dict().items()}, masks)
    return {"state": state, "arch": model["arch"]}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Levels "<s>" (both towers, one threshold), "v<s>" (vision only), "t<s>" (text only)."""
    torch.manual_seed(seed)
    ids = layer_ids(cfg, build(model), data, seed) if variant == "id_weighted" else {}
    summary = {}
    if ids:
        for t in ("vision", "text"):
            summary[t] = {k: v for k, v in ids.items() if k.startswith(t + ".")}
    out = {}
    for towers in ("vt", "v", "t"):
        for s in cfg.sparsities:
            pruned = prune_finetune(cfg, model, data, variant, seed, towers, s, ids)
            if summary:
                pruned["ids"] = summary
            out[level_name(towers, s)] = pruned
    return out


# ----------------------------------------------------------------------------------------------------
# Claims


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Pseudo-variant rows "<variant>|vision_only" / "|text_only": compressed@<s>/<m> = compressed@v<s>/<m>
    (resp. t<s>) of the same (variant, seed), so single-modality pruning is compared per seed."""
    out = [dict(r) for r in rows]
    for r in rows:
        if r["variant"] not in VARIANTS:
            continue
        for prefix, tag in PSEUDO.items():
            new = {"paper": r["paper"], "variant": f"{r['variant']}|{tag}", "seed": r["seed"]}
            for col, v in r.items():
                m = re.match(rf"^compressed@{prefix}([0-9.]+)/(.+)$", col)
                if m:
                    new[f"compressed@{m.group(1)}/{m.group(2)}"] = v
            if len(new) > 3:
                out.append(new)
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    lv = f"{cfg.compare_level:.2f}"
    rows = [
        Comparison(metric="acc", method="id_weighted", baseline="uniform_magnitude", better="higher", stage="compressed",
                   level=lv, text=f"ID-weighted pruning beats uniform magnitude pruning (both towers at {lv})"),
        Comparison(metric="acc", method="id_weighted", baseline="importance", better="higher", stage="compressed",
                   level=lv, text=f"ID-weighted importance beats the same importance without ID (both towers at {lv})"),
        Comparison(metric="acc", method="id_weighted|text_only", baseline="id_weighted|vision_only", better="higher",
                   stage="compressed", level=lv,
                   text=f"vision more sensitive: pruning only text to {lv} keeps more accuracy than only vision (ID-weighted)"),
        Comparison(metric="acc", method="uniform_magnitude|text_only", baseline="uniform_magnitude|vision_only",
                   better="higher", stage="compressed", level=lv,
                   text=f"vision more sensitive under uniform magnitude pruning ({lv})"),
    ]
    if cfg.stress_level:
        hi = f"{cfg.stress_level:.2f}"
        rows.append(Comparison(metric="acc", method="id_weighted", baseline="uniform_magnitude", better="higher",
                               stage="compressed", level=hi,
                               text=f"stress level, added after the 30-70% rows tied (post hoc): ID-weighted beats uniform magnitude (both towers at {hi})"))
    return rows


SPEC = register_paper(PaperSpec(
    id="id_vl_pruning",
    title="Exploring Intrinsic Dimension for Vision-Language Model Pruning",
    claim="ID-guided beats uniform; vision more sensitive",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate,
    comparisons=comparisons, derive=derive,
    resources=("fashion_mnist",),
    data="Fashion-MNIST images (20k train subset, 2k test) paired with generated word-level label descriptions "
         "(6 templates x 3 nouns x 4 phrases per class; 1 in 4 combinations held out and used only for the zero-shot "
         "class embeddings at evaluation)",
    substitutions="Paper: pretrained BLIP (ViT-B + BERT) pruned during fine-tuning on COCO captioning / NLVR2 / Flickr30k "
                  "retrieval with PLATON x ID, ID from 600 samples. Here: a ~0.22M-parameter dual encoder (3-layer ViT, "
                  "2-layer word transformer) trained here with CLIP InfoNCE (multi-positive targets, learned temperature), "
                  "zero-shot accuracy; 40-step pruning fine-tune per level with the PLATON cubic schedule (delta_t 1); ID on 400 "
                  "calibration images / descriptions; biases not pruned. TwoNN as the official code: fraction ignored "
                  "(all but the two largest ratios, line through the origin), mean over subsample sizes n..n/20",
    compression="prune attn.qkv/proj and ffn.fc1/fc2 of the vision tower, the text tower, or both (one global "
                "threshold) to 30/50/70/90% during a short contrastive fine-tune: PLATON score x layer TwoNN ID "
                "(id_weighted), PLATON score (importance), or per-layer |W| (uniform_magnitude)",
    tradeoff=("nonzero_params", "acc"),
    weight=1,
))
