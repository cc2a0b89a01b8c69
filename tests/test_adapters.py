"""Tests of paperflow.nn.adapters (LoRA, ETHER, ETHER+, OFT; merge) and paperflow.finetune (the shared
SmolLM2 task: passages split, the top-layer forward, merge). Tiny random models only."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from paperflow import finetune as ft
from paperflow.nn import adapters as ad
from tiny_llama import tiny_llama, tiny_resources

torch.set_num_threads(1)


def _linear(i=12, o=8, bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(i, o, bias=bias)


# ------------------------------------------------------------------------------------------ reflections
def test_householder_is_orthogonal_with_determinant_minus_one():
    u = torch.randn(3, 5, dtype=torch.float64)
    h = ad.householder(u)
    eye = torch.eye(5, dtype=torch.float64)
    for hi, ui in zip(h, u):
        assert torch.allclose(hi @ hi.T, eye, atol=1e-12)
        assert torch.linalg.det(hi).item() == pytest.approx(-1.0, abs=1e-12)
        assert torch.allclose(hi @ ui, -ui, atol=1e-12)  # u is reflected
        assert torch.linalg.norm(hi - eye).item() == pytest.approx(2.0, abs=1e-12)  # ||H - I||_F = 2
    # hand-computed 2-D case: u = (1, 1) -> H = [[0, -1], [-1, 0]]
    assert torch.allclose(ad.householder(torch.tensor([[1.0, 1.0]]))[0], torch.tensor([[0.0, -1.0], [-1.0, 0.0]]), atol=1e-6)


def test_ether_plus_matrix_is_identity_when_v_is_minus_u_and_is_the_hyperplane_sum():
    u = torch.randn(2, 6, dtype=torch.float64)
    assert torch.allclose(ad.ether_plus_matrix(u, -u), torch.eye(6, dtype=torch.float64).expand(2, 6, 6), atol=1e-12)
    v = torch.randn(2, 6, dtype=torch.float64)
    for hi, ui, vi in zip(ad.ether_plus_matrix(u, v), u, v):
        expected = torch.eye(6, dtype=torch.float64) - torch.outer(ui, ui) / ui.dot(ui) + torch.outer(vi, vi) / vi.dot(vi)
        assert torch.allclose(hi, expected, atol=1e-12)


def test_cayley_is_orthogonal_det_plus_one_and_identity_at_zero():
    r = torch.randn(2, 4, 4, dtype=torch.float64)
    q = ad.cayley(r)
    for qi in q:
        assert torch.allclose(qi @ qi.T, torch.eye(4, dtype=torch.float64), atol=1e-10)
        assert torch.linalg.det(qi).item() == pytest.approx(1.0, abs=1e-10)
    assert torch.allclose(ad.cayley(torch.zeros(3, 4, 4)), torch.eye(4).expand(3, 4, 4))


@pytest.mark.parametrize("lead", [(2, 3), (40,)])  # 6 or 40 rows, against b = 4 and b = 32
def test_cayley_apply_equals_x_times_explicit_q_transpose_with_gradients(lead):
    # Both paths: fewer rows than the block width (solve against x) and more (form Q); values and gradients.
    nb = 2
    for b in (4, 32):
        x = torch.randn(*lead, nb * b, dtype=torch.float64, requires_grad=True)
        r = torch.randn(nb, b, b, dtype=torch.float64, requires_grad=True)
        got = ad.cayley_apply(x, r)
        ref = ad.apply_blocks(x, ad.cayley(r))
        assert torch.allclose(got, ref, atol=1e-10)
        w = torch.randn_like(ref)
        g_got = torch.autograd.grad((got * w).sum(), (x, r))
        g_ref = torch.autograd.grad((ref * w).sum(), (x, r))
        for a, e in zip(g_got, g_ref):
            assert torch.allclose(a, e, atol=1e-9)


def test_block_forms_equal_the_explicit_block_diagonal_matrix():
    u = torch.randn(3, 4, dtype=torch.float64)
    x = torch.randn(5, 12, dtype=torch.float64)
    h = ad.householder(u)
    big = ad.block_diag(h)
    assert big.shape == (12, 12)
    assert torch.allclose(big[4:8, 4:8], h[1]) and torch.count_nonzero(big[:4, 4:]) == 0
    assert torch.allclose(ad.reflect(x, u), x @ big.T, atol=1e-12)
    assert torch.allclose(ad.apply_blocks(x, h), x @ big.T, atol=1e-12)
    v = torch.randn(3, 4, dtype=torch.float64)
    assert torch.allclose(ad.ether_plus_apply(x, u, v), x @ ad.block_diag(ad.ether_plus_matrix(u, v)).T, atol=1e-12)


def test_ether_linear_is_the_papers_block_diagonal_product_not_a_row_major_reshape():
    base = _linear(12, 8).double()
    e = ad.ETHERLinear(base, nb=3).double()
    w, big = base.weight, ad.block_diag(e.transform())
    assert torch.allclose(e.merged_weight(), w @ big, atol=1e-12)
    for i in range(3):  # each column block of W transformed by its own reflection
        assert torch.allclose(e.merged_weight()[:, 4 * i : 4 * i + 4], w[:, 4 * i : 4 * i + 4] @ e.transform()[i], atol=1e-12)
    row_major = torch.einsum("rfm,rmn->rfn", w.reshape(3, 8, 4), e.transform()).reshape(8, 12)  # the code's n > 1 form
    assert not torch.allclose(row_major, e.merged_weight(), atol=1e-6)
    e1 = ad.ETHERLinear(base, nb=1).double()  # n = 1: the code's form agrees
    assert torch.allclose(torch.einsum("rfm,rmn->rfn", w.reshape(1, 8, 12), e1.transform()).reshape(8, 12),
                          e1.merged_weight(), atol=1e-12)


# --------------------------------------------------------------------------------------------- adapters
def test_init_identity_where_the_method_says_so():
    x = torch.randn(4, 12)
    base = _linear()
    ref = base(x)
    assert torch.allclose(ad.LoRALinear(base, r=2)(x), ref)  # B = 0
    assert torch.allclose(ad.ETHERPlusLinear(base, nb=2)(x), ref, atol=1e-6)  # v = -u on both sides
    assert torch.allclose(ad.OFTLinear(base, nb=3)(x), ref, atol=1e-6)  # R = 0
    assert not torch.allclose(ad.ETHERLinear(base, nb=2)(x), ref, atol=1e-3)  # a reflection is never I
    lora = ad.LoRALinear(base, r=2)
    assert torch.count_nonzero(lora.lora_B) == 0 and lora.lora_A.abs().max() <= 1 / math.sqrt(12) + 1e-6


@pytest.mark.parametrize("kind,kw", [("lora", {"r": 3, "alpha": 6.0}), ("ether", {"nb": 2}), ("ether_plus", {"nb": 2}),
                                     ("ether_plus", {"nb": 2, "two_sided": False}), ("oft", {"nb": 2})])
def test_merged_equals_unmerged(kind, kw):
    base = _linear()
    a = ad.make_adapter(kind, base, **kw)
    with torch.no_grad():  # move away from init so the check is not trivial
        for p in a.adapter_parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(7, 12)
    merged = a.merged()
    assert isinstance(merged, nn.Linear) and not isinstance(merged, ad.Adapter)
    assert torch.allclose(a(x), merged(x), atol=1e-5)
    assert all(not p.requires_grad for p in a.base.parameters())


def test_parameter_counts():
    base = _linear(12, 8)
    assert ad.n_effective(ad.LoRALinear(base, r=2)) == 2 * (12 + 8)
    assert ad.n_effective(ad.ETHERLinear(base, nb=3)) == 12  # one vector per block: `in` whatever nb
    assert ad.n_effective(ad.ETHERLinear(base, nb=1)) == 12
    assert ad.n_effective(ad.ETHERPlusLinear(base, nb=2)) == 2 * 12 + 2 * 8
    assert ad.n_effective(ad.OFTLinear(base, nb=2)) == 2 * (6 * 5 // 2)


def test_bad_block_count_raises():
    with pytest.raises(ValueError):
        ad.ETHERLinear(_linear(12, 8), nb=5)
    with pytest.raises(ValueError):
        ad.ETHERPlusLinear(_linear(12, 9), nb=2)  # out side not divisible


def test_add_and_merge_adapters_on_a_llama():
    lm = tiny_llama()
    layer = lm.model.layers[1]
    found = ad.add_adapters(lm.model.layers, ("q_proj", "down_proj"), lambda lin: ad.LoRALinear(lin, r=2))
    assert sorted(found) == ["0.mlp.down_proj", "0.self_attn.q_proj", "1.mlp.down_proj", "1.self_attn.q_proj"]
    assert isinstance(layer.self_attn.q_proj, ad.LoRALinear)
    assert ad.merge_adapters(lm) == 4 and not ad.adapters_of(lm)
    with pytest.raises(ValueError):
        ad.add_adapters(lm, ("nope",), lambda lin: ad.LoRALinear(lin))


# ------------------------------------------------------------------------------------- shared SmolLM2 task
def test_window_split_regions_are_disjoint_and_in_order():
    tr, va, te = ft.window_split(100, (0.7, 0.8), (10, 3, 5))
    assert tr.max() < 70 <= va.min() and va.max() < 80 <= te.min() and te.max() == 99
    assert (len(tr), len(va), len(te)) == (10, 3, 5)
    from paperflow.spec import ConfigError
    with pytest.raises(ConfigError):
        ft.window_split(10, (0.7, 0.8), (8, 1, 1))


def test_top_classifier_last_token_shortcut_matches_hugging_face(tmp_path):
    cfg = ft.TaskConfig(seq_len=8, n_train=4, n_val=2, n_test=2)
    data = ft.prepare_task(cfg, tiny_resources(tmp_path))
    assert data["hidden"].dtype == torch.float16 and data["hidden"].shape == (6 * 8, 8, 32)
    # passages carry no token of another split: windows are disjoint slices, ids are kept
    lm = tiny_llama()
    net = ft.TopClassifier(data, 6)
    with torch.no_grad():
        hs = lm(data["ids"][:5], output_hidden_states=True).hidden_states
        assert torch.allclose(data["hidden"][:5].float(), hs[-2], atol=1e-2)
        pos = torch.arange(8)[None]
        cos, sin = net.rotary(hs[-2], pos)
        full = ft.layer_forward(net.layers[0], hs[-2], cos, sin, net.config)
        last = ft.layer_forward(net.layers[0], hs[-2], cos, sin, net.config, last_only=True)
        assert torch.allclose(net.norm(last[:, -1]), hs[-1][:, -1], atol=1e-5)  # HF applies the final norm
        assert torch.allclose(full[:, -1], last[:, -1], atol=1e-5)


TINY = ft.TaskConfig(seq_len=8, n_train=6, n_val=2, n_test=2, steps=4, batch_size=4, warmup=1, eval_every=2, nb=4)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return ft.prepare_task(TINY, tiny_resources(tmp_path_factory.mktemp("tiny")))


@pytest.mark.parametrize("method", ["lora", "ether", "ether_plus", "oft", "full"])
def test_finetune_then_merge_matches(tiny_data, method):
    cfg, data = TINY, tiny_data
    model = ft.finetune(cfg, data, method, 1e-2, 0)
    assert model["curve"]["step"] == [2, 4]
    merged = ft.merge(cfg, data, model)
    assert merged["merge_err"] < 1e-4
    a, b = ft.metrics(cfg, model, data), ft.metrics(cfg, merged, data)
    assert a["acc"] == b["acc"] and a["loss"] == pytest.approx(b["loss"], abs=1e-5)
    if method != "full":  # only adapter parameters and the head were trained; the base weights stay frozen
        assert all(".base." not in k for k in model["state"]) and any(k.startswith("head.") for k in model["state"])
        assert model["adapter_params"] > 0


def test_steps_to_target():
    assert ft.steps_to_target([10, 20, 30], [1.0, 0.5, 0.4], 0.5) == 20
    assert ft.steps_to_target([10, 20], [1.0, 0.9], 0.5) == math.inf


def test_prune_merged_prunes_each_adapted_matrix_and_leaves_the_rest(tiny_data):
    cfg, data = TINY, tiny_data
    model = ft.finetune(cfg, data, "lora", 1e-2, 0)
    comp = ft.compress_merge_prune(cfg, model, data, "lora_lr0", 0)
    assert set(comp) == {"merged", "0.50"} and ft.level_names(cfg) == ["0.50"]
    merged, pruned = comp["merged"]["state"], comp["0.50"]["state"]
    for name, w in merged.items():
        if any(name.endswith(f"{t}.weight") for t in cfg.targets):  # each matrix: exactly half, the smallest |w|
            kept = pruned[name] != 0
            assert int((~kept).sum()) == w.numel() // 2
            assert w[kept].abs().min() >= w[~kept].abs().max()
        else:  # norms, head: untouched
            assert torch.equal(pruned[name], w)
    m = ft.metrics(cfg, comp["0.50"], data)
    assert m["sparsity"] == pytest.approx(0.5) and "merge_err" not in m


def test_shared_prepare_cache_computes_once_and_reloads_the_same_artifact(tmp_path, monkeypatch):
    res = tiny_resources(tmp_path / "res")
    cfg = ft.TaskConfig(seq_len=8, n_train=4, n_val=2, n_test=2)
    calls = []
    real = ft.prepare_task
    monkeypatch.setattr(ft, "prepare_task", lambda c, r: calls.append(1) or real(c, r))
    first = ft.prepare_task_shared(cfg, res, tmp_path / "cache")
    # another paper's Config with the same data fields (training fields differ): same key, loaded, not recomputed
    other = ft.TaskConfig(seq_len=8, n_train=4, n_val=2, n_test=2, steps=70, lora_r=2, nb=2, sparsities=(0.3,))
    assert ft.task_cache_key(other, res) == ft.task_cache_key(cfg, res) == first["cache_key"]
    second = ft.prepare_task_shared(other, res, tmp_path / "cache")
    assert len(calls) == 1 and torch.equal(first["hidden"], second["hidden"]) and torch.equal(first["ids"], second["ids"])
    assert [p.name for p in (tmp_path / "cache").glob("*.pt")] == [f"finetune-task-{first['cache_key']}.pt"]
    # a data field changes the key (a new product); a corrupt file is recomputed, not trusted
    assert ft.task_cache_key(ft.TaskConfig(seq_len=8, n_train=5, n_val=2, n_test=2), res) != first["cache_key"]
    (tmp_path / "cache" / f"finetune-task-{first['cache_key']}.pt").write_bytes(b"garbage")
    third = ft.prepare_task_shared(cfg, res, tmp_path / "cache")
    assert len(calls) == 2 and torch.equal(third["hidden"], first["hidden"])
    assert ft.shared_dir(res) == tmp_path / "results" / "_shared"


def test_finetune_grid_keeps_the_best_validation_run_and_every_lrs_state(tiny_data):
    cfg, data = TINY, tiny_data
    lrs = (1e-4, 3e-2, 1.0)
    model = ft.finetune_grid(cfg, data, "lora", lrs, 3)
    # each grid entry is exactly the run finetune() gives at that lr with the same seed
    for run, lr in zip(model["grid"], lrs):
        alone = ft.finetune(cfg, data, "lora", lr, 3)
        assert run["lr"] == lr and all(torch.equal(run["state"][k], alone["state"][k]) for k in alone["state"])
    vals = [run["curve"]["val_acc"][-1] for run in model["grid"]]
    i = max(range(3), key=lambda j: (vals[j], -j))  # best validation accuracy, ties to the smaller lr
    assert model["tuning"]["tuned_lr_index"] == i and model["lr"] == lrs[i] and model["tuning"]["grid_edge"] == float(i != 1)
    m = ft.metrics(cfg, model, data)
    accs = [m[f"acc@lr{j}"] for j in range(3)]
    assert m["acc"] == accs[i] and m["acc_worst"] == min(accs) and m["val_acc"] == vals[i]
    assert "grid" not in ft.merge(cfg, data, model) and "acc_worst" not in ft.metrics(cfg, ft.merge(cfg, data, model), data)


def test_shared_prepare_waits_for_the_lock_holder(tmp_path):
    """A second prepare (another paper's job) blocks on the per-key flock while the first holds it, then loads."""
    import fcntl
    import threading

    res = tiny_resources(tmp_path / "res")
    cfg = ft.TaskConfig(seq_len=8, n_train=4, n_val=2, n_test=2)
    cache = tmp_path / "cache"
    cache.mkdir()
    key = ft.task_cache_key(cfg, res)
    out = {}
    with open(cache / f".finetune-task-{key}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: out.update(data=ft.prepare_task_shared(cfg, res, cache)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not (cache / f"finetune-task-{key}.pt").exists()  # waiting, not computing
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(timeout=120)
    assert not worker.is_alive() and out["data"]["cache_key"] == key
