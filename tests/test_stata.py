"""STATA (ICML 2024): LIF dynamics, surrogate gradient, token selection, alignment losses, anchor scoring,
and a tiny prepare-free train -> compress -> evaluate -> derive run on synthetic images through the spec."""
from __future__ import annotations

import pytest
import torch

from paperflow.papers import stata as P
from paperflow.spec import ConfigError


def test_lif_hand_computed_sequence():
    # tau=2, v_th=1: H_t = V + (X_t - V)/2, spike if H >= 1, hard reset to 0
    x = torch.tensor([2.5, 0.5, 2.2, 1.0]).view(4, 1)
    s, v = P.lif_multistep(x, tau=2.0, v_th=1.0, return_v=True)
    # t0: H=1.25 -> spike, V=0; t1: H=0.25, V=0.25; t2: H=0.25+(2.2-0.25)/2=1.225 -> spike, V=0; t3: H=0.5
    assert s.flatten().tolist() == [1.0, 0.0, 1.0, 0.0]
    torch.testing.assert_close(v.flatten(), torch.tensor([0.0, 0.25, 0.0, 0.5]))


def test_surrogate_gradient_nonzero():
    x = torch.tensor([[0.3, 1.9, -0.5]] * 3, requires_grad=True)  # (T=3, 3)
    P.lif_multistep(x, tau=2.0, v_th=1.0, alpha=4.0).sum().backward()
    assert x.grad is not None and bool((x.grad.abs() > 0).all())
    # the surrogate at the threshold: a * sig(0) * (1 - sig(0)) = 4 * 0.25 = 1
    z = torch.zeros(1, requires_grad=True)
    P.spike_fn(z, 4.0).sum().backward()
    assert float(z.grad) == pytest.approx(1.0)


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
    cfg, data = _tiny_cfg(), _synthetic()
    logged = []
    rows = []
    for variant in P.SPEC.variants:
        model = P.SPEC.train(cfg, data, variant, 0, lambda step, **m: logged.append((step, m)))
        m = P.SPEC.evaluate(cfg, model, data)
        assert set(m) >= {"acc", "tokens", "synops", "train_s_per_epoch", "train_cpu_s_per_epoch"}
        assert 0 <= m["acc"] <= 100 and m["synops"] >= 0 and m["train_s_per_epoch"] > 0
        levels = P.SPEC.compress(cfg, model, data, variant, 0)
        assert list(levels) == ["0.70"]
        mc = P.SPEC.evaluate(cfg, levels["0.70"], data)
        row = {"variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in m.items()},
               **{f"compressed@0.70/{k}": v for k, v in mc.items()}}
        rows.append(row)
    by = {r["variant"]: r for r in rows}
    n_tokens = 1 + 49
    assert by["dense"]["dense/tokens"] == pytest.approx(n_tokens)
    # 2 blocks = 4 sub-layers; block 1 MLP sees CLS (+anchor) + ceil(0.5 * 49) = 25 patches
    assert by["token_prune"]["dense/tokens"] == pytest.approx((50 + 50 + 50 + 26) / 4)
    assert by["stata"]["dense/tokens"] == pytest.approx((51 + 51 + 51 + 27) / 4)
    assert by["dense"]["compressed@0.70/tokens"] < by["dense"]["dense/tokens"]
    assert any("train/l_intra" in m for _, m in logged)
    derived = {r["variant"]: r for r in P.SPEC.derive(cfg, rows)}
    assert derived["dense"]["dense/train_speedup"] == pytest.approx(1.0)
    assert "dense/train_speedup" in derived["stata"]
    assert len(P.SPEC.comparisons(cfg)) >= 4


def test_train_is_deterministic_given_seed():
    cfg, data = _tiny_cfg(), _synthetic()
    a = P.train(cfg, data, "stata", 3, None)["state"]
    b = P.train(cfg, data, "stata", 3, None)["state"]
    for k in a:
        torch.testing.assert_close(a[k], b[k])


@pytest.mark.parametrize("bad", [dict(keep_ratio=1.5), dict(prune_layers=(7,)), dict(timesteps=1),
                                 dict(d_model=30, n_head=4), dict(infer_keep_ratios=(0.0,)), dict(patch_size=5)])
def test_config_errors(bad):
    with pytest.raises(ConfigError):
        P.Config(**bad)


def test_make_config_unknown_key():
    with pytest.raises(ConfigError):
        P.SPEC.make_config({"no_such_key": 1})
    assert P.SPEC.make_config({"prune_layers": [1, 2]}).prune_layers == (1, 2)
