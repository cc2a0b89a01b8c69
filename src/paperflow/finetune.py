"""The shared SmolLM2-135M fine-tuning task of the PEFT papers (loraplus, ether): novel attribution.

Task. 6-way classification of short passages (seq_len tokens) of the six Jane Austen novels in
res["austen"]: which novel does the passage come from? Each novel is cut into consecutive NON-overlapping
windows of seq_len tokens; by position in the book the first `split[0]` of the windows is the train region,
the next up to `split[1]` the validation region and the rest the test region (no passage shares a token with
a passage of another split). From each region n_train / n_val / n_test windows per novel are taken evenly
spaced (the same for every variant and seed; seeds change initialisation and batch order).

Model. SmolLM2-135M-Instruct (30 decoder layers). The bottom 30 - k layers stay frozen and, since nothing
below the adapted layers changes during fine-tuning, their output hidden states are computed ONCE in
prepare() (`prepare_task`) and cached (float16) in the data artifact together with the weights of the top k
layers and the final norm. Fine-tuning runs only the top k layers (`TopClassifier`): our own forward over the
Hugging Face modules (RMSNorm -> q/k/v -> RoPE from model.model.rotary_emb -> causal GQA attention -> o_proj ->
residual -> RMSNorm -> SwiGLU MLP -> residual), then the final norm and a linear classification head on the
LAST token (as transformers' LlamaForSequenceClassification pools). Because only the last position feeds the
head, the last layer computes keys/values for every position but queries, o_proj and the MLP only for the last
token: an exact shortcut (tests check it against the Hugging Face forward), not an approximation.

How the top layers are adapted is the paper's method (`method`): "full" (every weight of the top k layers +
final norm trainable), "head" (only the head), or an adapter from paperflow.nn.adapters ("lora", "ether",
"ether_plus", "oft") on the `targets` linears of the top k layers (base weights and norms frozen). The head
is trained in every variant. The optimizer param groups are the caller's (`param_groups`), e.g. LoRA+'s.
"head" trains on the frozen top layers' last-token features computed once per run (`TopClassifier.features`), the
same numbers as the full forward (tested), so a head-only reference costs little. `adapter_stats` measures what
training did to the adapted linears (weight_shift; LoRA's ||B||, ||A - A_0|| and their ratio) for the papers'
mechanism gates.

Shrinks for the CPU budget (recorded by the papers): k = 1 adapted layer by default (the paper adapts all
layers), short passages, a few hundred passages per novel, ~300 AdamW steps, frozen activations cached in
float16 (the adapted layer computes in float32).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .loop import cosine_lr, train_loop
from .nn.adapters import Adapter, adapters_of, add_adapters, make_adapter, merge_adapters, n_effective
from .spec import check

LLAMA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
METHODS = ("full", "head", "lora", "ether", "ether_plus", "oft")


@dataclass(frozen=True)
class TaskConfig:
    """The task's fields, shared by the papers' Config classes (which subclass it)."""

    seq_len: int = 32  # tokens per passage
    n_train: int = 250  # passages per novel, evenly spaced over the train region
    n_val: int = 20  # per novel (learning curves, lr selection)
    n_test: int = 50  # per novel (reported accuracy)
    split: tuple = (0.7, 0.8)  # window-position fractions: train [0, a), val [a, b), test [b, 1)
    top_layers: int = 1  # k adapted decoder layers (the rest frozen and cached)
    targets: tuple = LLAMA_LINEARS  # linears of the top layers that get an adapter
    steps: int = 300
    batch_size: int = 16
    warmup: int = 20
    weight_decay: float = 0.0
    eval_every: int = 10  # validation loss/accuracy every this many steps (the learning curve)
    log_every: int = 10
    lora_r: int = 8
    lora_alpha: float = 16.0
    nb: int = 4  # diagonal blocks of ETHER / ETHER+ / OFT
    prepare_batch: int = 32  # passages per forward in prepare()
    book_chars: int = 0  # read only the first book_chars characters of each novel (0 = the whole novel)
    sparsities: tuple = (0.5,)  # compress: magnitude pruning of the merged adapted layers at these levels

    def __post_init__(self) -> None:
        object.__setattr__(self, "split", tuple(float(x) for x in self.split))
        object.__setattr__(self, "targets", tuple(str(x) for x in self.targets))
        check(self.seq_len >= 2, f"seq_len must be >= 2, got {self.seq_len}")
        check(min(self.n_train, self.n_val, self.n_test) >= 1, "n_train, n_val and n_test must be >= 1 (per novel)")
        check(len(self.split) == 2 and 0 < self.split[0] < self.split[1] < 1,
              f"split must be two fractions 0 < a < b < 1 (train/val/test regions), got {self.split}")
        check(self.top_layers >= 1, f"top_layers must be >= 1, got {self.top_layers}")
        check(len(self.targets) >= 1 and all(t in LLAMA_LINEARS for t in self.targets),
              f"targets must be a non-empty subset of {LLAMA_LINEARS}, got {self.targets}")
        check(self.steps >= 1 and self.batch_size >= 1, "steps and batch_size must be >= 1")
        check(0 <= self.warmup < self.steps, f"warmup must be in [0, steps), got {self.warmup}")
        check(self.weight_decay >= 0, f"weight_decay must be >= 0, got {self.weight_decay}")
        check(self.eval_every >= 1 and self.log_every >= 1, "eval_every and log_every must be >= 1")
        check(self.lora_r >= 1 and self.lora_alpha > 0, "lora_r must be >= 1 and lora_alpha > 0")
        check(self.nb >= 1, f"nb must be >= 1, got {self.nb}")
        check(self.prepare_batch >= 1, f"prepare_batch must be >= 1, got {self.prepare_batch}")
        check(self.book_chars >= 0, f"book_chars must be >= 0 (0 = whole novels), got {self.book_chars}")
        object.__setattr__(self, "sparsities", tuple(float(x) for x in self.sparsities))
        check(all(0 < x < 1 for x in self.sparsities),
              f"sparsities must be fractions in (0, 1) (magnitude pruning levels), got {self.sparsities}")


# ------------------------------------------------------------------------------------------------ data
def window_split(n_windows: int, split: tuple, counts: tuple[int, int, int]) -> list[np.ndarray]:
    """Window indices of the train/val/test regions, `counts` of each evenly spaced over its region."""
    bounds = [0, int(n_windows * split[0]), int(n_windows * split[1]), n_windows]
    out = []
    for (lo, hi), n in zip(zip(bounds[:-1], bounds[1:]), counts):
        check(hi - lo >= n, f"a region of {hi - lo} windows cannot give {n} passages; lower n_train/n_val/n_test or seq_len")
        out.append(np.unique(np.linspace(lo, hi - 1, n).round().astype(np.int64)))
    return out


def passages(cfg: TaskConfig, books: dict[str, list[int]]) -> dict:
    """Token windows (N, T) with labels and split ids (0 train, 1 val, 2 test), classes = sorted titles."""
    titles = sorted(books)
    ids, labels, split = [], [], []
    for c, title in enumerate(titles):
        toks = np.asarray(books[title], dtype=np.int64)
        n_win = len(toks) // cfg.seq_len
        windows = toks[: n_win * cfg.seq_len].reshape(n_win, cfg.seq_len)
        for s, idx in enumerate(window_split(n_win, cfg.split, (cfg.n_train, cfg.n_val, cfg.n_test))):
            ids.append(windows[idx])
            labels += [c] * len(idx)
            split += [s] * len(idx)
    return {"ids": torch.from_numpy(np.concatenate(ids)), "labels": torch.tensor(labels),
            "split": torch.tensor(split, dtype=torch.int8), "classes": titles}


@torch.no_grad()
def cache_hidden(lm: nn.Module, ids: torch.Tensor, top_layers: int, batch: int) -> torch.Tensor:
    """Outputs of the bottom L - k frozen decoder layers for every passage (N, T, D) (float32)."""
    from .compress.calibration import hf_llama_inputs, run_block

    inp = hf_llama_inputs(lm, ids)
    h = inp.hidden
    for block in inp.blocks[: len(inp.blocks) - top_layers]:
        h = run_block(block, h, inp.kwargs, chunk=batch)
    return h


def prepare_task(cfg: TaskConfig, res) -> dict:
    """The data artifact: passages, cached frozen activations (float16), top-k layer weights, LM config."""
    from .data.smollm2 import load_smollm2, load_tokenizer

    with open(res["austen"], encoding="utf-8") as fh:
        novels = json.load(fh)
    tok = load_tokenizer(res["smollm2"])
    if cfg.book_chars:
        novels = {t: text[: cfg.book_chars] for t, text in novels.items()}
    books = {t: tok(text, add_special_tokens=False, verbose=False)["input_ids"] for t, text in novels.items()}
    data = passages(cfg, books)
    lm = load_smollm2(res["smollm2"])
    n_layers = lm.config.num_hidden_layers
    check(cfg.top_layers < n_layers, f"top_layers must be < the model's {n_layers} layers, got {cfg.top_layers}")
    h = cache_hidden(lm, data["ids"], cfg.top_layers, cfg.prepare_batch)
    check(bool(torch.isfinite(h.half()).all()), "cached activations overflow float16")
    top = lm.model.layers[n_layers - cfg.top_layers :]
    data.update({
        "hidden": h.half(),
        "top_state": {k: v.detach().clone() for k, v in top.state_dict().items()},
        "norm_state": {k: v.detach().clone() for k, v in lm.model.norm.state_dict().items()},
        "lm_config": json.loads(lm.config.to_json_string()),
        "first_top_layer": n_layers - cfg.top_layers,
        "model_dir": os.path.abspath(res["smollm2"]),
    })
    # the frozen top layers' last-token features of every passage (what a head-only run trains on), once here
    data["head_features"] = _frozen_features(TopClassifier(data, len(data["classes"])), data["hidden"])
    return data


# ------------------------------------------------------------------------- shared prepare cache
# The data artifact depends only on these TaskConfig fields, the two resources and the code that computes it,
# so two papers with the same values (loraplus and ether) derive the SAME product: it is computed once and
# the second prepare loads it (DESIGN.md "Shared fine-tuning task").
DATA_FIELDS = ("seq_len", "n_train", "n_val", "n_test", "split", "top_layers", "prepare_batch", "book_chars")
_DATA_CODE = ("finetune.py", "compress/calibration.py", "data/smollm2.py")  # paperflow files that compute it


def _resource_digest(path: str) -> str:
    """A resource's content identity: its recorded `<path>.sha256.json` digest (written by the resources rule
    over the decoded content), else the sha256 of its bytes (a folder: every file, by relative path)."""
    record = Path(f"{path}.sha256.json")
    if record.is_file():
        return str(json.loads(record.read_text())["sha256"])
    digest = hashlib.sha256()
    root = Path(path)
    for f in sorted(p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()):
        digest.update(str(f.relative_to(root) if f != root else f.name).encode())
        digest.update(hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


def task_cache_key(cfg: TaskConfig, res) -> str:
    """sha256 (16 hex) of everything the data artifact depends on: the DATA_FIELDS of cfg, the resources'
    content, the source of the code that computes it, and the torch/transformers versions."""
    import transformers

    here = Path(__file__).parent
    spec = {
        "fields": {f: list(v) if isinstance(v := getattr(cfg, f), tuple) else v for f in DATA_FIELDS},
        "resources": {name: _resource_digest(res[name]) for name in ("austen", "smollm2")},
        "code": {f: hashlib.sha256((here / f).read_bytes()).hexdigest() for f in _DATA_CODE},
        "versions": [torch.__version__, transformers.__version__],
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def shared_dir(res) -> Path:
    """results/_shared next to the checkout's resources/ (res.root), not inside any paper's results."""
    return Path(res.root).parent / "results" / "_shared"


def prepare_task_shared(cfg: TaskConfig, res, cache_dir: str | os.PathLike | None = None) -> dict:
    """prepare_task through a content-addressed cache: <cache_dir>/finetune-task-<key>.pt (task_cache_key).

    Safe under parallel jobs: an exclusive flock on a per-key lock file serialises the papers' prepare jobs, so
    the second one waits (blocked, no CPU) while the first computes, then loads the file; the file is written
    atomically (tmp + rename), so a reader never sees a partial one, and where flock does not exclude (some
    network file systems) both compute the same content and the last rename wins. An unreadable cache file is
    recomputed. The result is the prepare_task artifact plus its `cache_key`."""
    from .artifacts import load_torch, save_torch

    key = task_cache_key(cfg, res)
    folder = Path(cache_dir) if cache_dir is not None else shared_dir(res)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"finetune-task-{key}.pt"
    with open(folder / f".finetune-task-{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = None
            if path.is_file():
                try:
                    data = load_torch(path)
                except Exception:  # a corrupt or foreign file: recompute and replace it
                    data = None
            if data is None or data.get("cache_key") != key:
                data = {**prepare_task(cfg, res), "cache_key": key}
                save_torch(data, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    data["model_dir"] = os.path.abspath(res["smollm2"])
    return data


# ----------------------------------------------------------------------------------------------- model
def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as transformers' apply_rotary_pos_emb: x cos + rotate_half(x) sin, (B, H, T, d)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos[:, None] + rot * sin[:, None]


def layer_forward(layer: nn.Module, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, config,
                  last_only: bool = False) -> torch.Tensor:
    """One Hugging Face Llama decoder layer on h (B, T, D); with last_only, only the last position's output
    (B, 1, D) is computed (keys/values still for every position; the last query sees every key)."""
    attn = layer.self_attn
    b, t, _ = h.shape
    hq, hkv = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // hq
    x = layer.input_layernorm(h)
    k = _rope(attn.k_proj(x).view(b, t, hkv, d).transpose(1, 2), cos, sin)
    v = attn.v_proj(x).view(b, t, hkv, d).transpose(1, 2)
    if last_only:
        x, h, cos, sin = x[:, -1:], h[:, -1:], cos[:, -1:], sin[:, -1:]
    tq = x.shape[1]
    q = _rope(attn.q_proj(x).view(b, tq, hq, d).transpose(1, 2), cos, sin)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=not last_only, enable_gqa=hq != hkv)
    h = h + attn.o_proj(out.transpose(1, 2).reshape(b, tq, hq * d))
    return h + layer.mlp(layer.post_attention_layernorm(h))


class TopClassifier(nn.Module):
    """The top k decoder layers + final norm + linear head on the last token, fed cached activations."""

    def __init__(self, data: dict, n_classes: int):
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

        cfg = LlamaConfig(**data["lm_config"])
        self.config = cfg
        k = len({key.split(".")[0] for key in data["top_state"]})
        first = int(data["first_top_layer"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, layer_idx=first + i) for i in range(k)])
        self.layers.load_state_dict(data["top_state"])
        self.norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.norm.load_state_dict(data["norm_state"])
        self.rotary = LlamaRotaryEmbedding(cfg)
        self.head = nn.Linear(cfg.hidden_size, n_classes)

    def features(self, h: torch.Tensor) -> torch.Tensor:
        """The head's input: the final-norm hidden state of the last token (B, D)."""
        h = h.float()
        pos = torch.arange(h.shape[1]).unsqueeze(0)
        cos, sin = self.rotary(h, pos)
        for i, layer in enumerate(self.layers):
            h = layer_forward(layer, h, cos, sin, self.config, last_only=i == len(self.layers) - 1)
        return self.norm(h[:, -1])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(h))


def build_model(cfg: TaskConfig, data: dict, method: str, seed: int) -> TopClassifier:
    """The classifier with `method` applied to the top layers; requires_grad marks what trains.
    Head and adapter initialisations are drawn from `seed`."""
    check(method in METHODS, f"method must be one of {METHODS}, got {method!r}")
    torch.manual_seed(seed)
    model = TopClassifier(data, len(data["classes"]))
    for p in model.parameters():
        p.requires_grad_(method == "full")
    model.rotary.requires_grad_(False)
    if method in ("lora", "ether", "ether_plus", "oft"):
        kwargs = {"lora": {"r": cfg.lora_r, "alpha": cfg.lora_alpha}}.get(method, {"nb": cfg.nb})
        add_adapters(model.layers, cfg.targets, lambda lin: make_adapter(method, lin, **kwargs))
    model.head.requires_grad_(True)
    return model


def adapter_param_count(model: nn.Module) -> int:
    """Parameters the adapters add (the papers' trainable-parameter count; OFT counts its skew part)."""
    return sum(n_effective(a) for a in adapters_of(model).values())


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


# ------------------------------------------------------------------------------------------- training
def split_of(data: dict, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    mask = data["split"] == s
    return data["hidden"][mask], data["labels"][mask]


@torch.no_grad()
def evaluate_split(model: nn.Module, data: dict, s: int, batch: int = 256) -> dict[str, float]:
    """Mean cross-entropy and accuracy on split s (1 val, 2 test)."""
    model.eval()
    h, y = split_of(data, s)
    logits = torch.cat([model(h[i : i + batch]) for i in range(0, h.shape[0], batch)])
    return {"loss": float(F.cross_entropy(logits, y)), "acc": float((logits.argmax(-1) == y).float().mean())}


@torch.no_grad()
def _frozen_features(model: TopClassifier, h: torch.Tensor, batch: int = 256) -> torch.Tensor:
    model.eval()
    return torch.cat([model.features(h[i : i + batch]) for i in range(0, h.shape[0], batch)])


def head_features(data: dict, model: TopClassifier | None = None, splits: tuple = (0, 1)) -> tuple[torch.Tensor, ...]:
    """The last-token features of the frozen top layers (the same for every seed and head) on `splits` (default
    train, val): from the data artifact when prepare_task stored them, else computed here."""
    if "head_features" in data:
        return tuple(data["head_features"][data["split"] == s] for s in splits)
    model = model if model is not None else TopClassifier(data, len(data["classes"]))
    return tuple(_frozen_features(model, split_of(data, s)[0]) for s in splits)


@torch.no_grad()
def _evaluate_features(head: nn.Module, feats: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    logits = head(feats.to(head.weight.device)).cpu()
    return {"loss": float(F.cross_entropy(logits, y)), "acc": float((logits.argmax(-1) == y).float().mean())}


ParamGroups = Callable[[nn.Module, float], list[dict]]


def equal_groups(model: nn.Module, lr: float, weight_decay: float = 0.0) -> list[dict]:
    """One learning rate for every trainable parameter (decay on matrices only)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "lr": lr, "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "lr": lr, "weight_decay": 0.0}]


def finetune(cfg: TaskConfig, data: dict, method: str, lr: float, seed: int, log=None,
             groups: ParamGroups | None = None, features: tuple | None = None) -> dict:
    """Fine-tune `method` with AdamW (cosine schedule, linear warm-up) for cfg.steps on the train split.

    `groups(model, lr)` returns the optimizer param groups (default: one lr); every group's lr follows
    the same schedule as a multiple of its initial lr. Returns the model dict: the trained parameters, the
    validation learning curve, parameter counts. `features` ("head" only): the (train, val) frozen features from
    head_features, when the caller computed them once for several runs."""
    model = build_model(cfg, data, method, seed)
    param_groups = (groups or (lambda m, r: equal_groups(m, r, cfg.weight_decay)))(model, lr)
    param_groups = [g for g in param_groups if g["params"]]
    opt = torch.optim.AdamW(param_groups, lr=lr)
    base_lrs = [g["lr"] for g in opt.param_groups]
    h, y = split_of(data, 0)
    head_only = method == "head"
    if head_only:
        # only the head trains, so its input (the frozen top layers' last-token features) is the same at every
        # step: computed once here (the same numbers the full forward gives; tests check the two paths agree)
        h, val_feats = features if features is not None else head_features(data, model)
    gen = torch.Generator().manual_seed(10_000 + seed)
    order: list[int] = []
    curve: dict[str, list] = {"step": [], "val_loss": [], "val_acc": []}

    def batch_fn(step: int):
        # per-group schedule: train_loop's lr_fn would write ONE lr into every group, which would erase
        # LoRA+'s ratio, so each group is scaled here (called once per step, before the forward)
        factor = cosine_lr(step, cfg.steps, 1.0, warmup=cfg.warmup)
        for g, base in zip(opt.param_groups, base_lrs):
            g["lr"] = base * factor
        while len(order) < cfg.batch_size:  # epochs of random permutations
            order.extend(torch.randperm(h.shape[0], generator=gen).tolist())
        idx = torch.tensor([order.pop(0) for _ in range(cfg.batch_size)])
        return h[idx], y[idx]

    def loss_fn(batch):
        xb, yb = batch
        return F.cross_entropy(model.head(xb) if head_only else model(xb), yb)

    def eval_fn():
        m = _evaluate_features(model.head, val_feats, split_of(data, 1)[1]) if head_only else evaluate_split(model, data, 1)
        curve["step"].append(len(curve["step"]) * cfg.eval_every + cfg.eval_every)
        curve["val_loss"].append(m["loss"])
        curve["val_acc"].append(m["acc"])
        return m

    params = [p for g in param_groups for p in g["params"]]
    res = train_loop(params, batch_fn, loss_fn, opt, cfg.steps, log=log, log_every=cfg.log_every,
                     eval_fn=eval_fn, eval_every=cfg.eval_every, modules=[model])
    curve["step"][-1] = cfg.steps  # the final evaluation (train_loop also evaluates at the last step)
    return {
        "method": method, "lr": float(lr), "seed": int(seed), "state": trainable_state(model),
        "curve": curve, "final_train_loss": float(res.final_loss),
        "adapter_params": adapter_param_count(model),
        "trainable_params": int(sum(p.numel() for p in params)),
        "merged": False,
    }


def finetune_grid(cfg: TaskConfig, data: dict, method: str, lrs, seed: int, log=None,
                  groups: ParamGroups | None = None) -> dict:
    """Equal tuning inside one job (paperflow.tuning.tune): `finetune` at every lr of `lrs` (same seed, so the
    same initialisation and batch order at every lr), keeping the run with the best final VALIDATION accuracy
    (ties to the smaller lr). Returns that run's model dict plus "tuning" (tuned_lr, tuned_lr_index, grid_edge,
    val_score@<i>) and "grid" (per lr: lr, trained state, validation curve), so evaluate can report every lr's
    test numbers (grid_metrics). Per-step logs of the i-th lr carry the prefix "lr<i>/"."""
    from .tuning import tune

    runs: list[dict] = []
    features = head_features(data) if method == "head" else None  # once for the whole grid

    def fit(lr: float) -> tuple[dict, float]:
        i = len(runs)
        sub = None if log is None else (lambda step, **m: log(step, **{f"lr{i}/{k}": v for k, v in m.items()}))
        model = finetune(cfg, data, method, lr, seed, sub, groups, features=features)
        runs.append(model)
        return model, model["curve"]["val_acc"][-1]  # the final evaluation (step = cfg.steps)

    best, info = tune(tuple(float(x) for x in lrs), fit, higher=True, name="lr")
    grid = [{"lr": r["lr"], "state": r["state"], "curve": r["curve"]} for r in runs]
    return {**best, "tuning": info, "grid": grid}


@torch.no_grad()
def grid_metrics(cfg: TaskConfig, data: dict, model: dict) -> dict[str, float]:
    """Every grid lr's final test/validation numbers (acc@lr<i>, loss@lr<i>, val_acc@lr<i>), the robustness
    summaries over the grid (acc_worst = min test accuracy, acc_spread = max - min) and the tuning record
    (tuned_lr, tuned_lr_index, grid_edge); {} for a model without a grid (a merged or pruned one).
    The validation numbers are the run's final curve point (the same model, evaluated at step = cfg.steps), so only
    the test split is evaluated here; for "head" runs on the frozen features, computed once."""
    if "grid" not in model:
        return {}
    out = {k: float(v) for k, v in model["tuning"].items()}
    accs = []
    feats = None
    if model["method"] == "head":
        net = load_model(cfg, data, {"method": "head", "state": model["grid"][0]["state"]})
        (feats,) = head_features(data, net, splits=(2,))
    for i, run in enumerate(model["grid"]):
        if feats is not None:
            net.load_state_dict(run["state"], strict=False)
            test = _evaluate_features(net.head, feats, split_of(data, 2)[1])
        else:
            test = evaluate_split(load_model(cfg, data, {"method": model["method"], "state": run["state"]}), data, 2)
        out.update({f"acc@lr{i}": test["acc"], f"loss@lr{i}": test["loss"], f"val_acc@lr{i}": float(run["curve"]["val_acc"][-1])})
        accs.append(test["acc"])
    out.update(acc_worst=min(accs), acc_spread=max(accs) - min(accs), grid_size=float(len(accs)))
    return out


def load_model(cfg: TaskConfig, data: dict, model: dict) -> TopClassifier:
    """Rebuild a trained (or merged) classifier from its model dict."""
    method = "full" if model.get("merged") else model["method"]
    net = build_model(cfg, data, method, 0)
    missing = net.load_state_dict(model["state"], strict=False)
    check(not missing.unexpected_keys, f"model state has unknown keys {missing.unexpected_keys[:3]}")
    return net.eval()


@torch.no_grad()
def merge(cfg: TaskConfig, data: dict, model: dict) -> dict:
    """The compress stage: every adapter folded into its linear (W' = W + s B A, W H, H_out W H_in, W Q);
    the result is a plain model (all weights of the top layers + norm + head) and the max |logit| difference
    between merged and unmerged on the validation passages."""
    net = load_model(cfg, data, model)
    h, _ = split_of(data, 1)
    before = net(h)
    n = merge_adapters(net)
    after = net(h)
    state = {k: v.detach().clone() for k, v in net.state_dict().items() if not k.startswith("rotary")}
    # the lr grid's states and record stay with the dense model (grid_metrics); the merged model is the chosen run
    return {**{k: v for k, v in model.items() if k not in ("state", "grid", "tuning")}, "state": state, "merged": True,
            "n_merged": int(n), "merge_err": float((before - after).abs().max())}


ADAPTER_METHODS = ("lora", "ether", "ether_plus", "oft")


@torch.no_grad()
def adapter_stats(cfg: TaskConfig, data: dict, model: dict) -> dict[str, float]:
    """What training did to the adapted linears, measured on a trained (unmerged) adapter run:
    weight_shift = mean over adapted linears of ||W_eff - W||_F / ||W||_F (W_eff the merged weight, W the frozen
    pretrained one); for LoRA also lora_b_norm = mean ||B||_F (B = 0 at init), lora_a_shift = mean ||A - A_0||_F
    (A_0 rebuilt from the run's seed, the same initialisation as training) and lora_ba_ratio = lora_b_norm /
    lora_a_shift (how far B moved relative to A: LoRA+'s lr_B = ratio x lr_A acts on exactly this).
    {} for a merged/pruned model, "head" or "full"."""
    if model.get("merged") or model.get("method") not in ADAPTER_METHODS or "seed" not in model:
        return {}
    net = load_model(cfg, data, model)
    trained = adapters_of(net)
    shift = [float((a.merged_weight() - a.base.weight).norm() / a.base.weight.norm()) for a in trained.values()]
    out = {"weight_shift": float(np.mean(shift))}
    if model["method"] == "lora":
        init = adapters_of(build_model(cfg, data, "lora", int(model["seed"])))
        b = [float(a.lora_B.norm()) for a in trained.values()]
        da = [float((a.lora_A - init[name].lora_A).norm()) for name, a in trained.items()]
        out.update(lora_b_norm=float(np.mean(b)), lora_a_shift=float(np.mean(da)),
                   lora_ba_ratio=float(np.mean(b)) / max(float(np.mean(da)), 1e-12))
    return out


def metrics(cfg: TaskConfig, model: dict, data: dict) -> dict[str, float]:
    """Test/val accuracy and loss of a model dict, its parameter counts, lr and the learning curve (and, for a
    finetune_grid model, grid_metrics)."""
    grid = grid_metrics(cfg, data, model)
    if grid:  # the chosen run is grid run tuned_lr_index: its test numbers are there, its validation ones its curve's end
        i = int(grid["tuned_lr_index"])
        test = {"acc": grid[f"acc@lr{i}"], "loss": grid[f"loss@lr{i}"]}
        val = {"acc": float(model["curve"]["val_acc"][-1]), "loss": float(model["curve"]["val_loss"][-1])}
    else:
        net = load_model(cfg, data, model)
        test, val = evaluate_split(net, data, 2), evaluate_split(net, data, 1)
    out = {"acc": test["acc"], "loss": test["loss"], "val_acc": val["acc"], "val_loss": val["loss"],
           "params": float(model["adapter_params"]), "trainable_params": float(model["trainable_params"]),
           "lr": float(model["lr"]), "final_train_loss": float(model["final_train_loss"])}
    for s, l in zip(model["curve"]["step"], model["curve"]["val_loss"]):
        out[f"val_loss@{s}"] = float(l)
    if model.get("merged") and "merge_err" in model:
        out["merge_err"] = float(model["merge_err"])
    if model.get("pruned"):
        out["sparsity"] = float(model["sparsity"])
    out.update(grid)
    out.update(adapter_stats(cfg, data, model))
    return out


def compress_merge(cfg: TaskConfig, model: dict, data: dict, variant: str, seed: int) -> dict:
    """The PEFT papers' compress stage: one level, "merged" (see merge)."""
    return {"merged": merge(cfg, data, model)}


def level_names(cfg: TaskConfig) -> list[str]:
    """The compress levels of cfg.sparsities as they appear in metric columns ("0.50", ...)."""
    from .compress.magnitude import level_name

    return [level_name(s) for s in cfg.sparsities]


def prune_merged(cfg: TaskConfig, merged: dict) -> dict[str, dict]:
    """Magnitude pruning of a merged model's adapted linears (the `targets` weights of the top layers, each
    matrix pruned to the level on its own, scope "layer"), one model dict per level of cfg.sparsities. The
    frozen bottom layers stay dense: their activations are the cached inputs."""
    from .compress.magnitude import magnitude_levels, prunable_weights, sparsity_of

    include = tuple(f"{t}.weight" for t in cfg.targets)
    levels = magnitude_levels(merged["state"], cfg.sparsities, include=include, scope="layer")
    out = {}
    for level, state in levels.items():
        pruned = {k: v for k, v in merged.items() if k not in ("state", "merge_err")}
        out[level] = {**pruned, "state": state, "pruned": True,
                      "sparsity": sparsity_of(prunable_weights(state, include))}
    return out


def compress_merge_prune(cfg: TaskConfig, model: dict, data: dict, variant: str, seed: int) -> dict:
    """The PEFT papers' compress stage: "merged" (every adapter folded into its weight; equal to the dense
    model by construction, merge_err measures it) and, per level of cfg.sparsities ("0.50", ...), the merged
    model with its adapted linears magnitude-pruned (prune_merged): what a merged adapter survives."""
    if model.get("method") == "head":  # head-only: nothing adapted, nothing to merge or prune
        return {}
    merged = merge(cfg, data, model)
    return {"merged": merged, **prune_merged(cfg, merged)}


# ------------------------------------------------------------------------------- lr-grid variants
def lr_grid_variants(methods: tuple[str, ...], n_lrs: int) -> tuple[str, ...]:
    """Variant names "<method>_lr<i>": each method at the i-th learning rate of the paper's grid."""
    return tuple(f"{m}_lr{i}" for m in methods for i in range(n_lrs))


def parse_lr_variant(variant: str, variants: tuple[str, ...]) -> tuple[str, int]:
    """"lora_lr2" -> ("lora", 2); a name outside `variants` is a ConfigError naming the valid ones."""
    check(variant in variants, f"variant must be one of {variants}, got {variant!r}")
    method, _, i = variant.rpartition("_lr")
    return method, int(i)


def method_of(variant: str, variants: tuple[str, ...]) -> str | None:
    """The method of an lr-grid variant, None for derived views ("lora|best") and other rows."""
    return variant.rpartition("_lr")[0] if variant in variants else None


def steps_to_target(steps: list[int], losses: list[float], target: float) -> float:
    """First evaluated step whose validation loss is <= target (inf if never)."""
    for s, l in zip(steps, losses):
        if l <= target + 1e-12:
            return float(s)
    return math.inf


def curve_of(row: dict, stage: str = "dense", prefix: str | None = None) -> tuple[list[int], list[float]]:
    """The validation curve (steps, losses) stored in a metrics row as <stage>/val_loss@<step> (or under another
    column prefix, e.g. "dense/same_lr_val_loss@")."""
    prefix = prefix or f"{stage}/val_loss@"
    pts = sorted((int(k[len(prefix):]), float(v)) for k, v in row.items() if k.startswith(prefix) and v is not None)
    return [s for s, _ in pts], [l for _, l in pts]
