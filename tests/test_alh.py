"""alh: the hypothesis math against hand computations, the vectorised Pendulum against gymnasium (its stacked
optimiser is tested in tests/test_batched.py), and a tiny end-to-end run whose independent re-rollout reproduces the logged test curve."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperflow.papers import alh


def test_set_hypothesis_matches_hand_computation():
    z = torch.tensor([[[3.0, 4.0], [0.0, 2.0]]])  # one model, a set of two encodings
    # mean of the row-normalised encodings: ((0.6, 0.8) + (0, 1)) / 2 = (0.3, 0.9)
    h = alh.set_hypothesis(z, eps=1e-6)
    assert torch.allclose(h, torch.tensor([[0.3, 0.9]]))
    prev = torch.tensor([[1.0, 0.0]])
    inc = alh.set_hypothesis(z, eps=1e-6, prev=prev)  # normalize((0.3, 0.9) + (1, 0)) = (1.3, 0.9) / |.|
    expect = np.array([1.3, 0.9]) / np.hypot(1.3, 0.9)
    assert np.allclose(inc.numpy()[0], expect, atol=1e-6)
    assert torch.allclose(inc.norm(dim=-1), torch.ones(1))


def test_subset_indices_contain_their_own_sample():
    g = torch.Generator().manual_seed(0)
    idx = alh.subset_indices(37, 8, g)
    assert idx.shape == (37, 8) and int(idx.min()) >= 0 and int(idx.max()) < 37
    assert all(i in idx[i].tolist() for i in range(37))


def test_area_is_the_mean_return_of_a_linear_curve():
    steps, returns = [0, 100, 300, 400], [-1000.0, -900.0, -700.0, -600.0]  # linear in steps
    assert alh.area(steps, returns) == pytest.approx(-800.0)  # (first + last) / 2
    assert alh.area([0, 10], [5.0, 5.0]) == pytest.approx(5.0)


def test_vectorised_pendulum_equals_gymnasium():
    cfg = alh.Config()
    vec = alh.VecEnv(cfg, 3)
    refs = [alh.make_env(cfg) for _ in range(3)]
    rng = np.random.default_rng(0)
    obs = np.stack([vec.reset(j, 11 + j) for j in range(3)])
    ref_obs = np.stack([refs[j].reset(seed=11 + j)[0] for j in range(3)])
    assert np.array_equal(obs, ref_obs)
    for t in range(200):
        a = rng.uniform(-2.5, 2.5, (3, 1)).astype(np.float32)  # outside the torque bound too: clipped
        o2, r, term, trunc = vec.step(a)
        for j in range(3):
            ro, rr, rt, rtr, _ = refs[j].step(a[j])
            assert np.array_equal(o2[j], ro) and r[j] == pytest.approx(rr, abs=1e-9)
            assert bool(term[j]) == rt and bool(trunc[j]) == rtr
    assert trunc.all()  # the registered 200-step limit


def test_stacked_mlp_slice_equals_its_state_dict():
    torch.manual_seed(0)
    net = alh.SMLP(3, [5, 8, 8, 2])
    x = torch.randn(3, 4, 5)
    out = net(x)
    for k in range(3):
        assert torch.allclose(out[k], alh.mlp_forward(net.state(k), x[k]), atol=1e-6)
    assert torch.allclose(net(x[1:2], lo=1, hi=2), out[1:2])


def test_td3_target_uses_the_smaller_critic():
    cfg = alh.Config(hidden=8, batch_size=8, mini_batch=4)
    ag = alh.Agent(cfg, 3, 1, 2.0, "none", [1e-3], seed=0)
    s2, a2 = torch.randn(1, 8, 3), torch.rand(1, 8, 1)
    q = ag.critic(torch.cat([s2, a2], 2).repeat(2, 1, 1), ag.critic_t)
    by_hand = torch.minimum(q[0], q[1])
    assert torch.equal(torch.min(q[:1], q[1:])[0], by_hand)


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a job runs (thread_speedup 0): tiny batched matmuls on 2 threads of a loaded CPU crawl
    cfg = alh.Config(stack_seeds=2, steps=120, start_steps=40, eval_every=60, eval_episodes=1, hidden=16, batch_size=16,
                     mini_batch=4, hypo_dim=4, lr_grid=(1e-3, 3e-3, 1e-2))
    try:
        yield cfg, alh.prepare(cfg, None)
    finally:
        torch.set_num_threads(threads)


def test_tiny_run_end_to_end(tiny):
    cfg, data = tiny
    assert set(data["runs"]) == set(alh.VARIANTS) and data["random_return"] < 0
    for v in alh.VARIANTS:
        m = alh.train(cfg, data, v, 1, None)
        out = alh.evaluate(cfg, m, data)
        assert len(m["curve"]) == cfg.steps // cfg.eval_every + 1
        if v != "alh_null":  # deterministic rollouts: the independent re-rollout reproduces the logged last point
            assert out["policy_return"] == pytest.approx(out["final_return"], abs=1e-3)
        assert (out["adapt_shift"] > 0) == (v == "alh")
        levels = alh.compress(cfg, m, data, v, 1)
        assert set(levels) == {"0.50", "0.80"}
        w = [t for k, t in levels["0.80"]["actor"].items() if k.endswith("weight")]
        frac = float(sum(int((t == 0).sum()) for t in w)) / sum(t.numel() for t in w)
        assert frac == pytest.approx(0.8, abs=0.01)
        assert set(alh.evaluate(cfg, levels["0.80"], data)) == {"policy_return", "actor_sparsity"}
    extra = alh.train(cfg, data, "td3", 5, None)  # a seed outside the stack trains alone
    assert len(extra["curve"]) == cfg.steps // cfg.eval_every + 1


def test_hypothesis_feeds_the_actor(tiny):
    cfg, data = tiny
    m = data["runs"]["alh"][0]
    n_in = m["actor"]["l0.weight"].shape[1]
    assert n_in == 3 + cfg.hypo_dim  # Pendulum's 3 observations + the hypothesis
    x = torch.randn(3)
    h1, h2 = F.normalize(torch.randn(cfg.hypo_dim), dim=0), F.normalize(torch.randn(cfg.hypo_dim), dim=0)
    a1 = alh.mlp_forward(m["actor"], torch.cat([x, h1]))
    a2 = alh.mlp_forward(m["actor"], torch.cat([x, h2]))
    assert not torch.equal(a1, a2)


def test_prepare_is_deterministic(tiny):
    cfg, data = tiny
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        again = alh.prepare(cfg, None)
    finally:
        torch.set_num_threads(threads)
    assert again["tuning"] == data["tuning"] and again["random_return"] == data["random_return"]
    for v in alh.VARIANTS:
        assert [r["curve"] for r in again["runs"][v]] == [r["curve"] for r in data["runs"][v]]
