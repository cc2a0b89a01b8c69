"""CLIP-style dual-encoder parts (Radford et al. 2021): a small bidirectional text encoder built from the
ViT blocks of paperflow.nn.vit, and the symmetric InfoNCE loss with multi-positive targets.

Multi-positive targets (as UniCL, Yang et al. 2022): when several images / texts of a batch share a class,
the target of image i over the batch's texts is uniform over its same-class texts (and symmetrically for
texts over images); with exactly one image and one text per class it is plain CLIP (identity targets).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .vit import MLP, Block, SelfAttention, ViTConfig


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
