"""Measured costs: parameter counts, FLOPs counted by torch, latency, bytes.

Papers whose claim is a saving report these, measured on the model they built, never estimated by
hand. FLOPs come from torch.utils.flop_counter.FlopCounterMode, which counts every matmul,
convolution and attention op that dispatches (2 FLOPs per multiply-add); element-wise ops
(activations, norms) are not counted, as in fvcore/ptflops conventions.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils.flop_counter import FlopCounterMode


def count_params(source: torch.nn.Module | Mapping[str, torch.Tensor] | Iterable[torch.Tensor], trainable_only: bool = False) -> int:
    """Number of scalars in a module's parameters, a state dict, or an iterable of tensors."""
    if isinstance(source, torch.nn.Module):
        tensors = [p for p in source.parameters() if p.requires_grad or not trainable_only]
    elif isinstance(source, Mapping):
        tensors = list(source.values())
    else:
        tensors = list(source)
    return int(sum(t.numel() for t in tensors))


def count_nonzero(tensors: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]) -> int:
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    return int(sum(int(torch.count_nonzero(t)) for t in values))


def nbytes(tensors: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]) -> int:
    """Bytes held by the tensors (numel x element size)."""
    values = tensors.values() if isinstance(tensors, Mapping) else tensors
    return int(sum(t.numel() * t.element_size() for t in values))


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FLOPs of fn(*args, **kwargs) as dispatched (forward, and backward too if fn calls it)."""
    with FlopCounterMode(display=False) as mode:
        fn(*args, **kwargs)
    return int(mode.get_total_flops())


def forward_backward_flops(loss_fn: Callable[[], torch.Tensor]) -> tuple[int, int]:
    """(forward FLOPs, backward FLOPs) of one step: loss_fn() builds the loss, then .backward() runs.

    Backward FLOPs depend on what requires grad: frozen weights need no weight gradient, and a
    frozen prefix of the network needs no backward at all, which is how sparse updates save compute."""
    with FlopCounterMode(display=False) as fwd:
        loss = loss_fn()
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    return int(fwd.get_total_flops()), int(bwd.get_total_flops())


def backward_step_costs(loss_fn: Callable[[], torch.Tensor], weights: Iterable[torch.Tensor] = ()) -> dict[str, float]:
    """Measured backward cost of one training step: loss_fn() builds the loss, then .backward() runs.

    Returns {"bwd_flops": FLOPs of the backward (forward_backward_flops), "saved_bytes": bytes of the tensors
    autograd saved for the backward (caught with torch.autograd.graph.saved_tensors_hooks while the graph is
    built: activations, ReLU outputs, pooling indices, an input that a weight gradient needs), counted once per
    storage (its largest saved view), leaving out the storages of `weights` (the model's own tensors, resident
    anyway)}. A sparse update saves here twice: frozen layers need no weight gradient (FLOPs) and keep no input
    (bytes). Add the updated weights and their gradients to get the step's training memory."""
    exclude = {t.untyped_storage().data_ptr() for t in weights}
    saved: dict[int, dict[tuple, torch.Tensor]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in exclude:
            saved.setdefault(ptr, {})[(t.storage_offset(), tuple(t.shape))] = t
        return t

    def build() -> torch.Tensor:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return loss_fn()

    _, bwd = forward_backward_flops(build)
    largest = [max(views.values(), key=lambda t: t.numel()) for views in saved.values()]
    return {"bwd_flops": float(bwd), "saved_bytes": float(nbytes(largest))}


@torch.no_grad()
def latency(fn: Callable[..., Any], *args: Any, repeats: int = 20, warmup: int = 3, **kwargs: Any) -> float:
    """Median wall time in seconds of fn(*args, **kwargs) over `repeats` calls after `warmup` calls."""
    for _ in range(warmup):
        fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def interleaved_times(fns: Mapping[str, Callable[[], Any]], rounds: int = 5, repeats: int = 5, warmup: int = 2) -> dict[str, float]:
    """Seconds per call of each fn, measured in alternation in this process (A B A B ...): each round
    times `repeats` calls of every fn in turn, and the result is each fn's minimum over rounds of its
    median. Background load lands on both arms of an A/B pair alike, so their RATIO is what a timing
    claim reports (DESIGN.md "Honesty": timing claims are measured alone or interleaved)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            best[name] = min(best[name], float(statistics.median(times)))
    return best


def peak_tensor_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """(peak bytes of the tensors allocated by fn and alive at once, fn's result), measured on any device by
    intercepting every op's outputs (torch.utils._python_dispatch.TorchDispatchMode): each output storage is counted
    once (views and in-place results share a counted storage) and released when the tensor that brought it in is
    freed. Tensors that exist before the call (inputs, weights) are not counted: this is the activation memory of fn
    itself, which is what a memory-vs-input-size claim measures. Added in issue 29 (cmanp: peak memory of inference vs
    context size)."""
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Mode(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = 0
            self.peak = 0
            self.sizes: dict[int, int] = {}

        def _free(self, key: int) -> None:
            self.live -= self.sizes.pop(key, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                    continue
                storage = t.untyped_storage()
                key, n = storage.data_ptr(), storage.nbytes()
                if n == 0 or key in self.sizes:
                    continue
                self.sizes[key] = n
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, key)
            return out

    mode = Mode()
    with mode:
        result = fn(*args, **kwargs)
    return mode.peak, result
