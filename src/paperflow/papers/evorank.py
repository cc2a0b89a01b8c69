"""EvoRank: "Evolution-Inspired Loss Functions for Protein Representation Learning" (Chengyue Gong, Adam Klivans,
James Loy, Tianlong Chen, Qiang Liu, Danny Diaz), ICML 2024.

What was read: the abstract (pages corpus: ICML virtual site, OpenReview y5L8W0KRUX); the method section and the
loss's equation did not come back in several searches and no official code is in the public index (catalog), so the
objective below is our reconstruction of the abstract's sentence "EvoRank corresponds to ranking amino-acid likelihoods
in the probability distribution induced by an MSA" (fidelity "reconstruction"):
  wt_ce     wildtype accuracy: mask a position of a sequence, cross-entropy to the residue the sequence has there;
  evorank   the MSA-induced distribution q_i(s) at a masked position i of sequence s (the residue frequencies in column i
            of s's MSA, here the msa_k sequences of the training alignment nearest to s by identity, s itself excluded,
            with a pseudocount) gives a ranking of the 21 states; the loss is the pairwise logistic (RankNet) loss of
            the model's logits f: mean over state pairs with q_a > q_b of log(1 + exp(-(f_a - f_b)));
  msa_soft  ablation: cross-entropy to the same q_i(s) as a soft label (the MSA information without the ranking form;
            if it matches evorank, the gain is the MSA target's, not the ranking loss's);
  profile   control (Amendment 1), no model and no training: the column profile of the whole training MSA,
            log(f_i(a) + 1e-3), scores a substitution wt_i -> a by log(f_i(a) + 1e-3) - log(f_i(wt_i) + 1e-3) (the
            profile_spearman every run already logged); a reader sees how far the trained models are from it.
Every trained variant (all but profile) trains the same small bidirectional transformer (paperflow.protein.
SeqTransformer), the same masked positions (15% of the columns, at least one) and steps; the zero-shot score of a
single substitution wt_i -> a is the masked marginal log p(a | wt_-i) - log p(wt_i | wt_-i) (Meier et al. 2021).
Ground truth (the issue: Potts-model families with known mutation effects fitted to the real MSAs): a Potts model fitted
by pseudo-likelihood to the real Pfam seed alignment of the family (paperflow.protein.fit_potts; default fn3, 98 x 84
match columns, 21 states); the training "evolution" is a sample of n_train sequences from it (Gibbs, gibbs_sweeps sweeps
from real seed sequences, data_seed), n_val more are the validation sequences; the test wildtypes are n_wt further
samples drawn with test_seed, and their mutation effects are the exact Potts energy differences E(mutant) - E(wt) of all
19 x L' amino-acid substitutions at their non-gap positions (single_mutant_effects). Headline: the mean over wildtypes
of the Spearman correlation between a model's scores and these effects.
Mechanism (measured on the data every run trains on, logged per run; since Amendment 1): wt_not_top, the fraction of
training (sequence, position) pairs (2,000 drawn from data_seed) at which the wildtype residue is not the mode of the
MSA-induced distribution q_i(s). Where the two coincide the EvoRank target puts the wildtype residue on top like the
wildtype target does and differs from it only in the order of the other states; where they differ the ranking loss
pushes another state above the wildtype, which the wildtype objective never does. Gate: above 0.1 (the MSA's top
state differs from the wildtype residue at more than one training position in ten; below that the two targets agree on
the top state almost everywhere and the comparison would test little more than the form of the loss). Why this
statistic and not the reviewer's other candidate (val_rank_corr of evorank above wt_ce's, the Spearman of the trained
model's logits with q on validation positions): wt_not_top is a property of the training data, the condition under
which the MSA target can carry a ranking the wildtype target lacks, whatever the models do; val_rank_corr is read from
the trained models and is close to true by construction (a model trained to rank like q ranks more like q than one
trained on the wildtype), so it cannot fail for a reason that bears on the claim; it stays logged. The threshold is
the reviewer's, fixed from this reasoning; the value is a training-data statistic that depends on data_seed only, not
on test_seed, and the first default run logged it as 0.424 (no test reading enters it).
target_rank_corr, the mean Spearman correlation between q_i(s) and the wildtype one-hot target over the same pairs, was
the gate before Amendment 1 (below 0.9) and stays logged as a diagnostic. A one-hot has 20 tied entries, so its
Spearman with q is 1 only when q has a single observed state (the other 20 tied at the pseudocount) and falls with the
number of observed states whether or not the wildtype is q's mode: wildtype on top with one other observed state 0.73,
with two 0.61, with 20 distinct others 0.37; wildtype second of two observed states 0.65. It measures how many states
the MSA column admits more than whether the ranking differs, so it was a near-vacuous gate.
Design limitation (found by the review, 2026-12-06; not removed by Amendment 1): this setting can hardly show EvoRank's
advantage. For a Potts ground truth, wildtype masked cross-entropy on Potts samples is already the ideal scorer, and
the MSA gives EvoRank nothing the wildtype objective lacks. In detail: the training sequences are samples of the Potts
model whose energy differences are the ground truth, and for a Potts model log P(x_i = a | x_-i) - log P(x_i = wt_i |
x_-i) is exactly E(mutant) - E(wt); so the Bayes-optimal wt_ce predictor (masked cross-entropy on these samples), read
at a single masked position as the masked marginals do, is the ground truth itself (Spearman 1; training masks ~15% of
the positions, so this holds in the limit of a model that generalises across mask patterns, as masked-marginal scoring
assumes), while EvoRank's target (the neighbours' column profile) is not that conditional. The MSA gives EvoRank no
information the wildtype objective lacks here (q is computed from the same training sequences); any gain can only come
from a lower-variance target at a finite budget (what msa_soft measures). In the paper the MSA is information beyond
the wildtype training set; here it is not, so a "not reproduced" or "inconclusive" headline says that the ranking loss
brings no gain when the MSA holds no extra information, not that EvoRank fails where it does. A paper-like information
regime (every variant on few wildtype sequences, the MSA target from a larger sample) would be a redesign and was not
made.
Precondition: the effects are not site-independent (coupling_share: mean over the test wildtypes of the Spearman of the
effects with their field-only part h_i(a) - h_i(wt_i), below 0.95), else a column profile would be the whole truth.
Tuning (fixed before any run): each trained variant picks its Adam lr from lr_grid at tune_seed after tune_steps by its own
training objective on the validation sequences (the mutation effects are never read by tuning).
Substitutions: natural MSAs of UniRef/structure sets and deep mutational scans (ProteinGym-style) -> one Pfam family, a
Potts model fitted to it as the ground truth, sampled sequences as the training MSA; a ~30k-parameter transformer
trained from scratch (the paper fine-tunes/pre-trains larger structure and sequence models).
Development history (disclosed): while sizing the default profile on 2026-12-06, seed 0 of every variant was run with
test_seed 1 (150 steps, lr 3e-3 for all: spearman evorank 0.849, wt_ce 0.852, msa_soft 0.884) and seed 0 of evorank
and wt_ce at 200 steps (0.863, 0.860); the column profile of the training MSA scored 0.947. After that the lr grid
moved up one step (every variant had chosen the top edge of (3e-4, 1e-3, 3e-3) at the tuning horizon) and tune_steps
shrank for the budget. Because test numbers had been seen, the test wildtypes moved to test_seed 2 (never run before
registration); the Potts ground truth itself (data_seed) is unchanged.
Amendment 1 (2026-12-06, after the first default run and a review): (a) the mechanism gate target_rank_corr < 0.9 is
replaced by wt_not_top > 0.1 (above): the review showed the old statistic is dominated by the number of states a column
admits, not by whether the MSA ranking differs from the wildtype target, so the gate was near-vacuous. (b) A control
row evorank vs profile (the training MSA's column profile, no training; a new variant with no knob, no tuning and no
weights, whose "compressed" levels are itself): the review found every trained model below this no-model reference, and
the table should show it. (c) The design limitation above is stated plainly. (d) seeds 7 -> 10 (a job costs ~3.4 s in
the first default run; ~130 s of job time in all, profile jobs included). (e) The test wildtypes are re-drawn
(test_seed 2 -> 3) because the first default run's test readings were seen: spearman evorank 0.843, wt_ce 0.846,
msa_soft 0.889 (headline -0.004 [-0.012, 0.005], inconclusive; ablation evorank - msa_soft -0.046 [-0.058, -0.034]),
profile_spearman 0.945, the pruned-model rows, and the reviewer's longer-training check on the same draw (seed 0, 200
and 800 steps: the models 0.84-0.92, the profile 0.945). Also logged there (training-data statistics, not test):
wt_not_top 0.424, target_rank_corr 0.418; coupling_share 0.852 was read on the old test wildtypes. No other setting
changed (steps, sizes, grid, the coupling and learns gates as they were).
"""
from __future__ import annotations

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

VARIANTS = ("evorank", "wt_ce", "msa_soft", "profile")
TRAINED = ("evorank", "wt_ce", "msa_soft")  # profile: no model, no knob
NOT_TOP_GATE = 0.1  # mechanism: the wildtype residue is not the MSA target's mode at more than this fraction of positions
COUPLING_GATE = 0.95


@dataclass(frozen=True)
class Config:
    family: str = "fn3"  # fn3 | Pkinase | RRM_1
    max_gap: float = 0.5
    potts_steps: int = 60
    potts_lr: float = 0.05
    lam_h: float = 0.01
    lam_j: float = 0.01
    n_train: int = 1000
    n_val: int = 100
    n_wt: int = 8
    gibbs_sweeps: int = 10
    data_seed: int = 0
    test_seed: int = 3  # the test wildtypes only (never read by tuning); 2 before Amendment 1 (its readings were seen)
    msa_k: int = 50  # homologs of a sequence forming its MSA
    pseudocount: float = 0.5  # added to the msa_k column counts (spread over the 21 states)
    mask_rate: float = 0.15
    d_model: int = 32
    n_layer: int = 2
    n_head: int = 4
    steps: int = 200
    batch_size: int = 16
    lr_grid: tuple = (1e-3, 3e-3, 1e-2, 3e-2)
    tune_steps: int = 60
    tune_seed: int = 1000
    sparsities: tuple = (0.5,)
    compare_level: float = 0.5
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check(self.family in ("fn3", "Pkinase", "RRM_1"), f"family must be fn3, Pkinase or RRM_1, got {self.family!r}")
        check(self.potts_steps > 0 and self.potts_lr > 0 and self.lam_h >= 0 and self.lam_j >= 0, "Potts fit settings")
        check(self.n_train > self.msa_k >= 2 and self.n_val >= 2 and self.n_wt >= 1 and self.gibbs_sweeps >= 1, "sample sizes")
        check(self.pseudocount > 0 and 0 < self.mask_rate < 1, "pseudocount > 0 and 0 < mask_rate < 1")
        check(self.d_model % self.n_head == 0 and self.n_layer >= 1, "d_model divisible by n_head")
        check(self.steps > 0 and self.tune_steps > 0 and self.batch_size > 0, "steps, tune_steps, batch_size > 0")
        check(len(self.lr_grid) >= 1 and list(self.lr_grid) == sorted(self.lr_grid) and self.lr_grid[0] > 0, "lr_grid ascending, > 0")
        check(all(0 <= s < 1 for s in self.sparsities) and self.compare_level in self.sparsities, "sparsities / compare_level")


# ---------------------------------------------------------------------------------------------- targets and losses


def msa_profiles(queries: torch.Tensor, msa: torch.Tensor, k: int, pseudocount: float, exclude_self: bool) -> torch.Tensor:
    """q (Nq, L, 21): for each query its k nearest MSA rows by identity (itself excluded when exclude_self, the query
    being row r of msa for query r), column counts + pseudocount / 21, normalised."""
    same = (queries[:, None, :] == msa[None, :, :]).float().mean(-1)  # (Nq, N)
    if exclude_self:
        same.fill_diagonal_(-1.0)
    nbr = same.topk(k, dim=1).indices  # (Nq, k)
    counts = F.one_hot(msa[nbr], P.N_STATES).float().sum(1)  # (Nq, L, 21)
    q = counts + pseudocount / P.N_STATES
    return q / q.sum(-1, keepdim=True)


def ranknet_loss(logits: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Pairwise logistic ranking loss per row: mean over pairs (a, b) with q_a > q_b of softplus(-(f_a - f_b));
    logits, q (n, S). Rows without an ordered pair give 0."""
    pair = (q[:, :, None] > q[:, None, :]).float()  # (n, S, S): a ranked above b
    diff = logits[:, :, None] - logits[:, None, :]
    per = (F.softplus(-diff) * pair).sum((1, 2)) / pair.sum((1, 2)).clamp(min=1)
    return per.mean()


def mask_positions(B: int, L: int, rate: float, gen: torch.Generator) -> torch.Tensor:
    """(B, L) bool, each position with prob `rate`, at least one per row."""
    m = torch.rand(B, L, generator=gen) < rate
    first = torch.randint(0, L, (B,), generator=gen)
    m[torch.arange(B), first] = True
    return m


def objective(variant: str, model, x: torch.Tensor, q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The variant's loss on sequences x (B, L) with targets q (B, L, 21) at the masked positions `mask`."""
    logits = model(torch.where(mask, torch.full_like(x, P.MASK), x))[:, :, : P.N_STATES][mask]  # (n, 21)
    if variant == "wt_ce":
        return F.cross_entropy(logits, x[mask])
    if variant == "msa_soft":
        return -(q[mask] * F.log_softmax(logits, -1)).sum(-1).mean()
    if variant == "evorank":
        return ranknet_loss(logits, q[mask])
    raise ValueError(f"evorank: unknown variant {variant!r}; known: {VARIANTS}")


# ---------------------------------------------------------------------------------------------- data


def target_rank_stats(x: torch.Tensor, q: torch.Tensor, n: int, gen: torch.Generator) -> tuple[float, float]:
    """(mean Spearman(q_i(s), one-hot(x_si)), fraction where x_si is not q_i(s)'s mode) over n random (s, i) pairs."""
    s = torch.randint(0, x.shape[0], (n,), generator=gen)
    i = torch.randint(0, x.shape[1], (n,), generator=gen)
    qs, wt = q[s, i].numpy(), x[s, i].numpy()
    rho = [P.spearman(qs[r], np.eye(P.N_STATES)[wt[r]]) for r in range(n)]
    return float(np.mean(rho)), float(np.mean(qs.argmax(1) != wt))


def prepare(cfg: Config, res) -> dict:
    fam = P.load_family(res["protein_families"], cfg.family, cfg.max_gap)
    real = torch.as_tensor(fam["msa"])
    h, J = P.fit_potts(fam["msa"], cfg.potts_steps, cfg.potts_lr, cfg.lam_h, cfg.lam_j)
    g = torch.Generator().manual_seed(cfg.data_seed)
    n = cfg.n_train + cfg.n_val
    sample = P.gibbs_sample(h, J, real[torch.randint(0, real.shape[0], (n,), generator=g)], cfg.gibbs_sweeps, g)
    train, val = sample[: cfg.n_train].contiguous(), sample[cfg.n_train :].contiguous()
    data = {"train": train, "val": val, "h": h, "J": J,
            "q_train": msa_profiles(train, train, cfg.msa_k, cfg.pseudocount, exclude_self=True),
            "q_val": msa_profiles(val, train, cfg.msa_k, cfg.pseudocount, exclude_self=False)}
    rho, not_top = target_rank_stats(train, data["q_train"], 2000, torch.Generator().manual_seed(cfg.data_seed + 7))
    data["target_rank_corr"], data["wt_not_top"] = rho, not_top
    data["profile"] = column_profile(train)
    data["tuning"] = {}
    for v in TRAINED:
        _, info = tune(list(cfg.lr_grid), lambda lr, v=v: (None, validation_objective(
            cfg, fit(cfg, data, v, cfg.tune_seed, lr, cfg.tune_steps), data, v)), higher=False)
        data["tuning"][v] = info
    # test wildtypes (test_seed: never read above) and their exact Potts single-mutant effects
    gt = torch.Generator().manual_seed(cfg.test_seed * 7919 + 1)
    wts = P.gibbs_sample(h, J, real[torch.randint(0, real.shape[0], (cfg.n_wt,), generator=gt)], cfg.gibbs_sweeps, gt)
    data["wt"] = wts
    data["effects"] = torch.stack([P.single_mutant_effects(h, J, w) for w in wts])  # (n_wt, L, 21)
    shares = []
    for w, eff in zip(wts, data["effects"]):
        keep, field = _substitutions(w), h - h.gather(1, w[:, None])
        shares.append(P.spearman(eff[keep].numpy(), field[keep].numpy()))
    data["coupling_share"] = float(np.mean(shares))  # mean over the test wildtypes
    return data


def column_profile(msa: torch.Tensor) -> torch.Tensor:
    """(L, 21) log(column frequency + 1e-3) of the MSA: the no-model reference (the profile variant)."""
    return torch.log(F.one_hot(msa, P.N_STATES).float().mean(0) + 1e-3)


def profile_scores(prof: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    """(L, 21) the column profile's score of wt_i -> a: prof_i(a) - prof_i(wt_i)."""
    return prof - prof.gather(1, wt[:, None])


class ColumnProfile(torch.nn.Module):
    """The profile as a 'model' for the masked-position metrics: the logits of column i are prof_i at every input (no
    parameters: n_params 0)."""

    def __init__(self, prof: torch.Tensor):
        super().__init__()
        self.register_buffer("prof", prof)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.prof[None].expand(idx.shape[0], -1, -1)


def _substitutions(wt: torch.Tensor) -> torch.Tensor:
    """(L, 21) bool: the amino-acid substitutions scored (non-gap wildtype position, amino-acid target != wildtype)."""
    keep = torch.zeros(wt.shape[0], P.N_STATES, dtype=torch.bool)
    keep[:, : P.N_AA] = True
    keep[wt == P.GAP] = False
    keep[torch.arange(wt.shape[0]), wt] = False
    return keep


# ---------------------------------------------------------------------------------------------- training / evaluation


def arch_of(cfg: Config, L: int) -> dict:
    return {"length": L, "d_model": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "causal": False}


def fit(cfg: Config, data: dict, variant: str, seed: int, lr: float, steps: int, log=None) -> dict:
    x, q = data["train"], data["q_train"]
    gen = torch.Generator().manual_seed(seed)

    def batch_fn(step: int):
        idx = torch.randint(0, x.shape[0], (cfg.batch_size,), generator=gen)
        return x[idx], q[idx], mask_positions(cfg.batch_size, x.shape[1], cfg.mask_rate, gen)

    arch = arch_of(cfg, x.shape[1])
    state = P.train_seq_model(arch, lambda m, b: objective(variant, m, *b), batch_fn, lr, steps, seed, log, cfg.log_every)
    return {"arch": arch, "state": state}


@torch.no_grad()
def validation_objective(cfg: Config, model: dict, data: dict, variant: str) -> float:
    m = P.seq_model(model["arch"], model["state"])
    gen = torch.Generator().manual_seed(cfg.tune_seed + 1)
    x, q = data["val"], data["q_val"]
    return float(np.mean([float(objective(variant, m, x, q, mask_positions(x.shape[0], x.shape[1], cfg.mask_rate, gen)))
                          for _ in range(4)]))


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"evorank: unknown variant {variant!r}; known: {VARIANTS}")
    if variant == "profile":
        return {"profile": True}  # no model: evaluate reads data["profile"]
    info = data["tuning"][variant]
    model = fit(cfg, data, variant, seed, info["tuned_lr"], cfg.steps, log)
    model["tuning"] = {"tuned_lr": float(info["tuned_lr"]), "grid_edge": float(info["grid_edge"])}
    return model


@torch.no_grad()
def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    prof = data["profile"]  # the column profile of the training MSA (no model): a reference every variant shares
    is_prof = bool(model.get("profile"))
    m = ColumnProfile(prof) if is_prof else P.seq_model(model["arch"], model["state"])
    rhos, prof_rho = [], []
    for wt, eff in zip(data["wt"], data["effects"]):
        keep = _substitutions(wt)
        score = profile_scores(prof, wt) if is_prof else P.masked_marginals(m, wt)
        rhos.append(P.spearman(score[keep].numpy(), eff[keep].numpy()))
        prof_rho.append(P.spearman(profile_scores(prof, wt)[keep].numpy(), eff[keep].numpy()))
    x, q = data["val"], data["q_val"]
    gen = torch.Generator().manual_seed(cfg.tune_seed + 2)
    mask = mask_positions(x.shape[0], x.shape[1], cfg.mask_rate, gen)
    lg = m(torch.where(mask, torch.full_like(x, P.MASK), x))[:, :, : P.N_STATES][mask]
    out = {
        "spearman": float(np.mean(rhos)),
        "profile_spearman": float(np.mean(prof_rho)),
        "wt_acc": float((lg.argmax(-1) == x[mask]).float().mean()) * 100,
        "val_rank_corr": float(np.mean([P.spearman(a, b) for a, b in zip(lg.numpy()[:300], q[mask].numpy()[:300])])),
        "target_rank_corr": data["target_rank_corr"],
        "wt_not_top": data["wt_not_top"],
        "coupling_share": data["coupling_share"],
        "n_params": float(count_params(m)),
    }
    out.update(model.get("tuning", {}))
    return out


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Shared compressor: global magnitude pruning of the transformer blocks' weight matrices, no fine-tuning (the
    profile has no weights: every level is the profile itself)."""
    if model.get("profile"):
        return {level_name(s): model for s in cfg.sparsities}
    return magnitude_models(model, cfg.sparsities, include=("blocks.",))


# ---------------------------------------------------------------------------------------------- claims


def comparisons(cfg: Config) -> list[Comparison]:
    differs = Gate(f"the MSA-induced ranking differs from the wildtype target: the wildtype residue is not the MSA "
                   f"distribution's mode at more than {NOT_TOP_GATE:.0%} of the training positions", variant="evorank",
                   metric="wt_not_top", above=NOT_TOP_GATE, kind="mechanism")
    coupled = Gate(f"the mutation effects are not site-independent: Spearman with their field-only part below {COUPLING_GATE}",
                   variant="wt_ce", metric="coupling_share", below=COUPLING_GATE)
    learns = Gate("the wildtype-CE model ranks mutations above chance (Spearman > 0.05)", variant="wt_ce", metric="spearman", above=0.05)
    edge = lambda v: edge_gate(v, "tuned lr", "lr_grid")  # noqa: E731
    rows = [Comparison("spearman", "evorank", "wt_ce", better="higher", role="headline",
                       gates=(differs, coupled, learns, edge("evorank"), edge("wt_ce")),
                       text="EvoRank (ranking loss on the MSA-induced amino-acid distribution) gives a higher zero-shot Spearman "
                            "with the Potts mutation effects than wildtype masked-token cross-entropy",
                       refuted_if="the paired 95% interval of spearman(evorank) - spearman(wt_ce) lies below 0 while the MSA "
                                  "ranking differs from the wildtype target, the effects have coupling structure, wt_ce is above "
                                  "chance and both lrs are inside the grid")]
    rows.append(Comparison("spearman", "evorank", "msa_soft", better="higher", role="secondary",
                           gates=(differs, edge("evorank"), edge("msa_soft")),
                           text="ablation: the ranking loss beats soft-label cross-entropy to the same MSA distribution"))
    rows.append(Comparison("spearman", "msa_soft", "wt_ce", better="higher", role="control", gates=(differs,),
                           text="diagnostic: the MSA target alone (soft labels) beats the wildtype target"))
    rows.append(Comparison("spearman", "evorank", "profile", better="higher", role="control", gates=(edge("evorank"),),
                           text="diagnostic: EvoRank's trained model against the training MSA's column profile (no model, "
                                "no training); the review found every trained model below the profile"))
    rows.append(Comparison("wt_acc", "wt_ce", "evorank", better="higher", role="control",
                           text="diagnostic: the wildtype objective has the higher wildtype accuracy on validation sequences"))
    rows.append(Comparison("spearman", "evorank", "wt_ce", better="higher", stage="compressed", level=level_name(cfg.compare_level),
                           role="control", text=f"EvoRank keeps the higher Spearman with its blocks pruned to {level_name(cfg.compare_level)}"))
    rows.append(Comparison("n_params", "evorank", "wt_ce", role="fact", text="parameters: every variant is the same transformer"))
    return rows


SPEC = register_paper(PaperSpec(
    id="evorank",
    title="Evolution-Inspired Loss Functions for Protein Representation Learning",
    claim="EvoRank correlates better",
    Config=Config, variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    fidelity="reconstruction", resources=("protein_families",),
    data="a Potts model fitted by pseudo-likelihood to the Pfam fn3 seed alignment (Debian hmmer-examples, 98 x 84 match "
         "columns); 1,000 Gibbs samples as the training MSA, 100 for validation; 8 test wildtypes sampled with test_seed and "
         "their exact Potts single-mutant effects",
    substitutions="deep mutational scans -> Potts-model energy differences of a model fitted to a real Pfam alignment; "
                  "large pre-trained structure/sequence models -> a ~30k-parameter transformer trained from scratch; the "
                  "EvoRank loss is reconstructed from the abstract (pairwise ranking of the MSA-induced distribution)",
    compression="shared global magnitude pruning of the transformer blocks' weight matrices at each level (no fine-tuning)",
    figure="sparsity", weight=1,
))
