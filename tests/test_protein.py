"""paperflow.protein (shared by dplm and evorank): profile-HMM Forward against brute-force path enumeration, Potts
energies, Gibbs sampling against the exact distribution, the sequence transformer's attention, identities, the
protein_families resource."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from conftest import ROOT
from paperflow import protein as P
from paperflow.nn.transformer import MultiHeadAttention


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: tiny models on a shared 2-core machine run several times slower with two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _random_hmm(M: int, rng: np.random.Generator) -> dict:
    def logp(n):
        return np.log(rng.dirichlet(np.ones(n)))

    match = np.full((M + 1, 20), -np.inf)
    insert = np.stack([logp(20) for _ in range(M + 1)])
    trans = np.full((M + 1, 7), -np.inf)
    for k in range(M + 1):
        match[k] = logp(20) if k else -np.inf
        m = logp(3)  # m->m, m->i, m->d
        i = logp(2)  # i->m, i->i
        d = logp(2)  # d->m, d->d
        trans[k] = [m[0], m[1], m[2], i[0], i[1], d[0], d[1]]
    trans[0, 5:] = -np.inf  # no D_0
    trans[M] = [0.0, -np.inf, -np.inf, 0.0, -np.inf, 0.0, -np.inf]  # M_M -> E, D_M -> E (HMMER's last node)
    return {"match": match, "insert": insert, "trans": trans, "M": M}


def _brute_force(hmm: dict, x: list[int]) -> float:
    """log P(x) summed over every glocal state path (recursion over (state, node, position))."""
    M, t, eM, eI = hmm["M"], hmm["trans"], hmm["match"], hmm["insert"]
    MM, MI, MD, IM, II, DM, DD = range(7)

    def go(state: str, k: int, i: int) -> float:  # log prob of emitting x[i:] and ending, from `state` at node k
        terms = []
        if state in ("B", "M"):
            if state == "M" and k == M:
                return t[M, MM] if i == len(x) else -math.inf
            if i < len(x):
                terms.append(t[k, MM] + eM[k + 1, x[i]] + go("M", k + 1, i + 1))
                terms.append(t[k, MI] + eI[k, x[i]] + go("I", k, i + 1))
            terms.append(t[k, MD] + go("D", k + 1, i))
        elif state == "I":
            if i < len(x):
                terms.append(t[k, IM] + eM[k + 1, x[i]] + go("M", k + 1, i + 1))
                terms.append(t[k, II] + eI[k, x[i]] + go("I", k, i + 1))
        else:  # D
            if k == M:
                return t[M, DM] if i == len(x) else -math.inf
            if i < len(x):
                terms.append(t[k, DM] + eM[k + 1, x[i]] + go("M", k + 1, i + 1))
            terms.append(t[k, DD] + go("D", k + 1, i))
        terms = [v for v in terms if v > -math.inf]
        return float(np.logaddexp.reduce(terms)) if terms else -math.inf

    return go("B", 0, 0)


def test_forward_equals_the_sum_over_every_path():
    rng = np.random.default_rng(0)
    hmm = _random_hmm(3, rng)
    seqs = [[int(a) for a in rng.integers(0, 20, n)] for n in (1, 2, 3, 4, 5, 3)]
    got = P.hmm_loglik(hmm, seqs)
    want = [_brute_force(hmm, s) for s in seqs]
    assert np.allclose(got, want, atol=1e-9), (got, want)


def test_forward_probabilities_sum_to_at_most_one():
    """Summed over every sequence of lengths 0..3 of a 2-letter sub-alphabet the probabilities cannot exceed 1."""
    rng = np.random.default_rng(1)
    hmm = _random_hmm(2, rng)
    seqs = [list(s) for n in (1, 2, 3) for s in itertools.product(range(20), repeat=n)][:8000]
    assert float(np.exp(P.hmm_loglik(hmm, seqs)).sum()) <= 1.0 + 1e-9


def test_parse_hmm_reads_a_hmmer3_file():
    text = """HMMER3/f [3.2 | August 2017]
NAME  toy
LENG  1
ALPH  amino
HMM          A        C        D        E        F        G        H        I        K        L        M        N        P        Q        R        S        T        V        W        Y
            m->m     m->i     m->d     i->m     i->i     d->m     d->d
  COMPO   2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573
          2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573
          0.00000        *        *  0.00000        *  0.00000        *
      1   0.69315  0.69315        *        *        *        *        *        *        *        *        *        *        *        *        *        *        *        *        *        *      1 a - - -
          2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573  2.99573
          0.00000        *        *  0.00000        *  0.00000        *
//
"""
    hmm = P.parse_hmm(text)
    assert hmm["M"] == 1 and np.isclose(np.exp(hmm["match"][1, 0]), 0.5) and hmm["match"][1, 2] == -np.inf
    # one-node model: P("A") = 0.5 (B -> M1 -> E), P("D") = 0
    ll = P.hmm_loglik(hmm, [[0], [2], [1]])
    assert np.allclose(np.exp(ll), [0.5, 0.0, 0.5])


def test_potts_single_mutant_effects_equal_energy_differences():
    torch.manual_seed(0)
    L, q = 5, P.N_STATES
    h = torch.randn(L, q, dtype=torch.float64)
    J = P._symmetrise(torch.randn(L, L, q, q, dtype=torch.float64))
    wt = torch.randint(0, q, (L,))
    d = P.single_mutant_effects(h, J, wt)
    for i, a in [(0, 3), (2, 7), (4, 20), (1, int(wt[1]))]:
        mut = wt.clone()
        mut[i] = a
        want = P.potts_energy(h, J, mut[None]) - P.potts_energy(h, J, wt[None])
        assert torch.allclose(d[i, a], want[0])


def test_gibbs_sampler_matches_the_exact_two_site_distribution():
    torch.manual_seed(0)
    q = P.N_STATES
    h = torch.randn(2, q) * 0.5
    J = P._symmetrise(torch.randn(2, 2, q, q))
    states = torch.cartesian_prod(torch.arange(q), torch.arange(q))
    p = torch.softmax(P.potts_energy(h, J, states), 0)
    gen = torch.Generator().manual_seed(1)
    x = P.gibbs_sample(h, J, torch.zeros(20000, 2, dtype=torch.long), 4, gen)
    emp = torch.bincount(x[:, 0] * q + x[:, 1], minlength=q * q).float() / x.shape[0]
    assert 0.5 * (emp - p).abs().sum() < 0.08


def test_pseudo_likelihood_fit_is_symmetric_and_learns_a_coupling():
    """Two columns that always agree: the fitted coupling of the agreeing pair beats a disagreeing one."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, 60)
    msa = np.stack([a, a, rng.integers(0, 4, 60)], 1)
    h, J = P.fit_potts(msa, steps=60, lr=0.1)
    assert torch.allclose(J, J.permute(1, 0, 3, 2)) and float(J[0, 0].abs().max()) == 0.0
    assert float(J[0, 1, 2, 2]) > float(J[0, 1, 2, 3]) + 0.1


def test_causal_sdp_attention_equals_the_shared_causal_attention():
    torch.manual_seed(0)
    ref = MultiHeadAttention(16, 4)
    ours = P.CausalSDPAttention(16, 4)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 7, 16)
    assert torch.allclose(ref(x), ours(x), atol=1e-5)


def test_bidirectional_model_sees_the_future_and_causal_does_not():
    torch.manual_seed(0)
    x = torch.randint(0, 21, (1, 6))
    y = x.clone()
    y[0, 5] = (x[0, 5] + 1) % 21
    for causal, changes in ((False, True), (True, False)):
        m = P.SeqTransformer(6, 16, 1, 4, causal=causal)
        diff = (m(x)[0, 0] - m(y)[0, 0]).abs().max()
        assert bool(diff > 1e-6) == changes


def test_masked_marginals_are_zero_at_the_wildtype_and_normalised():
    torch.manual_seed(0)
    m = P.SeqTransformer(5, 16, 1, 4).eval()
    wt = torch.tensor([0, 3, 20, 7, 1])
    mm = P.masked_marginals(m, wt)
    assert torch.allclose(mm.gather(1, wt[:, None]), torch.zeros(5, 1))
    assert torch.all(-torch.logsumexp(mm, 1) < 0)  # log p(wt) < 0


def test_nn_identity_and_spearman_by_hand():
    q = np.array([[0, 1, 2, 20], [20, 20, 20, 20]])
    r = np.array([[0, 1, 3, 20], [5, 5, 5, 5]])
    # row 0 vs r0: 2 identical of 3 columns with a residue; row 1 (all gap) identical to nothing
    assert np.allclose(P.nn_identity(q, r), [2 / 3, 0.0])
    from scipy.stats import spearmanr

    a, b = np.array([1.0, 2, 2, 5, 0]), np.array([0.3, 0.1, 0.1, 0.9, 0.2])
    assert np.isclose(P.spearman(a, b), spearmanr(a, b).correlation)


def test_stockholm_and_match_columns():
    text = "# STOCKHOLM 1.0\ns1 AC-D\ns2 A.-E\n\ns1 FG\ns2 F-\n//\n"
    rows = P.parse_stockholm(text)
    assert rows == {"s1": "AC-DFG", "s2": "A--EF-"}
    msa = np.stack([P.encode(r) for r in rows.values()])
    assert list(P.match_columns(msa, 0.5)) == [0, 3, 4]  # columns with < 50% gaps


@pytest.mark.skipif(not (ROOT / "resources" / "protein_families.npz").exists(), reason="resource protein_families not built here")
def test_protein_families_resource_and_the_pfam_hmm_scores_real_above_shuffled():
    fam = P.load_family(str(ROOT / "resources" / "protein_families.npz"), "fn3")
    assert fam["msa"].shape == (98, 84) and fam["hmm"]["M"] == 86
    real = [P.ungap(r) for r in fam["msa"][:10]]
    rng = np.random.default_rng(0)
    shuffled = [rng.permutation(s) for s in real]
    assert P.hmm_bits(fam["hmm"], real).mean() > 0 > P.hmm_bits(fam["hmm"], shuffled).mean()


def _forward_cell_by_cell(hmm: dict, x) -> float:
    """The glocal Forward recursion of Durbin et al. ch. 5 written cell by cell in log space (no delete-chain matrix
    product, no exp-space shifts): an independent check of hmm_loglik on long sequences."""
    M, t, eM, eI = hmm["M"], hmm["trans"], hmm["match"], hmm["insert"]
    MM, MI, MD, IM, II, DM, DD = range(7)
    n, lae = len(x), np.logaddexp
    fM, fI, fD = (np.full((n + 1, M + 1), -np.inf) for _ in range(3))
    fM[0, 0] = 0.0
    for i in range(n + 1):
        for k in range(M + 1):
            if i and k:
                d = fD[i - 1, k - 1] + t[k - 1, DM] if k > 1 else -np.inf
                fM[i, k] = eM[k, x[i - 1]] + lae(lae(fM[i - 1, k - 1] + t[k - 1, MM], fI[i - 1, k - 1] + t[k - 1, IM]), d)
            if i and k < M:
                fI[i, k] = eI[k, x[i - 1]] + lae(fM[i - 1, k] + t[k, MI], fI[i - 1, k] + t[k, II])
            if k:
                d = fD[i, k - 1] + t[k - 1, DD] if k > 1 else -np.inf
                fD[i, k] = lae(fM[i, k - 1] + t[k - 1, MD], d)
    return float(lae(fM[n, M] + t[M, MM], fD[n, M] + t[M, DM]))


@pytest.mark.skipif(not (ROOT / "resources" / "protein_families.npz").exists(), reason="resource protein_families not built here")
def test_forward_on_the_real_fn3_model_equals_the_cell_by_cell_recursion():
    """The real 86-node Pfam model, real sequences (77-84 residues) and random ones shorter and longer than the model."""
    fam = P.load_family(str(ROOT / "resources" / "protein_families.npz"), "fn3")
    rng = np.random.default_rng(0)
    seqs = [P.ungap(r) for r in fam["msa"][:3]] + [rng.integers(0, 20, n) for n in (5, 120)]
    got = P.hmm_loglik(fam["hmm"], seqs)
    want = [_forward_cell_by_cell(fam["hmm"], list(s)) for s in seqs]
    assert np.allclose(got, want, rtol=0, atol=1e-8), (got, want)


def test_build_protein_families_from_the_package(tmp_path):
    from paperflow.data.resources import HMMER_DEB, build_protein_families, get_resource, npz_digest

    deb = ROOT / "sources" / HMMER_DEB
    if not deb.exists():
        pytest.skip("hmmer-examples .deb not in sources/")
    build_protein_families([deb], tmp_path / "p.npz")
    assert npz_digest(tmp_path / "p.npz") == get_resource("protein_families").sha256
