"""attn_localization (Bao, Hataya & Karakida, ICML 2024): eigenspectrum stats, penalty, entropy, rank collapse,
the recorded forward, and a tiny end-to-end run through the spec functions."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.papers import attn_localization as M
from paperflow.registry import get_paper
from paperflow.spec import ConfigError, Resources


def test_eigenspectrum_of_constructed_qk_matches_hand_computation():
    # W_Q W_K^T = diag(1, 2, 3, 6) / sqrt(d_h): eigenvalues 1, 2, 3, 6 (d_h = 1 -> no scaling)
    attn = M.RecordingAttention(4, 1)
    with torch.no_grad():
        attn.qkv.weight.zero_()
        attn.qkv.weight[:4] = torch.eye(4)  # Wq = I  -> W_Q = I
        attn.qkv.weight[4:8] = torch.diag(torch.tensor([1.0, 2.0, 3.0, 6.0]))  # W_K = diag
    W = M.qk_matrix(attn).detach()  # (1, 4, 4), scaled by 1 / sqrt(4) = 1/2
    torch.testing.assert_close(W[0], torch.diag(torch.tensor([0.5, 1.0, 1.5, 3.0])))
    m, v = M.eig_stats(W)
    # mean = 6 / 4 = 1.5; variance = ((-1)^2 + (-0.5)^2 + 0 + 1.5^2) / 4 = 3.5 / 4
    assert float(m[0]) == pytest.approx(1.5)
    assert float(v[0]) == pytest.approx(0.875)
    # W normal -> the penalty equals the variance exactly: ||W||_F^2 / d - m^2 = (0.25 + 1 + 2.25 + 9)/4 - 2.25
    assert float(M.spectrum_penalty(W)[0]) == pytest.approx(0.875)


def test_complex_eigenvalues_and_penalty_bound():
    # rotation-scaling block [[a, -b], [b, a]]: eigenvalues a +- ib -> mean a, variance b^2
    a, b = 0.7, 0.4
    W = torch.tensor([[a, -b], [b, a]])
    m, v = M.eig_stats(W)
    assert float(m) == pytest.approx(a) and float(v) == pytest.approx(b**2)
    assert float(M.spectrum_penalty(W)) == pytest.approx(b**2)  # normal: tight
    # non-normal (Jordan-like) matrix: eigenvalues 1, 1 (variance 0) but the penalty is positive (upper bound)
    J = torch.tensor([[1.0, 5.0], [0.0, 1.0]])
    assert float(M.eig_stats(J)[1]) == pytest.approx(0.0, abs=1e-12)
    assert float(M.spectrum_penalty(J)) == pytest.approx(25 / 2)
    # random matrices: penalty >= variance; shift by c*I leaves both unchanged
    torch.manual_seed(0)
    R = torch.randn(5, 6, 6, dtype=torch.float64)
    pen, var = M.spectrum_penalty(R), M.eig_stats(R)[1]
    assert torch.all(pen >= var - 1e-9)
    shifted = R + 3.0 * torch.eye(6, dtype=torch.float64)
    torch.testing.assert_close(M.spectrum_penalty(shifted), pen)
    torch.testing.assert_close(M.eig_stats(shifted)[1], var)


def test_factored_penalty_equals_explicit():
    torch.manual_seed(1)
    attn = M.RecordingAttention(12, 3)
    wq, wk = M.qk_factors(attn)
    scale = 1 / math.sqrt(attn.head_dim)
    torch.testing.assert_close(M.spectrum_penalty_factored(wq, wk, scale), M.spectrum_penalty(M.qk_matrix(attn)))
    # the W of a head reproduces the attention logits: q_i . k_j / sqrt(d_h) = x_i^T W x_j
    x = torch.randn(5, 12)
    q, k, _ = attn.qkv(x).split(12, dim=-1)
    h = 1
    qh, kh = q[:, 4 * h : 4 * h + 4], k[:, 4 * h : 4 * h + 4]
    torch.testing.assert_close(qh @ kh.T * scale, x @ M.qk_matrix(attn)[h] @ x.T, atol=1e-5, rtol=1e-5)


def test_attention_entropy_uniform_and_one_hot():
    n = 7
    uniform = torch.full((2, n), 1.0 / n)
    torch.testing.assert_close(M.attention_entropy(uniform), torch.full((2,), math.log(n)))
    one_hot = torch.zeros(3, n)
    one_hot[torch.arange(3), torch.tensor([0, 3, 6])] = 1.0
    torch.testing.assert_close(M.attention_entropy(one_hot), torch.zeros(3))
    assert float(M.attention_entropy(torch.tensor([0.5, 0.5, 0.0]))) == pytest.approx(math.log(2))


def test_rank_residual_identical_tokens_and_scale_free():
    x = torch.randn(1, 16)
    same = x.expand(10, 16).unsqueeze(0)  # (1, T, d): all tokens identical -> rank-1 collapse
    assert float(M.rank_residual(same)) == pytest.approx(0.0, abs=1e-6)
    X = torch.randn(2, 10, 16)
    r = M.rank_residual(X)
    torch.testing.assert_close(M.rank_residual(3.0 * X), r)
    assert torch.all((r > 0) & (r <= 1 + 1e-6))
    # zero-mean tokens: residual is the whole matrix -> 1
    Z = torch.tensor([[[1.0, 2.0], [-1.0, -2.0]]])
    assert float(M.rank_residual(Z)) == pytest.approx(1.0)


def test_forward_with_states_matches_model_and_records_causal_probs():
    torch.manual_seed(0)
    arch = dict(variant="standard", vocab_size=11, block_size=12, d_model=16, n_layer=2, n_head=2)
    net = M.build_model(arch).eval()
    M.init_qk(net, 0.5)
    idx = torch.randint(0, 11, (3, 12))
    logits, probs, attn_out, hidden = M.forward_with_states(net, idx)
    with torch.no_grad():
        torch.testing.assert_close(logits, net(idx))
    assert len(probs) == len(hidden) == len(attn_out) == 2
    p = probs[0]
    assert p.shape == (3, 2, 12, 12)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 2, 12))
    assert float(p.triu(1).abs().max()) == 0.0  # causal
    assert all(not b.attn.record for b in net.blocks)


def test_large_qk_init_raises_the_eigenspectrum_variance():
    arch = dict(variant="standard", vocab_size=11, block_size=8, d_model=16, n_layer=1, n_head=1)
    torch.manual_seed(0)
    net = M.build_model(arch)
    v0 = M.spectrum_metrics(net)["qk_eig_var"]
    M.init_qk(net, 0.2)  # 10x the std: W scales by 100, variance by 1e4
    v1 = M.spectrum_metrics(net)["qk_eig_var"]
    assert v1 > 1000 * v0


SMOKE = dict(d_model=16, n_layer=2, n_head=1, block_size=16, steps=8, batch_size=4, warmup=2, eval_every=4,
             eval_windows_train=4, eval_windows=8, eval_windows_tune=4, eval_batch=4, log_every=2, tune_fraction=0.1)


def _text_file(tmp_path):
    text = "".join(f"{w}: the quick brown fox jumps over {i % 7} lazy dogs.\n" for i, w in enumerate(["ROMEO", "JULIET"] * 60))
    path = tmp_path / "shakespeare.txt"
    path.write_text(text, encoding="utf-8")
    return text, path


def test_spec_end_to_end_on_synthetic_text(tmp_path):
    text, path = _text_file(tmp_path)
    spec = get_paper("attn_localization")
    assert tuple(spec.resources) == ("shakespeare",) and spec.fidelity == "reconstruction"
    cfg = spec.make_config(SMOKE)
    data = spec.prepare(cfg, Resources(str(tmp_path), {"shakespeare": str(path)}))
    assert data["vocab_size"] == len(set(text))
    assert len(data["train"]) + len(data["tune"]) + len(data["val"]) == len(text)
    assert data["vocab"][int(data["train"][0])] == text[0]
    logged, results = [], {}
    for variant in spec.variants:
        model = spec.train(cfg, data, variant, 0, lambda step, **m: logged.append((variant, step, m)))
        res = spec.evaluate(cfg, model, data)
        results[variant] = res
        assert math.isfinite(res["val_loss"]) and res["val_loss"] < math.log(data["vocab_size"]) + 0.5
        assert 0 <= res["attn_entropy"] <= math.log(cfg.block_size) + 1e-6
        assert 0 <= res["attn_entropy_norm"] <= 1 + 1e-6
        assert 0 < res["rank_res"] <= 1 + 1e-6 and 0 < res["attn_rank_res"] <= 1 + 1e-6
        assert res["qk_reg"] >= res["qk_eig_var"] - 1e-9
        assert {"attn_entropy_L0", "rank_res_L1", "qk_eig_var_L1", "grid_edge", "val_score@2"} <= set(res)
        # equal tuning: three grid values each, the kept one has the lowest tuning loss
        scores = [res[f"val_score@{i}"] for i in range(3)]
        assert res["tuned_lr"] == cfg.lr_grid[scores.index(min(scores))]
        # equal-lr metrics: one per grid lr, their mean, and the tuned run's value at its own index
        k = int(res["tuned_lr_index"])
        assert res[f"attn_entropy_lr{k}"] == pytest.approx(res["attn_entropy"])
        assert res["rank_res_eq"] == pytest.approx(sum(res[f"rank_res_lr{i}"] for i in range(3)) / 3)
        assert res["qk_eig_conc_eq"] >= 0 and res["qk_norm_eq"] > 0
        levels = spec.compress(cfg, model, data, variant, 0)
        assert set(levels) == {"0.50", "0.80"}
        st = levels["0.50"]["state"]
        blocks = [k for k, v in st.items() if k.startswith("blocks.") and v.dim() >= 2]
        zeros = sum(int((st[k] == 0).sum()) for k in blocks)
        assert zeros == int(0.5 * sum(st[k].numel() for k in blocks))  # one global threshold over the blocks
        assert torch.equal(st["tok.weight"], model["state"]["tok.weight"])  # embeddings kept
        pruned = spec.evaluate(cfg, levels["0.80"], data)
        assert math.isfinite(pruned["val_loss"]) and "attn_entropy_eq" not in pruned  # equal-lr: trained models only
    assert results["locater"]["n_params"] == results["standard"]["n_params"]
    assert any("grid2/val/loss" in m for _, _, m in logged) and any("grid0/train/loss" in m for _, _, m in logged)
    rows = spec.comparisons(cfg)
    assert {r.method for r in rows} <= set(spec.variants) and {r.baseline for r in rows} <= set(spec.variants)
    assert [r.role for r in rows].count("headline") == 2  # entropy higher AND rank_res not lower (the abstract's two)
    assert all(r.refuted_if and r.mechanism_gates for r in rows if r.role == "headline")


def test_penalty_shrinks_the_spectrum_and_training_is_deterministic(tmp_path):
    _, path = _text_file(tmp_path)
    cfg = M.Config(**{**SMOKE, "steps": 30})
    data = M.prepare(cfg, Resources(str(tmp_path), {"shakespeare": str(path)}))
    quiet = lambda *a, **k: None
    a, _ = M.fit(cfg, data, "locater", 3, 3e-3, 50.0, quiet)
    b, _ = M.fit(cfg, data, "locater", 3, 3e-3, 50.0, quiet)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    base, _ = M.fit(cfg, data, "standard", 3, 3e-3, 0.0, quiet)
    assert M.spectrum_metrics(a)["qk_reg"] < M.spectrum_metrics(base)["qk_reg"]


def test_concentration_of_a_shifted_spectrum_by_hand():
    # eigenvalues 2 +- 0.5 i (W = [[2, -0.5], [0.5, 2]]): mean 2, variance 0.25 -> |m| / s = 2 / 0.5 = 4 (regime);
    # the traceless rotation [[0, -1], [1, 0]]: mean 0 -> 0 (no regime, whatever the variance)
    for W, expect in ((torch.tensor([[2.0, -0.5], [0.5, 2.0]]), 4.0), (torch.tensor([[0.0, -1.0], [1.0, 0.0]]), 0.0)):
        m, v = M.eig_stats(W)
        assert float(M.concentration(m, v)) == pytest.approx(expect, abs=1e-9)


def test_config_validation():
    with pytest.raises(ConfigError, match="reg_lambda"):
        M.Config(reg_lambda=-1.0)
    with pytest.raises(ConfigError, match="lr_grid"):
        M.Config(lr_grid=(1e-2, 1e-3))
    with pytest.raises(ConfigError, match="d_model"):
        M.Config(d_model=30, n_head=4)
    with pytest.raises(ConfigError, match="warmup"):
        M.Config(steps=10, warmup=10)
    with pytest.raises(ConfigError, match="unknown key"):
        get_paper("attn_localization").make_config({"no_such_key": 1})
