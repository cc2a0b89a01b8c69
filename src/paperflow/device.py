"""Where training runs: params.yaml `device: cpu | cuda | auto` (auto by default; a profile may override it,
and PAPERFLOW_DEVICE overrides both for one run).

The stage runner resolves the setting once per job (`use`), train_loop moves the modules it trains and every
batch to `current()`, and the stage moves a trained model back to the CPU before saving it (`to_device`), so
artifacts never hold device tensors and evaluate/compress read them anywhere. On the CPU nothing moves: results
are bit-identical to a run without the setting (tests/test_device.py). Papers that build tensors inside their
loss (masks, targets) should build them on the batch's device (`x.device`) so a CUDA run works too; papers with
their own loops (no train_loop) run on the CPU.
"""
from __future__ import annotations

from typing import Any

import torch

from .spec import ConfigError

CHOICES = ("cpu", "cuda", "auto")
_current = torch.device("cpu")


def resolve(setting: str) -> torch.device:
    """'cpu' -> cpu; 'cuda' -> cuda:0 (a clear error when this torch sees no GPU); 'auto' -> cuda if any, else cpu."""
    if setting not in CHOICES:
        raise ConfigError(f"device must be one of {', '.join(CHOICES)}, got {setting!r}")
    if setting == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        raise ConfigError(f"device: cuda, but torch {torch.__version__} ({build}) sees no GPU; use device: auto or cpu")
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(setting)


def use(setting: str) -> torch.device:
    """Make the resolved device current for this process (the stage runner calls it once per job)."""
    global _current
    _current = resolve(setting)
    return _current


def current() -> torch.device:
    return _current


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Tensors and modules inside dicts, lists and tuples moved to `device` (others returned as they are)."""
    device = torch.device(device)
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device)
    if isinstance(obj, torch.nn.Module):
        return obj.to(device)
    if isinstance(obj, dict):
        moved = {k: to_device(v, device) for k, v in obj.items()}
        return moved if type(obj) is dict else type(obj)(moved)  # OrderedDict (state dicts) keeps its type
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(to_device(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj
