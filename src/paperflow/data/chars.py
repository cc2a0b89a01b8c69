"""Character-level language-model data: one encoding of a text, window batches and the held-out loss.

Shared by the char-LM papers (dcmha, attn_localization) on res["shakespeare"]."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..spec import check


def encode_text(text: str, val_fraction: float) -> dict:
    """Char vocabulary of the whole text (sorted by code point, uint8 ids); contiguous split: the last
    val_fraction of the characters is validation. Returns {train, val: (N,) uint8, vocab: str, vocab_size}."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    uniq, inv = np.unique(codes, return_inverse=True)
    check(len(uniq) <= 256, f"char vocabulary of {len(uniq)} symbols does not fit uint8")
    ids = torch.from_numpy(inv.astype(np.uint8))
    n_train = int(len(ids) * (1 - val_fraction))
    vocab = "".join(chr(int(c)) for c in uniq)
    return {"train": ids[:n_train].clone(), "val": ids[n_train:].clone(), "vocab": vocab, "vocab_size": len(vocab)}


def window_batch(ids: torch.Tensor, starts: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-char targets, (B, T) int64 each, of the windows starting at `starts` (B,)."""
    offsets = starts.view(-1, 1) + torch.arange(T + 1).view(1, -1)  # (B, T + 1)
    chunk = ids[offsets].long()
    return chunk[:, :-1], chunk[:, 1:]


def eval_starts(n_ids: int, T: int, n_windows: int) -> torch.Tensor:
    """Evenly spaced, deterministic window starts over a split of n_ids tokens."""
    return torch.linspace(0, n_ids - T - 1, n_windows).round().long().unique()


@torch.no_grad()
def mean_loss(net: nn.Module, ids: torch.Tensor, starts: torch.Tensor, T: int, batch: int) -> float:
    """Mean next-char cross-entropy (nats) over all tokens of the given windows; net maps (B, T) -> (B, T, V)."""
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        x, y = window_batch(ids, starts[i : i + batch], T)
        logits = net(x)
        total += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum"))
        count += y.numel()
    return total / count
