"""A small decoder-only transformer (nanoGPT-shaped) with pluggable attention.

Attention is chosen by `attention_cls`: any nn.Module subclass of `MultiHeadAttention` taking
(d_model, n_heads, **attention_kwargs). `MultiHeadAttention` exposes two hooks that a paper can
override without copying the rest of the attention:

    compose_logits(logits, x) -> logits   on (B, H, T, S) scores before the causal softmax
    compose_probs(probs, x)   -> probs    on (B, H, T, S) probabilities after it

Both are identities here, so the base class is plain causal MHA.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TransformerConfig:
    vocab_size: int
    block_size: int  # maximum context length T
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0
    mlp_ratio: int = 4
    attention_kwargs: dict[str, Any] = field(default_factory=dict)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention with composition hooks (identity here)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, **_: Any) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def compose_logits(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return logits

    def compose_probs(self, probs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return probs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        # (B, T, D) -> (B, H, T, hd)
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        logits = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        logits = self.compose_logits(logits, x)
        logits = logits.masked_fill(~causal, float("-inf"))
        probs = F.softmax(logits, dim=-1)
        probs = self.compose_probs(probs, x)
        # Composition may mix masked (zero) entries of other heads only along the head axis, which
        # keeps them zero; re-masking guards hooks that do not preserve causality.
        probs = probs.masked_fill(~causal, 0.0)
        y = self.dropout(probs) @ v  # (B, H, T, hd)
        y = y.transpose(1, 2).reshape(B, T, D)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, attention_cls: type[MultiHeadAttention]) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.d_model)
        self.attn = attention_cls(cfg.d_model, cfg.n_head, dropout=cfg.dropout, **cfg.attention_kwargs)
        self.norm2 = RMSNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TransformerLM(nn.Module):
    """Token + learned position embeddings, pre-norm blocks, tied output head."""

    def __init__(self, cfg: TransformerConfig, attention_cls: type[MultiHeadAttention] = MultiHeadAttention) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, attention_cls) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2 scaled init of residual projections
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) int64 -> logits (B, T, V)."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def count_params(model: nn.Module) -> int:
    """Unique parameters (tied weights counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
