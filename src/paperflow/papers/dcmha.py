"""DCMHA: "Improving Transformers with Dynamically Composable Multi-Head Attention" (DCFormer),
Xiao, Meng, Li, Yuan, ICML 2024. Official code: https://github.com/Caiyun-AI/DCFormer
(pytorch/dcformer/modeling_dcformer.py: DynamicWeightProjection, _cross_head_proj; the JAX trainer
jax/MaxText/layers/dc_attentions.py for the initialisation).

What is implemented. DCMHA replaces each head's independent attention by a Compose() of the
(B, H, T, S) score tensor across heads, once on the logits before the softmax ("pre") and once on the
probabilities after it ("post"), each with its own parameters. For a query position t and key
position s, the H-vector of heads a = A[:, t, s] becomes (paper Sec. 3, Fig. 2; the equation labels
(C1)-(C4) are ours, the paper's own numbering could not be checked offline):

  (C1)  Compose(a)_{ts} = a (I + W^s)                                  static cross-head matrix
                          + sum_{r<R} (a . q1_{t,r}) q2_{t,r}  + a * qg_t   query-wise (from x_t)
                          + sum_{r<R} (a . k1_{s,r}) k2_{s,r}  + a * kg_s   key-wise   (from x_s)
  (C2)  [w1, w2] = chunk(GELU(x W_1) W_2),  W_1: D -> 4N hidden, W_2: 4N -> 2 R N (per composition)
  (C3)  w1 <- RMSNorm(w1) over the head axis (no scale), w2 as is
  (C4)  qg, kg = tanh(x W_g)

The low-rank and diagonal terms are applied as one H x H map per query position (I + W^s + q1^T q2 +
diag(qg)) and one per key position (k1^T k2 + diag(kg)), the merged form of the official
_generate_fast; it equals the term-by-term form of _cross_head_proj (a unit test checks it entry by
entry) and is faster on CPU. x is the block's normed input (the same hidden state feeds the queries
and the keys: query-wise weights from x_t, key-wise weights from x_s), R = 2 the
rank of the dynamic projections, N = H heads. Four compositions (pre-query, pre-key, post-query,
post-key) each get their own 4N hidden units and gates, as in the official DynamicWeightProjection
(dynamic_squeeze_ratio = N/2 -> R = 2, dynamic_w_hidden_dim = 4N). Initialisation follows the
authors' JAX trainer: W_1 ~ N(0, 2/(D + 4N)), W_2 ~ N(0, (sqrt(1/4N) * 2/(N + R) * 0.01)^2),
W_g ~ N(0, (sqrt(2/(D + N)) * 0.005)^2) and the static W^s ~ N(0, (0.1/sqrt(N))^2) added to the
identity, so a fresh DCMHA is almost plain MHA. The causal mask is applied after the pre-compose
and the probabilities are re-masked after the post-compose, as in the official code (this is the
order of the hooks of paperflow.nn.transformer.MultiHeadAttention, nothing changed there).

Variants: "mha" (plain MHA, its MLP widened so that it has the same parameter count as DCMHA
within one MLP unit per layer), "dcmha", "mha_2x" (plain MHA with 2x the layers, i.e. ~2x compute).
Parameter counts and forward FLOPs per window (torch's FlopCounterMode) are reported as facts.

Equal tuning (paperflow.tuning): the three variants get the same lr grid (cfg.lr_grid). prepare() trains
every (variant, lr) once with a tuning seed that is not an evaluation seed, for cfg.tune_steps steps
(the same cosine schedule compressed to that horizon: a cheaper proxy of the full run, the same for
every variant), scores each on a selection split (the last tune_fraction of the training text, never
trained on), and keeps the lr with the lowest selection loss (ties: the smaller lr). The reported
val_loss is on the untouched validation split (the last val_fraction of the text).

Claims (contract v3, issue 25). Headline: DCMHA's val_loss below the param-matched MHA's; refuted when it is
above. Mechanism gate, measured on the runs (evaluate, composition_stats): the dynamic part of the composition maps
(C1) differs across inputs, dyn_spread > 0.01 (RMS deviation of the per-position maps from their mean over the
validation windows; 3.0e-3 at the authors' near-identity init, also logged as init/dyn_spread): a DCMHA whose
dynamic weights stayed at init would be plain MHA with a static head mix, and its result would not speak for
dynamic composition. Grid-edge gates on both variants' lr are directional (claims.gate_blocks: DCMHA on its edge
blocks only `not reproduced`, MHA only `reproduced`).

Substitutions for laptop scale: character-level LM on the Shakespeare plays resource (contiguous
90/10 train/val split) instead of the Pile; a 4-layer d=128 8-head pre-norm transformer with learned
positions and GELU MLP (the shared nn.transformer), context 64, instead of the authors' 405M-6.9B
RoPE/SwiGLU models with context 2048; a few hundred AdamW steps (betas 0.9/0.95, wd 0.1, clip 1,
cosine schedule as the authors); fp32 throughout (the authors cast the probabilities to bf16
before the post-compose: a precision choice, not math). The authors' released 405M config sets
static_proj False (the static W^s costs memory traffic); the paper's Compose has it, so it is on here
(`static_proj` switches it). Query chunking and local/global window alternation of DCFormer++ are
not used (full causal attention in every layer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.int8 import linear_weight_names, quantize_state
from ..compress.magnitude import apply_masks, layer_magnitude_mask, sparsity_of
from ..data.chars import encode_text, eval_starts, mean_loss, window_batch  # noqa: F401 (part of this API)
from ..loop import adamw, cosine_lr, train_loop
from ..nn.transformer import MultiHeadAttention, TransformerConfig, TransformerLM, count_params
from ..measure import count_flops
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("mha", "dcmha", "mha_2x")
EMBEDDINGS = ("tok.", "pos.", "head.")  # tied embedding / output head and positions: not compressed


@dataclass(frozen=True)
class Config:
    # model (default profile: 2-core CPU)
    d_model: int = 128  # width D
    n_layer: int = 4  # layers of "mha" and "dcmha"; "mha_2x" has big_depth_factor * n_layer
    n_head: int = 8  # heads N (DCMHA composes across them)
    block_size: int = 64  # context length T
    compose_rank: int = 2  # R, rank of the query-/key-wise dynamic projections (paper: 2)
    static_proj: bool = True  # static cross-head matrix W^s in Compose (C1)
    big_depth_factor: int = 2  # "mha_2x" = plain MHA with this many times the layers
    match_params: bool = True  # widen the MLP of "mha" to DCMHA's parameter count
    # optimisation (equal steps for all variants)
    steps: int = 320
    batch_size: int = 32
    lr_grid: tuple = (1e-3, 2e-3, 4e-3)  # peak lr; every variant picks one on the selection split
    tune_steps: int = 80  # steps of each tuning run (cosine over this horizon)
    tune_fraction: float = 0.05  # last fraction of the training text held out for the lr selection
    tune_seed: int = 1000  # seed of the tuning runs (not an evaluation seed)
    warmup: int = 32
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # evaluation
    val_fraction: float = 0.1  # last fraction of the text is the validation split
    eval_every: int = 100  # periodic val/loss during training
    eval_windows_train: int = 16  # windows of the periodic val/loss
    eval_windows: int = 192  # fixed, evenly spaced val windows of evaluate() (x block_size tokens)
    eval_batch: int = 32
    # compression and claims
    sparsity: float = 0.5  # magnitude pruning level of the Linear weights (level "0.50")
    close_margin: float = 0.01  # "dcmha close to mha_2x": within 1% of its val loss

    def __post_init__(self) -> None:
        check(self.d_model > 0 and self.d_model % self.n_head == 0, f"d_model must be a positive multiple of n_head, got {self.d_model}/{self.n_head}")
        check(self.n_head >= 2, f"n_head must be >= 2 (DCMHA composes heads), got {self.n_head}")
        check(self.n_layer >= 1 and self.big_depth_factor >= 1, "n_layer and big_depth_factor must be >= 1")
        check(self.block_size >= 2, f"block_size must be >= 2, got {self.block_size}")
        check(1 <= self.compose_rank <= self.n_head, f"compose_rank must be in [1, n_head], got {self.compose_rank}")
        check(self.steps >= 1 and self.batch_size >= 1, "steps and batch_size must be >= 1")
        object.__setattr__(self, "lr_grid", tuple(float(x) for x in self.lr_grid))
        check(len(self.lr_grid) >= 1 and min(self.lr_grid) > 0 and list(self.lr_grid) == sorted(self.lr_grid),
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(0 <= self.min_lr_ratio <= 1, f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        check(1 <= self.tune_steps and 0 < self.tune_fraction < 1, f"tune_steps >= 1 and tune_fraction in (0, 1), got {self.tune_steps}, {self.tune_fraction}")
        check(0 <= self.warmup < self.steps, f"warmup must be in [0, steps), got {self.warmup}")
        check(self.weight_decay >= 0 and self.grad_clip >= 0, "weight_decay and grad_clip must be >= 0")
        check(0 < self.val_fraction < 1, f"val_fraction must be in (0, 1), got {self.val_fraction}")
        check(self.eval_every >= 0, f"eval_every must be >= 0, got {self.eval_every}")
        check(min(self.eval_windows, self.eval_windows_train, self.eval_batch) >= 1, "eval_windows, eval_windows_train, eval_batch must be >= 1")
        check(0 <= self.sparsity < 1, f"sparsity must be in [0, 1), got {self.sparsity}")
        check(self.close_margin >= 0, f"close_margin must be >= 0, got {self.close_margin}")


# ------------------------------------------------------------------------------------- DCMHA
def rms_norm_noscale(x: torch.Tensor, dim: int = -1, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim, keepdim=True) + eps)


def compose_matrices(
    sw: torch.Tensor | None,
    qw1: torch.Tensor, qw2: torch.Tensor, kw1: torch.Tensor, kw2: torch.Tensor,
    qdd: torch.Tensor, kdd: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (C1) as one H x H map per query position and one per key position (low rank + diagonal):
    Wq_t = I + W^s + sum_r q1_{t,r}^T q2_{t,r} + diag(qg_t),  Wk_s = sum_r k1_{s,r}^T k2_{s,r} + diag(kg_s).
    qw*: (B, T, R, H), kw*: (B, S, R, H), qdd: (B, T, H), kdd: (B, S, H) -> (B, T, H, H), (B, S, H, H)."""
    H = qdd.shape[-1]
    static = torch.eye(H, dtype=qdd.dtype, device=qdd.device)
    if sw is not None:
        static = static + sw
    wq = static + torch.einsum("btrm,btrn->btmn", qw1, qw2) + torch.diag_embed(qdd)
    wk = torch.einsum("bsrm,bsrn->bsmn", kw1, kw2) + torch.diag_embed(kdd)
    return wq, wk


def compose(a: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor) -> torch.Tensor:
    """Eq. (C1) on a (B, H, T, S) tensor: out[:, :, t, s] = a[:, :, t, s] @ (Wq_t + Wk_s).
    Heads mix only at equal (t, s), so a causal mask (applied before or after) is preserved.
    Heads last, so each batched product reads contiguous rows of wq / wk (18% faster forward + backward than
    putting heads first, bit-identical; issue 27, measured at B=32, H=8, T=64 on one thread)."""
    out_q = a.permute(0, 2, 3, 1) @ wq  # (B, T, S, M) @ (B, T, M, N) -> (B, T, S, N)
    out_k = a.permute(0, 3, 2, 1) @ wk  # (B, S, T, M) @ (B, S, M, N) -> (B, S, T, N)
    return (out_q + out_k.transpose(1, 2)).permute(0, 3, 1, 2)  # (B, H, T, S)


class DCMHA(MultiHeadAttention):
    """Dynamically composable MHA: plain MHA whose compose hooks apply Eq. (C1) before and after the softmax."""

    PRE, POST = 0, 1

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, rank: int = 2, static_proj: bool = True, **_: object) -> None:
        super().__init__(d_model, n_heads, dropout)
        N, R = n_heads, rank
        self.rank, self.hidden = R, 2 * R * N  # dynamic_w_hidden_dim = 4N for R = 2
        # 4 compositions c = (pre-query, pre-key, post-query, post-key), each with its own weights
        self.dw1 = nn.Linear(d_model, 4 * self.hidden, bias=False)  # W_1 of (C2), all c stacked
        self.qkw = nn.Parameter(torch.empty(4, self.hidden, 2 * R, N))  # W_2 of (C2): (c, K, 2R, N)
        self.dd = nn.Linear(d_model, 4 * N, bias=False)  # W_g of (C4), all c stacked
        self.sw = nn.Parameter(torch.empty(2, N, N)) if static_proj else None  # W^s, pre and post
        self.reset_dynamic_parameters()

    @torch.no_grad()
    def reset_dynamic_parameters(self) -> None:
        """The authors' initialisation (jax/MaxText/layers/dc_attentions.py)."""
        D, N, K, R = self.dw1.in_features, self.n_heads, self.hidden, self.rank
        nn.init.normal_(self.dw1.weight, std=math.sqrt(2.0 / (D + K)))
        nn.init.normal_(self.qkw, std=math.sqrt(1.0 / K) * 2.0 / (N + R) * 0.01)
        nn.init.normal_(self.dd.weight, std=math.sqrt(2.0 / (D + N)) * 0.005)
        if self.sw is not None:
            nn.init.normal_(self.sw, std=math.sqrt(2.0 / (N + N)) * 0.1)

    def dynamic_weights(self, x: torch.Tensor, which: int) -> tuple[torch.Tensor, ...]:
        """(qw1, qw2, kw1, kw2, qdd, kdd) of the pre (which=0) or post (1) composition from x (B, T, D)."""
        B, T, _ = x.shape
        N, K, R = self.n_heads, self.hidden, self.rank
        rows = slice(2 * which * K, 2 * (which + 1) * K)  # the query and key blocks of this composition
        h = F.gelu(F.linear(x, self.dw1.weight[rows])).view(B, T, 2, K)  # (C2): (B, T, {q,k}, K)
        w = torch.einsum("btck,ckjn->btcjn", h, self.qkw[2 * which : 2 * which + 2])  # (B, T, 2, 2R, N)
        w1, w2 = rms_norm_noscale(w[..., :R, :]), w[..., R:, :]  # (C3): (B, T, 2, R, N) each
        g = torch.tanh(F.linear(x, self.dd.weight[2 * which * N : 2 * (which + 1) * N])).view(B, T, 2, N)  # (C4)
        return w1[:, :, 0], w2[:, :, 0], w1[:, :, 1], w2[:, :, 1], g[:, :, 0], g[:, :, 1]

    def _compose(self, a: torch.Tensor, x: torch.Tensor, which: int) -> torch.Tensor:
        sw = self.sw[which] if self.sw is not None else None
        return compose(a, *compose_matrices(sw, *self.dynamic_weights(x, which)))

    def compose_logits(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._compose(logits, x, self.PRE)  # (B, H, T, S), before the causal mask

    def compose_probs(self, probs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._compose(probs, x, self.POST)  # (B, H, T, S), re-masked by the base class


@torch.no_grad()
def composition_stats(net: TransformerLM, idx: torch.Tensor) -> dict[str, float]:
    """The mechanism, measured (contract v3): on windows idx (B, T), the DYNAMIC part of every DCMHA layer's
    composition maps, D_q(t) = Wq_t - (I + W^s) and D_k(s) = Wk_s of (C1), for the pre and post compositions.
      dyn_scale:  RMS of the entries of D (0 = plain MHA with a static head mix; ~3e-3 at the authors' init);
      dyn_spread: RMS over entries of the deviation of D from its mean over all positions of all windows, i.e.
                  how much the composition DIFFERS ACROSS INPUTS (a constant D would be a static mix);
    averaged over layers, pre/post and query/key. {} for a model without DCMHA layers."""
    layers = [b.attn for b in net.blocks if isinstance(b.attn, DCMHA)]
    if not layers:
        return {}
    seen: dict[int, torch.Tensor] = {}
    hooks = [a.register_forward_pre_hook(lambda mod, args, i=i: seen.__setitem__(i, args[0])) for i, a in enumerate(layers)]
    try:
        net(idx)
    finally:
        for h in hooks:
            h.remove()
    scale, spread = [], []
    for i, attn in enumerate(layers):
        x = seen[i]
        H = attn.n_heads
        for which in (DCMHA.PRE, DCMHA.POST):
            sw = attn.sw[which] if attn.sw is not None else None
            wq, wk = compose_matrices(sw, *attn.dynamic_weights(x, which))
            static = torch.eye(H) + (sw if sw is not None else 0.0)
            for dyn in (wq - static, wk):  # (B, T, H, H)
                flat = dyn.reshape(-1, H * H)
                scale.append(flat.pow(2).mean().sqrt())
                spread.append((flat - flat.mean(0, keepdim=True)).pow(2).mean().sqrt())
    return {"dyn_scale": float(torch.stack(scale).mean()), "dyn_spread": float(torch.stack(spread).mean())}


# ------------------------------------------------------------------------------------- models
def _mlp(d_model: int, hidden: int) -> nn.Sequential:
    """The shared Block's MLP layout (so that names like mlp.2.weight are unchanged)."""
    return nn.Sequential(nn.Linear(d_model, hidden, bias=False), nn.GELU(), nn.Linear(hidden, d_model, bias=False), nn.Dropout(0.0))


def make_arch(cfg: Config, variant: str, vocab_size: int) -> dict:
    """Plain description of a variant's model (stored with its weights)."""
    check(variant in VARIANTS, f"variant must be one of {VARIANTS}, got {variant!r}")
    arch = dict(variant=variant, vocab_size=vocab_size, block_size=cfg.block_size, d_model=cfg.d_model,
                n_head=cfg.n_head, n_layer=cfg.n_layer, mlp_hidden=4 * cfg.d_model, attention="mha",
                rank=cfg.compose_rank, static_proj=cfg.static_proj)
    if variant == "dcmha":
        arch["attention"] = "dcmha"
    elif variant == "mha_2x":
        arch["n_layer"] = cfg.n_layer * cfg.big_depth_factor
    elif cfg.match_params:  # "mha": spend DCMHA's extra parameters on MLP units
        with torch.device("meta"):  # counts shapes only; draws no random numbers
            extra = count_params(DCMHA(cfg.d_model, cfg.n_head, rank=cfg.compose_rank, static_proj=cfg.static_proj))
            extra -= count_params(MultiHeadAttention(cfg.d_model, cfg.n_head))
        arch["mlp_hidden"] += round(extra / (2 * cfg.d_model))
    return arch


def build_model(arch: dict) -> TransformerLM:
    attention_kwargs = dict(rank=arch["rank"], static_proj=arch["static_proj"]) if arch["attention"] == "dcmha" else {}
    tcfg = TransformerConfig(vocab_size=arch["vocab_size"], block_size=arch["block_size"], n_layer=arch["n_layer"],
                             n_head=arch["n_head"], d_model=arch["d_model"], attention_kwargs=attention_kwargs)
    model = TransformerLM(tcfg, DCMHA if arch["attention"] == "dcmha" else MultiHeadAttention)
    D, L = arch["d_model"], arch["n_layer"]
    for block in model.blocks:
        if arch["mlp_hidden"] != tcfg.mlp_ratio * D:  # widened MLP, initialised like TransformerLM's
            block.mlp = _mlp(D, arch["mlp_hidden"])
            nn.init.normal_(block.mlp[0].weight, std=0.02)
            nn.init.normal_(block.mlp[2].weight, std=0.02 / math.sqrt(2 * L))
        if isinstance(block.attn, DCMHA):  # TransformerLM re-initialised every nn.Linear
            block.attn.reset_dynamic_parameters()
    return model


def load_model(model: dict) -> TransformerLM:
    net = build_model(model["arch"])
    net.load_state_dict(model["state"])
    return net.eval()


# ------------------------------------------------------------------------------------- data
def prepare(cfg: Config, res) -> dict:
    """Char ids split train | tune (lr selection) | val (reported); then every variant's lr (tune_lrs)."""
    with open(res["shakespeare"], encoding="utf-8") as f:
        data = encode_text(f.read(), cfg.val_fraction)
    n_tune = int(len(data["train"]) * cfg.tune_fraction)
    data["train"], data["tune"] = data["train"][:-n_tune].clone(), data["train"][-n_tune:].clone()
    for split in ("val", "tune"):
        check(len(data[split]) > cfg.block_size + 1, f"{split} split ({len(data[split])} chars) is shorter than block_size + 1")
    data["tuning"] = tune_lrs(cfg, data)
    return data


def tune_lrs(cfg: Config, data: dict) -> dict:
    """{variant: {"tuned_lr", "tuned_lr_index", "grid_edge", "val_score@i"}}: each lr of the grid trained
    for tune_steps (seed tune_seed), scored by the mean loss on the tune split (lower is better)."""
    starts = eval_starts(len(data["tune"]), cfg.block_size, cfg.eval_windows)
    out = {}
    for variant in VARIANTS:
        def fit(lr: float, variant: str = variant) -> tuple[None, float]:
            torch.manual_seed(cfg.tune_seed)  # the same initialisation stream for every (variant, lr)
            net = fit_model(cfg, data, variant, cfg.tune_seed, lr, cfg.tune_steps, None)
            return None, mean_loss(net.eval(), data["tune"], starts, cfg.block_size, cfg.eval_batch)

        out[variant] = tune(cfg.lr_grid, fit, higher=False, name="lr")[1]
    return out


# ------------------------------------------------------------------------------------- stages
def fit_model(cfg: Config, data: dict, variant: str, seed: int, lr: float, steps: int, log) -> TransformerLM:
    """Train one variant at peak lr for `steps` steps (cosine schedule over them) on the train split."""
    arch = make_arch(cfg, variant, int(data["vocab_size"]))
    net = build_model(arch)
    net.arch = arch
    train_ids, val_ids, T = data["train"], data["val"], cfg.block_size
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train_ids) - T - 1, (steps, cfg.batch_size), generator=gen)  # (steps, B)
    val_starts = eval_starts(len(val_ids), T, cfg.eval_windows_train)
    opt = adamw(net, lr, cfg.weight_decay, betas=(0.9, 0.95))
    warmup = cfg.warmup * steps // cfg.steps  # the same schedule shape at every horizon
    if log is not None:
        init = composition_stats(net, window_batch(val_ids, val_starts[: cfg.eval_batch], T)[0])
        log(0, **{"model/n_params": float(count_params(net)), **{f"init/{k}": v for k, v in init.items()}})
    train_loop(
        net.parameters(),
        batch_fn=lambda step: window_batch(train_ids, starts[step], T),
        loss_fn=lambda batch: net.loss(*batch),
        optimizer=opt,
        steps=steps,
        log=log,
        lr_fn=lambda step: cosine_lr(step, steps, lr, warmup, cfg.min_lr_ratio),
        clip_norm=cfg.grad_clip or None,
        eval_fn=lambda: {"loss": mean_loss(net, val_ids, val_starts, T, cfg.eval_batch)},
        eval_every=cfg.eval_every if log is not None else 0,
        modules=(net,),
    )
    return net


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """The variant at the lr prepare() chose for it (the tuning record travels with the model)."""
    tuning = {k: float(v) for k, v in data["tuning"][variant].items()}
    net = fit_model(cfg, data, variant, seed, tuning["tuned_lr"], cfg.steps, log)
    return {"state": {k: v.detach().clone() for k, v in net.state_dict().items()}, "arch": net.arch, "tuning": tuning}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Level "int8": per-output-channel int8 of every Linear weight (stored de-quantized);
    level f"{sparsity:.2f}": per-matrix magnitude pruning of the same weights. Embeddings stay fp32."""
    state = model["state"]
    names = linear_weight_names(state, exclude=EMBEDDINGS)
    masks = {n: layer_magnitude_mask(state[n], cfg.sparsity) for n in names}
    return {
        "int8": {"state": quantize_state(state, names), "arch": model["arch"]},
        f"{cfg.sparsity:.2f}": {"state": apply_masks(state, masks), "arch": model["arch"]},
    }


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    net = load_model(model)
    val_ids = data["val"]
    loss = mean_loss(net, val_ids, eval_starts(len(val_ids), cfg.block_size, cfg.eval_windows), cfg.block_size, cfg.eval_batch)
    linear = {n: model["state"][n] for n in linear_weight_names(model["state"], exclude=EMBEDDINGS)}
    with torch.no_grad():  # forward FLOPs of one full window (matmuls and attention; 2 per multiply-add)
        flops = count_flops(net, torch.zeros(1, cfg.block_size, dtype=torch.long))
    metrics = {"val_loss": loss, "val_ppl": math.exp(loss), "n_params": float(count_params(net)),
               "flops": float(flops), "linear_sparsity": sparsity_of(linear)}
    metrics.update({k: v for k, v in model.get("tuning", {}).items() if k in ("tuned_lr", "grid_edge")})
    # the mechanism on the first eval_batch validation windows (DCMHA only; plain MHA has no such maps)
    probe = eval_starts(len(val_ids), cfg.block_size, cfg.eval_windows)[: cfg.eval_batch]
    metrics.update(composition_stats(net, window_batch(val_ids, probe, cfg.block_size)[0]))
    return metrics


DYN_SPREAD_MIN = 0.01  # dyn_spread gate: ~3x the authors' init (3.0e-3 measured), fixed before the default run


def comparisons(cfg: Config) -> list[Comparison]:
    def lr_ok(*variants: str) -> tuple[Gate, ...]:
        return tuple(edge_gate(v) for v in variants)

    dynamic = Gate(f"the mechanism is active: DCMHA's dynamic composition weights differ across inputs (dyn_spread, "
                   f"measured on validation windows after training, above {DYN_SPREAD_MIN:g}; ~3e-3 at the authors' init)",
                   variant="dcmha", metric="dyn_spread", above=DYN_SPREAD_MIN, kind="mechanism")
    bigger_is_better = Gate(f"the {cfg.big_depth_factor}x-depth MHA beats MHA (else 'close to it' is vacuous)",
                            comparison=Comparison("val_loss", "mha_2x", "mha", better="lower"))
    return [
        Comparison("val_loss", "dcmha", "mha", better="lower", role="headline", gates=lr_ok("dcmha", "mha") + (dynamic,),
                   text="DCMHA has lower validation loss than MHA of equal parameter count",
                   refuted_if="DCMHA's validation loss is above the param-matched MHA's (paired 95% interval over seeds "
                              "above 0) while its dynamic composition is active (a DCMHA lr on the grid's edge spares "
                              "this verdict: it blocks only `not reproduced`)"),
        Comparison("val_loss", "dcmha", "mha_2x", better="lower", kind="close", margin=cfg.close_margin, role="secondary",
                   gates=lr_ok("dcmha", "mha_2x") + (bigger_is_better,),
                   text=f"DCMHA is within {cfg.close_margin:.0%} of the {cfg.big_depth_factor}x-depth MHA (~2x compute)"),
        Comparison("val_loss", "mha_2x", "mha", better="lower", role="control", gates=lr_ok("mha_2x", "mha"),
                   text=f"(scale check) the {cfg.big_depth_factor}x-depth MHA beats MHA"),
        Comparison("val_loss", "dcmha", "mha", better="lower", stage="compressed", level="int8", role="control",
                   text="after int8 weight quantization DCMHA still beats MHA"),
        Comparison("n_params", "dcmha", "mha", role="fact", text="parameters: DCMHA vs the param-matched MHA"),
        Comparison("n_params", "mha_2x", "dcmha", role="fact", text=f"parameters: {cfg.big_depth_factor}x-depth MHA vs DCMHA"),
        Comparison("flops", "dcmha", "mha", role="fact", text="forward FLOPs per window: DCMHA vs MHA"),
        Comparison("flops", "mha_2x", "dcmha", role="fact", text=f"forward FLOPs per window: {cfg.big_depth_factor}x-depth MHA vs DCMHA"),
    ]


SPEC = register_paper(
    PaperSpec(
        id="dcmha",
        title="Improving Transformers with Dynamically Composable Multi-Head Attention",
        claim="DCMHA below MHA at equal size; close to the larger MHA",
        Config=Config,
        variants=VARIANTS,
        prepare=prepare,
        train=train,
        compress=compress,
        evaluate=evaluate,
        comparisons=comparisons,
        resources=("shakespeare",),
        data="character-level Shakespeare plays (resources/shakespeare.txt), contiguous 90/10 train/val split",
        substitutions=(
            "char-level Shakespeare instead of the Pile; 4-layer d=128 8-head pre-norm transformer, context 64, learned "
            "positions and GELU MLP instead of 405M-6.9B RoPE/SwiGLU models; a few hundred steps; fp32; full causal "
            "attention (no DCFormer++ local/global windows); MHA baseline param-matched by widening its MLP; each "
            "variant's peak lr picked from the same 3-value grid by short tuning runs (one tuning seed) on a held-out "
            "selection split"
        ),
        compression="int8 per-output-channel weight quantization and 50% per-matrix magnitude pruning of all Linear weights (embeddings kept)",
        fidelity="official-code",
        figure="sparsity",
        weight=1,
    )
)
