"""Multi-embedding (ICML 2024): information abundance on matrices with known singular values, the pairwise-product
interaction against a brute-force loop, ME with one set = the single-embedding model (same parameters, same output), ME
whose sets are copies with a shared first layer = the single model, and prepare -> train -> compress -> evaluate on small
fake MovieLens and TIC tables."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import ROOT
from paperflow.contract import contract_problems
from paperflow.papers import multi_embedding as ME
from paperflow.spec import Resources


def test_information_abundance_known_singular_values():
    U, _ = torch.linalg.qr(torch.randn(20, 20, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))
    E = U[:, :3] @ torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)) @ V.T
    assert ME.information_abundance(E) == pytest.approx(6.0 / 3.0)
    assert ME.information_abundance(torch.outer(torch.randn(10), torch.randn(4))) == pytest.approx(1.0, abs=1e-6)  # rank one
    assert ME.information_abundance(U[:, :5]) == pytest.approx(5.0)  # orthonormal columns: fully spread
    ia, nia = ME.abundance([U[:, :5]], [torch.arange(20)])
    assert ia == pytest.approx(5.0) and nia == pytest.approx(1.0)


def test_interaction_matches_brute_force():
    e = torch.randn(2, 3, 4, 5, dtype=torch.float64)  # (B, M, N, d)
    z = ME.interaction(e)
    assert z.shape == (2, 3, 4 * 5 + 6)
    for b in range(2):
        for m in range(3):
            want = [e[b, m].reshape(-1)] + [torch.stack([e[b, m, i] @ e[b, m, j] for i in range(4) for j in range(i + 1, 4)])]
            assert torch.allclose(z[b, m], torch.cat(want))


def test_one_set_is_the_single_embedding_model():
    cfg = ME.Config(base_dim=3)
    vocab = [5, 7, 4]
    ps, pm = ME.init_params(vocab, "single", 1, cfg, 0), ME.init_params(vocab, "multi", 1, cfg, 0)
    assert set(ps) == set(pm) and all(torch.equal(ps[k], pm[k]) for k in ps)  # same initialisation at size 1
    x = torch.tensor([[0, 5, 12], [4, 11, 15]])
    assert torch.allclose(ME.forward(ps, x, 2), ME.forward(pm, x, 2))


def test_copied_sets_with_a_shared_first_layer_equal_one_set():
    cfg = ME.Config(base_dim=3)
    vocab = [5, 7, 4]
    p1 = ME.init_params(vocab, "single", 1, cfg, 0)
    assert ME.init_params(vocab, "shared", 4, cfg, 1)["w1"].shape == p1["w1"].shape  # shared: one first layer
    p4 = {**p1, "emb": p1["emb"].repeat(4, 1, 1)}  # four identical sets through one first layer, averaged
    x = torch.tensor([[0, 5, 12], [4, 11, 15]])
    assert torch.allclose(ME.forward(p1, x, 2), ME.forward(p4, x, 2), atol=1e-6)


def test_multi_sets_differ_and_have_their_own_first_layers():
    cfg = ME.Config(base_dim=2)
    p = ME.init_params([5, 7], "multi", 3, cfg, 0)
    assert p["emb"].shape == (3, 12, 2) and p["w1"].shape == (3, 2 * 2 + 1, cfg.hidden[0])
    assert not torch.equal(p["emb"][0], p["emb"][1])
    s = ME.init_params([5, 7], "single", 3, cfg, 0)
    assert s["emb"].shape == (1, 12, 6) and s["w1"].shape == (1, 2 * 6 + 1, cfg.hidden[0])


def _fake(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    n = 1500
    user, movie = rng.integers(1, 60, n), rng.integers(1, 80, n)
    rating = np.clip(np.round((2.5 + (user % 5) * 0.4 + (movie % 3) * 0.5 + rng.normal(0, 0.7, n)) * 2) / 2, 0.5, 5.0)
    np.savez(tmp_path / "ml.npz", user=user.astype(np.int32), movie=movie.astype(np.int32), rating=rating,
             timestamp=rng.integers(10**9, 2 * 10**9, n).astype(np.int64), year=rng.integers(1950, 2000, n).astype(np.int32),
             genre=rng.integers(0, 5, n).astype(np.int32), genre_levels=np.asarray(list("abcde")))
    rows = 600
    x = rng.integers(0, 4, (rows, 6)).astype(np.int16)
    y = ((x[:, 0] + x[:, 1] + rng.integers(0, 3, rows)) > 6).astype(np.int8)
    np.savez(tmp_path / "tic.npz", x=x, n_levels=np.full(6, 4, np.int32), columns=np.asarray(list("abcdef")), y=y)
    return Resources(root=str(tmp_path), paths={"movielens": str(tmp_path / "ml.npz"), "ticdata": str(tmp_path / "tic.npz")})


def test_stages_end_to_end_on_small_fake_tables(tmp_path, monkeypatch):
    from paperflow.data import resources

    monkeypatch.setattr(resources, "TIC_TRAIN_ROWS", 400)
    cfg = ME.Config(base_dim=2, sizes=(1, 2), hidden=(8, 4), epochs=1, tic_epochs=1, n_train=800, n_val=300, batch_size=512,
                    tic_batch_size=512, lr_grid=(0.01,), tic_first_field=2)
    data = ME.prepare(cfg, _fake(tmp_path))
    assert set(data["tuning"]) == set(ME.VARIANTS)
    out = {}
    for variant in ME.VARIANTS:
        model = ME.train(cfg, data, variant, 0, None)
        m = out[variant] = ME.evaluate(cfg, model, data)
        for key in ("auc_x1", "auc_x2", "auc_gain", "nia_drop", "nia_max", "auc_max", "n_params", "grid_edge",
                    "val_auc_x1", "val_auc_x2", "val_gain", "headroom"):
            assert key in m and np.isfinite(m[key]), key
        assert m["val_gain"] == pytest.approx(m["val_auc_x2"] - m["val_auc_x1"])
        comp = ME.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "0.80"} and np.isfinite(ME.evaluate(cfg, comp["0.50"], data)["auc_max"])
        assert "val_gain" not in ME.evaluate(cfg, comp["0.50"], data)  # validation AUCs belong to the dense model
    assert out["single"]["auc_x1"] == out["multi"]["auc_x1"] == out["multi_shared"]["auc_x1"]  # one network at size 1
    tu = data["tuning"]  # headroom: the best design's tuning-seed validation gain, per data set
    ml, tic = ("single", "multi", "multi_shared"), ("single_tic", "multi_tic")
    for group in (ml, tic):
        assert all(tu[v]["headroom"] == max(tu[w]["val_gain"] for w in group) for v in group)
    assert out["multi_shared"]["headroom"] == tu["multi"]["headroom"]
    assert contract_problems(ME.SPEC, ME.Config()) == []


@pytest.mark.skipif(not (ROOT / "resources" / "ticdata.npz").exists(), reason="resource ticdata not built here")
def test_ticdata_resource():
    from paperflow.data.resources import RESOURCES, TIC_TRAIN_ROWS, load_ticdata, npz_digest

    t = load_ticdata(ROOT / "resources" / "ticdata.npz")
    assert t["x"].shape == (9822, 85) and int(t["y"].sum()) == 586 and int(t["y"][:TIC_TRAIN_ROWS].sum()) == 348
    assert (t["x"].max(0) < t["n_levels"]).all() and t["columns"][43] == "PWAPART"
    assert npz_digest(ROOT / "resources" / "ticdata.npz") == RESOURCES["ticdata"].sha256


@pytest.mark.skipif(not (ROOT / "resources" / "movielens.npz").exists(), reason="resource movielens not built here")
def test_movielens_ctr_fields():
    x, rating, vocab = ME.movielens_ctr(str(ROOT / "resources" / "movielens.npz"))
    assert x.shape == (100004, 6) and vocab[:2] == [671, 9066] and vocab[4] == 7 and vocab[5] == 24
    assert 0.45 < float((rating >= 4).mean()) < 0.52
