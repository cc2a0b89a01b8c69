"""attn_lipschitz: the attention map equals the Llama layer's, power iteration finds known spectral norms,
the adversarial construction has the stated logit gap, the bound holds, and the stages run on a tiny Llama."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import attn_lipschitz as P
from paperflow.spec import ConfigError
from tiny_llama import tiny_llama, tiny_resources

torch.manual_seed(0)


def random_weights(d=16, heads=4, kv=2, std=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    dh = d // heads
    return {"q": torch.randn(heads * dh, d, generator=g) * std, "k": torch.randn(kv * dh, d, generator=g) * std,
            "v": torch.randn(kv * dh, d, generator=g) * std, "o": torch.randn(d, heads * dh, generator=g) * std,
            "norm": 1 + 0.1 * torch.randn(d, generator=g), "eps": 1e-5, "n_heads": heads, "n_kv_heads": kv,
            "head_dim": dh}


@pytest.mark.parametrize("masked", [False, True])
def test_attention_equals_the_llama_layer_without_rope(masked):
    lm = tiny_llama(seed=1)
    lm.config._attn_implementation = "eager"
    w = P.layer_weights(lm, 0)
    x = torch.randn(7, lm.config.hidden_size)
    att = lm.model.layers[0].self_attn
    dh = w["head_dim"]
    identity_rope = (torch.ones(1, 7, dh), torch.zeros(1, 7, dh))  # cos=1, sin=0: no rotation
    mask = torch.zeros(1, 1, 7, 7)
    if masked:
        mask = mask.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
    with torch.no_grad():
        ref = att(x[None], position_embeddings=identity_rope, attention_mask=mask)[0][0]
        ours = P.attention(x, w, masked)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)
    norm_ref = lm.model.layers[0].input_layernorm(x)
    torch.testing.assert_close(P.rms_norm(x, w["norm"], w["eps"]), norm_ref, atol=1e-6, rtol=1e-5)


def test_power_iteration_on_a_linear_map_gives_its_spectral_norm():
    m = torch.randn(5, 5)
    f = lambda x: x @ m.T  # J = I_n (x) M, so ||J||_2 = ||M||_2
    lip = P.local_lipschitz(f, torch.randn(6, 5), torch.Generator().manual_seed(0), 1e-10, 500)
    assert lip == pytest.approx(float(torch.linalg.matrix_norm(m, ord=2)), rel=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_uniform_attention_has_the_analytic_lipschitz_constant(masked):
    """W_Q = 0: f(X) = C X OV^T with C the averaging matrix (all 1/n, or 1/i over j <= i when masked), so
    J = C (x) OV and ||J|| = ||C||_2 ||OV||_2 (= ||OV||_2 unmasked, for every n)."""
    w = random_weights()
    w["q"] = torch.zeros_like(w["q"])
    _, ov = P.head_matrices(w)
    ov_sum = sum(ov)  # all heads see the same uniform attention, so they add up
    for n in (3, 9):
        c = torch.full((n, n), 1.0 / n)
        if masked:
            c = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
        expected = float(torch.linalg.matrix_norm(c, ord=2) * torch.linalg.matrix_norm(ov_sum, ord=2))
        f = P.layer_map(w, masked, norm=False)
        lip = P.local_lipschitz(f, torch.randn(n, 16), torch.Generator().manual_seed(1), 1e-10, 500)
        assert lip == pytest.approx(expected, rel=1e-4)


def test_adversarial_input_has_the_requested_logit_gap_and_the_bound_holds():
    w = random_weights(std=0.5)
    a, ov = P.head_matrices(w)
    xs = P.adversarial_inputs(w, norm=False, lengths=(2, 8, 32), gap=3.0)
    x = xs[1]
    assert x.shape == (8, 16) and torch.allclose(x[2:], x[1].expand(6, -1))  # one special token, n-1 copies
    vals = [P.real_eigen(a_h)[0] for a_h in a]
    h = max(range(len(a)), key=lambda i: abs(vals[i]).max())
    s = x @ a[h] @ x.T  # s_ij = x_i^T A_h x_j
    assert float(s[1, 0] - s[1, 2]) == pytest.approx(3.0, rel=1e-4)  # token 0 leads the others by the gap
    f = P.layer_map(w, False, False)
    g = torch.Generator().manual_seed(0)
    for x in xs + [torch.randn(10, 16) * 3]:
        assert P.local_lipschitz(f, x, g, 1e-6, 300) <= P.attention_bound(x, a, ov)


def test_normalized_adversarial_input_is_symmetric_on_the_sphere():
    w = random_weights(std=0.5)
    x = P.adversarial_inputs(w, norm=True, lengths=(5,), gap=3.0)[0]
    y = P.rms_norm(x, w["norm"], w["eps"])
    torch.testing.assert_close(y[0], -y[1], atol=1e-5, rtol=1e-4)  # [-u, u, ..., u] after normalization
    f = P.layer_map(w, True, True)
    a, ov = P.head_matrices(w)
    assert P.local_lipschitz(f, x, torch.Generator().manual_seed(0), 1e-6, 300) <= P.layer_bound(x, w, True, a, ov)


def test_slope_recovers_a_power_law():
    n = [4, 8, 16, 32]
    assert P.slope(n, [3 * k ** 0.5 for k in n]) == pytest.approx(0.5)
    assert P.slope(n, [2.0] * 4) == pytest.approx(0.0, abs=1e-12)


def test_stages_on_a_tiny_llama(tmp_path):
    res = tiny_resources(tmp_path)
    cfg = P.Config(layer=1, n_windows=2, adv_lengths=(2, 4, 8), fit_from=2, meanfield_lengths=(4, 8, 16),
                   power_iters=20)
    data = P.prepare(cfg, res)
    assert data["real"].shape == (2, 16, 32) and data["radius"] > 0
    rows = []
    for variant in ("random", "smollm2_masked_norm"):
        model = P.train(cfg, data, variant, 0, lambda step, **m: None)
        metrics = P.evaluate(cfg, model, data)
        assert metrics["lip_over_bound"] <= 1.0 and math.isfinite(metrics["exp_adv"])
        rows.append({"paper": "attn_lipschitz", "variant": variant, "seed": 0,
                     **{f"dense/{k}": v for k, v in metrics.items()}})
    derived = P.derive(cfg, rows)
    views = {r["variant"] for r in derived}
    assert {"random|bound", "random|n-independent", "smollm2_masked_norm|bound"} <= views
    for c in P.comparisons(cfg):  # every row of the two variants run here names existing rows
        if c.method in ("random", "smollm2_masked_norm"):
            assert c.baseline in views
    with pytest.raises(ConfigError, match="layer"):
        P.prepare(P.Config(layer=5), res)


def test_config_errors():
    with pytest.raises(ConfigError, match="adv_lengths"):
        P.Config(adv_lengths=(8, 4))
    with pytest.raises(ConfigError, match="fit_from"):
        P.Config(fit_from=1000)
    with pytest.raises(ConfigError, match="adv_gap"):
        P.Config(adv_gap=0)
