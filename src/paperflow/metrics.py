"""Evaluation metrics shared by several papers (OOD detection, imbalanced classification)."""
from __future__ import annotations

import numpy as np


def auroc(positive_scores, negative_scores) -> float:
    """Area under the ROC curve of a score that should rank the positives above the negatives:
    P(s_pos > s_neg) + P(tie) / 2, the Mann-Whitney U over n_pos n_neg, from average ranks, O((n + m) log(n + m)).
    Used by rodeo (OOD positive), mc_ensemble (ID positive) and fedmlc_auc (class 1 positive)."""
    from scipy.stats import rankdata

    pos, neg = np.asarray(positive_scores, dtype=np.float64), np.asarray(negative_scores, dtype=np.float64)
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(f"auroc needs both classes, got {len(pos)} positive and {len(neg)} negative scores")
    ranks = rankdata(np.r_[neg, pos])
    u = ranks[len(neg):].sum() - len(pos) * (len(pos) + 1) / 2
    return float(u / (len(pos) * len(neg)))


def expected_calibration_error(probs, labels, n_bins: int = 15) -> float:
    """ECE (Guo et al. 2017) of class probabilities (N, K) against labels (N,): equal-width bins on the max-probability
    confidence, bin b = (b / n_bins, (b + 1) / n_bins]; sum_b (n_b / N) |accuracy_b - mean confidence_b|, a fraction.
    Used by kd_ranking and vp_gcnn."""
    import torch

    conf, pred = probs.max(dim=1)
    correct = (pred == labels).double()
    conf = conf.double()
    idx = (torch.ceil(conf * n_bins).long() - 1).clamp(0, n_bins - 1)
    n = conf.shape[0]
    ece = 0.0
    for b in range(n_bins):
        mask = idx == b
        cnt = int(mask.sum())
        if cnt:
            ece += cnt / n * abs(float(correct[mask].mean()) - float(conf[mask].mean()))
    return float(ece)
