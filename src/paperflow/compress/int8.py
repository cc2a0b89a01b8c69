"""Int8 weight quantization: symmetric, one scale per output channel (row of a Linear weight).

For a weight W of shape (out, in, ...), row r gets scale s_r = max|W_r| / 127 and integer codes
q_r = clamp(round(W_r / s_r), -127, 127), so |W_r - s_r q_r| <= s_r / 2 entry-wise. A zero row gets
s_r = 1 (its codes are 0). The functions are pure: they never modify their inputs.

    q, scale = quantize_per_channel(w)          # int8 (out, in), fp32 (out, 1, ...)
    w_hat = dequantize(q, scale)                # fp32, same shape as w
    state = quantize_state(state, names)        # de-quantized fp32 copy (loads into the same model)
    packed = quantize_state(state, names, keep_int8=True)   # int8 codes + "<name>.int8_scale" entries
    state = dequantize_state(packed)            # back to a loadable fp32 state dict
"""
from __future__ import annotations

from typing import Iterable, Mapping

import torch

QMAX = 127  # symmetric range [-127, 127]; -128 is unused so that +-max map to +-127
SCALE_SUFFIX = ".int8_scale"


def channel_scales(weight: torch.Tensor) -> torch.Tensor:
    """max|W_r| / 127 per output channel r (dim 0), shaped to broadcast against weight; 1 for zero rows."""
    if weight.dim() < 2:
        raise ValueError(f"int8: expected a weight with >= 2 dims (out, in, ...), got shape {tuple(weight.shape)}")
    amax = weight.detach().abs().reshape(weight.shape[0], -1).amax(dim=1).to(torch.float32)  # (out,)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    return scale.view(-1, *([1] * (weight.dim() - 1)))  # (out, 1, ...)


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes, fp32 scales): symmetric per-output-channel quantization of `weight`."""
    scale = channel_scales(weight)
    q = torch.clamp(torch.round(weight.detach().to(torch.float32) / scale), -QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (q.to(torch.float32) * scale).to(dtype)


def fake_quantize(weight: torch.Tensor) -> torch.Tensor:
    """The round trip dequantize(quantize(weight)), in weight's dtype."""
    q, scale = quantize_per_channel(weight)
    return dequantize(q, scale, weight.dtype)


def linear_weight_names(
    state: Mapping[str, torch.Tensor], exclude: Iterable[str] = ()
) -> list[str]:
    """Names of 2-D floating-point `*.weight` entries (Linear layers) not containing any `exclude` substring."""
    exclude = tuple(exclude)
    return [
        n for n, t in state.items()
        if n.endswith("weight") and t.dim() == 2 and t.is_floating_point() and not any(s in n for s in exclude)
    ]


def quantize_state(
    state: Mapping[str, torch.Tensor], names: Iterable[str], keep_int8: bool = False
) -> dict[str, torch.Tensor]:
    """A copy of `state` with each tensor in `names` int8-quantized per output channel.

    keep_int8=False stores the de-quantized fp32 values (the copy loads into the same model);
    keep_int8=True stores the int8 codes under the same name plus the scales under name + SCALE_SUFFIX.
    """
    out = dict(state)
    for name in names:
        if name not in state:
            raise KeyError(f"int8: {name!r} is not in the state dict")
        q, scale = quantize_per_channel(state[name])
        if keep_int8:
            out[name] = q
            out[name + SCALE_SUFFIX] = scale
        else:
            out[name] = dequantize(q, scale, state[name].dtype)
    return out


def dequantize_state(state: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Undo quantize_state(..., keep_int8=True): int8 codes with a scale entry become fp32 weights."""
    out = {}
    for name, t in state.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        scale = state.get(name + SCALE_SUFFIX)
        out[name] = dequantize(t, scale, dtype) if scale is not None else t
    return out


def int8_nbytes(state: Mapping[str, torch.Tensor]) -> int:
    """Storage of a (possibly packed) state dict in bytes, counting each tensor's element size."""
    return sum(t.numel() * t.element_size() for t in state.values())


class Int8Linear(torch.nn.Module):
    """A Linear layer stored as int8 codes + per-output-channel fp32 scales (quantize_per_channel) that runs
    torch's weight-only int8 CPU kernel (aten._weight_int8pack_mm: y = x (s * q)^T + b, activations stay fp32),
    so its output equals an fp32 Linear holding dequantize(q, s) up to float rounding. For timing whether
    int8 weights are also faster (papers time it against the fp32 layer with measure.interleaved_times)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        q, scale = quantize_per_channel(linear.weight)
        self.register_buffer("q", q.contiguous())
        self.register_buffer("scale", scale.reshape(-1).contiguous())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, self.in_features).float().contiguous(), self.q, self.scale)
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y + self.bias


def int8_kernel_model(model: torch.nn.Module, exclude: Iterable[str] = ()) -> torch.nn.Module:
    """A deep copy of `model` whose nn.Linear modules (names not containing any `exclude` substring) are
    replaced by Int8Linear; the input model is not modified."""
    import copy

    out = copy.deepcopy(model)
    exclude = tuple(exclude)
    for name, module in list(out.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, torch.nn.Linear) and not any(s in full for s in exclude):
                setattr(module, child_name, Int8Linear(child))
    return out
