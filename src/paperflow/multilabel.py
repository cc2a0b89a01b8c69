"""Multi-label helpers of pedestrian_attr (label-balanced multi-label learning; moved out of papers/pedestrian_attr.py
to keep it under 500 lines): the PAR metrics (per-attribute TPR/TNR, mA, instance F1), per-attribute linear heads and
the training prior's log-odds (the logit correction), the image-level per-attribute oversampler and its exact label
priors (co-occurrence leaks in), FRDL's per-attribute feature banks (attributes_Q) and GOAT's flooded loss."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

RARE = 4  # the rarest attributes of the pedestrian_attr data (the last four: rates fall geometrically with the index)


def image_sampler_priors(Y: np.ndarray) -> np.ndarray:
    """Label prior of every attribute under naive image-level per-attribute oversampling (`oversample`): an
    attribute a uniformly, a side s in {0, 1} w.p. 1/2, an image with y_a = s uniformly. Exact expectation:
    P(y_k = 1) = (1/A) sum_a [P(y_k = 1 | y_a = 1) + P(y_k = 1 | y_a = 0)] / 2 (co-occurrence leaks in)."""
    Y = np.asarray(Y, dtype=float)
    return sum(0.5 * Y[Y[:, a] == s].mean(0) for a in range(Y.shape[1]) for s in (0, 1) if (Y[:, a] == s).any()) / Y.shape[1]


def side_groups(Y: torch.Tensor) -> list:
    return [[torch.nonzero(Y[:, a] == s).flatten() for s in (0, 1)] for a in range(Y.shape[1])]


def balanced_image_indices(groups: list, n: int, gen: torch.Generator) -> torch.Tensor:
    """`oversample`: n image indices, each from a uniform attribute, side 1/2, uniform image of that side
    (groups = side_groups(Y); an empty side falls back to the other)."""
    attrs, sides = torch.randint(0, len(groups), (n,), generator=gen), torch.randint(0, 2, (n,), generator=gen)
    out = torch.empty(n, dtype=torch.long)
    for i, (a, s) in enumerate(zip(attrs.tolist(), sides.tolist())):
        g = groups[a][s] if len(groups[a][s]) else groups[a][1 - s]
        out[i] = g[int(torch.randint(0, len(g), (1,), generator=gen))]
    return out


class FeatureBanks:
    """attributes_Q: per attribute a and label s a ring buffer of the last `size` features x_a of samples with
    y_a = s; pop(n) draws, independently per attribute, label 1 w.p. 1/2 and a uniform feature of that bank."""

    def __init__(self, n_attr: int, dim: int, size: int, gen: torch.Generator):
        self.A, self.M, self.gen, self.bank = n_attr, size, gen, torch.zeros(n_attr, 2, size, dim)
        self.count, self.ptr = torch.zeros(n_attr, 2, dtype=torch.long), torch.zeros(n_attr, 2, dtype=torch.long)

    def push(self, feats: torch.Tensor, y: torch.Tensor) -> None:  # feats (B, A, c), y (B, A) in {0, 1}
        """Per (a, s), the batch's features with y_a = s in batch order go to the ring buffer (the last `size` of them
        if more), written at ptr, ptr + 1, ... mod size (one vectorised write; push_loop is the same rule per bank)."""
        y = y.long()
        mask = torch.stack([y == 0, y == 1], -1)  # (B, A, 2)
        n = mask.sum(0)  # (A, 2) rows per bank
        kept = n.clamp(max=self.M)
        rank = mask.long().cumsum(0) - 1  # (B, A, 2) position among the bank's rows in the batch
        b, a, s = torch.nonzero(mask & (rank >= (n - kept)[None]), as_tuple=True)
        pos = (self.ptr[a, s] + rank[b, a, s] - (n - kept)[a, s]) % self.M
        self.bank[a, s, pos] = feats[b, a]
        self.ptr = (self.ptr + kept) % self.M
        self.count = (self.count + kept).clamp(max=self.M)

    def push_loop(self, feats: torch.Tensor, y: torch.Tensor) -> None:
        """The per-bank loop push() vectorises (the reference the tests compare it with)."""
        for a in range(self.A):
            for s in (0, 1):
                f = feats[y[:, a] == s, a][-self.M :]
                self.bank[a, s, (int(self.ptr[a, s]) + torch.arange(len(f))) % self.M] = f
                self.ptr[a, s] = (self.ptr[a, s] + len(f)) % self.M
                self.count[a, s] = min(self.M, int(self.count[a, s]) + len(f))

    def pop(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:  # (n, A, c) features, (n, A) labels
        labels = (torch.rand(n, self.A, generator=self.gen) < 0.5).long()
        attrs = torch.arange(self.A)[None, :]
        idx = (torch.rand(n, self.A, generator=self.gen) * self.count[attrs, labels].clamp(min=1)).long()
        return self.bank[attrs, labels, idx], labels.float()


def flooded(loss: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
    """GOAT's flooded loss |L - b| + b (bceloss.py): descent above the level b, ascent below it."""
    return (loss - level).abs() + level


def head_logits(feats: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, A) logits of per-attribute linear heads (w (A, c), b (A,)) on relu of the per-attribute features (N, A, c)."""
    return (F.relu(feats) * w).sum(-1) + b


def log_prior_odds(y_train: torch.Tensor) -> torch.Tensor:
    """log(pi / (1 - pi)) per attribute, pi = the training prior (clamped to [1e-4, 1 - 1e-4])."""
    pi = y_train.float().mean(0).clamp(1e-4, 1 - 1e-4)
    return torch.log(pi / (1 - pi))


def attr_rates(y: np.ndarray, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-attribute TPR and TNR (an attribute with no positive (negative) counts TPR (TNR) 0)."""
    y, pred = np.asarray(y).astype(bool), np.asarray(pred).astype(bool)
    return (y & pred).sum(0) / np.maximum(y.sum(0), 1), (~y & ~pred).sum(0) / np.maximum((~y).sum(0), 1)


def pedestrian_metrics(y: np.ndarray, pred: np.ndarray) -> dict:
    """mA = mean_k (TPR_k + TNR_k) / 2 and instance F1 (mean over samples of 2|y & p| / (|y| + |p|); an empty
    truth and empty prediction counts 1), all in %; ma_rare: mA of the RARE rarest attributes."""
    y, pred = np.asarray(y).astype(bool), np.asarray(pred).astype(bool)
    tpr, tnr = attr_rates(y, pred)
    inter, tot = (y & pred).sum(1), y.sum(1) + pred.sum(1)
    f1 = np.where(tot > 0, 2 * inter / np.maximum(tot, 1), 1.0)
    return {"ma": 100 * float(((tpr + tnr) / 2).mean()), "f1": 100 * float(f1.mean()),
            "tpr": 100 * float(tpr.mean()), "tnr": 100 * float(tnr.mean()), "ma_rare": 100 * float(((tpr + tnr) / 2)[-RARE:].mean())}
