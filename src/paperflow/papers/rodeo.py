"""RODEO: "Robust Outlier Detection via Exposing Adaptive Out-of-Distribution Samples" (Hossein Mirzaei, Mohammad Jafari,
Hamid Reza Dehbashi, Ali Ansari, Sepehr Ghobadi, Masoud Hadi, Arshia Soltani Moakhar, Mohammad Azizmalayeri, Mahdieh
Soleymani Baghshah, Mohammad Hossein Rohban), ICML 2024.

What was read. The abstract and introduction (pages corpus: arXiv 2501.16971, ar5iv, ICML) and the authors' code,
github.com/rohban-lab/RODEO (the catalog says "none found"; the paper's abstract links it): Notebooks/OOD.ipynb (the OOD
detector, its adversarial training and the test attack) and Notebooks/GenerateExposures.ipynb (the outlier generator).
The paper's method section itself was not retrievable from the corpus (every query returned the abstract and
introduction), so the detector, training and attack follow the notebook; the generator is substituted (below).

The method as the authors' code runs it (OOD.ipynb):
  detector   a (K+1)-way classifier: the K in-distribution classes plus one class (index K) for every exposed outlier
             (MergedDataset gives outliers the label K; in- and outlier images are shuffled together, ~1:1);
  training   adversarial training on the merged data: each batch is replaced by its PGD adversarial examples
             (PGD_CLS: L_inf ball of radius eps in [0, 1] pixel space, random start, `steps` signed-gradient ascent steps
             of size alpha = 2.5 eps / steps on the cross-entropy of the true label, K for outliers), then a
             cross-entropy step; Adam (weight decay 5e-4) with the piecewise-linear schedule lr -> lr/10 (1/3 of training)
             -> lr/100 (2/3) -> 0 (end); eps = 8/255 and 10 steps in the notebook;
  score      the softmax probability of class K (anomaly score; AUROC with OOD as the positive class);
  attack     PGD_TEST, end to end on the detector: in-distribution test images are pushed toward class K (their
             anomaly score up), OOD images away from it (score down), same eps, alpha and random start.
Here a(x) = log p_K(x) (the log of the notebook's score: the same ranking, and its gradient is the notebook's
attack direction). The generator (GenerateExposures.ipynb): GLIDE, started from a slightly noised inlier image
(skip_timesteps=5 of 100), conditioned on prompts from the inlier label's word2vec neighbours and on "negative
adjective" prompts ("a broken X", "X with a hole / a crack / a scratch", "X torn", "X cut", ...), CLIP-guided; the
generated set has as many images as the inlier training set and is re-augmented at training time (flip, grayscale,
random affine, AutoAugment).

Substitution (the issue allows it; recorded in `substitutions`): a text-to-image diffusion model does not fit here, so
the adaptive generator is an image-space transform family conditioned on the inlier image and its label
(generate_adaptive). Each generated outlier starts from one inlier training image x of class y and applies one of
  hole      1-3 rectangles (6-12 px) erased ("X with a hole", "X cut");
  tear      the image cut along a random row or column and one side shifted by 3-7 px ("X torn");
  scratch   1-3 random line segments (1-2 px) drawn bright or dark across it ("X with a crack / a scratch");
  warp      a strong smooth random deformation (4x4 displacement grid, bilinear; "a broken / damaged X");
  rotate    a rotation by 90, 180 or 270 degrees (the inlier's shape in a pose no inlier has);
  composite one part (top/bottom or left/right at a random cut) of x joined to the other part of an inlier of a
            different class y' != y (a concept next to the inlier concepts: the word2vec-neighbour prompts' role).
The choice is uniform per image (diversity), every output keeps most of an inlier's pixels (near-distribution, the
paper's "analogy"), and each breaks the inlier concept (its "differentiability"). At training time outliers get the
exposure augmentation (random horizontal flip and a shift of up to `shift` px; the notebook's flip + random affine,
without grayscale, a no-op here, and AutoAugment). How near they are is measured (`outlier_nn_ratio`, a fact row): the
mean L2 distance of 500 pool images to their nearest inlier training image, over the same for 500 held-out inliers.

Variants (one seed = one initialisation, batch order and augmentation draw; the outlier pools are drawn once in prepare):
  rodeo      adversarial training + OE with the adaptive generated outliers (the method);
  oe_random  adversarial training + OE with random outliers (the catalog's "OE with random outliers": the same number of
             images, a third each uniform noise, smooth noise (Gaussian noise on a 4x4 or 7x7 grid, bilinear, rescaled
             to [0, 1]) and pixel-permuted inlier images); differs from rodeo ONLY in the outlier pool, so it is also
             the isolating ablation of "which outliers are exposed";
  at         adversarial training without OE (K-way classifier, same steps and inlier batches): its anomaly score is
             the maximum-softmax-probability score a(x) = -max_k log p_k(x), attacked the same way;
  oe_clean   rodeo's outliers without adversarial training: the undefended detector of the mechanism gate (and the
             ablation "OE alone").
Every variant sees the same inlier batches per step (batch_size inlier images; OE variants add batch_size outliers).

Equal tuning (paperflow.tuning; rule fixed in code before any default run): every variant picks its Adam lr from the same
grid by its own training objective on validation data: the cross-entropy, after the training-time PGD for the
adversarially trained variants, on the held-out inlier validation images plus (OE variants) as many validation outliers
of its own kind, generated from the validation images (rodeo, oe_clean) or drawn afresh (oe_random); lower is better;
one fit per lr at tune_seed for tune_steps. Tuning reads no test image and no OOD test set.

Data: Fashion-MNIST classes `id_classes` in distribution: n_train training and n_val validation images from the official
training split (data_seed). Test sets (test_seed, read by evaluate only): the ID test images from the official test
split's ID classes, near-OOD = the held-out Fashion-MNIST classes from the test split, far-OOD = MNIST digits (mnist10k),
n_test each.

Contract v3. Headline: rodeo's adversarial AUROC (mean over near and far OOD under the PGD attack, `attack_steps`
steps, radius `eps`) above oe_random's. Mechanism gate (issue 28's starting gate): the attack lowers the undefended
detector's AUROC: oe_clean's attack_drop = clean AUROC - adversarial AUROC (AUROC points, measured per run) above
ATTACK_DROP_MIN = 10 (fixed before any run). Facts: how near the two outlier pools are to the inliers.

Compression: global magnitude pruning of the CNN's conv and linear weight tensors at cfg.sparsities (no fine-tuning,
the shared compress.magnitude), evaluated with the same attack.
Substitutions: CIFAR-10/100 with a WideResNet-40-4 and GLIDE-generated outliers -> 28x28 Fashion-MNIST, a 2-conv CNN,
a few hundred Adam steps, an image-space transform family as the generator; PGD steps fewer than the notebook's 10 during
training (train_pgd_steps) for the budget.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_models
from ..data.images import FASHION_MEAN, FASHION_STD, load_fashion, load_mnist10k, select_classes
from ..loop import train_loop
from ..measure import count_params
from ..metrics import auroc as shared_auroc
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("rodeo", "oe_random", "at", "oe_clean")
POOL = {"rodeo": "gen", "oe_clean": "gen", "oe_random": "random", "at": None}  # outlier pool of each variant
ADVERSARIAL = {"rodeo": True, "oe_random": True, "at": True, "oe_clean": False}
OOD_SETS = ("near", "far")
TRANSFORMS = ("hole", "tear", "scratch", "warp", "rotate", "composite")
RANDOM_KINDS = ("uniform", "smooth", "permuted")
ATTACK_DROP_MIN = 10.0  # mechanism gate: the attack lowers the undefended detector's mean AUROC by > 10 points
NN_SAMPLE = 500  # pool images (and held-out inliers) in the nearness measurement


@dataclass(frozen=True)
class Config:
    id_classes: tuple = (0, 1, 2, 3, 4, 5)  # in-distribution Fashion-MNIST classes; the others are near-OOD
    n_train: int = 6000  # ID training images (official training split); the generated pool has as many
    n_val: int = 1000  # ID validation images (lr tuning)
    n_test: int = 500  # images of each test set: ID, near-OOD, far-OOD
    data_seed: int = 0
    test_seed: int = 1  # draws the test sets (never read by tuning)
    channels: tuple = (8, 16)  # CNN conv widths (3x3, stride 2 each)
    hidden: int = 64
    steps: int = 200  # Adam steps (every variant)
    batch_size: int = 64  # inlier images per step; OE variants add as many outliers
    lr_grid: tuple = (1e-3, 3e-3, 1e-2, 3e-2)
    weight_decay: float = 5e-4  # Adam weight decay (official notebook)
    tune_steps: int = 100
    tune_seed: int = 1000
    eps: float = 0.03137254901960784  # L_inf radius in [0, 1] pixels (8/255, official)
    train_pgd_steps: int = 3  # PGD steps of adversarial training (official 10)
    attack_steps: int = 10  # PGD steps of the test attack (official PGD-10 during training, PGD-100 at the end)
    alpha_ratio: float = 2.5  # PGD step alpha = alpha_ratio * eps / steps (official)
    shift: int = 2  # exposure augmentation of outliers: shift of up to +-shift px and a horizontal flip
    sparsities: tuple = (0.5,)
    compare_level: float = 0.5
    eval_batch: int = 500
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("id_classes", "channels", "lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(2 <= len(self.id_classes) < 10 and len(set(self.id_classes)) == len(self.id_classes)
              and all(0 <= c < 10 for c in self.id_classes), f"id_classes must be 2..9 distinct classes in 0..9, got {self.id_classes}")
        check(self.n_train > 0 and self.n_val > 0 and self.n_test > 0, "n_train, n_val and n_test must be > 0")
        check(self.test_seed >= 0 and self.data_seed >= 0, "data_seed and test_seed must be >= 0")
        check(len(self.channels) == 2 and all(c > 0 for c in self.channels) and self.hidden > 0, "channels: two positive widths; hidden > 0")
        check(self.steps > 0 and self.tune_steps > 0 and self.batch_size > 1, "steps, tune_steps > 0 and batch_size > 1")
        check(len(self.lr_grid) >= 1 and all(lr > 0 for lr in self.lr_grid) and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(self.weight_decay >= 0, "weight_decay must be >= 0")
        check(0 < self.eps < 1, f"eps must be in (0, 1), got {self.eps}")
        check(self.train_pgd_steps >= 1 and self.attack_steps >= 1 and self.alpha_ratio > 0, "PGD steps >= 1 and alpha_ratio > 0")
        check(0 <= self.shift <= 8, f"shift must be in [0, 8], got {self.shift}")
        check(len(self.sparsities) >= 1 and all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}")
        check(self.eval_batch > 0 and self.log_every > 0, "eval_batch and log_every must be > 0")


# ---------------------------------------------------------------------------------------------- metrics and PGD


def auroc(id_scores: np.ndarray, ood_scores: np.ndarray) -> float:
    """AUROC of the anomaly score with OOD as the positive class (paperflow.metrics.auroc: P(s_ood > s_id) + ties / 2)."""
    return shared_auroc(ood_scores, id_scores)


def pgd(objective, x: torch.Tensor, eps: float, alpha: float, steps: int, gen: torch.Generator | None,
        random_start: bool = True) -> torch.Tensor:
    """L_inf PGD (Madry et al.; the notebook's PGD_CLS / PGD_TEST): ascend objective(x_adv) (a scalar, summed over the
    batch) by `steps` signed-gradient steps of size alpha from a uniform random start in the eps-ball, projecting onto
    {|x_adv - x|_inf <= eps} and [0, 1] after each step. Only x_adv gets a gradient (model parameters are untouched)."""
    x0 = x.detach()
    if random_start:
        noise = torch.rand(x0.shape, generator=gen).to(x0.device) * 2 - 1
        xa = (x0 + eps * noise).clamp(0, 1)
    else:
        xa = x0.clone()
    for _ in range(steps):
        xa.requires_grad_(True)
        (grad,) = torch.autograd.grad(objective(xa), xa)
        xa = xa.detach() + alpha * grad.sign()
        xa = torch.minimum(torch.maximum(xa, x0 - eps), x0 + eps).clamp(0, 1)
    return xa.detach()


def anomaly_score(logits: torch.Tensor, oe: bool) -> torch.Tensor:
    """Higher = more anomalous. OE detectors ((K+1)-way): log p_K, the log of the notebook's softmax score of the outlier
    class; the K-way detector (at): -max_k log p_k, the maximum-softmax-probability score."""
    logp = F.log_softmax(logits, dim=1)
    return logp[:, -1] if oe else -logp.max(dim=1).values


# ---------------------------------------------------------------------------------------------- outlier generators


def _rects(n: int, gen: torch.Generator, lo: int, hi: int, size: int = 28) -> torch.Tensor:
    """Masks (n, size, size), True inside one random axis-aligned rectangle of sides in [lo, hi] centred in the image's
    middle part (4..size-4) so that it hits the object."""
    h = torch.randint(lo, hi + 1, (n,), generator=gen)
    w = torch.randint(lo, hi + 1, (n,), generator=gen)
    cy = torch.randint(4, size - 4, (n,), generator=gen)
    cx = torch.randint(4, size - 4, (n,), generator=gen)
    r = torch.arange(size)
    rows = (r[None, :] >= (cy - h // 2)[:, None]) & (r[None, :] < (cy - h // 2 + h)[:, None])
    cols = (r[None, :] >= (cx - w // 2)[:, None]) & (r[None, :] < (cx - w // 2 + w)[:, None])
    return rows[:, :, None] & cols[:, None, :]


def _segments(n: int, gen: torch.Generator, size: int = 28) -> torch.Tensor:
    """Masks (n, size, size) of one random line segment of width 1-2 px each (distance of the pixel to the segment)."""
    p = torch.rand(n, 2, 2, generator=gen) * (size - 1)  # endpoints (y, x)
    width = 0.5 + torch.rand(n, generator=gen) * 0.6
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    pix = torch.stack([yy, xx], -1)[None]  # (1, S, S, 2)
    a, b = p[:, 0][:, None, None], p[:, 1][:, None, None]  # (n, 1, 1, 2)
    ab = b - a
    t = (((pix - a) * ab).sum(-1) / (ab * ab).sum(-1).clamp(min=1e-6)).clamp(0, 1)
    dist = (pix - (a + t[..., None] * ab)).norm(dim=-1)
    return dist <= width[:, None, None]


def _warp(x: torch.Tensor, gen: torch.Generator, strength: float = 0.25) -> torch.Tensor:
    """Smooth random deformation of (n, S, S) images: a 4x4 grid of displacements ~ N(0, strength) (in [-1, 1] image
    coordinates), upsampled bilinearly, applied with grid_sample (zero outside)."""
    n, s, _ = x.shape
    disp = torch.randn(n, 2, 4, 4, generator=gen) * strength
    disp = F.interpolate(disp, size=(s, s), mode="bicubic", align_corners=True).permute(0, 2, 3, 1)
    base = torch.stack(torch.meshgrid(torch.linspace(-1, 1, s), torch.linspace(-1, 1, s), indexing="xy"), -1)[None]
    return F.grid_sample(x[:, None], base + disp, mode="bilinear", padding_mode="zeros", align_corners=True)[:, 0]


def generate_adaptive(x: torch.Tensor, y: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The adaptive (near-distribution, diverse) outliers: one per inlier image x (n, S, S) in [0, 1] with labels y, each
    by a transform of TRANSFORMS drawn uniformly (the module docstring). Returns (outliers (n, S, S) in [0, 1], the
    index of the transform used per image)."""
    n, s, _ = x.shape
    kind = torch.randint(0, len(TRANSFORMS), (n,), generator=gen)
    out = x.clone()
    for k, name in enumerate(TRANSFORMS):
        idx = torch.nonzero(kind == k).flatten()
        m = idx.numel()
        if m == 0:
            continue
        xs = x[idx]
        if name == "hole":
            mask = torch.zeros(m, s, s, dtype=torch.bool)
            n_holes = torch.randint(1, 4, (m,), generator=gen)
            for j in range(3):
                mask |= _rects(m, gen, 6, 12, s) & (n_holes > j)[:, None, None]
            res = xs.masked_fill(mask, 0.0)
        elif name == "tear":
            cut = torch.randint(9, 20, (m,), generator=gen)
            amount = torch.randint(3, 8, (m,), generator=gen) * (torch.randint(0, 2, (m,), generator=gen) * 2 - 1)
            vertical = torch.rand(m, generator=gen) < 0.5
            res = xs.clone()
            for i in range(m):
                img = xs[i] if not bool(vertical[i]) else xs[i].T
                moved = torch.roll(img, int(amount[i]), dims=1)
                c, a = int(cut[i]), int(amount[i])
                if a > 0:
                    moved[:, :a] = 0
                else:
                    moved[:, a:] = 0
                torn = img.clone()
                torn[c:] = moved[c:]
                res[i] = torn if not bool(vertical[i]) else torn.T
        elif name == "scratch":
            mask = torch.zeros(m, s, s, dtype=torch.bool)
            n_lines = torch.randint(1, 4, (m,), generator=gen)
            for j in range(3):
                mask |= _segments(m, gen, s) & (n_lines > j)[:, None, None]
            value = (torch.rand(m, generator=gen) < 0.5).float()[:, None, None].expand(m, s, s)
            res = torch.where(mask, value, xs)
        elif name == "warp":
            res = _warp(xs, gen).clamp(0, 1)
        elif name == "rotate":
            q = torch.randint(1, 4, (m,), generator=gen)
            res = torch.stack([torch.rot90(xs[i], int(q[i]), dims=(0, 1)) for i in range(m)])
        else:  # composite with an inlier of a different class
            partner = torch.empty(m, dtype=torch.long)
            for i in range(m):
                others = torch.nonzero(y != y[idx[i]]).flatten()
                partner[i] = others[torch.randint(0, others.numel(), (1,), generator=gen)]
            cut = torch.randint(10, 19, (m,), generator=gen)
            vertical = torch.rand(m, generator=gen) < 0.5
            r = torch.arange(s)
            below = r[None, :] >= cut[:, None]  # (m, S)
            mask = torch.where(vertical[:, None, None], below[:, None, :].expand(m, s, s), below[:, :, None].expand(m, s, s))
            res = torch.where(mask, x[partner], xs)
        out[idx] = res
    return out.clamp(0, 1), kind


def generate_random(n: int, x_pool: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Random outliers (n, S, S) in [0, 1]: a third each of uniform noise, smooth noise (N(0, 1) on a 4x4 or 7x7 grid,
    bilinear to S x S, min-max scaled) and pixel-permuted images of x_pool (a random permutation of each image's pixels)."""
    s = x_pool.shape[-1]
    kind = torch.randint(0, len(RANDOM_KINDS), (n,), generator=gen)
    out = torch.rand(n, s, s, generator=gen)  # uniform
    idx = torch.nonzero(kind == 1).flatten()
    if idx.numel():
        grid = 4 if torch.rand(1, generator=gen) < 0.5 else 7
        coarse = torch.randn(idx.numel(), 1, grid, grid, generator=gen)
        sm = F.interpolate(coarse, size=(s, s), mode="bilinear", align_corners=False)[:, 0]
        lo, hi = sm.amin(dim=(1, 2), keepdim=True), sm.amax(dim=(1, 2), keepdim=True)
        out[idx] = (sm - lo) / (hi - lo).clamp(min=1e-6)
    idx = torch.nonzero(kind == 2).flatten()
    if idx.numel():
        src = x_pool[torch.randint(0, x_pool.shape[0], (idx.numel(),), generator=gen)].reshape(idx.numel(), -1)
        perm = torch.argsort(torch.rand(src.shape, generator=gen), dim=1)
        out[idx] = torch.gather(src, 1, perm).reshape(-1, s, s)
    return out


def nn_ratio(pool: torch.Tensor, x_train: torch.Tensor, x_held: torch.Tensor, gen: torch.Generator) -> float:
    """Nearness of an outlier pool to the inliers: mean L2 distance of NN_SAMPLE pool images to their nearest inlier
    training image, over the same for NN_SAMPLE held-out inliers (1 = as near as new inliers; larger = farther)."""
    def mean_nn(q: torch.Tensor) -> float:
        q = q[torch.randperm(q.shape[0], generator=gen)[:NN_SAMPLE]].reshape(-1, x_train[0].numel()).double()
        return float(torch.cdist(q, x_train.reshape(x_train.shape[0], -1).double()).min(dim=1).values.mean())

    return mean_nn(pool) / mean_nn(x_held)


# ---------------------------------------------------------------------------------------------- data


def _unit(x: torch.Tensor) -> torch.Tensor:
    """uint8 images -> float32 in [0, 1]."""
    return x.float() / 255.0


def _uint8(x: torch.Tensor) -> torch.Tensor:
    """float images in [0, 1] -> uint8 (how every image is stored in the data artifact)."""
    return (x.clamp(0, 1) * 255).round().to(torch.uint8)


def prepare(cfg: Config, res) -> dict:
    """Inlier train / val images (official training split, data_seed), the outlier pools (generated from the training
    images; validation pools from the validation images), the lr of every variant (tune_lrs: train + val only), then the
    test sets (official test split and MNIST-10k, test_seed). Images are stored uint8."""
    f = load_fashion(res["fashion_mnist"])
    x_id, y_id = select_classes(f["x_train"], f["y_train"].long(), cfg.id_classes)
    check(cfg.n_train + cfg.n_val <= x_id.shape[0], f"n_train + n_val must be <= {x_id.shape[0]} ID training images")
    perm = torch.randperm(x_id.shape[0], generator=torch.Generator().manual_seed(cfg.data_seed))
    tr, va = perm[: cfg.n_train], perm[cfg.n_train : cfg.n_train + cfg.n_val]
    data = {"x_train": x_id[tr].clone(), "y_train": y_id[tr].clone(), "x_val": x_id[va].clone(), "y_val": y_id[va].clone()}
    gen = torch.Generator().manual_seed(cfg.data_seed + 1)
    pool_gen, data["pool_gen_kind"] = generate_adaptive(_unit(data["x_train"]), data["y_train"], gen)
    data["pool_gen"] = _uint8(pool_gen)
    data["pool_random"] = _uint8(generate_random(cfg.n_train, _unit(data["x_train"]), gen))
    data["val_gen"] = _uint8(generate_adaptive(_unit(data["x_val"]), data["y_val"], gen)[0])
    data["val_random"] = _uint8(generate_random(cfg.n_val, _unit(data["x_val"]), gen))
    ngen = torch.Generator().manual_seed(cfg.data_seed + 2)
    data["nn_ratio"] = {p: nn_ratio(_unit(data[f"pool_{p}"]), _unit(data["x_train"]), _unit(data["x_val"]), ngen)
                        for p in ("gen", "random")}
    data["tuning"] = tune_lrs(cfg, data)
    # test sets: never read above
    x_te, y_te = select_classes(f["x_test"], f["y_test"].long(), cfg.id_classes)
    held = [c for c in range(10) if c not in cfg.id_classes]
    x_near, _ = select_classes(f["x_test"], f["y_test"].long(), held)
    m = load_mnist10k(res["mnist10k"])
    tgen = torch.Generator().manual_seed(cfg.test_seed)
    for name, pool in (("test", x_te), ("near", x_near), ("far", m["x"])):
        check(pool.shape[0] >= cfg.n_test, f"n_test = {cfg.n_test} exceeds the {pool.shape[0]} images of the {name} pool")
        idx = torch.randperm(pool.shape[0], generator=tgen)[: cfg.n_test]
        data[f"x_{name}"] = pool[idx].clone()
        if name == "test":
            data["y_test"] = y_te[idx].clone()
    return data


# ---------------------------------------------------------------------------------------------- model and training


class Detector(nn.Module):
    """Small CNN on [0, 1] pixels (standardised inside, so attacks act on pixels): conv3x3/2 - ReLU - conv3x3/2 - ReLU -
    fc - ReLU - fc to n_out (K for `at`, K + 1 for OE variants)."""

    def __init__(self, channels: tuple, hidden: int, n_out: int):
        super().__init__()
        c1, c2 = channels
        self.net = nn.Sequential(nn.Conv2d(1, c1, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(c1, c2, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.Flatten(), nn.Linear(c2 * 49, hidden), nn.ReLU(), nn.Linear(hidden, n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(((x - FASHION_MEAN) / FASHION_STD).unsqueeze(1))


def build(cfg: Config, variant: str) -> Detector:
    k = len(cfg.id_classes)
    return Detector(cfg.channels, cfg.hidden, k + (POOL[variant] is not None))


def exposure_augment(x: torch.Tensor, shift: int, gen: torch.Generator) -> torch.Tensor:
    """Random horizontal flip and a random shift of up to +-shift px (zero fill) of (B, S, S) images."""
    b, s, _ = x.shape
    flip = torch.rand(b, generator=gen) < 0.5
    x = torch.where(flip[:, None, None], x.flip(2), x)
    if shift:
        padded = F.pad(x, (shift, shift, shift, shift))
        dy = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
        dx = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
        windows = padded.unfold(1, s, 1).unfold(2, s, 1)
        x = windows[torch.arange(b), dy, dx]
    return x


def lr_schedule(step: int, steps: int, lr: float) -> float:
    """The notebook's piecewise-linear schedule: lr at 0, lr/10 at 1/3, lr/100 at 2/3, 0 at the end (of `steps`)."""
    t = (step + 1) / steps
    return float(np.interp(t, [0, 1 / 3, 2 / 3, 1], [lr, lr / 10, lr / 100, 0.0]))


def fit(cfg: Config, data: dict, variant: str, seed: int, lr: float, steps: int, log) -> Detector:
    """Train one detector: batches of batch_size inlier images (+ as many exposure-augmented pool outliers labelled K),
    replaced by their PGD examples (train_pgd_steps, eps) for the adversarially trained variants; CE; Adam + schedule."""
    if variant not in VARIANTS:
        raise ValueError(f"rodeo: unknown variant {variant!r}; known: {VARIANTS}")
    torch.manual_seed(seed)
    model = build(cfg, variant)
    k = len(cfg.id_classes)
    x, y = _unit(data["x_train"]), data["y_train"]
    pool = _unit(data[f"pool_{POOL[variant]}"]) if POOL[variant] else None
    gen = torch.Generator().manual_seed(seed)
    alpha = cfg.alpha_ratio * cfg.eps / cfg.train_pgd_steps

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        xb, yb = x[idx], y[idx]
        if pool is not None:
            o = exposure_augment(pool[torch.randint(0, pool.shape[0], (cfg.batch_size,), generator=gen)], cfg.shift, gen)
            xb, yb = torch.cat([xb, o]), torch.cat([yb, torch.full((cfg.batch_size,), k, dtype=torch.long)])
        return xb, yb

    def loss_fn(batch):
        xb, yb = batch
        if ADVERSARIAL[variant]:
            xb = pgd(lambda xa: F.cross_entropy(model(xa), yb, reduction="sum"), xb, cfg.eps, alpha, cfg.train_pgd_steps, gen)
        return F.cross_entropy(model(xb), yb)

    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=cfg.weight_decay)
    train_loop(list(model.parameters()), batch_fn, loss_fn, optimizer, steps, log=log, log_every=cfg.log_every,
               lr_fn=lambda step: lr_schedule(step, steps, lr), modules=[model])
    model.eval()
    return model


def validation_objective(cfg: Config, model: Detector, data: dict, variant: str) -> float:
    """The variant's own training objective on validation data: mean CE over the validation inliers (+ as many validation
    outliers of its own pool kind, label K), after the training-time PGD for the adversarially trained variants (fixed
    random start, tune_seed); lower is better."""
    x, y = _unit(data["x_val"]), data["y_val"]
    if POOL[variant]:
        o = _unit(data[f"val_{POOL[variant]}"])
        x, y = torch.cat([x, o]), torch.cat([y, torch.full((o.shape[0],), len(cfg.id_classes), dtype=torch.long)])
    gen = torch.Generator().manual_seed(cfg.tune_seed)
    alpha = cfg.alpha_ratio * cfg.eps / cfg.train_pgd_steps
    total = 0.0
    for a in range(0, x.shape[0], cfg.eval_batch):
        xb, yb = x[a : a + cfg.eval_batch], y[a : a + cfg.eval_batch]
        if ADVERSARIAL[variant]:
            xb = pgd(lambda xa: F.cross_entropy(model(xa), yb, reduction="sum"), xb, cfg.eps, alpha, cfg.train_pgd_steps, gen)
        with torch.no_grad():
            total += float(F.cross_entropy(model(xb), yb, reduction="sum"))
    return total / x.shape[0]


def tune_lrs(cfg: Config, data: dict) -> dict:
    """Every variant: each lr of lr_grid trained once (tune_seed, tune_steps), scored by validation_objective (lower
    is better), best kept (ties: the smaller lr)."""
    out = {}
    for variant in VARIANTS:
        def one(lr: float, variant: str = variant):
            model = fit(cfg, data, variant, cfg.tune_seed, lr, cfg.tune_steps, None)
            return None, validation_objective(cfg, model, data, variant)

        out[variant] = tune(cfg.lr_grid, one, higher=False, name="lr")[1]
    return out


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The variant at its tuned lr; the state, the tuning record and the nearness of its outlier pool."""
    info = data["tuning"][variant]
    model = fit(cfg, data, variant, seed, info["tuned_lr"], cfg.steps, log)
    extra = {"tuned_lr": float(info["tuned_lr"]), "grid_edge": float(info["grid_edge"])}
    if POOL[variant]:
        extra["outlier_nn_ratio"] = float(data["nn_ratio"][POOL[variant]])
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "variant": variant, "extra": extra}


# ---------------------------------------------------------------------------------------------- evaluation


def load(cfg: Config, model: dict) -> Detector:
    det = build(cfg, model["variant"])
    det.load_state_dict(model["state"])
    det.eval()
    return det


def scores(cfg: Config, det: Detector, x: torch.Tensor, oe: bool, direction: float, gen: torch.Generator | None) -> np.ndarray:
    """Anomaly scores of images x; with a generator, after the test attack: PGD (attack_steps, eps) ascending
    direction * score (+1 for inliers: made to look anomalous; -1 for OOD: made to look normal)."""
    out = []
    alpha = cfg.alpha_ratio * cfg.eps / cfg.attack_steps
    for a in range(0, x.shape[0], cfg.eval_batch):
        xb = _unit(x[a : a + cfg.eval_batch])
        if gen is not None:
            xb = pgd(lambda xa: direction * anomaly_score(det(xa), oe).sum(), xb, cfg.eps, alpha, cfg.attack_steps, gen)
        with torch.no_grad():
            out.append(anomaly_score(det(xb), oe))
    return torch.cat(out).numpy()


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """Clean and adversarial AUROC (%) per OOD set (near: held-out Fashion-MNIST classes, far: MNIST) and their means,
    attack_drop = clean - adversarial mean AUROC, ID accuracy on the K classes (clean), tuning record, pool nearness."""
    det = load(cfg, model)
    oe = POOL[model["variant"]] is not None
    k = len(cfg.id_classes)
    out = {}
    clean = {s: scores(cfg, det, data[f"x_{s}"], oe, 0.0, None) for s in ("test",) + OOD_SETS}
    gen = torch.Generator().manual_seed(cfg.test_seed + 7)  # the attack's random start: the same draw for every model
    adv = {"test": scores(cfg, det, data["x_test"], oe, 1.0, gen)}
    adv.update({s: scores(cfg, det, data[f"x_{s}"], oe, -1.0, gen) for s in OOD_SETS})
    for s in OOD_SETS:
        out[f"auroc_{s}"] = 100 * auroc(clean["test"], clean[s])
        out[f"adv_auroc_{s}"] = 100 * auroc(adv["test"], adv[s])
    out["auroc"] = float(np.mean([out[f"auroc_{s}"] for s in OOD_SETS]))
    out["adv_auroc"] = float(np.mean([out[f"adv_auroc_{s}"] for s in OOD_SETS]))
    out["attack_drop"] = out["auroc"] - out["adv_auroc"]
    with torch.no_grad():
        logits = torch.cat([det(_unit(data["x_test"][a : a + cfg.eval_batch])) for a in range(0, cfg.n_test, cfg.eval_batch)])
    out["id_acc"] = 100 * float((logits[:, :k].argmax(1) == data["y_test"]).float().mean())
    out["n_params"] = float(count_params(model["state"]))
    out.update(model.get("extra", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of the conv and linear weights at each level (no fine-tuning)."""
    return magnitude_models(model, cfg.sparsities)


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    works = Gate("OE with random outliers detects OOD above chance on clean data (mean AUROC > 60%)", variant="oe_random",
                 metric="auroc", above=60.0)
    attack = Gate(f"the PGD attack lowers the undefended detector's AUROC: oe_clean (the same generated OE, no adversarial "
                  f"training) loses more than {ATTACK_DROP_MIN:g} AUROC points under the attack (attack_drop)",
                  variant="oe_clean", metric="attack_drop", above=ATTACK_DROP_MIN, kind="mechanism")
    steps = f"PGD-{cfg.attack_steps}, eps {cfg.eps:.4f}"
    rows = [Comparison("adv_auroc", "rodeo", "oe_random", better="higher", role="headline",
                       gates=(works, attack, edge_gate("rodeo"), edge_gate("oe_random")),
                       text=f"adversarial training with adaptive generated (near-distribution, diverse) outliers has a higher "
                            f"adversarial AUROC ({steps} on the detector; mean over near and far OOD) than with random outliers",
                       refuted_if="the paired 95% interval of adv_auroc(rodeo) - adv_auroc(oe_random) lies below 0 while the "
                                  "attack is active on the undefended detector, the random-OE detector is above chance clean "
                                  "and rodeo's lr is inside the grid")]
    rows.append(Comparison("adv_auroc", "rodeo", "at", better="higher", role="secondary", gates=(edge_gate("rodeo"), edge_gate("at")),
                           text="adaptive OE beats adversarial training without OE (MSP score) in adversarial AUROC"))
    rows.append(Comparison("auroc", "rodeo", "oe_random", better="higher", role="secondary", gates=(works,),
                           text="adaptive OE beats random OE in clean AUROC"))
    rows.append(Comparison("adv_auroc", "rodeo", "oe_clean", better="higher", role="secondary", gates=(attack,),
                           text="ablation: adversarial training is needed: rodeo beats the same OE without adversarial training "
                                "under the attack"))
    rows += [Comparison(f"adv_auroc_{s}", "rodeo", "oe_random", better="higher", role="secondary", gates=(works,),
                        text=f"adaptive OE beats random OE in adversarial AUROC on {name}")
             for s, name in (("near", "held-out Fashion-MNIST classes"), ("far", "MNIST digits"))]
    level = level_name(cfg.compare_level)
    rows.append(Comparison("adv_auroc", "rodeo", "oe_random", better="higher", stage="compressed", level=level, role="control",
                           text=f"adaptive OE keeps a higher adversarial AUROC than random OE with weights pruned to {level}"))
    rows.append(Comparison("id_acc", "rodeo", "at", better="higher", role="control",
                           text="ID classification accuracy (clean) of rodeo vs adversarial training without OE"))
    rows.append(Comparison("outlier_nn_ratio", "rodeo", "oe_random", better="lower", role="fact",
                           text="nearness of the exposed outliers: mean distance to the nearest inlier over the same for new "
                                "inliers (1 = as near as inliers); generated vs random pool"))
    return rows


SPEC = register_paper(PaperSpec(
    id="rodeo",
    title="RODEO: Robust Outlier Detection via Exposing Adaptive Out-of-Distribution Samples",
    claim="adaptive OE improves adversarial AUROC",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="reconstruction", resources=("fashion_mnist", "mnist10k"),
    data="Fashion-MNIST classes 0-5 in distribution (training split: training and validation images); test: the official "
         "test split's ID classes, near-OOD = its held-out classes (Shirt, Sneaker, Bag, Ankle boot), far-OOD = MNIST "
         "digits (mnist10k), drawn with test_seed; outliers for exposure generated from the training inliers",
    substitutions="Paper: CIFAR-10/100 in distribution, WideResNet-40-4, outliers generated by GLIDE + CLIP guidance from "
                  "the inlier images and label-derived prompts, PGD-10 adversarial training. Here: 28x28 Fashion-MNIST, a "
                  "2-conv CNN, a few hundred Adam steps, PGD with fewer training steps, and the generator replaced by an "
                  "image-space transform family conditioned on the inlier image and label (holes, tears, scratches, "
                  "warps, rotations, cross-class composites); random OE = noise and pixel-permuted images (no real "
                  "auxiliary data set: MNIST is a test OOD set). Detector, training and attack follow the authors' notebook.",
    compression="global magnitude pruning of the CNN's conv and linear weights at each level (no fine-tuning), attacked "
                "the same way",
    figure="sparsity", weight=1,
))
