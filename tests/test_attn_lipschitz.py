"""attn_lipschitz: the attention map equals the Llama layer's, power iteration finds known spectral norms,
the adversarial construction has the stated logit gap, the bound holds, and the stages run on a tiny Llama."""
from __future__ import annotations

import math

import numpy as np
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
            "n_heads": heads, "n_kv_heads": kv,
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
        f = lambda x: P.attention(x, w, masked)
        lip = P.local_lipschitz(f, torch.randn(n, 16), torch.Generator().manual_seed(1), 1e-10, 500)
        assert lip == pytest.approx(expected, rel=1e-4)


def test_adversarial_input_has_the_requested_logit_gap_and_the_bound_holds():
    w = random_weights(std=0.5)
    a, ov = P.head_matrices(w)
    xs = P.adversarial_inputs(w, lengths=(2, 8, 32), gap=3.0)
    x = xs[1]
    assert x.shape == (8, 16) and torch.allclose(x[2:], x[1].expand(6, -1))  # one special token, n-1 copies
    vals = [P.real_eigen(a_h)[0] for a_h in a]
    h = max(range(len(a)), key=lambda i: abs(vals[i]).max())
    s = x @ a[h] @ x.T  # s_ij = x_i^T A_h x_j
    assert float(s[1, 0] - s[1, 2]) == pytest.approx(3.0, rel=1e-4)  # token 0 leads the others by the gap
    g = torch.Generator().manual_seed(0)
    for masked in (False, True):
        f = lambda x: P.attention(x, w, masked)
        for x in xs + [torch.randn(10, 16) * 3]:
            assert P.local_lipschitz(f, x, g, 1e-6, 300) <= P.attention_bound(x, a, ov)


def test_low_rank_head_eigenpairs_match_the_full_eigendecomposition():
    w = random_weights(d=16, heads=4, kv=2, std=0.5, seed=3)
    a, _ = P.head_matrices(w)
    dh = w["head_dim"]
    for i in range(4):
        j = i // 2
        val, vec = P.head_eigen(w["q"][i * dh:(i + 1) * dh], w["k"][j * dh:(j + 1) * dh])
        full, _ = P.real_eigen(a[i])
        nonzero = np.sort(full[np.abs(full) > 1e-6])
        np.testing.assert_allclose(np.sort(val), nonzero, rtol=1e-5, atol=1e-7)
        A = a[i].double().numpy()
        np.testing.assert_allclose(A @ vec, vec * val, atol=1e-6)  # eigenvectors of the full A_h (float32 inputs)
        np.testing.assert_allclose(np.linalg.norm(vec, axis=0), 1.0)


def test_slope_recovers_a_power_law():
    n = [4, 8, 16, 32]
    assert P.slope(n, [3 * k ** 0.5 for k in n]) == pytest.approx(0.5)
    assert P.slope(n, [2.0] * 4) == pytest.approx(0.0, abs=1e-12)


def test_adversarial_sweep_grows_like_sqrt_n_then_flattens():
    """The theory's picture on a hand-made head (d=2, one head, A = diag(1, 0.1), W_O W_V = I): the special token
    gets p = e^g / (e^g + n - 1) of every query's attention, so L ~ sqrt(n) p: exponent ~0.5 for n << e^g and no
    growth once n >> e^g."""
    w = {"q": torch.eye(2), "k": torch.diag(torch.tensor([1.0, 0.1])), "v": torch.eye(2), "o": torch.eye(2),
         "n_heads": 1, "n_kv_heads": 1, "head_dim": 2}
    f = lambda x: P.attention(x, w, True)
    g = torch.Generator().manual_seed(0)
    lip = lambda xs: [P.local_lipschitz(f, x, g, 1e-6, 300) for x in xs]
    small = (4, 8, 16, 32)
    assert abs(P.slope(small, lip(P.adversarial_inputs(w, small, 9.0))) - 0.5) < 0.1  # n << e^9
    late = (256, 512, 1024)
    assert P.slope(late, lip(P.adversarial_inputs(w, late, 1.0))) < 0.1  # n >> e^1


def test_stages_on_a_tiny_llama(tmp_path):
    res = tiny_resources(tmp_path)
    cfg = P.Config(layers=(0, 1), tight_lengths=(2, 4, 8), knee_lengths=(4, 8, 16), late_from=8, power_iters=20,
                   iid_lengths=(4, 8, 16), real_lengths=(4, 8, 16), n_windows=2, calib_len=16)
    data = P.prepare(cfg, res)
    assert set(data["weights"]) == {0, 1} and data["calib"][1]["qkv"].shape == (32,) and data["calib"][1]["o"].min() > 0
    assert data["real"][1].shape == (2, 16, 32) and data["radius"][1] == pytest.approx(float(data["real"][1].norm(dim=-1).median()))
    for variant in P.VARIANTS:
        model = P.train(cfg, data, variant, 1, lambda step, **m: None)
        assert model["layer"] == 1
        metrics = P.evaluate(cfg, model, data)
        assert metrics["lip_over_bound"] <= 1.0 and math.isfinite(metrics["exp_tight"]) and "lip_knee@16" in metrics
        for key in ("ratio_slope", "exp_adv", "adv_p_first", "adv_gap", "exp_iid", "iid_attn_kl"):
            assert math.isfinite(metrics[key]), key
        assert 0 < metrics["adv_p_first"] <= 1 and metrics["iid_attn_kl"] >= -1e-6
        assert ("exp_real" in metrics) == (variant == "smollm2")  # real text only through the pretrained layer
        levels = P.compress(cfg, model, data, variant, 1)
        if variant == "random":
            assert levels == {} and model["radius"] == pytest.approx(math.sqrt(32))
            assert not torch.equal(model["weights"]["q"], data["weights"][1]["q"])
            continue
        assert model["radius"] == data["radius"][1]
        assert torch.equal(model["weights"]["q"], data["weights"][1]["q"])
        pruned = levels["0.50"]
        for key in ("q", "k", "v", "o"):  # Wanda: exactly half of every output row pruned
            assert torch.equal((pruned["weights"][key] == 0).sum(1), torch.full((pruned["weights"][key].shape[0],), 16))
        m = P.evaluate(cfg, pruned, data)
        assert math.isfinite(m["ratio_slope"]) and "exp_late" not in m and "exp_iid" not in m  # dense-only sweeps
    rows = [{"paper": "attn_lipschitz", "variant": "smollm2", "seed": 1, "dense/exp_tight": 0.4,
             "dense/bound_exp_real": 0.55, "compressed:0.50/ratio_slope": 0.05}]
    views = {r["variant"]: r for r in P.derive(cfg, rows)}
    assert views["smollm2|theory"]["dense/exp_tight"] == 0.5 and views["smollm2|theory"]["compressed:0.50/ratio_slope"] == 0.0
    assert views["smollm2|bound"]["dense/lip_over_bound"] == 1.0 and views["smollm2|bound"]["dense/exp_real"] == 0.55
    for c in P.comparisons(cfg):
        assert c.method in P.VARIANTS and c.baseline in {f"{v}|{k}" for v in P.VARIANTS for k in ("theory", "bound")}
    with pytest.raises(ConfigError, match="layers"):
        P.prepare(P.Config(layers=(5,)), res)


def test_fixed_radius_inputs_have_the_models_own_gap():
    """radius_inputs puts the special token at norm R, so the logit gap is R^2 lam_max / 4 (hand-made head A = diag(1,
    0.1): lam_max = 1, [u, u/2, ...] with u = e_1) and the attention weight on it is e^g / (e^g + n - 1)."""
    w = {"q": torch.eye(2), "k": torch.diag(torch.tensor([1.0, 0.1])), "v": torch.eye(2), "o": torch.eye(2),
         "n_heads": 1, "n_kv_heads": 1, "head_dim": 2}
    radius = 2.0
    gap = radius ** 2 * 1.0 / 4 / math.sqrt(2)  # A_h = W_Q^T W_K / sqrt(d_h)
    xs = P.radius_inputs(w, (4, 16), radius)
    assert float(xs[0][0].norm()) == pytest.approx(radius)
    for x, n in zip(xs, (4, 16)):
        p = P.attention_probs(x, w)
        # query i (>= 2) sees the special token and i - 1 copies: weight e^g / (e^g + i - 1); the mean over queries 2..n
        expected = np.mean([math.exp(gap) / (math.exp(gap) + i - 1) for i in range(2, n + 1)])
        assert P.special_weight(p)[0] == pytest.approx(expected, rel=1e-5)
        s = P.attention_logits(x, w)
        assert float(s[0, -1, 0] - s[0, -1, 1]) == pytest.approx(gap, rel=1e-5)


def test_kl_from_uniform_is_zero_for_uniform_attention_and_log_i_for_one_hot():
    n = 8
    uniform = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
    assert P.kl_from_uniform(uniform[None]) == pytest.approx(0.0, abs=1e-6)
    one_hot = torch.zeros(1, n, n)
    one_hot[0, :, 0] = 1.0  # every query on token 1: KL = log(i)
    assert P.kl_from_uniform(one_hot) == pytest.approx(float(np.mean(np.log(np.arange(n // 2 + 1, n + 1)))), rel=1e-6)


def test_claims_rows_can_come_out_not_reproduced():
    """The headline verdicts follow the model: a ratio slope of -0.4 (L falls behind the bound) is `not reproduced`,
    and attention that does not concentrate makes the row `not testable`."""
    import polars as pl

    from paperflow.report.claims import claims_rows

    cfg = P.Config()
    head = [c for c in P.comparisons(cfg) if c.role == "headline"][0]
    spec = __import__("dataclasses").replace(P.SPEC, comparisons=lambda _cfg: [head])

    def table(slope, p_first):
        rows = [{"paper": "attn_lipschitz", "variant": "smollm2", "seed": s, "dense/ratio_slope": slope + 0.01 * (s % 3),
                 "dense/adv_p_first": p_first} for s in range(10)]
        return pl.DataFrame(P.derive(cfg, rows))

    assert claims_rows(spec, cfg, table(-0.02, 0.99), "default")[0]["verdict"] == "reproduced"
    assert claims_rows(spec, cfg, table(-0.4, 0.99), "default")[0]["verdict"] == "not reproduced"
    assert claims_rows(spec, cfg, table(-0.02, 0.2), "default")[0]["verdict"] == "not testable"


def test_wanda_calibration_matches_the_block_inputs(tmp_path):
    """prepare's q/k/v scaler row equals Wanda's statistic recomputed from the Llama block's own normed inputs."""
    import json

    from paperflow.data.smollm2 import load_smollm2

    res = tiny_resources(tmp_path)
    data = P.prepare(P.Config(layers=(1,), n_windows=2, calib_len=16, real_lengths=(8, 16)), res)
    ids = P.load_tokenizer(res["smollm2"])(json.loads(open(res["austen"]).read())["Emma"])["input_ids"]
    step = len(ids) // 2
    windows = torch.tensor([ids[i * step:i * step + 16] for i in range(2)])
    lm = load_smollm2(res["smollm2"])
    with torch.no_grad():
        normed = lm.model.layers[1].input_layernorm(lm(windows, output_hidden_states=True).hidden_states[1])
    expected = normed.pow(2).sum(1).mean(0)  # mean over samples of the sum over tokens of x^2
    torch.testing.assert_close(data["calib"][1]["qkv"], expected, rtol=1e-4, atol=1e-6)


def test_config_errors():
    with pytest.raises(ConfigError, match="knee_lengths"):
        P.Config(knee_lengths=(8, 4))
    with pytest.raises(ConfigError, match="late_from"):
        P.Config(late_from=100000)
    with pytest.raises(ConfigError, match="sparsity"):
        P.Config(sparsity=1.0)
    with pytest.raises(ConfigError, match="real_lengths"):
        P.Config(real_lengths=(64, 512), calib_len=256)
