"""STATA (ICML 2024): token selection, alignment losses, anchor scoring, the interleaved training-step timing, and
a tiny prepare-free train -> compress -> evaluate run on synthetic images through the spec (LIF dynamics and the
Spikformer block: tests/test_spiking.py)."""
from __future__ import annotations

import pytest
import torch

from paperflow.papers import stata as P
from paperflow.spec import ConfigError


def test_select_tokens_keeps_k_per_timestep_and_cls():
    T, B, Np, D, ns, k = 2, 3, 10, 4, 2, 4
    N = ns + Np
    x = torch.arange(N, dtype=torch.float32).view(1, 1, N, 1).expand(T, B, N, D).clone()
    x[1] += 100.0  # different values per timestep, same token identities
    scores = torch.randn(B, Np, generator=torch.Generator().manual_seed(0))
    out = P.select_tokens(x, scores, ns, k)
    assert out.shape == (T, B, ns + k, D)
    torch.testing.assert_close(out[:, :, :ns], x[:, :, :ns])  # CLS (and anchor) kept in front
    for b in range(B):
        expected = sorted((scores[b].topk(k).indices + ns).tolist())
        assert out[0, b, ns:, 0].long().tolist() == expected
        assert (out[1, b, ns:, 0] - 100).long().tolist() == expected  # same set at every timestep


def test_alignment_losses_zero_iff_identical():
    g = torch.Generator().manual_seed(1)
    rows = torch.rand(2, 3, 9, generator=g) * 5
    assert float(P.intra_alignment(rows, rows.clone())) == pytest.approx(0.0, abs=1e-6)
    same_over_time = rows[:1].expand(2, -1, -1)
    assert float(P.inter_alignment(same_over_time)) == pytest.approx(0.0, abs=1e-6)
    other = torch.rand(2, 3, 9, generator=g) * 5
    assert float(P.intra_alignment(rows, other)) > 1e-4
    assert float(P.inter_alignment(rows)) > 1e-4


def test_anchor_scoring_is_scale_invariant_per_timestep():
    g = torch.Generator().manual_seed(2)
    r0 = torch.rand(1, 2, 8, generator=g)
    r1 = torch.rand(1, 2, 8, generator=g)
    rows = torch.cat([r0, r1])
    scaled = torch.cat([r0, 50.0 * r1])  # timestep 1 fires far more: raw averaging is dominated by it
    torch.testing.assert_close(P.token_scores(rows, "anchor"), P.token_scores(scaled, "anchor"), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(P.token_scores(scaled, "cls"), scaled.mean(0))


def _tiny_cfg(**kw):
    base = dict(n_train=32, n_test=16, d_model=8, n_head=2, n_layer=2, prune_layers=(1,), keep_ratio=0.5,
                infer_keep_ratios=(0.3,), epochs=1, batch_size=16, warmup=1, eval_batch=8, log_every=1)
    base.update(kw)
    return P.Config(**base)


def _synthetic():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (48, 28, 28), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 10, (48,), generator=g)
    return {"x_train": x[:32], "y_train": y[:32], "x_test": x[32:], "y_test": y[32:]}


def test_stata_training_forward_has_alignment_losses_and_grads():
    cfg = _tiny_cfg()
    torch.manual_seed(0)
    net = P.SpikingViT(P.make_arch(cfg, "stata"))
    net.train()
    logits, aux = net(torch.randn(16, 1, 28, 28) * 2)
    assert logits.shape == (16, 10)
    loss = logits.logsumexp(-1).mean() + aux["intra"] + aux["inter"]
    assert float(aux["intra"].detach()) >= 0 and float(aux["inter"].detach()) >= 0
    loss.backward()
    assert net.anchor.grad is not None


def test_tiny_spec_run_on_synthetic_data():
    cfg, data = _tiny_cfg(time_rounds=1, time_repeats=1), _synthetic()
    logged = []
    rows = []
    for variant in P.SPEC.variants:
        model = P.SPEC.train(cfg, data, variant, 0, lambda step, **m: logged.append((step, m)))
        m = P.SPEC.evaluate(cfg, model, data)
        assert set(m) >= {"acc", "tokens", "synops", "train_speedup", "train_s_per_epoch", "train_cpu_s_per_epoch"}
        assert 0 <= m["acc"] <= 100 and m["synops"] >= 0 and m["train_s_per_epoch"] > 0
        if variant == "dense":
            assert m["train_speedup"] == 1.0  # the reference of the ratio
        else:  # measured interleaved against a dense net in the same process
            assert m["train_speedup"] > 0 and m["train_step_ms"] > 0 and m["train_step_dense_ms"] > 0
            assert m["train_speedup"] == pytest.approx(m["train_step_dense_ms"] / m["train_step_ms"])
        levels = P.SPEC.compress(cfg, model, data, variant, 0)
        assert list(levels) == ["0.70"]
        mc = P.SPEC.evaluate(cfg, levels["0.70"], data)
        row = {"variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in m.items()},
               **{f"compressed:0.70/{k}": v for k, v in mc.items()}}
        rows.append(row)
    by = {r["variant"]: r for r in rows}
    n_tokens = 1 + 49
    assert by["dense"]["dense/tokens"] == pytest.approx(n_tokens)
    # 2 blocks = 4 sub-layers; block 1 MLP sees CLS (+anchor) + ceil(0.5 * 49) = 25 patches
    assert by["token_prune"]["dense/tokens"] == pytest.approx((50 + 50 + 50 + 26) / 4)
    assert by["stata"]["dense/tokens"] == pytest.approx((51 + 51 + 51 + 27) / 4)
    assert by["dense"]["compressed:0.70/tokens"] < by["dense"]["dense/tokens"]
    assert any("train/l_intra" in m for _, m in logged)
    assert 0 <= by["stata"]["dense/sel_overlap"] <= 1 and not by["stata"]["dense/intra_ratio"] < 0  # nan if L_intra starts at 0
    by = {r["variant"]: r for r in P.derive(cfg, rows)}
    assert by["dense"]["dense/speedup_claim_j"] == 0.0 and "dense/speedup_claim_j" in by["token_prune"]
    comps = P.SPEC.comparisons(cfg)
    assert [c.role for c in comps].count("headline") == 1 and len(comps) >= 4
    assert all(c.role == "fact" for c in comps if c.metric in ("synops", "tokens"))
    assert all(c.column in by[c.method] and c.column in by[c.baseline] for c in comps)
    head = next(c for c in comps if c.role == "headline")
    assert head.metric == "speedup_claim_j" and {g.metric for g in head.mechanism_gates} == {"sel_overlap"}


def test_claim_terms_by_hand():
    """speedup_claim_j = min(speedup / target - 1, acc / acc_dense - (1 - margin)); > 0 iff both halves hold."""
    cfg = P.Config(speedup_target=1.5, acc_margin=0.02)
    t = P.claim_terms(cfg, {"train_speedup": 1.8, "acc": 80.0}, {"acc": 80.0})
    assert t["speedup_term"] == pytest.approx(0.2) and t["acc_term"] == pytest.approx(0.02)
    assert t["speedup_claim_j"] == pytest.approx(0.02)
    # fast but inaccurate, accurate but too slow (speedup 1.2 < 1.5 though > 1): both refute the claim
    assert P.claim_terms(cfg, {"train_speedup": 2.0, "acc": 70.0}, {"acc": 80.0})["speedup_claim_j"] == pytest.approx(70 / 80 - 0.98)
    assert P.claim_terms(cfg, {"train_speedup": 1.2, "acc": 81.0}, {"acc": 80.0})["speedup_claim_j"] == pytest.approx(-0.2)


def test_selection_overlap_and_intra_ratio_by_hand():
    a = torch.tensor([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    b = torch.tensor([[4.0, 1.0, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    assert P.selection_overlap(a, b, 2) == pytest.approx((1 / 2 + 2 / 2) / 2)  # sample 0 shares token 0 only
    assert P.selection_overlap(a, a, 3) == 1.0
    assert P.intra_ratio([2.0] * 10 + [1.0] * 80 + [0.5] * 10) == pytest.approx(0.25)


def test_step_times_leave_the_trained_model_unchanged():
    cfg, data = _tiny_cfg(time_rounds=1, time_repeats=1), _synthetic()
    torch.manual_seed(0)
    net = P.SpikingViT(P.make_arch(cfg, "stata"))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    times = P.step_times(cfg, data, "stata", net, 0)
    assert set(times) == {"dense", "stata"} and all(t > 0 for t in times.values())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_train_is_deterministic_given_seed():
    cfg, data = _tiny_cfg(), _synthetic()
    a = P.train(cfg, data, "stata", 3, None)["state"]
    b = P.train(cfg, data, "stata", 3, None)["state"]
    for k in a:
        torch.testing.assert_close(a[k], b[k])


@pytest.mark.parametrize("bad", [dict(keep_ratio=1.5), dict(prune_layers=(7,)), dict(timesteps=1),
                                 dict(d_model=30, n_head=4), dict(infer_keep_ratios=(0.0,)), dict(patch_size=5),
                                 dict(time_rounds=0), dict(acc_margin=-0.1)])
def test_config_errors(bad):
    with pytest.raises(ConfigError):
        P.Config(**bad)


def test_make_config_unknown_key():
    with pytest.raises(ConfigError):
        P.SPEC.make_config({"no_such_key": 1})
    assert P.SPEC.make_config({"prune_layers": [1, 2]}).prune_layers == (1, 2)
