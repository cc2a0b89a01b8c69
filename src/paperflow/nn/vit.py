"""A small vision transformer (DeiT-shaped) whose norm, attention and FFN are pluggable.

The efficiency papers change one part of the block and keep the rest, so the block takes three
factories instead of subclassing:

    norm_fn(dim) -> nn.Module                 default nn.LayerNorm (SLAB: PRepBN)
    attn_fn(dim, n_heads, n_tokens) -> nn.Module   default SelfAttention (SLAB: simplified linear attention)
    ffn_fn(dim, hidden) -> nn.Module          default MLP with GELU (IFFN: AGeLU branches)

Shapes: images (B, C, H, W) -> patch tokens (B, N, D), N = (H/p)(W/p), plus one class token when
pool="cls" (N+1 tokens); logits (B, n_classes).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

NormFn = Callable[[int], nn.Module]
AttnFn = Callable[[int, int, int], nn.Module]
FfnFn = Callable[[int, int], nn.Module]


@dataclass
class ViTConfig:
    image_size: int = 28
    patch_size: int = 4
    in_channels: int = 1
    n_classes: int = 10
    d_model: int = 64
    n_layer: int = 4
    n_head: int = 4
    mlp_ratio: float = 4.0
    pool: str = "cls"  # "cls" (class token) | "mean" (average of patch tokens)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.pool not in ("cls", "mean"):
            raise ValueError(f"pool must be cls|mean, got {self.pool!r}")

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def n_tokens(self) -> int:
        return self.n_patches + (1 if self.pool == "cls" else 0)

    @property
    def hidden(self) -> int:
        return int(round(self.d_model * self.mlp_ratio))

    def to_dict(self) -> dict:
        return asdict(self)


class SelfAttention(nn.Module):
    """Bidirectional multi-head softmax attention; keeps the last (B, H, N, N) map when `keep_attn`."""

    def __init__(self, dim: int, n_heads: int, n_tokens: int = 0, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.keep_attn = False
        self.last_attn: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x (B, H, N, hd)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).softmax(dim=-1)  # (B, H, N, N)
        if self.keep_attn:
            self.last_attn = attn
        y = (self.dropout(attn) @ v).transpose(1, 2).reshape(B, N, D)
        return self.proj(y)


class MLP(nn.Module):
    """The standard ViT FFN: Linear(dim, hidden) -> GELU -> Linear(hidden, dim)."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(F.gelu(self.fc1(x))))


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + ffn(norm2(x))."""

    def __init__(self, cfg: ViTConfig, norm_fn: NormFn, attn_fn: AttnFn, ffn_fn: FfnFn) -> None:
        super().__init__()
        self.norm1 = norm_fn(cfg.d_model)
        self.attn = attn_fn(cfg.d_model, cfg.n_head, cfg.n_tokens)
        self.norm2 = norm_fn(cfg.d_model)
        self.ffn = ffn_fn(cfg.d_model, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class PatchEmbed(nn.Module):
    """Non-overlapping p x p patches -> D channels: (B, C, H, W) -> (B, N, D)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_channels, cfg.d_model, cfg.patch_size, stride=cfg.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(nn.Module):
    def __init__(
        self,
        cfg: ViTConfig,
        norm_fn: NormFn | None = None,
        attn_fn: AttnFn | None = None,
        ffn_fn: FfnFn | None = None,
    ) -> None:
        super().__init__()
        self.cfg = cfg
        norm_fn = norm_fn or nn.LayerNorm
        attn_fn = attn_fn or (lambda d, h, n: SelfAttention(d, h, n, cfg.dropout))
        ffn_fn = ffn_fn or (lambda d, hidden: MLP(d, hidden, cfg.dropout))
        self.patch = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if cfg.pool == "cls" else None
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.n_tokens, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg, norm_fn, attn_fn, ffn_fn) for _ in range(cfg.n_layer))
        self.norm = norm_fn(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.n_classes)

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> embedded tokens with positions, (B, n_tokens, D)."""
        x = self.patch(images)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) -> (B, D): the class token, or the mean of the tokens."""
        return x[:, 0] if self.cls_token is not None else x.mean(dim=1)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.tokens(images)
        for block in self.blocks:
            x = block(x)
        return self.pool(self.norm(x))  # (B, D)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))  # (B, n_classes)
