"""EvoRank (src/paperflow/papers/evorank.py): the ranking loss by hand, the MSA-induced profiles, the scored
substitutions, the mechanism statistic, the column-profile control, and a tiny end-to-end run on a Potts model fitted to the real family."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import ROOT
from paperflow import protein as P
from paperflow.papers import evorank as E
from paperflow.spec import Resources


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: tiny models on a shared 2-core machine run several times slower with two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_ranknet_loss_by_hand():
    q = torch.tensor([[0.5, 0.3, 0.2]])
    assert math.isclose(float(E.ranknet_loss(torch.zeros(1, 3), q)), math.log(2), rel_tol=1e-6)
    # logits in q's order with gaps of 10: every ordered pair is almost free
    assert float(E.ranknet_loss(torch.tensor([[20.0, 10.0, 0.0]]), q)) < 1e-4
    # reversed order: pairs (0,1), (0,2), (1,2) cost softplus(10), softplus(20), softplus(10)
    want = (2 * math.log1p(math.exp(10)) + math.log1p(math.exp(20))) / 3
    assert math.isclose(float(E.ranknet_loss(torch.tensor([[0.0, 10.0, 20.0]]), q)), want, rel_tol=1e-5)
    # ties carry no pair: a row of equal q gives 0
    assert float(E.ranknet_loss(torch.randn(1, 3), torch.full((1, 3), 1 / 3))) == 0.0


def test_msa_profiles_by_hand():
    msa = torch.tensor([[0, 1], [0, 2], [3, 2]])
    q = E.msa_profiles(msa, msa, k=2, pseudocount=P.N_STATES * 1.0, exclude_self=True)
    # row 0's two neighbours are rows 1 (identity 0.5) and 2 (0): column 0 counts {0: 1, 3: 1} + 1 each -> 2/23, 2/23
    assert math.isclose(float(q[0, 0, 0]), 2 / 23, rel_tol=1e-6) and math.isclose(float(q[0, 0, 3]), 2 / 23, rel_tol=1e-6)
    assert math.isclose(float(q[0, 1, 2]), 3 / 23, rel_tol=1e-6)
    assert torch.allclose(q.sum(-1), torch.ones(3, 2))


def test_substitutions_are_19_per_non_gap_position():
    wt = torch.tensor([0, 20, 5, 19])
    keep = E._substitutions(wt)
    assert int(keep.sum()) == 3 * 19 and not keep[1].any() and not keep[0, 0] and not keep[:, 20].any()


def test_target_rank_statistic_is_one_only_for_a_wildtype_matching_target():
    x = torch.tensor([[2, 3]])
    onehot = torch.nn.functional.one_hot(x, P.N_STATES).float()
    rho, not_top = E.target_rank_stats(x, onehot, 20, torch.Generator().manual_seed(0))
    assert math.isclose(rho, 1.0) and not_top == 0.0
    flat = torch.full((1, 2, P.N_STATES), 0.01)
    flat[0, :, 7] = 0.8
    rho, not_top = E.target_rank_stats(x, flat, 20, torch.Generator().manual_seed(0))
    assert rho < 0.1 and not_top == 1.0


def test_target_rank_statistic_counts_observed_states_more_than_the_wildtypes_rank():
    """Spearman against a one-hot (20 tied entries): below 0.9 as soon as q admits a second state, whether the wildtype
    is q's mode or not (what the mechanism gate's 0.9 threshold reads)."""
    x = torch.tensor([[3]])

    def rho(q_values: dict) -> float:
        q = torch.full((1, 1, P.N_STATES), 1e-3)
        for a, v in q_values.items():
            q[0, 0, a] = v
        return E.target_rank_stats(x, q, 1, torch.Generator().manual_seed(0))[0]

    assert math.isclose(rho({3: 0.9}), 1.0)
    top_of_two, second_of_two = rho({3: 0.6, 0: 0.3}), rho({3: 0.3, 0: 0.6})
    assert top_of_two < 0.9 and second_of_two < 0.9 and abs(top_of_two - second_of_two) < 0.1
    distinct = torch.linspace(0.2, 0.01, P.N_STATES)  # 21 distinct values, wildtype (3) moved to the top
    distinct[[0, 3]] = distinct[[3, 0]]
    assert math.isclose(E.target_rank_stats(x, distinct[None, None], 1, torch.Generator().manual_seed(0))[0],
                        105 / math.sqrt(770 * 105), rel_tol=1e-6)  # cov / (sd sd) of the centred ranks, by hand


def test_column_profile_scores_by_hand_and_as_a_model():
    """The profile control: log(column frequency + 1e-3) differences, by hand on a 3-row MSA, and the same numbers
    through masked_marginals when the profile acts as a model (ColumnProfile, no parameters)."""
    msa = torch.tensor([[0, 1], [0, 2], [3, 2]])
    prof = E.column_profile(msa)
    wt = torch.tensor([0, 2])
    s = E.profile_scores(prof, wt)
    assert math.isclose(float(s[0, 3]), math.log(1 / 3 + 1e-3) - math.log(2 / 3 + 1e-3), rel_tol=1e-6)
    assert math.isclose(float(s[1, 1]), math.log(1 / 3 + 1e-3) - math.log(2 / 3 + 1e-3), rel_tol=1e-6)
    assert math.isclose(float(s[1, 5]), math.log(1e-3) - math.log(2 / 3 + 1e-3), rel_tol=1e-6)
    model = E.ColumnProfile(prof)
    assert torch.allclose(P.masked_marginals(model, wt), s, atol=1e-5)
    assert sum(p.numel() for p in model.parameters()) == 0


def test_mechanism_gate_reads_wt_not_top():
    """Amendment 1: the headline's mechanism gate is wt_not_top > 0.1 (a training-data statistic)."""
    head = [c for c in E.comparisons(E.Config()) if c.role == "headline"][0]
    (gate,) = head.mechanism_gates
    assert gate.metric == "wt_not_top" and gate.above == 0.1 and gate.below is None
    assert any(c.baseline == "profile" and c.role == "control" for c in E.comparisons(E.Config()))


def test_mask_positions_has_one_per_row():
    m = E.mask_positions(500, 10, 0.0001, torch.Generator().manual_seed(0))
    assert torch.all(m.sum(1) >= 1)


@pytest.mark.skipif(not (ROOT / "resources" / "protein_families.npz").exists(), reason="resource protein_families not built here")
def test_tiny_end_to_end_run():
    cfg = E.Config(potts_steps=2, n_train=40, n_val=8, n_wt=1, gibbs_sweeps=1, msa_k=5, steps=3, tune_steps=1, lr_grid=(0.003,))
    data = E.prepare(cfg, Resources(root=str(ROOT), paths={"protein_families": str(ROOT / "resources" / "protein_families.npz")}))
    assert data["effects"].shape == (1, data["train"].shape[1], P.N_STATES)
    model = E.train(cfg, data, "evorank", 0, None)  # tuning above already trained every variant
    m = E.evaluate(cfg, model, data)
    assert -1 <= m["spearman"] <= 1 and m["target_rank_corr"] < 1
    assert -1 <= E.evaluate(cfg, E.compress(cfg, model, data, "evorank", 0)["0.50"], data)["spearman"] <= 1
    prof = E.train(cfg, data, "profile", 0, None)  # no model, no tuning
    mp = E.evaluate(cfg, prof, data)
    assert mp["spearman"] == mp["profile_spearman"] == m["profile_spearman"] and mp["n_params"] == 0
    assert E.evaluate(cfg, E.compress(cfg, prof, data, "profile", 0)["0.50"], data) == mp
