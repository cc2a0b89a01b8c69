"""DPLM (src/paperflow/papers/dplm.py): the diffusion weighting and corruption, the loss by hand, the samplers, the
pseudo-perplexity of a uniform model, and a tiny end-to-end run on the real family."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import ROOT
from paperflow import protein as P
from paperflow.papers import dplm as D
from paperflow.spec import Resources


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: tiny models on a shared 2-core machine run several times slower with two."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_weighting_is_the_codes_linear_schedule():
    t = torch.tensor([1, 50, 100])
    assert torch.allclose(D.diffusion_weight(t, 100, True), torch.tensor([1.0, 0.51, 0.01]))
    assert torch.allclose(D.diffusion_weight(t, 100, False), torch.ones(3))


def test_corruption_masks_with_probability_t_over_T():
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 20, (4000, 50))
    xt, mask, t = D.diffusion_corrupt(x0, 10, gen)
    assert torch.equal(xt[mask], torch.full_like(xt[mask], P.MASK)) and torch.equal(xt[~mask], x0[~mask])
    for tv in (1, 5, 10):
        rows = t == tv
        assert abs(float(mask[rows].float().mean()) - tv / 10) < 0.02


def test_diffusion_loss_by_hand():
    """Two sequences of 2 tokens, uniform logits over the vocabulary: CE = log V at every masked token; weights
    (T-t+1)/T with T=4, t = (1, 4): masked tokens (2 in row 0, 1 in row 1) -> (2*1 + 1*0.25) log V / 3."""
    logits = torch.zeros(2, 2, P.VOCAB)
    x0 = torch.tensor([[0, 1], [2, 3]])
    mask = torch.tensor([[True, True], [False, True]])
    t = torch.tensor([1, 4])
    want = (2 * 1.0 + 0.25) * math.log(P.VOCAB) / 3
    assert math.isclose(float(D.diffusion_loss(logits, x0, mask, t, 4, True)), want, rel_tol=1e-6)
    assert math.isclose(float(D.diffusion_loss(logits, x0, mask, t, 4, False)), math.log(P.VOCAB), rel_tol=1e-6)


def test_mlm_corruption_proportions():
    gen = torch.Generator().manual_seed(0)
    x0 = torch.full((2000, 50), 3)
    x, sel = D.mlm_corrupt(x0, 0.15, gen)
    assert abs(float(sel.float().mean()) - 0.15) < 0.01
    masked = float((x[sel] == P.MASK).float().mean())
    assert abs(masked - 0.8) < 0.02 and torch.equal(x[~sel], x0[~sel])


class _Fixed(torch.nn.Module):
    """A 'model' whose logits put all mass on state 4 (and would pick MASK/BOS if the sampler allowed them)."""

    def forward(self, idx):
        out = torch.full((*idx.shape, P.VOCAB), -30.0)
        out[..., 4] = 0.0
        out[..., P.MASK] = 10.0
        return out


@pytest.mark.parametrize("causal", [False, True])
def test_samplers_fill_every_position_with_sequence_states(causal):
    arch = {"length": 9, "causal": causal}
    x = D.generate(_Fixed(), arch, 5, 4, torch.Generator().manual_seed(0))
    assert x.shape == (5, 9) and torch.equal(x, torch.full_like(x, 4))


def test_pseudo_perplexity_of_a_uniform_model_is_the_number_of_states():
    class Zero(torch.nn.Module):
        def forward(self, idx):
            return torch.zeros(*idx.shape, P.VOCAB)

    x = torch.randint(0, 21, (3, 6))
    assert math.isclose(D.pseudo_perplexity(Zero(), {"causal": False}, x), P.N_STATES, rel_tol=1e-5)


@pytest.mark.skipif(not (ROOT / "resources" / "protein_families.npz").exists(), reason="resource protein_families not built here")
def test_tiny_end_to_end_run():
    cfg = D.Config(n_val=4, steps=3, tune_steps=1, lr_grid=(0.003,), n_gen=3, gen_steps=4)
    data = D.prepare(cfg, Resources(root=str(ROOT), paths={"protein_families": str(ROOT / "resources" / "protein_families.npz")}))
    assert data["real_bits"] > 0
    for v in ("dplm", "ar"):  # the masked and the causal path (tuning above already trained every variant)
        model = D.train(cfg, data, v, 0, None)
        m = D.evaluate(cfg, model, data)
        assert np.isfinite(m["gen_bits"]) and 0 <= m["gen_nn_identity"] <= 1 and m["val_ppl"] > 1
        pruned = D.compress(cfg, model, data, v, 0)["0.50"]
        assert np.isfinite(D.evaluate(cfg, pruned, data)["gen_bits"])
