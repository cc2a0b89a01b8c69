""""Actions Speak Louder than Words: Trillion-Parameter Sequential Transducers for Generative Recommendations" (Zhai et al.),
ICML 2024 (arXiv 2402.17152). Fidelity "official-code": the authors' research code (facebookresearch/generative-recommenders,
generative_recommenders/research/modeling/sequential/hstu.py: SequentialTransductionUnitJagged,
RelativeBucketedTimeAndPositionBasedBias, _hstu_attention_maybe_from_cache; sasrec.py) was read and its layer followed; the
paper's text was read through its abstract and summaries (pages corpus). Our own code, dense (padded) tensors instead of
jagged ones.

HSTU layer (paper eqs. 1-3, as the code computes them), input X (B, N, d), N the padded length:
    U, V, Q, K = split( SiLU( LN(X) W_uvqk ) )                     (eq. 1: one fused projection, SiLU on all four)
    A = SiLU( Q K^T + rab^{p,t} ) / N,  masked causally (j <= i)    (eq. 2: pointwise attention, no softmax, no 1/sqrt(d);
                                                                    "normalised by length": the code divides by the padded N)
    Y = W_o( Dropout( U * LN(A V) ) ) + X                          (eq. 3: gating by U, a residual)
rab^{p,t}_{ij} = w^pos[j - i + N - 1] + w^ts[ clamp( floor( ln(max(|t_{i+1} - t_j|, 1)) / 0.301 ), 0, 128 ) ]
(RelativeBucketedTimeAndPositionBasedBias: 2N - 1 learned position weights and 129 learned log-time-bucket weights, shared
by the heads; the query at position i uses the timestamp t_{i+1} of the action it predicts (the request time), the last
position the target's time, as the code's ext_timestamps do; bucket width 0.301 = log10 2 in natural-log units, i.e.
about a factor 1.35 per bucket). The code builds w^pos[j - i + N - 1] with a pad/repeat trick; we index it directly
(tests/test_hstu.py checks both give the same matrix).
SASRec baseline (the same repository's sasrec.py, Kang & McAuley 2018): pre-LN blocks, causal softmax multi-head attention
(q, k, v, out projections) + a two-layer ReLU feed-forward network of width d, residuals, final LN. Both encoders share
everything else, as in the authors' ML experiments: item embeddings scaled by sqrt(d) + learned absolute positions
(LearnablePositionalEmbeddingInputFeaturesPreprocessor), dropout, L2-normalised outputs and item embeddings scored by
cosine / temperature (L2NormEmbeddingPostprocessor, temperature 0.05), next-item training with a sampled softmax (the
code's SampledSoftmaxLoss: cfg.n_neg negatives drawn uniformly from the catalogue per batch, shared by its positions, a
negative equal to the positive masked), Adam.
Variants: hstu; sasrec (same d, depth, data, steps, tuning); hstu_norab (ablation: HSTU without the relative bias, the
code's enable_relative_attention_bias=False: the only path by which timestamps enter, so this is also the no-time-signal
ablation that DESIGN.md's fair-information rule asks for).
Where we differ from paper and code: dense padded tensors (the code is jagged, fbgemm); heads = 1 and d = cfg.dim (the
code's ML-1M config: 2 blocks, 1 head, d = 50); sequences truncated to the cfg.max_len most recent actions (code: 200);
at most cfg.epochs = 32 epochs with the best validation epoch kept (the code trains ~100 epochs on ML-1M); Adam lr chosen
on validation (below); throughput on a CPU thread in
eager PyTorch (the paper's 5.3-15.2x is fused GPU kernels against FlashAttention2 at 8192 tokens).

Data: MovieLens "latest-small" (2016) as shipped in Debian's r-cran-dslabs (resource movielens: 100,004 ratings, 671 users,
9,066 movies, timestamps); substitution for the paper's ML-1M/ML-20M (not installable offline). Each user's ratings sorted
by time (ties by file order) form a sequence; leave-last-out: the last action is the test target, the second to last
the validation target, the rest the training sequence (every next item predicted, the last cfg.max_len + 1 actions).
Evaluation ranks the full catalogue for every user (no sampled candidates, as the paper), HR@10 and NDCG@10.
Equal tuning (paperflow.tuning rule): every variant's Adam lr from cfg.lr_grid on the tuning seed (cfg.tune_seed,
initialisation and batch order), best validation NDCG@10, ties to the smaller lr; test targets are never read by tuning.
Epochs (amendment 1), the same rule for every variant, in tuning and in every training run: train up to cfg.epochs,
score validation NDCG@10 after every cfg.eval_every epochs and after the last, keep the parameters of the best
validation epoch (ties to the earlier); the chosen epoch is logged (epoch_best) with epoch_grid_edge = 1 when it is the
cap (more training might have helped that variant).
(The grid got its fourth value, 0.1, before any default run, after a validation-only tuning probe put hstu and hstu_norab
on the upper edge of (0.003, 0.01, 0.03).)

Contract v3. Headline (better): HSTU's test NDCG@10 above SASRec's at equal depth and width. Mechanism gate: the relative
time/position bias is used, measured on the trained model: rab_use = 1 - NDCG@10(the same HSTU with every layer's
position and time-bucket weights set to 0) / NDCG@10 > RAB_MIN = 0.1 (fixed before any default run; the retrained
ablation below asks the different question whether the bias helps). Also logged: rab_share = E[rab^2] / (E[(QK^T)^2] +
E[rab^2]) over causal entries between real positions (the bias's share of the attention pre-activation; ~0.7 at
initialisation, ~0.03 after training in one probe, so a share threshold would have measured the initialisation).
Precondition (amendment 1): SASRec beats the popularity ranker (the catalogue ranked by training counts, the same for every
user, ties to the smaller item index): ndcg_over_pop = NDCG@10 - pop_ndcg10 > 0 on sasrec; a baseline that has not
learned more than item popularity cannot test the claim. Directional grid-edge gates on hstu and sasrec: the tuned lr
inside its grid and the best validation epoch before the cap (epoch_grid_edge < 0.5). Secondary (Holm): HR@10; the
ablation (HSTU's NDCG@10 above hstu_norab's: the bias, the only path of the timestamps, helps). Controls: hstu_norab vs
SASRec, NDCG after magnitude pruning, and the time ratios (encoder forward time relative to SASRec's, measured
interleaved in one process with random weights: paperflow.measure.interleaved_times; sasrec's own value is an A/A
measurement): they compare our unfused eager-PyTorch HSTU with SASRec's fused attention kernel
(F.scaled_dot_product_attention), an implementation comparison, not the paper's fused-kernel claim. Facts:
parameter counts (HSTU 5 d^2 per layer against SASRec's 6 d^2).
Compression: global magnitude pruning of every weight matrix (embeddings included) at cfg.sparsities, no retraining.

What the data can and cannot show (measured in review, issue 31; not used by any stage): the relative bias has almost no
time signal to read here. In this MovieLens set most users rated their movies in one sitting: among the gaps between
consecutive actions in each user's last 33, the median is 12 s and 95% are under ~25 min (median 10 s with 200 actions kept,
where 54% of users' windows contain no gap over an hour), so the time buckets barely vary within a window; the relative
position weights repeat what the learned absolute positions already give (sequences are left-aligned). A popularity
ranker (training counts) scores test NDCG@10 0.012 on this split; at 8 epochs (88 Adam steps) the tuned SASRec scores 0.011.

Amendment 1 (session 4, after review): the registered version trained every variant for a fixed 8 epochs (88 Adam steps),
far from convergence; the reviewer found SASRec below the popularity ranker (test NDCG@10 0.0110 over 7 seeds against
0.0122; validation 0.0134 on seed 0 against 0.0135), and the +0.009 headline lead a convergence-speed artefact that
vanished at 32 epochs. Changed: (a) every variant, in tuning and training alike, picks its epoch on validation up to a
cap of 32 (Config.epochs, eval_every = 2), logs epoch_best, and a directional gate epoch_grid_edge < 0.5 sits beside each
lr grid-edge gate; (b) the headline gets the precondition that SASRec beats the popularity ranker (ndcg_over_pop > 0:
"learns more than popularity" means above it, so 0 is the threshold by definition, not from any number); (c) the rab_use
mechanism gate stays unchanged (RAB_MIN = 0.1), so an unused bias reads "not testable"; (d) the L512 throughput row is
a control (unfused eager CPU HSTU against SASRec's fused SDPA kernel), no longer a secondary claim. The cap of 32 is the
reviewer's proposal, limited by the job-time budget (the authors' ML-1M configs run ~100 epochs); the lr grid is
unchanged. Test data seen: the split is leave-last-out and cannot be re-drawn; the registered default run's test numbers
(7 seeds, 8 epochs) and the reviewer's test NDCG@10 for seeds 0-2 at 32 epochs (hstu / sasrec / hstu_norab means 0.0239
/ 0.0239 / 0.0222) and the popularity ranker's test NDCG@10 (0.0122) were seen before this amendment; no threshold was
set from them, and the seeds are unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..compress.magnitude import level_name, magnitude_models
from ..data.resources import load_movielens
from ..registry import register_paper
from ..spec import Comparison, Gate, PaperSpec, check, edge_gate
from ..tuning import best_index, grid_edge

VARIANTS = ("hstu", "sasrec", "hstu_norab")
NUM_BUCKETS = 128  # the code's RelativeBucketedTimeAndPositionBasedBias(num_buckets=128)
BUCKET_WIDTH = 0.301  # the code's bucketization_fn: (log(|dt|.clamp(min=1)) / 0.301).long()
RAB_MIN = 0.1  # mechanism: the trained HSTU loses > 10% of its test NDCG when its bias is zeroed (fixed before any run)


@dataclass(frozen=True)
class Config:
    max_len: int = 32  # N: the most recent actions a sequence keeps (padded length)
    min_item_ratings: int = 5  # items rated fewer times are dropped (the usual 5-core item filter of SASRec's data)
    dim: int = 32  # d: embedding and attention width (1 head)
    layers: int = 2
    dropout: float = 0.2
    n_neg: int = 128  # sampled-softmax negatives per batch
    temperature: float = 0.05
    epochs: int = 32  # E_max: the cap; every fit keeps the epoch with the best validation NDCG@k (amendment 1)
    eval_every: int = 2  # validation NDCG@k after every eval_every epochs (and after the last)
    batch_size: int = 64  # users per step
    lr_grid: tuple = (0.003, 0.01, 0.03, 0.1)
    tune_seed: int = 1000  # initialisation and batch order of the tuning runs (not an evaluation seed)
    k: int = 10  # HR@k, NDCG@k
    timing_lengths: tuple = (64, 512)  # sequence lengths of the throughput rows (random weights)
    timing_batch: int = 2
    timing_rounds: int = 2
    timing_repeats: int = 3
    sparsities: tuple = (0.5, 0.8)
    compare_level: float = 0.5
    log_every: int = 20

    def __post_init__(self) -> None:
        for name in ("lr_grid", "sparsities"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))
        object.__setattr__(self, "timing_lengths", tuple(int(v) for v in self.timing_lengths))
        check(self.min_item_ratings >= 1, "min_item_ratings >= 1")
        check(self.max_len >= 2 and self.dim >= 2 and self.layers >= 1, "max_len >= 2, dim >= 2, layers >= 1")
        check(0 <= self.dropout < 1 and self.n_neg >= 1 and self.temperature > 0, "dropout in [0, 1), n_neg >= 1, temperature > 0")
        check(self.epochs >= 1 and self.eval_every >= 1 and self.batch_size >= 1 and self.k >= 1,
              "epochs, eval_every, batch_size, k >= 1")
        check(len(self.lr_grid) >= 1 and list(self.lr_grid) == sorted(self.lr_grid) and min(self.lr_grid) > 0,
              f"lr_grid must be positive and ascending, got {self.lr_grid}")
        check(len(self.timing_lengths) >= 1 and min(self.timing_lengths) >= 2, "timing_lengths: one or more lengths >= 2")
        check(self.timing_batch >= 1 and self.timing_rounds >= 1 and self.timing_repeats >= 1, "timing sizes >= 1")
        check(all(0 <= s < 1 for s in self.sparsities), f"sparsities must be in [0, 1), got {self.sparsities}")
        check(self.compare_level in self.sparsities, f"compare_level must be one of sparsities {self.sparsities}")
        check(self.log_every >= 1, "log_every >= 1")


# ----------------------------------------------------------------------------------------------------
# The layers


def time_bucket(dt: torch.Tensor) -> torch.Tensor:
    """The authors' log bucket of a time gap in seconds: floor(ln(max(|dt|, 1)) / 0.301), clamped to [0, 128]."""
    return (torch.log(dt.abs().clamp(min=1).double()) / BUCKET_WIDTH).long().clamp(0, NUM_BUCKETS)


def bucket_matrix(ts_ext: torch.Tensor) -> torch.Tensor:
    """(B, N, N) time buckets of bucket(t_{i+1} - t_j) from ts_ext (B, N + 1): query i's time is that of the action it
    predicts, key j's its own (the code's ext_timestamps[:, 1:] - ext_timestamps[:, :-1])."""
    return time_bucket(ts_ext[:, 1:, None] - ts_ext[:, None, :-1])


class _TableLookup(torch.autograd.Function):
    """table[index] for a small 1-D table and a large index tensor, with the backward as one bincount (the gradient of a
    gather into 129 buckets; autograd's index backward accumulates element by element, ~3x the whole layer on a CPU)."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.size = table.shape[0]
        return table[index]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        g = torch.bincount(index.reshape(-1), weights=grad.reshape(-1).double(), minlength=ctx.size).to(grad.dtype)
        return g, None


class RelativeBias(nn.Module):
    """rab^{p,t} (B, N, N): w^pos[j - i + N - 1] + w^ts[bucket(t_{i+1} - t_j)], from the bucket matrix (bucket_matrix of
    ts_ext (B, N + 1): each input action's time and, last, the time of the action the last position predicts)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.pos_w = nn.Parameter(torch.empty(2 * n - 1).normal_(0, 0.02))
        self.ts_w = nn.Parameter(torch.empty(NUM_BUCKETS + 1).normal_(0, 0.02))

    def forward(self, buckets: torch.Tensor) -> torch.Tensor:
        n = buckets.shape[1]
        idx = torch.arange(n)
        pos = self.pos_w[(idx[None, :] - idx[:, None]) + self.n - 1]  # (n, n): j - i + N - 1
        return pos[None] + _TableLookup.apply(self.ts_w, buckets)


class HSTULayer(nn.Module):
    def __init__(self, d: int, n: int, dropout: float, rab: bool) -> None:
        super().__init__()
        self.d, self.n, self.dropout = d, n, dropout
        self.uvqk = nn.Parameter(torch.empty(d, 4 * d).normal_(0, 0.02))
        self.o = nn.Linear(d, d)
        nn.init.xavier_uniform_(self.o.weight)
        self.rab = RelativeBias(n) if rab else None
        self.trace: list | None = None  # when a list, forward appends (QK^T, rab) for rab_share

    def forward(self, x: torch.Tensor, buckets: torch.Tensor | None) -> torch.Tensor:
        n = x.shape[1]
        u, v, q, k = F.silu(F.layer_norm(x, (self.d,), eps=1e-6) @ self.uvqk).split(self.d, dim=-1)
        logits = q @ k.transpose(1, 2)
        if self.rab is not None:
            bias = self.rab(buckets)
            if self.trace is not None:
                self.trace.append((logits.detach(), bias.detach()))
            logits = logits + bias
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        a = F.silu(logits) / n * causal  # pointwise attention normalised by the (padded) length
        y = u * F.layer_norm(a @ v, (self.d,), eps=1e-6)
        return self.o(F.dropout(y, self.dropout, self.training)) + x


class SASRecLayer(nn.Module):
    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.d, self.dropout = d, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor, buckets: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).split(self.d, dim=-1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + F.dropout(self.out(a), self.dropout, self.training)
        h = self.ff2(F.dropout(F.relu(self.ff1(self.ln2(x))), self.dropout, self.training))
        return x + F.dropout(h, self.dropout, self.training)


class Encoder(nn.Module):
    """Item embedding * sqrt(d) + learned positions -> dropout -> layers -> (SASRec: final LN) -> L2 normalisation."""

    def __init__(self, kind: str, n_items: int, n: int, d: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.kind, self.d, self.dropout = kind, d, dropout
        self.item = nn.Embedding(n_items + 1, d, padding_idx=0)  # 0 = padding
        nn.init.normal_(self.item.weight, 0, 1.0 / math.sqrt(d))
        with torch.no_grad():
            self.item.weight[0].zero_()
        self.pos = nn.Embedding(n, d)
        nn.init.xavier_normal_(self.pos.weight)
        if kind == "sasrec":
            self.blocks = nn.ModuleList(SASRecLayer(d, dropout) for _ in range(layers))
            self.final = nn.LayerNorm(d)
        else:
            self.blocks = nn.ModuleList(HSTULayer(d, n, dropout, rab=(kind == "hstu")) for _ in range(layers))
            self.final = None

    def forward(self, ids: torch.Tensor, ts_ext: torch.Tensor | None = None, buckets: torch.Tensor | None = None) -> torch.Tensor:
        """(B, N, d) L2-normalised outputs; HSTU's bias reads `buckets` (bucket_matrix, precomputed) or else ts_ext."""
        n = ids.shape[1]
        if self.kind == "hstu" and buckets is None:
            buckets = bucket_matrix(ts_ext)
        if buckets is not None:
            buckets = buckets.long()
        x = self.item(ids) * math.sqrt(self.d) + self.pos.weight[:n]
        x = F.dropout(x, self.dropout, self.training) * (ids > 0).unsqueeze(-1)
        for block in self.blocks:
            x = block(x, buckets)
        if self.final is not None:
            x = self.final(x)
        return F.normalize(x, dim=-1)

    def item_table(self) -> torch.Tensor:
        return F.normalize(self.item.weight, dim=-1)


def build_encoder(cfg: Config, kind: str, n_items: int, n: int | None = None) -> Encoder:
    return Encoder(kind, n_items, n or cfg.max_len, cfg.dim, cfg.layers, cfg.dropout)


# ----------------------------------------------------------------------------------------------------
# Data


def user_sequences(ml: dict, min_item_ratings: int = 1) -> tuple[list[np.ndarray], list[np.ndarray], int]:
    """Per user (ascending id), the item indices (1..n_items, by movie id order) and timestamps of their ratings sorted by
    time (stable: ties keep file order), after dropping the ratings of movies rated fewer than min_item_ratings times."""
    movies, counts = np.unique(ml["movie"], return_counts=True)
    kept = np.isin(ml["movie"], movies[counts >= min_item_ratings])
    ml = {k: ml[k][kept] for k in ("movie", "user", "timestamp")}
    movies = np.unique(ml["movie"])
    item = np.searchsorted(movies, ml["movie"]) + 1
    order = np.lexsort((np.arange(len(item)), ml["timestamp"], ml["user"]))
    users, starts = np.unique(ml["user"][order], return_index=True)
    bounds = list(starts[1:]) + [len(order)]
    items = [item[order[a:b]].astype(np.int64) for a, b in zip(starts, bounds)]
    times = [ml["timestamp"][order[a:b]].astype(np.int64) for a, b in zip(starts, bounds)]
    return items, times, len(movies)


def pack(seqs: list[np.ndarray], times: list[np.ndarray], n: int, with_target: bool) -> dict[str, torch.Tensor]:
    """Left-aligned padded batches of the last actions of each sequence. with_target=False (training): inputs are the last
    n + 1 actions but one, targets the next action at every position (0 = padding). with_target=True (evaluation): inputs
    are all actions but the last (at most n of them), the target is the last; ts_ext ends with the target's time."""
    B = len(seqs)
    ids = torch.zeros(B, n, dtype=torch.long)
    tgt = torch.zeros(B, n, dtype=torch.long)
    ts = torch.zeros(B, n + 1, dtype=torch.long)
    last = torch.zeros(B, dtype=torch.long)
    for b, (s, t) in enumerate(zip(seqs, times)):
        s, t = s[-(n + 1):], t[-(n + 1):]
        m = len(s) - 1  # inputs
        ids[b, :m] = torch.from_numpy(s[:-1])
        tgt[b, :m] = torch.from_numpy(s[1:])
        ts[b, : m + 1] = torch.from_numpy(t)
        ts[b, m + 1:] = int(t[-1])
        last[b] = m - 1
    out = {"ids": ids, "ts": ts, "last": last, "buckets": bucket_matrix(ts).to(torch.uint8)}
    out["target"] = tgt[torch.arange(B), last] if with_target else tgt
    return out


def prepare(cfg: Config, res) -> dict:
    """Leave-last-out splits of every user's time-sorted ratings, then every variant's lr on the tuning seed (validation
    targets only)."""
    items, times, n_items = user_sequences(load_movielens(res["movielens"]), cfg.min_item_ratings)
    keep = [i for i, s in enumerate(items) if len(s) >= 4]
    items, times = [items[i] for i in keep], [times[i] for i in keep]
    n = cfg.max_len
    data = {
        "n_items": n_items,
        "train": pack([s[:-2] for s in items], [t[:-2] for t in times], n, with_target=False),
        "val": pack([s[:-1] for s in items], [t[:-1] for t in times], n, with_target=True),
        "test": pack(items, times, n, with_target=True),
    }
    data["pop"] = {name: popularity_metrics(cfg, [s[:-2] for s in items], n_items, data[name]) for name in ("val", "test")}
    data["tuning"] = tune_all(cfg, data)
    return data


def popularity_metrics(cfg: Config, train_seqs: list[np.ndarray], n_items: int, split: dict) -> dict[str, float]:
    """The popularity ranker (amendment 1): every user gets the catalogue ranked by the items' counts in the training
    sequences (ties to the smaller item index, so no tie is counted in the target's favour), HR@k and NDCG@k."""
    counts = np.bincount(np.concatenate(train_seqs), minlength=n_items + 1).astype(np.float64)
    scores = torch.from_numpy(counts) - torch.arange(n_items + 1, dtype=torch.float64) / (n_items + 2)
    return rank_metrics(scores[None].repeat(split["target"].shape[0], 1), split["target"], cfg.k)


# ----------------------------------------------------------------------------------------------------
# Training and ranking


def fit(cfg: Config, data: dict, kind: str, lr: float, seed: int, log=None) -> tuple[Encoder, dict]:
    """Adam for up to cfg.epochs epochs; validation NDCG@k after every cfg.eval_every epochs and after the last; returns
    the model with the parameters of the best validation epoch (ties to the earlier one) and {"epoch_best", "val_best"}.
    The same rule for every variant, in tuning and in training (amendment 1); test targets are never read."""
    torch.manual_seed(seed)
    model = build_encoder(cfg, kind, data["n_items"])
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    tr = data["train"]
    U, gen = tr["ids"].shape[0], torch.Generator().manual_seed(seed)
    step, best = 0, {"val_best": -math.inf, "epoch_best": 0}
    best_state = None
    model.train()
    for epoch in range(cfg.epochs):
        perm = torch.randperm(U, generator=gen)
        for start in range(0, U, cfg.batch_size):
            b = perm[start : start + cfg.batch_size]
            ids, buckets, tgt = tr["ids"][b], tr["buckets"][b], tr["target"][b]
            h = model(ids, buckets=buckets)  # (B, n, d)
            valid = tgt > 0
            h, pos = h[valid], tgt[valid]
            neg = torch.randint(1, data["n_items"] + 1, (cfg.n_neg,), generator=gen)
            table = model.item_table()
            pos_logit = (h * table[pos]).sum(-1, keepdim=True)
            neg_logit = (h @ table[neg].T).masked_fill(neg[None, :] == pos[:, None], float("-inf"))
            logits = torch.cat([pos_logit, neg_logit], dim=1) / cfg.temperature
            loss = F.cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"hstu: loss is {value} at step {step}")
            if log is not None and step % cfg.log_every == 0:
                log(step, **{"train/loss": value, "train/epoch": float(epoch)})
            step += 1
        if (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs:
            val = score_split(cfg, model, data["val"])[f"ndcg{cfg.k}"]  # eval mode, no grad, no random numbers
            if log is not None:
                log(step, **{f"val/ndcg{cfg.k}": val})
            if val > best["val_best"]:
                best = {"val_best": float(val), "epoch_best": epoch + 1}
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            model.train()
    if best_state is None:
        raise FloatingPointError(f"hstu: no finite validation NDCG for {kind} at lr {lr}")
    model.load_state_dict(best_state)
    model.eval()
    return model, best


def rank_metrics(scores: torch.Tensor, target: torch.Tensor, k: int) -> dict[str, float]:
    """HR@k and NDCG@k of the target among all items (scores (U, n_items + 1), column 0 = padding, never ranked):
    rank = number of items scored strictly above the target; NDCG = 1 / log2(rank + 2) when rank < k."""
    s = scores.clone()
    s[:, 0] = float("-inf")
    tgt_score = s.gather(1, target[:, None])
    rank = (s > tgt_score).sum(1).double()
    hit = rank < k
    return {f"hr{k}": float(hit.double().mean()),
            f"ndcg{k}": float(torch.where(hit, 1.0 / torch.log2(rank + 2.0), torch.zeros_like(rank)).mean())}


@torch.no_grad()
def score_split(cfg: Config, model: Encoder, split: dict) -> dict[str, float]:
    model.eval()
    out = []
    for start in range(0, split["ids"].shape[0], 256):
        sl = slice(start, start + 256)
        h = model(split["ids"][sl], buckets=split["buckets"][sl])
        h_last = h[torch.arange(h.shape[0]), split["last"][sl]]
        out.append(h_last @ model.item_table().T)
    return rank_metrics(torch.cat(out), split["target"], cfg.k)


def tune_all(cfg: Config, data: dict) -> dict:
    """Every variant's Adam lr from cfg.lr_grid on seed cfg.tune_seed, by validation NDCG@k (ties to the smaller lr), each
    lr's fit at its best validation epoch (fit's rule)."""
    out = {}
    for kind in VARIANTS:
        scores = [fit(cfg, data, kind, lr, cfg.tune_seed)[1]["val_best"] for lr in cfg.lr_grid]
        i = best_index(scores)
        out[kind] = {"lr": cfg.lr_grid[i], "grid_edge": grid_edge(i, len(cfg.lr_grid)), "val_scores": scores}
    return out


def time_ratios(cfg: Config, kind: str, n_items: int, seed: int) -> dict[str, float]:
    """Forward seconds of this variant's encoder over SASRec's (random weights, eval mode, no grad, timing_batch sequences
    of each length), measured interleaved in this process (paperflow.measure.interleaved_times); sasrec against a second
    SASRec of the same size (A/A)."""
    from ..measure import interleaved_times

    out = {}
    torch.manual_seed(seed)
    for L in cfg.timing_lengths:
        net, ref = build_encoder(cfg, kind, n_items, L).eval(), build_encoder(cfg, "sasrec", n_items, L).eval()
        ids = torch.randint(1, n_items + 1, (cfg.timing_batch, L))
        ts = torch.cumsum(torch.randint(0, 10**5, (cfg.timing_batch, L + 1)), 1)
        with torch.no_grad():
            t = interleaved_times({"net": lambda: net(ids, ts), "ref": lambda: ref(ids, ts)}, rounds=cfg.timing_rounds,
                                  repeats=cfg.timing_repeats, warmup=1)
        out[f"time_rel_L{L}"] = t["net"] / t["ref"]
        out[f"time_ms_L{L}"] = 1e3 * t["net"]
    return out


@torch.no_grad()
def rab_share(enc: Encoder, split: dict) -> float:
    """How much of HSTU's attention pre-activation QK^T + rab the relative bias makes up, on a split's sequences:
    E[rab^2] / (E[(QK^T)^2] + E[rab^2]) over the causal entries between real positions, mean over layers (0 without a
    bias). SiLU is not shift-invariant, so the bias's magnitude (not only its variance) acts on the attention."""
    layers = [b for b in enc.blocks if isinstance(b, HSTULayer) and b.rab is not None]
    if not layers:
        return 0.0
    for b in layers:
        b.trace = []
    enc.eval()
    sums = torch.zeros(len(layers), 2, dtype=torch.float64)
    for start in range(0, split["ids"].shape[0], 256):
        ids = split["ids"][start : start + 256]
        enc(ids, buckets=split["buckets"][start : start + 256])
        real = ids > 0
        n = ids.shape[1]
        mask = torch.ones(n, n, dtype=torch.bool).tril()[None] & real[:, :, None] & real[:, None, :]
        for li, b in enumerate(layers):
            qk, bias = b.trace.pop()
            sums[li, 0] += (qk[mask].double() ** 2).sum()
            sums[li, 1] += (bias[mask].double() ** 2).sum()
    for b in layers:
        b.trace = None
    return float((sums[:, 1] / sums.sum(1)).mean())


@torch.no_grad()
def rab_use(cfg: Config, enc: Encoder, split: dict, ndcg: float) -> float:
    """How much the trained HSTU relies on its relative bias: 1 - NDCG@k(the same model with every layer's position and
    time-bucket weights set to 0) / NDCG@k (0 for a model without the bias, or with NDCG 0)."""
    layers = [b for b in enc.blocks if isinstance(b, HSTULayer) and b.rab is not None]
    if not layers or ndcg <= 0:
        return 0.0
    saved = [(b.rab.pos_w.clone(), b.rab.ts_w.clone()) for b in layers]
    for b in layers:
        b.rab.pos_w.zero_(), b.rab.ts_w.zero_()
    zeroed = score_split(cfg, enc, split)[f"ndcg{cfg.k}"]
    for b, (pw, tw) in zip(layers, saved):
        b.rab.pos_w.copy_(pw), b.rab.ts_w.copy_(tw)
    return 1.0 - zeroed / ndcg


def train(cfg: Config, data: dict, variant: str, seed: int, log) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"hstu: unknown variant {variant!r}")
    tu = data["tuning"][variant]
    model, best = fit(cfg, data, variant, tu["lr"], seed, log)
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "kind": variant,
            "n_items": int(data["n_items"]), "timing": time_ratios(cfg, variant, int(data["n_items"]), seed),
            "tuning": {"tuned_lr": float(tu["lr"]), "grid_edge": float(tu["grid_edge"]),
                       "epoch_best": float(best["epoch_best"]),
                       "epoch_grid_edge": float(best["epoch_best"] == cfg.epochs)}}


def load(cfg: Config, record: dict) -> Encoder:
    model = build_encoder(cfg, record["kind"], record["n_items"])
    model.load_state_dict(record["state"])
    return model.eval()


def compress(cfg: Config, model: dict, data: dict, variant: str, seed: int) -> dict:
    """Global magnitude pruning of every weight matrix (item and position embeddings included; biases, LayerNorms and the
    1-D relative-bias tables kept) at each of cfg.sparsities, no retraining."""
    return magnitude_models(model, cfg.sparsities)


def evaluate(cfg: Config, model: dict, data: dict) -> dict:
    enc = load(cfg, model)
    out = score_split(cfg, enc, data["test"])
    out.update({f"val_{k}": v for k, v in score_split(cfg, enc, data["val"]).items()})
    out["rab_share"] = rab_share(enc, data["test"])
    out["rab_use"] = rab_use(cfg, enc, data["test"], out[f"ndcg{cfg.k}"])
    k = cfg.k  # the popularity ranker's scores (the same for every variant) and the margin over it
    out[f"pop_ndcg{k}"], out[f"val_pop_ndcg{k}"] = data["pop"]["test"][f"ndcg{k}"], data["pop"]["val"][f"ndcg{k}"]
    out["ndcg_over_pop"] = out[f"ndcg{k}"] - out[f"pop_ndcg{k}"]
    out["n_params"] = float(sum(v.numel() for k, v in model["state"].items() if not k.startswith(("item.", "pos."))))
    out.update(model["timing"])
    out.update(model["tuning"])
    return out


# ----------------------------------------------------------------------------------------------------
# Claims


def comparisons(cfg: Config) -> list[Comparison]:
    k, L = cfg.k, cfg.timing_lengths[-1]
    mech = Gate(f"the relative time/position bias is used: the trained HSTU loses more than {RAB_MIN:.0%} of its test "
                f"NDCG@{k} when its position and time-bucket weights are set to 0, rab_use > {RAB_MIN:g}",
                variant="hstu", metric="rab_use", above=RAB_MIN, kind="mechanism")
    pop = Gate(f"SASRec learns more than item popularity: its test NDCG@{k} minus the popularity ranker's (training "
               "counts, the same full-catalogue ranking) is above 0, ndcg_over_pop > 0", variant="sasrec",
               metric="ndcg_over_pop", above=0.0, kind="precondition")

    def edges(*variants: str) -> tuple[Gate, ...]:
        """Per variant: the tuned lr inside its grid, and the best validation epoch before the cap (a best epoch at the
        cap means more training might help that variant; "grid_edge" in the metric makes the gate directional)."""
        return tuple(g for v in variants for g in (
            edge_gate(v), Gate(f"{v}: best validation epoch before the cap of {cfg.epochs} epochs", variant=v,
                               metric="epoch_grid_edge", below=0.5, kind="grid_edge")))

    edges_hs = edges("hstu", "sasrec")
    rows = [
        Comparison(f"ndcg{k}", "hstu", "sasrec", better="higher", role="headline", gates=(mech, pop) + edges_hs,
                   text=f"HSTU's next-item NDCG@{k} (full-catalogue ranking, last action of each user) above SASRec's at "
                        "equal depth and width",
                   refuted_if=f"the paired 95% interval of NDCG@{k} (HSTU - SASRec) lies below 0 (SASRec better), with "
                              "both lrs inside their grids, both best validation epochs before the cap, SASRec above "
                              "the popularity ranker and the relative bias measurably used"),
        Comparison(f"hr{k}", "hstu", "sasrec", better="higher", role="secondary", gates=edges_hs,
                   text=f"HSTU's HR@{k} above SASRec's"),
        Comparison(f"ndcg{k}", "hstu", "hstu_norab", better="higher", role="secondary", gates=edges("hstu", "hstu_norab"),
                   text="ablation: the relative time/position bias (the only path of the timestamps) raises HSTU's NDCG"),
        Comparison(f"ndcg{k}", "hstu_norab", "sasrec", better="higher", role="control", gates=edges("hstu_norab", "sasrec"),
                   text="HSTU without the bias (no timestamps, no relative positions) against SASRec"),
        Comparison(f"time_rel_L{L}", "hstu", "sasrec", better="lower", role="control",
                   text=f"implementation throughput at length {L}, not the paper's kernel claim: our unfused eager-PyTorch "
                        "HSTU (bias gather, SiLU, mask and matmul materialised) against SASRec's fused attention kernel "
                        "(F.scaled_dot_product_attention), encoder forward time relative to SASRec's below SASRec's A/A "
                        "ratio (one CPU thread, interleaved in one process, random weights)"),
        Comparison(f"ndcg{k}", "hstu", "sasrec", better="higher", stage="compressed", level=level_name(cfg.compare_level),
                   role="control", text=f"after magnitude pruning to {cfg.compare_level:.0%}, HSTU still above SASRec"),
    ]
    rows += [Comparison(f"time_rel_L{n}", "hstu", "sasrec", better="lower", role="control",
                        text=f"encoder forward time relative to SASRec at length {n}") for n in cfg.timing_lengths[:-1]]
    rows.append(Comparison("n_params", "hstu", "sasrec", role="fact",
                           text="encoder parameters without the embeddings (HSTU 5 d^2 + bias tables per layer, SASRec 6 d^2)"))
    return rows


SPEC = register_paper(PaperSpec(
    id="hstu",
    title="Actions Speak Louder than Words: Trillion-Parameter Sequential Transducers for Generative Recommendations",
    claim="HSTU higher NDCG and faster at long sequences",
    Config=Config,
    variants=VARIANTS,
    prepare=prepare, train=train, compress=compress, evaluate=evaluate, comparisons=comparisons,
    resources=("movielens",),
    data="MovieLens latest-small (dslabs' movielens, Debian r-cran-dslabs: 100,004 ratings, 671 users, 9,066 movies, "
         "timestamps; movies rated >= 5 times: 3,496); each user's time-sorted ratings, leave-last-out (last = test, "
         "second to last = validation), the 32 most recent actions kept; full-catalogue ranking",
    substitutions="Paper: ML-1M / ML-20M / Amazon Books and industrial data, sequences of 200+ (8192 for timing), fused GPU "
                  "kernels. Here: the 100k MovieLens set that installs offline, d = 32, 2 layers, 1 head, 32 actions, up to 32 "
                  "epochs with the best validation epoch kept, sampled softmax with 128 shared negatives, Adam lr chosen "
                  "on validation from a 4-value grid per variant; throughput on one CPU thread in eager PyTorch at short "
                  "lengths, as a ratio to SASRec measured interleaved",
    compression="global magnitude pruning of every weight matrix (embeddings included) at 50% / 80%, no retraining",
    fidelity="official-code",
    tradeoff=("n_params", "ndcg10"),
    weight=1,
))
