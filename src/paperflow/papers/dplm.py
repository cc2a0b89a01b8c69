"""DPLM: "Diffusion Language Models Are Versatile Protein Learners" (Xinyou Wang, Zaixiang Zheng, Fei Ye, Dongyu Xue,
Shujian Huang, Quanquan Gu), ICML 2024.

What was read: the paper's abstract and introduction (pages corpus: arXiv 2402.18567 and the ICML text; its method
section did not come back in several searches) and the authors' code (bytedance/dplm): src/byprot/models/dplm/dplm.py
(q_sample: each non-special token masked with probability t/T, t ~ U{1..T}; compute_loss: weight "linear" =
(T - (t - 1)) / T or "constant" = 1), configs/experiment/dplm/dplm_150m.yaml (num_diffusion_timesteps 500, weight:
linear, rdm_couple false, AdamW betas (0.9, 0.98), weight decay 0.01, the net initialised from ESM2-150M) and
byprot/modules/cross_entropy.py RDMCrossEntropyLoss (the weighted token cross-entropy summed over the masked tokens and
divided by their number in the batch). We follow the code: mask probability t/T with T = 500, loss weight
lambda(t) = (T - t + 1) / T (the paper's ELBO weight 1/t is not what the configs run), normalised by the masked-token
count. Differences from the code: the model is trained from scratch (the code starts from ESM2 weights, "diffusive
adaptation"; no protein LM weights install offline), plain Adam without weight decay or schedule for every variant,
and the sampler (below).

Variants (one small bidirectional/causal transformer of equal size for all: paperflow.protein.SeqTransformer):
  dplm       absorbing diffusion, mask prob t/T, weight (T - t + 1)/T;
  dplm_flat  ablation: the same diffusion masking with weight 1 (the code's "constant" option; isolates the loss
             weighting: if it matches dplm the weighting plays no part);
  mlm        ESM-style masked LM: 15% of the positions selected, 80% of those masked, 10% replaced by a random amino
             acid, 10% kept; cross-entropy on the selected positions;
  ar         autoregressive LM (begin token, causal attention, next-token cross-entropy).
Generation (unconditional, the family's aligned length L): the masked models (dplm, dplm_flat, mlm) all use the same
ancestral absorbing-diffusion sampler: start from all-mask, unmask positions in a random order, ceil(remaining / steps
left) per step, each unmasked token sampled at temperature 1 from the model's prediction over the 21 states (20 amino
acids + gap); the ar model samples left to right at temperature 1. With gen_steps < L the positions unmasked in one step
are drawn independently given the same context (default 84 / 42: two per step), an approximation of the learned joint
that the AR sampler does not make (the authors' script runs max_iter 500 >= L steps; a reviewer check, 2026-12-06, seeds
0-1 at default size, found gen_bits at 42 and 84 steps equal within 0.012). Paper vs ours: DPLM generates with the
reparameterised (RDM) sampler that unmasks the most confident tokens first; a confidence-ordered sampler is mode-seeking
and would favour the masked models over the AR model by the sampler, not by training, so every masked model here uses
the same random-order sampler (a proper sampler of the absorbing process) and the AR model its own exact one. Headline
metric (independent of every LM): the mean per-residue log-odds (bits) of the de-gapped generations under the family's
Pfam profile HMM shipped with hmmer-examples (HMMER3 Forward, glocal; paperflow.protein.hmm_bits). For fn3 and Pkinase
the shipped .hmm was built by Pfam from an older seed release (fn3 PF00041.13, 106 sequences; Pkinase PF00069.17, 54)
than the alignment we train on (PF00041.20, PF00069.24), so it is a family model that none of the LMs shares parameters
or training code with; it is not independent of their training data (the older seed most likely shares many sequences
with the newer one), so generations that copied training sequences would score high: hence the nearest-neighbour gate
below. The baselines' own scorers (an LM's pseudo-perplexity) would favour generations that look like their own model,
so they are not used for the headline. The LMs' pseudo-perplexity of the validation sequences is a control row (dplm
vs mlm, both masked models; a secondary row before Amendment 1); these are the sequences each variant's lr was tuned on
(by its own training loss), so that row is a validation number, not a test one. The AR model's logged val_ppl is its next-token perplexity over the whole
vocabulary, not a pseudo-perplexity: no row compares it. Mechanism (logged per run): gen_nn_identity, the mean over
generations of the highest identity to any training sequence (paperflow.protein.nn_identity); a high HMM score from
copies of training sequences would not be generation. Gate: dplm's below 0.8 (the seed's own sequences are at about 0.3
to each other).
Data: one Pfam seed alignment of the protein_families resource (default fn3: 98 sequences x 84 match columns; gap a
token), split with data_seed into n_val validation sequences (tuning and pseudo-perplexity) and the rest for training.
Tuning (fixed before any run): each variant picks its Adam lr from lr_grid at tune_seed after tune_steps by its own
training objective on the validation sequences (fixed masks drawn from tune_seed); generation draws come from test_seed
and the run's seed, which tuning never reads.
Substitutions: UniRef50 pre-training of 150M-3B models -> one Pfam family of ~80 training sequences and a ~30k-parameter
transformer trained from scratch; pLDDT of ESMFold structures -> the profile HMM's log-odds; representation probes on
downstream tasks are not run (no labelled protein task ships offline); globins (globins45 is unaligned and globins4 has
4 sequences) is not a default family, fn3 is (Pkinase and RRM_1 run with cfg.family).
Development history (disclosed): while sizing the default profile on 2026-12-06, seed 0 of every variant was run at
reduced size with test_seed 1 (100 steps, T = 100, lr 3e-3 for all: gen_bits dplm 0.52, dplm_flat 0.54, mlm 0.36,
ar 0.51) and seed 0 of dplm and mlm at near-default size (200 steps: 0.69 and 0.44). After that the lr grid moved up
one step (every variant had chosen the top edge of (3e-4, 1e-3, 3e-3) at the tuning horizon), T went from 100 to the
configs' 500 (read in the authors' code afterwards), and steps / tune_steps shrank for the budget. Because test numbers
had been seen, the generation draws moved to test_seed 2 (never run before registration); the profile-HMM scorer cannot
be re-drawn.
Amendment 1 (2026-12-06, after the first default run and a review): (a) seeds 5 -> 10. The review found the headline
under-powered by design: dplm - mlm gen_bits +0.038 [-0.060, 0.136] with 5 seeds (mde 0.13), the seed-to-seed spread
(dplm 0.50-0.60, mlm 0.45-0.58) dominating the generation noise, while a job costs ~3 s; 10 seeds shrink the t factor
from 2.78/sqrt(5) to 2.26/sqrt(10) (half-width ~0.10 -> ~0.06 at the same spread). n_gen, gen_steps and every other
setting are unchanged. (b) The val_ppl row (dplm vs mlm pseudo-perplexity) is demoted from secondary to control: it is
read on the validation sequences every variant's lr was tuned on, so it is a validation measure and no longer counts
among the paper's results. (c) The generation draws are re-drawn (test_seed 2 -> 3) because the first default run's
test readings were seen: gen_bits dplm 0.544, mlm 0.506, ar 0.622, dplm_flat 0.574 (headline inconclusive; dplm below
ar -0.078 [-0.130, -0.025] and below dplm_flat -0.029 [-0.053, -0.005]), val_ppl dplm 10.73 vs mlm 11.20, and the
pruned-model rows. Also seen before this amendment: the reviewer's sampler check (seeds 0-1, gen_steps 42 vs 84, draws
from a scratch generator, not a test_seed) and the mechanism value gen_nn_identity 0.28. No gate or threshold changed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .. import protein as P
from ..compress.magnitude import level_name, magnitude_models
from ..nn.transformer import count_params
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import tune

VARIANTS = ("dplm", "dplm_flat", "mlm", "ar")
MASKED = ("dplm", "dplm_flat", "mlm")
NN_GATE = 0.8  # dplm's mean nearest-neighbour identity to the training sequences must stay below this


@dataclass(frozen=True)
class Config:
    family: str = "fn3"  # fn3 | Pkinase | RRM_1 (protein_families resource)
    max_gap: float = 0.5  # match column: gap fraction below this
    n_val: int = 18  # real sequences held out (tuning, pseudo-perplexity)
    data_seed: int = 0
    test_seed: int = 3  # generation draws only (never read by tuning); 2 before Amendment 1 (its readings were seen)
    d_model: int = 32
    n_layer: int = 2
    n_head: int = 4
    T: int = 500  # diffusion timesteps (the authors' configs)
    mlm_rate: float = 0.15
    steps: int = 150
    batch_size: int = 16
    lr_grid: tuple = (1e-3, 3e-3, 1e-2, 3e-2)
    tune_steps: int = 50
    tune_seed: int = 1000
    n_gen: int = 32  # generations per run
    gen_steps: int = 42  # sampler steps of the masked models
    sparsities: tuple = (0.5,)
    compare_level: float = 0.5
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.family in ("fn3", "Pkinase", "RRM_1"), f"family must be fn3, Pkinase or RRM_1, got {self.family!r}")
        check(0 < self.max_gap <= 1, "max_gap must be in (0, 1]")
        check(self.n_val >= 2, "n_val must be >= 2")
        check(self.d_model % self.n_head == 0 and self.n_layer >= 1, "d_model divisible by n_head, n_layer >= 1")
        check(self.T >= 2 and 0 < self.mlm_rate < 1, "T >= 2 and 0 < mlm_rate < 1")
        check(self.steps > 0 and self.tune_steps > 0 and self.batch_size > 0, "steps, tune_steps, batch_size > 0")
        check(len(self.lr_grid) >= 1 and list(self.lr_grid) == sorted(self.lr_grid) and self.lr_grid[0] > 0, "lr_grid ascending, > 0")
        check(self.n_gen >= 2 and self.gen_steps >= 1, "n_gen >= 2 and gen_steps >= 1")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities, "sparsities in [0, 1), compare_level one of them")


# ---------------------------------------------------------------------------------------------- objectives


def diffusion_weight(t: torch.Tensor, T: int, weighted: bool) -> torch.Tensor:
    """lambda(t) of the authors' code, (T - t + 1) / T for t in 1..T (1 at t = 1, 1/T at t = T); 1 for the ablation."""
    return (T - t + 1).float() / T if weighted else torch.ones_like(t, dtype=torch.float)


def diffusion_corrupt(x0: torch.Tensor, T: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward absorbing process: t ~ U{1..T} per sequence, each token masked with probability t/T.
    Returns (x_t, mask (B, L) bool, t (B,))."""
    B, L = x0.shape
    t = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.rand(B, L, generator=gen) < (t.float() / T)[:, None]
    t, mask = t.to(x0.device), mask.to(x0.device)  # draws on the CPU generator, the batch wherever the loop put it
    return torch.where(mask, torch.full_like(x0, P.MASK), x0), mask, t


def diffusion_loss(logits: torch.Tensor, x0: torch.Tensor, mask: torch.Tensor, t: torch.Tensor, T: int, weighted: bool) -> torch.Tensor:
    """sum over masked tokens of lambda(t) CE(x0 | x_t) / number of masked tokens in the batch (0 if none is masked)."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x0.reshape(-1), reduction="none").view_as(x0)
    w = diffusion_weight(t, T, weighted)[:, None]
    return (ce * w * mask).sum() / mask.sum().clamp(min=1)


def mlm_corrupt(x0: torch.Tensor, rate: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """ESM/BERT corruption: select each position with prob `rate`; of the selected, 80% -> mask, 10% -> a random amino
    acid, 10% kept. Returns (input, selected)."""
    sel = (torch.rand(x0.shape, generator=gen) < rate).to(x0.device)
    u = torch.rand(x0.shape, generator=gen).to(x0.device)
    rnd = torch.randint(0, P.N_AA, x0.shape, generator=gen).to(x0.device)
    x = torch.where(sel & (u < 0.8), torch.full_like(x0, P.MASK), x0)
    x = torch.where(sel & (u >= 0.8) & (u < 0.9), rnd, x)
    return x, sel


def ar_inputs(x0: torch.Tensor) -> torch.Tensor:
    """[BOS, x_1 .. x_{L-1}]: position t predicts x_{t+1}."""
    return torch.cat([torch.full_like(x0[:, :1], P.BOS), x0[:, :-1]], 1)


def objective(cfg: Config, variant: str, model, x0: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The variant's training loss on a batch of aligned sequences x0 (B, L)."""
    if variant in ("dplm", "dplm_flat"):
        xt, mask, t = diffusion_corrupt(x0, cfg.T, gen)
        return diffusion_loss(model(xt), x0, mask, t, cfg.T, weighted=variant == "dplm")
    if variant == "mlm":
        x, sel = mlm_corrupt(x0, cfg.mlm_rate, gen)
        ce = F.cross_entropy(model(x).reshape(-1, P.VOCAB), x0.reshape(-1), reduction="none").view_as(x0)
        return (ce * sel).sum() / sel.sum().clamp(min=1)
    if variant == "ar":
        return F.cross_entropy(model(ar_inputs(x0)).reshape(-1, P.VOCAB), x0.reshape(-1))
    raise ValueError(f"dplm: unknown variant {variant!r}; known: {VARIANTS}")


# ---------------------------------------------------------------------------------------------- data / training


def arch_of(cfg: Config, L: int, variant: str) -> dict:
    return {"length": L, "d_model": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "causal": variant == "ar"}


def fit(cfg: Config, data: dict, variant: str, seed: int, lr: float, steps: int, log=None) -> dict:
    x = data["train"]
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int) -> torch.Tensor:
        return x[torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)]

    arch = arch_of(cfg, x.shape[1], variant)
    state = P.train_seq_model(arch, lambda m, b: objective(cfg, variant, m, b, gen), batch_fn, lr, steps, seed, log, cfg.log_every)
    return {"arch": arch, "state": state}


@torch.no_grad()
def validation_objective(cfg: Config, model: dict, data: dict, variant: str) -> float:
    """The variant's own loss on the validation sequences, 8 corruption draws from tune_seed (the same for every lr)."""
    m = P.seq_model(model["arch"], model["state"])
    gen = torch.Generator().manual_seed(cfg.tune_seed + 1)
    return float(np.mean([float(objective(cfg, variant, m, data["val"], gen)) for _ in range(8)]))


def prepare(cfg: Config, res) -> dict:
    fam = P.load_family(res["protein_families"], cfg.family, cfg.max_gap)
    msa = torch.as_tensor(fam["msa"])
    check(msa.shape[0] > cfg.n_val + 8, f"{cfg.family}: {msa.shape[0]} sequences, n_val={cfg.n_val} leaves too few")
    perm = torch.randperm(msa.shape[0], generator=torch.Generator().manual_seed(cfg.data_seed))
    data = {"train": msa[perm[cfg.n_val :]].contiguous(), "val": msa[perm[: cfg.n_val]].contiguous(),
            "hmm": {k: (torch.as_tensor(v) if isinstance(v, np.ndarray) else v) for k, v in fam["hmm"].items()}}
    data["real_bits"] = float(np.mean(P.hmm_bits(fam["hmm"], [P.ungap(r) for r in data["val"].numpy()])))
    data["real_nn_identity"] = float(np.mean(P.nn_identity(data["val"].numpy(), data["train"].numpy())))
    data["tuning"] = {}
    for v in VARIANTS:
        _, info = tune(list(cfg.lr_grid), lambda lr, v=v: (None, validation_objective(
            cfg, fit(cfg, data, v, cfg.tune_seed, lr, cfg.tune_steps), data, v)), higher=False)
        data["tuning"][v] = info
    return data


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"dplm: unknown variant {variant!r}; known: {VARIANTS}")
    info = data["tuning"][variant]
    model = fit(cfg, data, variant, seed, info["tuned_lr"], cfg.steps, log)
    model["tuning"] = {"tuned_lr": float(info["tuned_lr"]), "grid_edge": float(info["grid_edge"])}
    model["seed"] = seed
    return model


# ---------------------------------------------------------------------------------------------- generation / evaluation


@torch.no_grad()
def generate(model, arch: dict, n: int, steps: int, gen: torch.Generator) -> torch.Tensor:
    """n aligned sequences (n, L) of states 0..20. Masked models: random-order ancestral unmasking from all-mask,
    ceil(remaining / steps left) positions per step, tokens sampled at temperature 1 over the 21 states. AR: left to
    right at temperature 1."""
    L = int(arch["length"])
    if arch["causal"]:
        x = torch.full((n, 1), P.BOS, dtype=torch.long)
        for _ in range(L):
            probs = torch.softmax(model(x)[:, -1, : P.N_STATES], -1)
            x = torch.cat([x, torch.multinomial(probs, 1, generator=gen)], 1)
        return x[:, 1:]
    x = torch.full((n, L), P.MASK, dtype=torch.long)
    order = torch.argsort(torch.rand(n, L, generator=gen), 1)
    done = 0
    for s in range(steps):
        k = math.ceil((L - done) / (steps - s))
        if k <= 0:
            continue
        pos = order[:, done : done + k]
        probs = torch.softmax(model(x)[:, :, : P.N_STATES], -1)  # (n, L, 21)
        rows = torch.arange(n)[:, None].expand_as(pos)
        sampled = torch.multinomial(probs[rows, pos].reshape(-1, P.N_STATES), 1, generator=gen).view_as(pos)
        x[rows, pos] = sampled
        done += k
    return x


@torch.no_grad()
def pseudo_perplexity(model, arch: dict, x: torch.Tensor) -> float:
    """exp of the mean -log p(x_i | x_-i) over every position of every sequence (masked models, one position masked
    at a time); for the AR model exp of its mean next-token NLL."""
    if arch["causal"]:
        return float(torch.exp(F.cross_entropy(model(ar_inputs(x)).reshape(-1, P.VOCAB), x.reshape(-1))))
    nll = []
    for seq in x:
        mm = P.masked_marginals(model, seq)  # log p(a) - log p(wt); recover log p(wt) from the normaliser
        logp_wt = -torch.logsumexp(mm, 1)
        nll.append(-logp_wt)
    return float(torch.exp(torch.cat(nll).mean()))


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    arch = model["arch"]
    m = P.seq_model(arch, model["state"])
    gen = torch.Generator().manual_seed(cfg.test_seed * 100_003 + int(model.get("seed", 0)))
    seqs = generate(m, arch, cfg.n_gen, cfg.gen_steps, gen).numpy()
    hmm = {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in data["hmm"].items()}
    ungapped = [P.ungap(s) for s in seqs]
    keep = [u for u in ungapped if len(u) > 0]
    # all-gap generations have no residue to score and are left out of the mean; -10 bits/residue (far below any real
    # or shuffled sequence) only when every generation is empty
    bits = P.hmm_bits(hmm, keep) if keep else np.array([-10.0])
    same = (seqs[:, None, :] == seqs[None, :, :]) & (seqs[:, None, :] < P.N_AA)
    either = (seqs[:, None, :] < P.N_AA) | (seqs[None, :, :] < P.N_AA)
    pair = same.sum(-1) / np.maximum(either.sum(-1), 1)
    off = ~np.eye(len(seqs), dtype=bool)
    out = {
        "gen_bits": float(np.mean(bits)),
        "gen_nn_identity": float(np.mean(P.nn_identity(seqs, data["train"].numpy()))),
        "gen_pair_identity": float(pair[off].mean()),
        "gen_gap_frac": float((seqs == P.GAP).mean()),
        "val_ppl": pseudo_perplexity(m, arch, data["val"]),
        "real_bits": data["real_bits"],
        "real_nn_identity": data["real_nn_identity"],
        "n_params": float(count_params(m)),
    }
    out.update(model.get("tuning", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Shared compressor: global magnitude pruning of the transformer blocks' weight matrices (embeddings and the tied
    head kept), no fine-tuning; the pruned model generates and is scored like the dense one."""
    return magnitude_models(model, cfg.sparsities, include=("blocks.",))


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    novel = Gate(f"dplm's generations are not copies of training sequences: mean nearest-neighbour identity to the "
                 f"training sequences below {NN_GATE}", variant="dplm", metric="gen_nn_identity", below=NN_GATE, kind="mechanism")
    hmm_ok = Gate("the profile HMM separates the family from noise: held-out real sequences score > 0 bits/residue",
                  variant="mlm", metric="real_bits", above=0.0)
    edge = lambda v: edge_gate(v, "tuned lr", "lr_grid")  # noqa: E731
    rows = [Comparison("gen_bits", "dplm", "mlm", better="higher", role="headline", gates=(hmm_ok, novel, edge("dplm"), edge("mlm")),
                       text="DPLM (absorbing diffusion, t/T masking, (T-t+1)/T weighting) generates sequences that the family's "
                            "held-out Pfam profile HMM scores higher (bits/residue) than those of an equal-size masked LM with the same sampler",
                       refuted_if="the paired 95% interval of gen_bits(dplm) - gen_bits(mlm) lies below 0 while the HMM separates "
                                  "real sequences from noise, dplm's generations are not copies (nearest-neighbour identity < "
                                  f"{NN_GATE}) and both lrs are inside the grid")]
    rows.append(Comparison("gen_bits", "dplm", "ar", better="higher", role="secondary", gates=(hmm_ok, novel, edge("dplm"), edge("ar")),
                           text="DPLM's generations score higher under the profile HMM than an equal-size autoregressive LM's"))
    rows.append(Comparison("gen_bits", "dplm", "dplm_flat", better="higher", role="secondary", gates=(hmm_ok, edge("dplm"), edge("dplm_flat")),
                           text="ablation: the (T-t+1)/T loss weighting beats the same diffusion training with weight 1"))
    rows.append(Comparison("val_ppl", "dplm", "mlm", better="lower", role="control", gates=(edge("dplm"), edge("mlm")),
                           text="diagnostic (a validation measure: the sequences every lr was tuned on): DPLM has a lower "
                                "pseudo-perplexity of the validation family sequences than the masked LM"))
    rows.append(Comparison("gen_nn_identity", "dplm", "mlm", better="lower", role="control",
                           text="diagnostic: DPLM's generations are no closer to training sequences than the masked LM's"))
    rows.append(Comparison("gen_bits", "dplm", "mlm", better="higher", stage="compressed", level=level_name(cfg.compare_level),
                           role="control", text=f"DPLM keeps the higher HMM score with its blocks pruned to {level_name(cfg.compare_level)}"))
    rows.append(Comparison("n_params", "dplm", "ar", role="fact", text="parameters: every variant is the same transformer size"))
    return rows


SPEC = register_paper(PaperSpec(
    id="dplm",
    title="Diffusion Language Models Are Versatile Protein Learners",
    claim="diffusion LM generates and represents better",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="official-code", resources=("protein_families",),
    data="Pfam seed alignment fn3 (PF00041.20, 98 sequences, 84 match columns) from Debian hmmer-examples; 18 sequences "
         "held out (tuning, validation pseudo-perplexity); generations scored by the older-release Pfam fn3 profile HMM (PF00041.13) "
         "shipped in the same package",
    substitutions="UniRef50 pre-training of 150M-3B models -> ~80 aligned sequences of one family and a ~30k-parameter "
                  "transformer; ESMFold pLDDT -> profile-HMM log-odds; the RDM confidence-ordered sampler -> the random-order "
                  "ancestral sampler for every masked model; no downstream representation probes; globins not a default family",
    compression="shared global magnitude pruning of the transformer blocks' weight matrices at each level (no fine-tuning); "
                "the pruned models generate and are scored like the dense ones",
    figure="sparsity", weight=1,
))
