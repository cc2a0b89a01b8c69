"""The shared loop, atomic artifacts, magnitude pruning and the transformer."""
from __future__ import annotations

import os

import pytest
import torch

from paperflow import artifacts
from paperflow.compress.magnitude import global_magnitude_masks, layer_magnitude_mask
from paperflow.loop import cosine_lr, train_loop
from paperflow.nn.transformer import TransformerConfig, TransformerLM


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "a.json"

    def boom(path):
        path.write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        artifacts.write_atomic(target, boom)
    assert not target.exists() and os.listdir(tmp_path) == []
    artifacts.save_json({"x": 1}, target)
    assert artifacts.load_json(target) == {"x": 1}


def test_loop_fits_least_squares():
    torch.manual_seed(0)
    X = torch.randn(64, 3)
    w_true = torch.tensor([1.0, -2.0, 0.5])
    y = X @ w_true
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([w], lr=0.1)
    logged = []
    train_loop([w], lambda step: (X, y), lambda b: ((b[0] @ w - b[1]) ** 2).mean(), opt, 300, log=lambda s, **m: logged.append(s))
    assert torch.allclose(w.detach(), w_true, atol=1e-3)
    assert logged[0] == 0 and logged[-1] == 299


def test_loop_combine_hook_sets_shared_gradient():
    shared = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    seen = {}

    def combine(G, losses):
        seen["G"] = G.clone()
        return G.mean(0)

    opt = torch.optim.SGD([shared], lr=0.0)
    # task losses x0^2 and 3 x1: per-task gradients [2, 0] and [0, 3]
    train_loop([shared], lambda s: None, lambda b: torch.stack([shared[0] ** 2, 3 * shared[1]]), opt, 1,
               combine=combine, shared_params=[shared])
    assert torch.allclose(seen["G"], torch.tensor([[2.0, 0.0], [0.0, 3.0]]))
    assert torch.allclose(shared.grad, torch.tensor([1.0, 1.5]))


def test_cosine_lr_schedule():
    assert cosine_lr(0, 100, 1.0, warmup=10) == pytest.approx(0.1)
    assert cosine_lr(100, 100, 1.0, warmup=10) == pytest.approx(0.1)
    assert cosine_lr(10, 100, 1.0, warmup=10) == pytest.approx(1.0)


def test_magnitude_masks_hit_their_sparsity():
    w = torch.randn(16, 32)
    assert int((~layer_magnitude_mask(w, 0.6)).sum()) == int(16 * 32 * 0.6)
    masks = global_magnitude_masks({"a": w, "b": 10 * torch.randn(8, 8)}, 0.5)
    assert sum(int((~m).sum()) for m in masks.values()) == int((16 * 32 + 64) * 0.5)
    assert (~masks["a"]).float().mean() > (~masks["b"]).float().mean()  # smaller weights pruned first


def test_transformer_is_causal():
    torch.manual_seed(0)
    model = TransformerLM(TransformerConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16)).eval()
    x = torch.randint(0, 11, (1, 8))
    y = x.clone()
    y[0, 5:] = (y[0, 5:] + 1) % 11
    assert torch.allclose(model(x)[0, :5], model(y)[0, :5], atol=1e-6)


@pytest.mark.parametrize("n_prune", [0, 1, 7, 20, 31, 32])
def test_keep_mask_lowest_equals_stable_sort(n_prune):
    from paperflow.compress.magnitude import keep_mask_lowest

    torch.manual_seed(0)
    scores = torch.randint(0, 6, (9, 32)).float()  # many ties
    ref = torch.ones_like(scores, dtype=torch.bool)
    ref.scatter_(1, torch.sort(scores, dim=1, stable=True).indices[:, :n_prune], False)
    assert torch.equal(keep_mask_lowest(scores, n_prune), ref)


def test_unprotect_tree_gives_writable_copies_and_keeps_the_cache(tmp_path):
    """What `dvc commit` leaves with cache.type hardlink (a read-only inode shared with the cache) becomes a private
    writable copy with the same mtime; the cache entry keeps its bytes and mode (issue 26)."""
    import os
    import stat

    from paperflow.artifacts import unprotect_tree

    cache, out = tmp_path / "cache" / "ab12", tmp_path / "results" / "p" / "metrics.csv"
    cache.parent.mkdir(parents=True)
    out.parent.mkdir(parents=True)
    cache.write_text("a,b\n1,2\n")
    os.chmod(cache, 0o444)
    os.link(cache, out)
    os.utime(out, ns=(1_000_000_000, 2_000_000_000))
    assert unprotect_tree(tmp_path / "results") == 1
    assert out.stat().st_mode & stat.S_IWUSR and out.stat().st_mtime_ns == 2_000_000_000
    assert out.stat().st_ino != cache.stat().st_ino and out.read_text() == "a,b\n1,2\n"
    assert not cache.stat().st_mode & stat.S_IWUSR
    assert unprotect_tree(tmp_path / "results") == 0  # nothing left to do
