"""How Smooth Is Attention?  Castin, Ablin, Peyre, ICML 2024.  Official code:
https://github.com/vcastin/how-smooth-is-attention (adversarial_data/toolbox.py: loc_lipschitz,
compute_bound, adversarial_data; adversarial_data/adversarial.py: the sqrt(n) figures).

What is measured. The local Lipschitz constant of masked multi-head self-attention f: R^{n x d} -> R^{n x d}
at an input X is the spectral norm of its Jacobian, L(X) = ||J_f(X)||_2 = sqrt(lambda_max(J^T J)), found by
power iteration on J^T J with one forward-mode (jvp) and one reverse-mode (vjp) product per step, as
loc_lipschitz does (stop when the estimate of lambda_max changes by < tol relative, or after max iters).
The map is the attention sub-layer of a Llama/SmolLM2 block without the residual:
    f(X) = sum_h softmax(X A_h X^T + M) X W_{V,h}^T W_{O,h}^T,  A_h = W_{Q,h}^T W_{K,h} / sqrt(d_h)
(M_ij = -inf for j > i: SmolLM2 is causal, and the masked mean-field theory is the paper's new part; grouped
query: query head h uses KV head h // (H/H_kv)).

The input family (the paper's tightness construction, adversarial_data): u a real eigenvector of A_h of the
head with the largest |real eigenvalue|; if lambda_max > -8 lambda_min, X = R [u, u/2, ..., u/2], else
X = R [-u, u, ..., u] (lambda_min's eigenvector). The code fixes R by hand per model; here R is set so that the
attention-logit gap between the special token and the others is `gap` (R^2 lambda / 4, resp. 2 R^2 |lambda_min|).
Theory: all n queries put weight p = e^gap / (e^gap + n - 1) on the special token, so moving it moves all n
outputs: L >~ sqrt(n) p ||W_O W_V||, the sqrt(n) growth while n << e^gap; once n >> e^gap the special token's
weight vanishes, the empirical measure converges (mean-field regime) and L is bounded independently of n.
One family, two sweeps of n:
  - tight (gap `tight_gap` = 6, n = 8..128, the paper's range of n): fitted exponent `exp_tight` (~0.5 claimed);
  - knee  (gap `knee_gap` = 3, n = 8..1024): L(n) rises, bends and flattens; the exponent fitted over
    n >= late_from is `exp_late` (~0 claimed: n-independent), lip_knee@<n> is the whole curve.
Fitted exponent = least-squares slope of log L on log n, one per seed.
Bound (compute_bound): sum_h ||W_{O,h} W_{V,h}||_2 sqrt(R_h^2 r^2 (n + 1) + n), R_h = max_i ||A_h x_i||,
r = max_ij ||x_i - x_j|| (the unmasked theorem's form, a reference for masked attention: same sqrt(n) order);
`lip_over_bound` = max over every measured input of L / bound (a fact: <= 1 where the bound holds).

Variants; what a seed varies:
  - "smollm2": a pretrained SmolLM2-135M attention layer, seed s -> layer layers[s % len(layers)] (10 layers
    spread over the 30; the paper shows a few layers of pretrained BERT / GPT-2);
  - "random": a random layer of SmolLM2's shapes (d=576, 9 query / 3 KV heads of 64), N(0, init_std^2) weights
    (the Hugging Face / GPT-2 initializer), drawn with the seed (the paper: randomly initialised GPT-2 / BERT).
Compression: Wanda (compress/wanda.py) at `sparsity` on the layer's q, k, v, o projections, calibrated on the
activations that the dense SmolLM2 feeds them on real text (Jane Austen); the pruned layer's tight sweep is
measured again (a random layer has no calibration data and no meaning to prune: its compress returns nothing).

Substitutions: SmolLM2-135M-Instruct (4-bit GGUF weights de-quantized) instead of GPT-2 / BERT; its rotary
position embedding is left out (the theory and GPT-2's / BERT's attention are position-free, and A_h is then a
fixed matrix); masked attention only, no layer norm; R set by a logit gap instead of by hand; n up to 1024.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import torch

from ..compress.wanda import update_scaler_row, wanda_mask
from ..data.smollm2 import load_smollm2, load_tokenizer
from ..registry import register_paper
from ..spec import Comparison, PaperSpec, check

VARIANTS = ("smollm2", "random")


@dataclass(frozen=True)
class Config:
    layers: tuple = (1, 4, 7, 10, 13, 16, 19, 22, 25, 28)  # SmolLM2 blocks; seed s studies layers[s % len]
    tight_lengths: tuple = (8, 16, 32, 64, 128)  # sqrt(n) regime sweep (n << e^tight_gap)
    tight_gap: float = 6.0
    knee_lengths: tuple = (8, 16, 32, 64, 128, 256, 512, 1024)  # sweep through the knee (e^knee_gap ~ 20)
    knee_gap: float = 3.0
    late_from: int = 256  # exp_late is fitted over knee lengths >= late_from (the mean-field regime)
    tolerance: float = 0.15  # |fitted exponent - claimed exponent| that still counts as the claim
    init_std: float = 0.02  # std of the random layers' weights
    power_tol: float = 1e-3  # relative change of lambda_max(J^T J) that stops the power iteration
    power_iters: int = 60
    sparsity: float = 0.5  # Wanda sparsity of q, k, v, o (compress)
    book: str = "emma"  # Austen novel of the calibration windows
    n_windows: int = 4  # calibration windows of calib_len tokens
    calib_len: int = 256

    def __post_init__(self) -> None:
        for key in ("layers", "tight_lengths", "knee_lengths"):
            object.__setattr__(self, key, tuple(int(n) for n in getattr(self, key)))
        for key in ("tight_lengths", "knee_lengths"):
            lengths = getattr(self, key)
            check(len(lengths) >= 2 and all(n >= 2 for n in lengths) and list(lengths) == sorted(set(lengths)),
                  f"attn_lipschitz.{key} must be >= 2 increasing lengths >= 2, got {lengths}")
        check(sum(n >= self.late_from for n in self.knee_lengths) >= 2,
              f"attn_lipschitz.late_from={self.late_from} leaves < 2 knee lengths to fit an exponent")
        check(len(self.layers) >= 1 and min(self.layers) >= 0, f"attn_lipschitz.layers must be >= 0, got {self.layers}")
        check(self.tight_gap > 0 and self.knee_gap > 0, "attn_lipschitz: tight_gap and knee_gap must be > 0")
        check(self.init_std > 0 and self.tolerance > 0, "attn_lipschitz: init_std and tolerance must be > 0")
        check(0 < self.power_tol < 1 and self.power_iters >= 2,
              f"attn_lipschitz: need 0 < power_tol < 1 and power_iters >= 2, got {self.power_tol}, {self.power_iters}")
        check(0 < self.sparsity < 1, f"attn_lipschitz.sparsity must be in (0, 1), got {self.sparsity}")
        check(self.n_windows >= 1 and self.calib_len >= 2, "attn_lipschitz: n_windows >= 1 and calib_len >= 2")


# ----------------------------------------------------------------------------------------------- the map
def attention(x: torch.Tensor, w: dict, masked: bool) -> torch.Tensor:
    """Multi-head (grouped-query) self-attention without residual or RoPE. x (n, d) -> (n, d)."""
    n, _ = x.shape
    h, hkv, dh = w["n_heads"], w["n_kv_heads"], w["head_dim"]
    q = (x @ w["q"].T).view(n, h, dh).transpose(0, 1)  # (H, n, dh)
    k = (x @ w["k"].T).view(n, hkv, dh).transpose(0, 1).repeat_interleave(h // hkv, 0)  # (H, n, dh)
    v = (x @ w["v"].T).view(n, hkv, dh).transpose(0, 1).repeat_interleave(h // hkv, 0)
    s = q @ k.transpose(1, 2) / math.sqrt(dh)  # (H, n, n)
    if masked:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = (s.softmax(-1) @ v).transpose(0, 1).reshape(n, h * dh)  # (n, H dh)
    return out @ w["o"].T


def local_lipschitz(f, x: torch.Tensor, generator: torch.Generator, tol: float, max_iter: int) -> float:
    """||J_f(x)||_2 by power iteration on J^T J (jvp then vjp), as loc_lipschitz."""
    _, vjp = torch.func.vjp(f, x)
    u = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    u = u / u.norm()
    mu_prev = 0.0
    for _ in range(max_iter):
        jv = torch.func.jvp(f, (x,), (u,))[1]
        jtjv = vjp(jv)[0]
        mu = float(torch.dot(u.flatten(), jtjv.flatten()))  # Rayleigh quotient u^T J^T J u
        u = jtjv / jtjv.norm()
        if abs(mu - mu_prev) <= tol * abs(mu):
            break
        mu_prev = mu
    return math.sqrt(max(mu, 0.0))


# ---------------------------------------------------------------------------------------- bound, inputs
def head_matrices(w: dict) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per query head h: A_h = W_Q,h^T W_K,h / sqrt(d_h) (d, d) and OV_h = W_O,h W_V,h (d, d)."""
    h, hkv, dh = w["n_heads"], w["n_kv_heads"], w["head_dim"]
    a, ov = [], []
    for i in range(h):
        j = i // (h // hkv)
        wq, wk, wv = w["q"][i * dh:(i + 1) * dh], w["k"][j * dh:(j + 1) * dh], w["v"][j * dh:(j + 1) * dh]
        a.append(wq.T @ wk / math.sqrt(dh))
        ov.append(w["o"][:, i * dh:(i + 1) * dh] @ wv)
    return a, ov


def attention_bound(y: torch.Tensor, a: list, ov: list) -> float:
    """compute_bound: sum_h ||OV_h||_2 sqrt(R_h^2 r^2 (n+1) + n) at attention inputs y (n, d)."""
    n = y.shape[0]
    r = float(torch.cdist(y, y).max())
    total = 0.0
    for a_h, ov_h in zip(a, ov):
        r_h = float((y @ a_h.T).norm(dim=1).max())  # max_i ||A_h y_i||
        total += float(torch.linalg.matrix_norm(ov_h, ord=2)) * math.sqrt(r_h ** 2 * r ** 2 * (n + 1) + n)
    return total


def real_eigen(a: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Real eigenvalues of a (d, d) and their (unit) eigenvectors as columns."""
    val, vec = np.linalg.eig(a.double().numpy())
    keep = np.abs(val.imag) < 1e-9 * max(1.0, np.abs(val).max())
    vec = vec[:, keep].real
    return val[keep].real, vec / np.linalg.norm(vec, axis=0, keepdims=True)


def head_eigen(wq: torch.Tensor, wk: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Non-zero real eigenpairs of A = wq^T wk / sqrt(d_h) (d x d, rank d_h) from the d_h x d_h matrix
    S = wk wq^T / sqrt(d_h): S v = lam v gives A (wq^T v) = lam (wq^T v), and every non-zero eigenvalue of A is one
    of S (AB and BA share them), so u = wq^T v / |wq^T v| (one d_h x d_h eig per head instead of d x d)."""
    val, vec = real_eigen(wk @ wq.T / math.sqrt(wq.shape[0]))
    u = wq.double().numpy().T @ vec
    keep = np.abs(val) > 1e-12 * max(1.0, np.abs(val).max()) if val.size else val.astype(bool)
    u = u[:, keep]
    return val[keep], u / np.linalg.norm(u, axis=0, keepdims=True)


def adversarial_direction(w: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, rest) token directions of the tightness construction at logit gap 1 (scale by sqrt(gap)): the head
    with the largest |real eigenvalue| of A_h; [u, u/2, ..] with R^2 lam_max / 4 = gap if lam_max > -8 lam_min,
    else [-u, u, ..] with 2 R^2 |lam_min| = gap (adversarial_data)."""
    h, hkv, dh = w["n_heads"], w["n_kv_heads"], w["head_dim"]
    eig = []
    for i in range(h):
        j = i // (h // hkv)
        eig.append(head_eigen(w["q"][i * dh:(i + 1) * dh], w["k"][j * dh:(j + 1) * dh]))
    best = int(np.argmax([np.abs(v).max() if v.size else -np.inf for v, _ in eig]))
    val, vec = eig[best]
    check(val.size > 0, "attn_lipschitz: A_h has no real non-zero eigenvalue in any head")
    lam_max, lam_min = float(val.max()), min(float(val.min()), 0.0)  # A_h also has the eigenvalue 0 (rank d_h < d)
    if lam_max > -8 * lam_min:
        u = torch.tensor(vec[:, int(np.argmax(val))], dtype=torch.float32) * math.sqrt(4 / lam_max)
        return u, u / 2
    u = torch.tensor(vec[:, int(np.argmin(val))], dtype=torch.float32) * math.sqrt(1 / (2 * -lam_min))
    return -u, u


def adversarial_inputs(w: dict, lengths, gap: float, direction=None) -> list[torch.Tensor]:
    """The tightness construction of adversarial_data, one (n, d) input per length (docstring)."""
    first, rest = direction if direction is not None else adversarial_direction(w)
    first, rest = first * math.sqrt(gap), rest * math.sqrt(gap)
    return [torch.cat([first[None], rest[None].expand(n - 1, -1)]) for n in lengths]


def slope(lengths, values) -> float:
    """Least-squares slope of log(value) on log(n): the fitted growth exponent."""
    return float(np.polyfit(np.log(np.asarray(lengths, float)), np.log(np.asarray(values, float)), 1)[0])


# --------------------------------------------------------------------------------------------- stages
def layer_weights(lm, layer: int) -> dict:
    """The attention weights of one Llama decoder block, as plain tensors."""
    cfg = lm.config
    att = lm.model.layers[layer].self_attn
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    return {"q": att.q_proj.weight.detach().clone(), "k": att.k_proj.weight.detach().clone(),
            "v": att.v_proj.weight.detach().clone(), "o": att.o_proj.weight.detach().clone(),
            "n_heads": n_heads, "n_kv_heads": n_kv, "head_dim": cfg.hidden_size // n_heads}


def prepare(cfg: Config, res) -> dict:
    """The studied SmolLM2 layers' attention weights and, per layer, Wanda's input statistics (scaler_row) of
    q/k/v (they share the normed block input) and of o_proj, from the dense model on real text windows."""
    lm = load_smollm2(res["smollm2"])
    n_layers = lm.config.num_hidden_layers
    check(max(cfg.layers) < n_layers, f"attn_lipschitz.layers={cfg.layers} but the model has {n_layers} layers")
    books = json.loads(open(res["austen"]).read())
    key = next((k for k in books if k.replace(" ", "").replace("&", "").lower().startswith(cfg.book)), None)
    check(key is not None, f"attn_lipschitz.book={cfg.book!r} not among {sorted(books)}")
    ids = load_tokenizer(res["smollm2"])(books[key])["input_ids"]
    n = cfg.calib_len
    check(len(ids) >= cfg.n_windows * n, f"attn_lipschitz: {key} has {len(ids)} tokens, need {cfg.n_windows * n}")
    step = len(ids) // cfg.n_windows
    windows = torch.tensor([ids[i * step:i * step + n] for i in range(cfg.n_windows)])  # (W, n)
    stats, hooks = {}, []
    for layer in cfg.layers:
        att = lm.model.layers[layer].self_attn
        for name, mod in (("qkv", att.q_proj), ("o", att.o_proj)):
            stats[(layer, name)] = (torch.zeros(mod.in_features), 0)

            def hook(mod, args, key=(layer, name)):
                stats[key] = update_scaler_row(*stats[key], args[0].detach())
            hooks.append(mod.register_forward_pre_hook(hook))
    with torch.no_grad():
        lm(windows)
    for h in hooks:
        h.remove()
    return {"weights": {layer: layer_weights(lm, layer) for layer in cfg.layers}, "book": key,
            "calib": {layer: {name: stats[(layer, name)][0] for name in ("qkv", "o")} for layer in cfg.layers}}


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    """No training: the seed's SmolLM2 layer, or a random layer of the same shapes drawn with the seed."""
    check(variant in VARIANTS, f"attn_lipschitz: variant must be one of {VARIANTS}, got {variant!r}")
    layer = cfg.layers[seed % len(cfg.layers)]
    w = dict(data["weights"][layer])
    if variant == "random":
        g = torch.Generator().manual_seed(seed)
        for key in ("q", "k", "v", "o"):
            w[key] = torch.randn(w[key].shape, generator=g) * cfg.init_std
    log(0, qk_frobenius=float(sum(a.norm() ** 2 for a in head_matrices(w)[0]) ** 0.5))
    return {"weights": w, "variant": variant, "seed": seed, "layer": layer}


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Wanda at cfg.sparsity on q, k, v (scaler of the normed block input) and o (scaler of its input)."""
    if variant == "random":
        return {}
    w, calib = dict(model["weights"]), data["calib"][model["layer"]]
    for key in ("q", "k", "v", "o"):
        w[key] = w[key] * wanda_mask(w[key], calib["o" if key == "o" else "qkv"], cfg.sparsity)
    return {f"{cfg.sparsity:.2f}": {**model, "weights": w, "level": f"{cfg.sparsity:.2f}"}}


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    """L(n) on the tight and (dense models only) knee sweeps; fitted exponents; max L / bound."""
    w, seed = model["weights"], model["seed"]
    f = lambda x: attention(x, w, masked=True)
    a, ov = head_matrices(w)
    g = torch.Generator().manual_seed(1000 + seed)
    out, ratios = {}, []
    sweeps = [("tight", cfg.tight_lengths, cfg.tight_gap)] + ([] if "level" in model else
                                                           [("knee", cfg.knee_lengths, cfg.knee_gap)])
    direction = adversarial_direction(w)
    for name, lengths, gap in sweeps:
        xs = adversarial_inputs(w, lengths, gap, direction)
        lips = [local_lipschitz(f, x, g, cfg.power_tol, cfg.power_iters) for x in xs]
        ratios += [lip / attention_bound(x, a, ov) for lip, x in zip(lips, xs)]
        out.update({f"lip_{name}@{n}": lip for n, lip in zip(lengths, lips)})
        if name == "tight":
            out["exp_tight"] = slope(lengths, lips)
        else:
            late = [i for i, n in enumerate(lengths) if n >= cfg.late_from]
            out["exp_late"] = slope([lengths[i] for i in late], [lips[i] for i in late])
            out["knee_ratio"] = max(lips) / lips[0]  # how far L rose before it flattened
    out["lip_over_bound"] = max(ratios)
    return out


def derive(cfg: Config, rows: list[dict]) -> list[dict]:
    """Reference views per (variant, seed): "<v>|theory" holds the claimed exponents (0.5 before the knee, 0 in the
    mean-field regime; the judged "matches" rows ignore it, the report shows it beside the fitted value) and
    "<v>|bound" holds L / bound = 1 (the fact row's reference)."""
    out = [dict(r) for r in rows]
    lv = f"compressed:{cfg.sparsity:.2f}/exp_tight"
    for r in rows:
        if r["variant"] in VARIANTS:
            key = {"paper": r["paper"], "seed": r["seed"]}
            theory = {**key, "variant": f"{r['variant']}|theory", "dense/exp_tight": 0.5, "dense/exp_late": 0.0}
            out += [{**theory, **({lv: 0.5} if r.get(lv) is not None else {})},
                    {**key, "variant": f"{r['variant']}|bound", "dense/lip_over_bound": 1.0}]
    return out


def comparisons(cfg: Config) -> list[Comparison]:
    tol, lv = cfg.tolerance, f"{cfg.sparsity:.2f}"
    tight = f"logit gap {cfg.tight_gap:g}, n={cfg.tight_lengths[0]}..{cfg.tight_lengths[-1]}"
    late = f"logit gap {cfg.knee_gap:g}, n={cfg.late_from}..{cfg.knee_lengths[-1]}"
    rows = []
    for v, role, what in (("smollm2", "headline", "pretrained SmolLM2 layers"), ("random", "secondary", "random layers")):
        first, second = ("claim 1 of 2, ", "claim 2 of 2, ") if role == "headline" else ("", "")
        rows += [
            Comparison("exp_tight", v, f"{v}|theory", kind="matches", target=0.5, tolerance=tol, role=role,
                       text=f"{first}sqrt(n) bound tight at reasonable n: {what}, adversarial inputs ({tight}): "
                            f"L grows like n^0.5 (fitted exponent within {tol:g})"),
            Comparison("exp_late", v, f"{v}|theory", kind="matches", target=0.0, tolerance=tol, role=role,
                       text=f"{second}mean-field regime: {what}, the same inputs past the knee ({late}): L is "
                            f"n-independent (fitted exponent within {tol:g} of 0)"),
        ]
    rows += [
        Comparison("lip_over_bound", "smollm2", "smollm2|bound", role="fact",
                   text="max over every measured input of L / the sqrt(n) upper bound (<= 1: the bound holds)"),
        Comparison("exp_tight", "smollm2", "smollm2|theory", kind="matches", target=0.5, tolerance=tol, role="control",
                   stage="compressed", level=lv,
                   text=f"after Wanda {float(lv):.0%} pruning of q,k,v,o: the pruned layer still grows like n^0.5"),
    ]
    return rows


SPEC = register_paper(PaperSpec(
    id="attn_lipschitz",
    title="How Smooth Is Attention? (Castin, Ablin, Peyre, ICML 2024)",
    claim="~sqrt(n) growth then n-independent in the mean-field regime",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare,
    train=train,
    compress=compress,
    evaluate=evaluate,
    comparisons=comparisons,
    derive=derive,
    resources=("smollm2", "austen"),
    fidelity="official-code",
    headlines=2,
    data="SmolLM2-135M attention layers (10 of 30, one per seed) and random SmolLM2-shaped layers, on the paper's "
         "adversarial inputs; Jane Austen text for Wanda's calibration",
    substitutions="SmolLM2-135M-Instruct (de-quantized 4-bit) instead of GPT-2/BERT; RoPE left out so A_h is fixed; "
                  "masked attention only, no layer norm; adversarial radius set by a logit gap (code: by hand), gap 6 "
                  "for the sqrt(n) sweep and gap 3 for the sweep through the knee, n up to 1024; the masked bound uses "
                  "the unmasked formula as reference",
    compression="Wanda (|W| x input-norm, per output row) on the pretrained layer's q,k,v,o, calibrated on the dense "
                "model's activations on Austen text; the pruned layer's sqrt(n) sweep is measured again (random layers: "
                "nothing to calibrate, not pruned)",
))
