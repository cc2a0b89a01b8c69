"""HSTU (ICML 2024): the authors' log time buckets by hand, the relative position bias against the code's pad/repeat
construction, the HSTU layer against a brute-force loop over (query, key) pairs, causality, the bincount gradient of the
bucket lookup, HR/NDCG on a hand example, the popularity ranker on a hand example, fit keeping its best validation epoch,
and prepare -> train -> compress -> evaluate on a small fake MovieLens."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT
from paperflow.contract import contract_problems
from paperflow.papers import hstu as H
from paperflow.spec import Resources


def test_time_bucket_hand_values():
    dt = torch.tensor([0, 1, -1, 2, 3, 60, 86400, 2**62])
    # floor(ln(max(|dt|, 1)) / 0.301): ln 2 / 0.301 = 2.30, ln 3 / 0.301 = 3.65, ln 60 = 4.09 -> 13.6, ln 86400 = 11.37 -> 37.8
    assert H.time_bucket(dt).tolist() == [0, 0, 0, 2, 3, 13, 37, 128]  # ln 2^62 / 0.301 = 142.8, clamped to 128


def test_relative_position_bias_matches_the_codes_pad_repeat_construction():
    n = 6
    rab = H.RelativeBias(n)
    w = rab.pos_w.detach()
    # the authors' RelativeBucketedTimeAndPositionBasedBias: pad w by n zeros, repeat n times, cut, reshape, slice
    t = F.pad(w[: 2 * n - 1], [0, n]).repeat(n)
    t = t[..., :-n].reshape(1, n, 3 * n - 2)
    r = (2 * n - 1) // 2
    code = t[..., r:-r][0]
    zero_buckets = torch.zeros(1, n, n, dtype=torch.long)
    ours = rab(zero_buckets)[0] - rab.ts_w[0].detach()
    assert torch.allclose(ours.detach(), code)
    assert float(code[0, 0]) == float(w[n - 1]) and float(code[1, 0]) == float(w[n - 2])  # depends on j - i only


def test_bucket_matrix_uses_the_predicted_actions_time():
    ts = torch.tensor([[0, 10, 100, 1000]])  # 3 inputs, the last position predicts an action at t = 1000
    b = H.bucket_matrix(ts)[0]
    assert b.shape == (3, 3)
    assert int(b[0, 0]) == int(H.time_bucket(torch.tensor(10 - 0)))  # query 0 predicts the action at t = 10
    assert int(b[2, 1]) == int(H.time_bucket(torch.tensor(1000 - 10)))


def test_table_lookup_gradient_equals_autograd_indexing():
    t = torch.randn(129, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, 129, (3, 5, 5))
    w = torch.randn(3, 5, 5, dtype=torch.float64)
    g1, = torch.autograd.grad((H._TableLookup.apply(t, idx) * w).sum(), t)
    g2, = torch.autograd.grad((t[idx] * w).sum(), t)
    assert torch.allclose(g1, g2)


def test_hstu_layer_matches_a_brute_force_loop():
    torch.manual_seed(0)
    d, n, B = 4, 5, 2
    layer = H.HSTULayer(d, n, dropout=0.0, rab=True).double().eval()
    with torch.no_grad():
        layer.rab.pos_w.normal_(0, 0.5), layer.rab.ts_w.normal_(0, 0.5)
    x = torch.randn(B, n, d, dtype=torch.float64)
    ts = torch.cumsum(torch.randint(0, 5000, (B, n + 1)), 1)
    buckets = H.bucket_matrix(ts)
    got = layer(x, buckets)
    W = layer.uvqk.detach()
    ln = lambda z: (z - z.mean()) / torch.sqrt(z.var(unbiased=False) + 1e-6)  # noqa: E731
    for b in range(B):
        proj = [F.silu(ln(x[b, i]) @ W) for i in range(n)]
        u, v, q, k = ([p[j * d:(j + 1) * d] for p in proj] for j in range(4))
        for i in range(n):
            acc = torch.zeros(d, dtype=torch.float64)
            for j in range(i + 1):
                bias = layer.rab.pos_w[j - i + n - 1] + layer.rab.ts_w[H.time_bucket(ts[b, i + 1] - ts[b, j])]
                acc = acc + F.silu(q[i] @ k[j] + bias) / n * v[j]
            want = layer.o(u[i] * ln(acc)) + x[b, i]
            assert torch.allclose(got[b, i], want.detach(), atol=1e-10)


@pytest.mark.parametrize("kind", H.VARIANTS)
def test_encoders_are_causal(kind):
    torch.manual_seed(0)
    cfg = H.Config(max_len=6, dim=8, dropout=0.0)
    enc = H.build_encoder(cfg, kind, 20).eval()
    ids = torch.randint(1, 21, (2, 6))
    ts = torch.cumsum(torch.randint(1, 1000, (2, 7)), 1)
    h1 = enc(ids, ts)
    ids2, ts2 = ids.clone(), ts.clone()
    ids2[:, 4:], ts2[:, 5:] = 3, ts2[:, 5:] + 10**6  # change what positions 0..3 may not see (t_5 is position 4's target time)
    h2 = enc(ids2, ts2)
    assert torch.allclose(h1[:, :4], h2[:, :4], atol=1e-6)


def test_rab_share_limits():
    torch.manual_seed(0)
    cfg = H.Config(max_len=6, dim=8, dropout=0.0)
    ids = torch.randint(1, 21, (3, 6))
    ids[0, 4:] = 0  # padding is left out
    split = {"ids": ids, "buckets": H.bucket_matrix(torch.cumsum(torch.randint(1, 10**5, (3, 7)), 1))}
    enc = H.build_encoder(cfg, "hstu", 20).eval()
    assert 0.0 < H.rab_share(enc, split) < 1.0
    with torch.no_grad():
        for b in enc.blocks:
            b.rab.pos_w.zero_(), b.rab.ts_w.zero_()
    assert H.rab_share(enc, split) == 0.0  # no bias
    split.update(target=torch.randint(1, 21, (3,)), last=torch.tensor([3, 5, 5]))
    assert H.rab_use(cfg, enc, split, 0.5) == pytest.approx(1.0 - H.score_split(cfg, enc, split)["ndcg10"] / 0.5)
    ndcg = H.score_split(cfg, enc, split)["ndcg10"]
    if ndcg > 0:
        assert H.rab_use(cfg, enc, split, ndcg) == 0.0  # zeroing a zero bias changes nothing
    with torch.no_grad():
        for b in enc.blocks:
            b.rab.ts_w.fill_(0.3), b.uvqk.zero_()  # q = k = SiLU(0) = 0: the pre-activation is the bias alone
    assert H.rab_share(enc, split) == pytest.approx(1.0)
    assert H.rab_share(H.build_encoder(cfg, "hstu_norab", 20), split) == 0.0


def test_rank_metrics_hand_example():
    scores = torch.tensor([[0.0, 0.9, 0.5, 0.1], [0.0, 0.2, 0.3, 0.4], [9.0, 0.1, 0.2, 0.3]])
    target = torch.tensor([2, 3, 1])  # ranks 1, 0 and 2 (column 0 is padding, never ranked)
    m = H.rank_metrics(scores, target, k=2)
    assert m["hr2"] == pytest.approx(2 / 3)
    assert m["ndcg2"] == pytest.approx((1 / math.log2(3) + 1.0 + 0.0) / 3)


def test_popularity_ranker_hand_example():
    cfg = H.Config()
    train_seqs = [np.array([1, 2, 2]), np.array([2, 3])]  # counts: item 2: 3, items 1 and 3: 1 (tie), item 4: 0
    split = {"target": torch.tensor([2, 3, 1, 4])}  # order 2, 1, 3, 4 (the tie goes to the smaller index): ranks 0, 2, 1, 3
    m = H.popularity_metrics(dataclasses.replace(cfg, k=2), train_seqs, 4, split)
    assert m["hr2"] == pytest.approx(2 / 4)
    assert m["ndcg2"] == pytest.approx((1.0 + 1 / math.log2(3)) / 4)


def test_fit_keeps_the_best_validation_epoch(tmp_path, monkeypatch):
    cfg = H.Config(max_len=8, dim=8, epochs=5, eval_every=2, batch_size=16, n_neg=8, lr_grid=(0.01,), timing_lengths=(8,),
                   timing_rounds=1, timing_repeats=1, min_item_ratings=1)
    data = H.prepare(cfg, Resources(root=str(tmp_path), paths={"movielens": str(_fake_movielens(tmp_path / "ml.npz"))}))
    scripted, snapshots = iter([0.1, 0.3, 0.3]), []  # validation after epochs 2, 4 and 5 (the last): best epoch 4 (tie -> earlier)

    def fake_score(cfg_, model, split):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return {f"ndcg{cfg.k}": next(scripted)}

    monkeypatch.setattr(H, "score_split", fake_score)
    model, best = H.fit(cfg, data, "hstu", 0.01, 0)
    assert best == {"val_best": 0.3, "epoch_best": 4} and len(snapshots) == 3
    assert all(torch.equal(v, snapshots[1][k]) for k, v in model.state_dict().items())
    assert not all(torch.equal(v, snapshots[2][k]) for k, v in model.state_dict().items())
    assert not model.training


def test_pack_leave_last_out():
    seqs, times = [np.array([5, 6, 7, 8])], [np.array([1, 2, 3, 4])]
    tr = H.pack([s[:-2] for s in seqs], [t[:-2] for t in times], 4, with_target=False)
    assert tr["ids"][0].tolist() == [5, 0, 0, 0] and tr["target"][0].tolist() == [6, 0, 0, 0]
    te = H.pack(seqs, times, 4, with_target=True)
    assert te["ids"][0].tolist() == [5, 6, 7, 0] and int(te["target"][0]) == 8 and int(te["last"][0]) == 2
    assert te["ts"][0].tolist()[:4] == [1, 2, 3, 4]


def _fake_movielens(path, users=30, items=40, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(users):
        n = int(rng.integers(8, 20))
        start = int(rng.integers(10**8, 2 * 10**8))
        for j, m in enumerate(rng.choice(items, n, replace=False)):
            rows.append((u + 1, int(m) + 1, float(rng.integers(1, 11)) / 2, start + j * int(rng.integers(1, 10**5))))
    user, movie, rating, ts = map(np.asarray, zip(*rows))
    np.savez(path, user=user.astype(np.int32), movie=movie.astype(np.int32), rating=rating, timestamp=ts.astype(np.int64),
             year=np.full(len(user), 1999, np.int32), genre=(movie % 3).astype(np.int32), genre_levels=np.asarray(["a", "b", "c"]))
    return path


def test_stages_end_to_end_on_a_small_fake_movielens(tmp_path):
    cfg = H.Config(max_len=8, dim=8, epochs=1, batch_size=16, n_neg=8, lr_grid=(0.01,), timing_lengths=(8,),
                   timing_rounds=1, timing_repeats=1, min_item_ratings=1)
    data = H.prepare(cfg, Resources(root=str(tmp_path), paths={"movielens": str(_fake_movielens(tmp_path / "ml.npz"))}))
    assert set(data["tuning"]) == set(H.VARIANTS)
    for variant in H.VARIANTS:
        model = H.train(cfg, data, variant, 0, None)
        m = H.evaluate(cfg, model, data)
        for key in ("ndcg10", "hr10", "time_rel_L8", "n_params", "grid_edge", "tuned_lr", "rab_share", "rab_use",
                    "epoch_best", "epoch_grid_edge", "pop_ndcg10", "val_pop_ndcg10", "ndcg_over_pop"):
            assert key in m and np.isfinite(m[key]), key
        assert m["epoch_best"] == 1 and m["epoch_grid_edge"] == 1.0  # one epoch: the cap is the only choice
        assert m["ndcg_over_pop"] == pytest.approx(m["ndcg10"] - m["pop_ndcg10"])
        comp = H.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "0.80"}
        assert np.isfinite(H.evaluate(cfg, comp["0.80"], data)["ndcg10"])
    assert contract_problems(H.SPEC, H.Config()) == []


@pytest.mark.skipif(not (ROOT / "resources" / "movielens.npz").exists(), reason="resource movielens not built here")
def test_movielens_resource_and_sequences():
    from paperflow.data.resources import RESOURCES, load_movielens, npz_digest

    ml = load_movielens(ROOT / "resources" / "movielens.npz")
    assert len(ml["user"]) == 100004 and len(np.unique(ml["user"])) == 671 and len(np.unique(ml["movie"])) == 9066
    assert npz_digest(ROOT / "resources" / "movielens.npz") == RESOURCES["movielens"].sha256
    items, times, n_items = H.user_sequences(ml, 5)
    assert len(items) == 671 and n_items == 3496
    assert all((np.diff(t) >= 0).all() for t in times) and min(len(s) for s in items) >= 4
