"""Protein sequence family shared by the protein papers (dplm, evorank): alignments, profile HMMs, Potts models and a
small sequence transformer.

- Alphabet: the 20 amino acids, the gap '-' (an alignment's deletion, a token of its own), a mask token (masked LMs,
  absorbing diffusion) and a begin token (autoregressive LMs). Sequences are the match columns of a family alignment
  (`match_columns`: a column is a match column when fewer than `max_gap` of its rows are gaps, hmmbuild's symfrac rule),
  so every sequence of a family has the same length and a position is an alignment column.
- Real data: the resource `protein_families` (paperflow.data.resources.build_protein_families) holds the Stockholm
  alignments and HMMER3 profile HMMs of Debian's hmmer-examples; `load_family` reads one family from it.
- Profile HMM: `parse_hmm` reads a HMMER3 text model; `hmm_loglik` is the Forward log-likelihood of ungapped sequences
  under it in glocal mode (the whole sequence is one domain, begin -> M1/I0/D1, end from M_M/D_M, no flanking states),
  Durbin et al. (1998) ch. 5 with HMMER's plan-7 transitions; `hmm_bits` is the per-residue log-odds against the
  model's node-0 insert emissions (its background).
- Potts model: `fit_potts` (pseudo-likelihood, Ekeberg et al. 2013, L2-regularised, Adam on the full batch),
  `potts_energy`, `gibbs_sample`, `single_mutant_effects` (the exact Delta E of every single substitution).
- `SeqTransformer`: token + position embeddings, pre-norm blocks of paperflow.nn.transformer, bidirectional (masked LMs,
  diffusion) or causal (autoregressive), tied output head; `masked_marginals` (the zero-shot mutation score of masked
  LMs: log p(mut) - log p(wt) at the masked position, Meier et al. 2021).
- `nn_identity`: each query's highest identity to a reference set over its non-gap-in-either columns.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .nn.transformer import Block, MultiHeadAttention, RMSNorm, TransformerConfig

AMINO = "ACDEFGHIKLMNPQRSTVWY"
GAP, MASK, BOS = 20, 21, 22
N_AA, N_STATES, VOCAB = 20, 21, 23  # amino acids; + gap (Potts states); + mask + begin (model vocabulary)
_INDEX = {a: i for i, a in enumerate(AMINO)}


# ---------------------------------------------------------------------------------------------- alignments


def parse_stockholm(text: str) -> dict[str, str]:
    """{name: aligned row} of a Stockholm alignment (blocks concatenated, in first-appearance order; upper case, '.' and
    '-' both as '-')."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("//"):
            continue
        parts = line.split()
        if len(parts) != 2:
            continue
        rows[parts[0]] = rows.get(parts[0], "") + parts[1]
    lengths = {len(r) for r in rows.values()}
    if len(lengths) != 1:
        raise ValueError(f"parse_stockholm: rows of different lengths {sorted(lengths)}")
    return {k: v.upper().replace(".", "-") for k, v in rows.items()}


def encode(seq: str) -> np.ndarray:
    """Aligned row -> int codes: amino acids 0-19, gap and any other letter (X, B, Z, U) -> GAP."""
    return np.array([_INDEX.get(c, GAP) for c in seq], dtype=np.int64)


def decode(codes: Sequence[int]) -> str:
    return "".join(AMINO[c] if c < N_AA else "-" for c in codes)


def match_columns(msa: np.ndarray, max_gap: float = 0.5) -> np.ndarray:
    """Indices of the columns whose gap fraction is below max_gap (hmmbuild's default symfrac 0.5 rule)."""
    return np.nonzero((msa == GAP).mean(0) < max_gap)[0]


def load_family(path: str, name: str, max_gap: float = 0.5) -> dict:
    """One family of the protein_families resource: {"msa": (N, L) int64 codes of its match columns, "names": [...],
    "hmm": parse_hmm(...) of the family's shipped profile HMM}."""
    with np.load(path) as z:
        sto, hmm = str(z[f"{name}_sto"]), str(z[f"{name}_hmm"])
    rows = parse_stockholm(sto)
    msa = np.stack([encode(r) for r in rows.values()])
    cols = match_columns(msa, max_gap)
    return {"msa": msa[:, cols], "names": list(rows), "hmm": parse_hmm(hmm)}


# ---------------------------------------------------------------------------------------------- profile HMM


def parse_hmm(text: str) -> dict[str, np.ndarray]:
    """A HMMER3 text profile: {"match": (M+1, 20) log emission probs (row 0 unused), "insert": (M+1, 20),
    "trans": (M+1, 7) log transition probs (m->m, m->i, m->d, i->m, i->i, d->m, d->d; node 0 = begin), "M": M}.
    HMMER stores -ln p; '*' is p = 0 (log = -inf)."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("HMM "))
    M = int(next(l.split()[1] for l in lines if l.startswith("LENG")))
    body = [l for l in lines[start + 2 :] if l.strip() and l.strip() != "//"]
    if body and body[0].split()[0] == "COMPO":
        body = body[1:]
    val = lambda tok: -math.inf if tok == "*" else -float(tok)  # noqa: E731
    match = np.full((M + 1, N_AA), -np.inf)
    insert = np.full((M + 1, N_AA), -np.inf)
    trans = np.full((M + 1, 7), -np.inf)
    insert[0] = [val(t) for t in body[0].split()[:N_AA]]
    trans[0] = [val(t) for t in body[1].split()[:7]]
    for k in range(1, M + 1):
        m_line, i_line, t_line = body[3 * k - 1], body[3 * k], body[3 * k + 1]
        parts = m_line.split()
        if int(parts[0]) != k:
            raise ValueError(f"parse_hmm: expected node {k}, got {parts[0]}")
        match[k] = [val(t) for t in parts[1 : 1 + N_AA]]
        insert[k] = [val(t) for t in i_line.split()[:N_AA]]
        trans[k] = [val(t) for t in t_line.split()[:7]]
    return {"match": match, "insert": insert, "trans": trans, "M": M}


def _lse(*xs: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(torch.stack(xs), 0)


@torch.no_grad()
def hmm_loglik(hmm: Mapping, seqs: Sequence[Sequence[int]]) -> np.ndarray:
    """Glocal Forward log-likelihood (nats) of each ungapped sequence (amino-acid codes 0-19) under the profile.

    States per node k: M_k (k = 1..M), I_k (k = 0..M-1), D_k (k = 1..M); the begin state sits in the M column of node 0.
    fM[i,k] = eM_k(x_i) + lse(fM[i-1,k-1] + t_MM(k-1), fI[i-1,k-1] + t_IM(k-1), fD[i-1,k-1] + t_DM(k-1))
    fI[i,k] = eI_k(x_i) + lse(fM[i-1,k] + t_MI(k), fI[i-1,k] + t_II(k))
    fD[i,k] = lse(fM[i,k-1] + t_MD(k-1), fD[i,k-1] + t_DD(k-1))       (solved in closed form along k, see below)
    log P(x) = lse(fM[n,M] + t_MM(M), fD[n,M] + t_DM(M)).
    The delete chain of a row is fD[i,k] = lse_{j<k} (fM[i,j] + t_MD(j) + sum_{j<l<k} t_DD(l)), one log-matrix product."""
    M = hmm["M"]
    t = torch.as_tensor(hmm["trans"], dtype=torch.float64)
    eM = torch.as_tensor(hmm["match"], dtype=torch.float64)
    eI = torch.as_tensor(hmm["insert"], dtype=torch.float64)
    tMM, tMI, tMD, tIM, tII, tDM, tDD = (t[:, j] for j in range(7))
    # C[j, k] = t_MD(j) + sum_{l=j+1}^{k-1} t_DD(l) for j < k (D_k entered from M_j), -inf otherwise; t_DD of node 0
    # (no D_0) and of node M ('*') never enter such a sum
    dd = tDD.clone()
    dd[0] = dd[M] = 0.0
    cum = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(dd, 0)])  # cum[m] = sum_{l<m} t_DD(l)
    j = torch.arange(M + 1)[:, None]
    k = torch.arange(M + 1)[None, :]
    C = tMD[:, None] + cum[k] - cum[(j + 1).clamp(max=M + 1)]
    C = torch.where(k > j, C, torch.full_like(C, -math.inf))
    lengths = torch.tensor([len(s) for s in seqs])
    n_max = int(lengths.max())
    x = torch.zeros(len(seqs), n_max, dtype=torch.long)
    for b, s in enumerate(seqs):
        x[b, : len(s)] = torch.as_tensor(np.asarray(s, dtype=np.int64))
    B = len(seqs)
    ninf = torch.full((B, M + 1), -math.inf, dtype=torch.float64)
    fM, fI = ninf.clone(), ninf.clone()
    fM[:, 0] = 0.0  # begin state at i = 0
    fD = _delete_chain(fM, C)
    out = torch.full((B,), -math.inf, dtype=torch.float64)
    for i in range(1, n_max + 1):
        xi = x[:, i - 1]
        em = eM[:, xi].T  # (B, M+1)
        ei = eI[:, xi].T
        nM = ninf.clone()
        nM[:, 1:] = em[:, 1:] + _lse(fM[:, :-1] + tMM[:-1], fI[:, :-1] + tIM[:-1], fD[:, :-1] + tDM[:-1])
        nI = ninf.clone()
        nI[:, :M] = ei[:, :M] + _lse(fM[:, :M] + tMI[:M], fI[:, :M] + tII[:M])
        fM, fI = nM, nI
        fD = _delete_chain(fM, C)
        done = lengths == i
        if done.any():
            end = _lse(fM[:, M] + tMM[M], fD[:, M] + tDM[M])
            out[done] = end[done]
    return out.numpy()


def _delete_chain(fM: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """fD[b, k] = lse_j (fM[b, j] + C[j, k]) in exp space with per-row and per-column max shifts."""
    a = fM.max(1, keepdim=True).values.clamp(min=-1e300)
    c = C.max(0, keepdim=True).values.clamp(min=-1e300)
    return torch.log(torch.exp(fM - a) @ torch.exp(C - c)) + a + c


def hmm_bits(hmm: Mapping, seqs: Sequence[Sequence[int]]) -> np.ndarray:
    """Per-residue log-odds (bits) of each ungapped sequence: (log P_hmm(x) - sum_i log q(x_i)) / (n ln 2), q = the
    model's node-0 insert emissions (HMMER's background composition)."""
    ll = hmm_loglik(hmm, seqs)
    bg = hmm["insert"][0]
    null = np.array([bg[np.asarray(s)].sum() for s in seqs])
    n = np.array([len(s) for s in seqs], dtype=float)
    return (ll - null) / (n * math.log(2))


def ungap(codes: Sequence[int]) -> np.ndarray:
    c = np.asarray(codes)
    return c[c < N_AA]


# ---------------------------------------------------------------------------------------------- Potts model


def potts_energy(h: torch.Tensor, J: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """E(x) = sum_i h_i(x_i) + sum_{i<j} J_ij(x_i, x_j) (higher = fitter; P(x) ~ exp E) for x (B, L) in 0..q-1;
    h (L, q), J (L, L, q, q) symmetric (J_ij(a, b) = J_ji(b, a)) with zero diagonal blocks."""
    oh = F.one_hot(x, h.shape[1]).to(h.dtype)  # (B, L, q)
    field = (oh * h).sum((1, 2))
    pair = torch.einsum("nia,ijac,njc->n", oh, J, oh) / 2
    return field + pair


def _symmetrise(J: torch.Tensor) -> torch.Tensor:
    L = J.shape[0]
    J = (J + J.permute(1, 0, 3, 2)) / 2
    return J * (1 - torch.eye(L, dtype=J.dtype))[:, :, None, None]


def fit_potts(msa: np.ndarray, steps: int = 200, lr: float = 0.05, lam_h: float = 0.01, lam_j: float = 0.01,
              weights: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric pseudo-likelihood Potts fit (Ekeberg et al. 2013; plmc's scheme): maximise
    sum_s w_s sum_i log P(x_si | x_s,-i) - lam_h |h|^2 - lam_j |J|^2 over the 21 states (amino acids + gap), full-batch
    Adam from h = log column frequencies, J = 0; J is symmetrised (J_ij + J_ji^T) / 2 after the fit. Deterministic.
    Returns (h (L, q), J (L, L, q, q) with zero diagonal blocks)."""
    x = torch.as_tensor(msa, dtype=torch.long)
    n, L = x.shape
    q = N_STATES
    w = torch.ones(n) if weights is None else torch.as_tensor(weights, dtype=torch.float32)
    w = w / w.sum()
    oh = F.one_hot(x, q).float().reshape(n, L * q)
    freq = (oh.reshape(n, L, q) * w[:, None, None]).sum(0) + 1e-3
    h = torch.log(freq / freq.sum(1, keepdim=True)).clone().requires_grad_(True)
    J = torch.zeros(L * q, L * q, requires_grad=True)  # J[(j, b), (i, a)]: coupling read by position i from position j
    off = (1 - torch.eye(L)).repeat_interleave(q, 0).repeat_interleave(q, 1)
    opt = torch.optim.Adam([h, J], lr=lr)
    for _ in range(steps):
        Jm = J * off
        logits = h[None] + (oh @ Jm).reshape(n, L, q)  # conditional logits of x_i given the rest
        nll = -(F.log_softmax(logits, -1) * oh.reshape(n, L, q)).sum((1, 2))
        loss = (w * nll).sum() + lam_h * h.pow(2).sum() + lam_j * Jm.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    Jf = (J.detach() * off).reshape(L, q, L, q).permute(2, 0, 3, 1)  # [i, j, a, b] = J[(j, b), (i, a)]
    return h.detach(), _symmetrise(Jf)


@torch.no_grad()
def gibbs_sample(h: torch.Tensor, J: torch.Tensor, init: torch.Tensor, sweeps: int, gen: torch.Generator,
                 temperature: float = 1.0) -> torch.Tensor:
    """Gibbs sampling from P(x) ~ exp(E(x) / temperature): `sweeps` systematic sweeps over positions of the chains
    `init` (B, L)."""
    x = init.clone()
    B, L = x.shape
    q = h.shape[1]
    oh = F.one_hot(x, q).to(h.dtype).reshape(B, L * q)
    Jf = J.permute(1, 3, 0, 2).reshape(L * q, L * q)  # [(j, b), (i, a)] = J_ij(a, b)
    for _ in range(sweeps):
        for i in range(L):
            logits = (h[i] + oh @ Jf[:, i * q : (i + 1) * q]) / temperature
            new = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
            x[:, i] = new
            oh[:, i * q : (i + 1) * q] = F.one_hot(new, q).to(h.dtype)
    return x


def single_mutant_effects(h: torch.Tensor, J: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    """(L, q) matrix of E(wt with x_i = a) - E(wt) (0 at the wildtype residue): h_i(a) - h_i(wt_i) + sum_j [J_ij(a, wt_j) -
    J_ij(wt_i, wt_j)], exact for a pairwise model."""
    L = wt.shape[0]
    ctx = J[torch.arange(L)[:, None], torch.arange(L)[None, :], :, wt[None, :]].sum(1)  # (L, q): sum_j J_ij(a, wt_j)
    d = h + ctx
    return d - d.gather(1, wt[:, None])


# ---------------------------------------------------------------------------------------------- sequence transformer


class SDPAttention(MultiHeadAttention):
    """Multi-head self-attention by torch's scaled_dot_product_attention; bidirectional unless `causal`."""

    causal = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class CausalSDPAttention(SDPAttention):
    causal = True


class SeqTransformer(nn.Module):
    """Protein sequence model: token + learned position embeddings, paperflow.nn.transformer blocks (pre-norm, GELU MLP),
    final RMSNorm and a head tied to the token embedding. causal=False: a masked LM / absorbing-diffusion denoiser;
    causal=True: an autoregressive LM (position t predicts token t+1)."""

    def __init__(self, length: int, d_model: int = 64, n_layer: int = 2, n_head: int = 4, causal: bool = False) -> None:
        super().__init__()
        cfg = TransformerConfig(vocab_size=VOCAB, block_size=length + 1, n_layer=n_layer, n_head=n_head, d_model=d_model)
        attn = CausalSDPAttention if causal else SDPAttention
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(length + 1, d_model)
        self.blocks = nn.ModuleList(Block(cfg, attn) for _ in range(n_layer))
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(idx))


def seq_model(arch: Mapping, state: Mapping | None = None) -> SeqTransformer:
    """A SeqTransformer from its arch record {"length", "d_model", "n_layer", "n_head", "causal"} (and a state dict)."""
    m = SeqTransformer(int(arch["length"]), int(arch["d_model"]), int(arch["n_layer"]), int(arch["n_head"]), bool(arch["causal"]))
    if state is not None:
        m.load_state_dict(dict(state))
    m.eval()
    return m


@torch.no_grad()
def masked_marginals(model: SeqTransformer, wt: torch.Tensor, positions: Sequence[int] | None = None,
                     batch: int = 128) -> torch.Tensor:
    """(L, 21) log p(a | wt with position i masked) - log p(wt_i | same), the masked-marginal mutation score over the
    21 sequence states (amino acids and gap), one masked copy of wt per position."""
    L = wt.shape[0]
    pos = list(range(L)) if positions is None else list(positions)
    out = torch.zeros(L, N_STATES)
    for a in range(0, len(pos), batch):
        ps = torch.tensor(pos[a : a + batch])
        x = wt[None].repeat(len(ps), 1)
        x[torch.arange(len(ps)), ps] = MASK
        logp = F.log_softmax(model(x)[torch.arange(len(ps)), ps, :N_STATES], -1)
        out[ps] = logp - logp.gather(1, wt[ps][:, None])
    return out


def nn_identity(queries: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """For each aligned query row, its highest identity to a reference row: identical residues / columns where either row
    has a residue (gap-gap columns ignored), so two all-gap rows do not count as identical."""
    q = torch.as_tensor(queries)
    r = torch.as_tensor(refs)
    same = ((q[:, None, :] == r[None, :, :]) & (q[:, None, :] < N_AA)).sum(-1).float()
    either = ((q[:, None, :] < N_AA) | (r[None, :, :] < N_AA)).sum(-1).clamp(min=1).float()
    return (same / either).max(1).values.numpy()


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation with average ranks for ties (scipy.stats.spearmanr's definition)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def train_seq_model(arch: Mapping, loss_fn, batch_fn, lr: float, steps: int, seed: int, log=None,
                    log_every: int = 50) -> dict:
    """Adam on a fresh SeqTransformer (init from torch.manual_seed(seed)) for `steps` steps of loss_fn(model, batch_fn(step));
    returns its state dict."""
    from .loop import train_loop

    torch.manual_seed(seed)
    model = seq_model(arch)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    train_loop(list(model.parameters()), batch_fn, lambda b: loss_fn(model, b), opt, steps, log=log, log_every=log_every,
               modules=[model])
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
