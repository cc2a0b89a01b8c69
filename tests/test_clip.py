"""paperflow.nn.clip: the multi-positive CLIP loss against plain CLIP and a hand-built target, and the
text encoder's shapes."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from paperflow.nn.clip import TextEncoder, contrastive_loss


def _unit(n, d, seed):
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)), dim=-1)


def test_one_pair_per_class_is_plain_clip():
    img, txt = _unit(5, 8, 0), _unit(5, 8, 1)
    labels = torch.arange(5)
    scale = torch.tensor(math.log(1 / 0.07))
    logits = scale.exp() * img @ txt.T
    plain = 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
    assert float(contrastive_loss(img, txt, labels, labels, scale)) == pytest.approx(float(plain), rel=1e-6)


def test_multi_positive_targets_by_hand():
    # images of classes (0, 0, 1), texts of classes (0, 1, 2): text 2's class has no image -> left out of t2i
    img, txt = _unit(3, 4, 2), _unit(3, 4, 3)
    il, tl = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 2])
    scale = torch.tensor(0.0)  # exp(0) = 1
    logits = img @ txt.T
    lsm_i, lsm_t = logits.log_softmax(1), logits.T.log_softmax(1)
    i2t = -(lsm_i[0, 0] + lsm_i[1, 0] + lsm_i[2, 1]) / 3
    t2i = -((0.5 * lsm_t[0, 0] + 0.5 * lsm_t[0, 1]) + lsm_t[1, 2]) / 2
    assert float(contrastive_loss(img, txt, il, tl, scale)) == pytest.approx(float(0.5 * (i2t + t2i)), rel=1e-6)


def test_logit_scale_is_clamped_at_100():
    img, txt, lab = _unit(4, 6, 4), _unit(4, 6, 5), torch.arange(4)
    big = contrastive_loss(img, txt, lab, lab, torch.tensor(10.0))  # exp(10) > 100
    assert float(big) == pytest.approx(float(contrastive_loss(img, txt, lab, lab, torch.tensor(math.log(100.0)))), rel=1e-5)


def test_text_encoder_shapes():
    enc = TextEncoder(vocab=20, max_len=6, d=8, layers=1, heads=2, mlp_ratio=2.0, embed_dim=5)
    assert enc(torch.randint(0, 20, (3, 6))).shape == (3, 5)
