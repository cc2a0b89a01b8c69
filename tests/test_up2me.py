"""UP2ME (paperflow.papers.up2me): RevIN over visible points, the dependency graph, the naive/seasonal fills, channel
independence of the frozen and graph-free paths, and derive()'s views, each against a value computed another way."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.papers import up2me as U

CFG = U.Config(d_model=16, heads=2, pretrain_steps=2, finetune_steps=2, batch=4, ft_batch=2)


def test_revin_normalises_the_visible_points():
    torch.manual_seed(0)
    x = torch.randn(3, 40) * 5 + 2
    vis = torch.rand(3, 40) > 0.3
    xn, mu, sd = U.revin(x, vis, eps=0.0)
    for r in range(3):
        v = x[r][vis[r]]
        assert float(mu[r]) == pytest.approx(float(v.mean()), rel=1e-5)
        assert float(sd[r]) == pytest.approx(float(v.std(unbiased=False)), rel=1e-5)
        assert float(xn[r][vis[r]].mean()) == pytest.approx(0.0, abs=1e-5)
        assert torch.all(xn[r][~vis[r]] == 0)


def test_graph_construct_by_brute_force():
    torch.manual_seed(1)
    b, c, n, d, k = 2, 5, 4, 6, 2
    enc = torch.randn(b, c, n, d)
    pm = torch.rand(b, c, n) < 0.3
    pm[..., 0] = False
    adj = U.graph_construct(enc, pm, k)
    for s in range(b):
        pooled = torch.stack([enc[s, i][~pm[s, i]].max(0).values for i in range(c)])
        sim = torch.tensor([[float(torch.nn.functional.cosine_similarity(pooled[i], pooled[j], dim=0)) for j in range(c)]
                            for i in range(c)])
        thr = sorted(sim.flatten().tolist(), reverse=True)[k * c - 1]
        for i in range(c):
            nn_i = set(np.argsort(-sim[i].numpy(), kind="stable")[:k].tolist())
            for j in range(c):
                want = float(j in nn_i and sim[i, j] >= thr - 1e-7)
                assert float(adj[s, i, j]) == want


def test_naive_and_seasonal_fills_by_hand():
    cfg = U.Config(patch=2, context=4, horizon=2, impute_len=8, period=2)
    x = torch.arange(8, dtype=torch.float32).view(1, 1, 8) ** 2  # 0 1 4 9 16 25 36 49
    pm = torch.tensor([[[False, True, False, False]]])  # points 2, 3 missing
    lin = U.naive_predict(cfg, x, pm, seasonal=False)
    assert lin[0, 0, 2:4].tolist() == pytest.approx([1 + (16 - 1) * 1 / 3, 1 + (16 - 1) * 2 / 3])
    sea = U.naive_predict(cfg, x, pm, seasonal=True)
    assert sea[0, 0, 2:4].tolist() == [0.0, 1.0]  # one period (2) earlier
    fpm = U.fc_pmask(cfg, 1, 1)  # last patch (points 4, 5 of 6) missing -> last value carried forward
    last = U.naive_predict(cfg, x[..., :6], fpm, seasonal=False)
    assert last[0, 0, 4:].tolist() == [9.0, 9.0]
    assert U.naive_predict(cfg, x[..., :6], fpm, seasonal=True)[0, 0, 4:].tolist() == [4.0, 9.0]


def test_frozen_and_graph_free_paths_are_channel_independent():
    """Without the graph no information crosses channels: changing channel 4's input leaves channel 0's output; with a
    graph that links them it does not."""
    torch.manual_seed(0)
    base = U.MAE(CFG, 5).eval()
    tuned = U.Tuned(CFG, base).eval()
    x = torch.randn(2, 5, CFG.context + CFG.horizon)
    pm = U.fc_pmask(CFG, 2, 5)
    x2 = x.clone()
    x2[:, 4] += torch.randn_like(x2[:, 4]) * 3
    with torch.no_grad():
        for t, g in ((None, True), (tuned, False)):
            a, b = U.multi_forward(CFG, base, x, pm, t, g), U.multi_forward(CFG, base, x2, pm, t, g)
            assert torch.allclose(a[:, :4], b[:, :4], atol=1e-5)
        cfg_all = U.Config(d_model=16, heads=2, neighbors=5)  # complete graph
        a, b = U.multi_forward(cfg_all, base, x, pm, tuned, True), U.multi_forward(cfg_all, base, x2, pm, tuned, True)
        assert not torch.allclose(a[:, 0], b[:, 0], atol=1e-5)


def test_derive_views_rename_the_suffixed_metrics():
    row = {"variant": "up2me", "seed": 0, "dense/rel_mse_frozen": 0.9, "dense/rel_mse_ft": 0.8, "dense/rel_mse_ft_nograph": 0.85,
           "dense/frozen_naive_gap": 0.3, "dense/grid_edge": 0.0, "compressed:0.50/rel_mse_frozen": 1.1}
    out = U.derive(CFG, [row, {"variant": "naive", "seed": 0, "dense/rel_mse": 1.0}])
    views = {r["variant"]: r for r in out}
    assert views["up2me|frozen"]["dense/rel_mse"] == 0.9 and views["up2me|frozen"]["compressed:0.50/rel_mse"] == 1.1
    assert views["up2me|ft"]["dense/rel_mse"] == 0.8 and views["up2me|ft_nograph"]["dense/rel_mse"] == 0.85
    assert views["up2me|ft"]["dense/grid_edge"] == 0.0 and "dense/rel_mse_ft" not in views["up2me|ft"]


def test_training_runs_and_pretraining_lowers_the_masked_loss():
    torch.manual_seed(0)
    t = torch.linspace(0, 60, 600)
    seg = torch.stack([torch.sin(t + p) for p in range(5)])
    cfg = U.Config(d_model=16, heads=2, pretrain_steps=60, batch=16)
    sets = U.eval_sets(cfg, seg, 0)
    ref = U.naive_ref(cfg, sets)
    untrained = U.relative(U.frozen_metrics(cfg, U.fit_mae(U.Config(d_model=16, heads=2, pretrain_steps=1, batch=2), seg, 0, 1e-3), sets), ref)
    trained = U.relative(U.frozen_metrics(cfg, U.fit_mae(cfg, seg, 0, 3e-3), sets), ref)
    assert trained < untrained


def test_msft_resource_builds_from_the_wheel(tmp_path):
    from conftest import ROOT
    from paperflow.data.resources import build_resource, get_resource, load_msft

    res = get_resource("msft")
    if res.missing(ROOT / "sources"):
        pytest.skip("pmdarima wheel not in sources/ (scripts/setup.sh fetches it)")
    assert build_resource("msft", ROOT / "sources", tmp_path) == res.sha256
    d = load_msft(tmp_path / "msft.npz")
    assert d["close"].shape == (7983,) and d["date"][0] == 19860313 and d["date"][-1] == 20171110
    assert np.all(d["high"] >= d["low"]) and U.load_series(str(tmp_path / "msft.npz"), 0).shape == (5, 7983)
