"""The shared layer-by-layer calibration pass (Wanda, OWL, and any later block-wise pruner).

As in locuslab/wanda `prune_wanda` and luuyin/OWL `prune_wanda_outlier`, blocks are processed in order:

    for each block l:
        1. hook every nn.Linear inside the block and run the block on its inputs X_l  (N, T, D),
           accumulating per-linear input statistics (Wanda's scaler_row, compress/wanda.py);
        2. callback(l, block, stats): may prune the block in place (or only read the stats);
        3. re-run the (now pruned) block: X_{l+1} = block(X_l), so later blocks are calibrated on the
           outputs of the already-pruned earlier blocks (sequential pruning).

The pass itself is model-agnostic: a block is any nn.Module called as block(x, **kwargs) that returns
a tensor (or a tuple whose first item is the tensor). The model-specific bits (which modules are the
blocks, how tokens become the first block's inputs, which kwargs a block needs) live in the small
adapters at the bottom: `hf_llama_inputs` (Hugging Face Llama-family causal LMs, transformers 5.x)
and `transformer_lm_inputs` (paperflow.nn.transformer.TransformerLM).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn as nn

from .wanda import update_scaler_row

BlockStats = dict[str, torch.Tensor]  # linear name inside the block -> scaler_row (in,)
BlockCallback = Callable[[int, nn.Module, BlockStats], None]


def linear_sublayers(block: nn.Module) -> dict[str, nn.Linear]:
    """Every nn.Linear inside the block, by its name relative to the block (Wanda's find_layers)."""
    return {name: m for name, m in block.named_modules() if isinstance(m, nn.Linear)}


def _call(block: nn.Module, x: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
    out = block(x, **kwargs)
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def run_block(block: nn.Module, inputs: torch.Tensor, kwargs: Mapping[str, Any], chunk: int = 8) -> torch.Tensor:
    """block applied to inputs (N, T, D) in chunks of `chunk` samples -> (N, T, D)."""
    return torch.cat([_call(block, inputs[i : i + chunk], kwargs) for i in range(0, inputs.shape[0], chunk)])


@torch.no_grad()
def block_input_stats(
    block: nn.Module, inputs: torch.Tensor, kwargs: Mapping[str, Any], chunk: int = 8
) -> tuple[BlockStats, torch.Tensor]:
    """Run the block with forward hooks on its linears; returns (scaler_row per linear, outputs)."""
    linears = linear_sublayers(block)
    state = {name: (torch.zeros(m.in_features), 0) for name, m in linears.items()}

    def hook(name: str):
        def fn(_module: nn.Module, args: tuple, _out: torch.Tensor) -> None:
            state[name] = update_scaler_row(*state[name], args[0].detach())

        return fn

    handles = [m.register_forward_hook(hook(name)) for name, m in linears.items()]
    try:
        outputs = run_block(block, inputs, kwargs, chunk)
    finally:
        for h in handles:
            h.remove()
    return {name: s for name, (s, _) in state.items()}, outputs


@torch.no_grad()
def sequential_pass(
    blocks: Sequence[nn.Module],
    inputs: torch.Tensor,
    block_kwargs: Mapping[str, Any],
    callback: BlockCallback,
    *,
    chunk: int = 8,
    rerun: bool = True,
) -> torch.Tensor:
    """The calibration pass over `blocks` starting from the first block's inputs (N, T, D).

    With rerun=True (pruning) each block is run again after its callback, so the next block sees the
    pruned block's outputs. rerun=False is for read-only callbacks (OWL's outlier pass on the dense
    model), where the second run would reproduce the first outputs exactly. Returns the last outputs.
    """
    x = inputs
    for index, block in enumerate(blocks):
        stats, out = block_input_stats(block, x, block_kwargs, chunk)
        callback(index, block, stats)
        x = run_block(block, x, block_kwargs, chunk) if rerun else out
    return x


# ----------------------------------------------------------------------------------------- adapters


@dataclass
class CalibrationInputs:
    """What sequential_pass needs: the blocks, the first block's inputs and the per-call kwargs."""

    blocks: list[nn.Module]
    hidden: torch.Tensor  # (N, T, D)
    kwargs: dict[str, Any] = field(default_factory=dict)


@torch.no_grad()
def hf_llama_inputs(model: nn.Module, input_ids: torch.Tensor) -> CalibrationInputs:
    """Adapter for Hugging Face Llama-family causal LMs (LlamaForCausalLM, SmolLM2; transformers 5.x).

    input_ids (N, T) -> token embeddings (N, T, D), plus the kwargs LlamaModel.forward passes to each
    decoder layer: the causal mask (None under SDPA without padding), position ids and the rotary
    (cos, sin) embeddings. Mask and rotary embeddings are built for batch 1 and broadcast over chunks.
    """
    from transformers.masking_utils import create_causal_mask

    inner = model.model
    hidden = inner.embed_tokens(input_ids)  # (N, T, D)
    position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)  # (1, T)
    probe = hidden[:1]
    mask = create_causal_mask(
        config=model.config, inputs_embeds=probe, attention_mask=None, cache=None, position_ids=position_ids
    )
    rotary = inner.rotary_emb(probe, position_ids=position_ids)  # (cos, sin), each (1, T, head_dim)
    kwargs = {"attention_mask": mask, "position_ids": position_ids, "position_embeddings": rotary, "use_cache": False}
    return CalibrationInputs(blocks=list(inner.layers), hidden=hidden, kwargs=kwargs)


@torch.no_grad()
def transformer_lm_inputs(model: nn.Module, idx: torch.Tensor) -> CalibrationInputs:
    """Adapter for paperflow.nn.transformer.TransformerLM: token + position embeddings, no kwargs."""
    hidden = model.tok(idx) + model.pos(torch.arange(idx.shape[1], device=idx.device))  # (N, T, D)
    return CalibrationInputs(blocks=list(model.blocks), hidden=hidden)
