"""Shared vision/measurement modules: the ViT, counted FLOPs, image helpers, the trade-off figure."""
from __future__ import annotations

import polars as pl
import torch

from paperflow.data.images import few_shot, select_classes, to_float
from paperflow.measure import count_flops, count_params, forward_backward_flops, nbytes
from paperflow.nn.vit import ViT, ViTConfig
from paperflow.report.figures import tradeoff_figure


def test_vit_shapes_and_factories():
    cfg = ViTConfig(d_model=32, n_layer=2, n_head=2)
    model = ViT(cfg)
    assert cfg.n_patches == 49 and cfg.n_tokens == 50  # (28/4)^2 patches + cls
    assert model(torch.randn(3, 1, 28, 28)).shape == (3, 10)
    # a norm factory replaces every LayerNorm (the hook papers like SLAB use)
    swapped = ViT(cfg, norm_fn=lambda d: torch.nn.Identity())
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in swapped.modules())


def test_linear_flops_are_counted_exactly():
    layer = torch.nn.Linear(8, 4, bias=False)
    x = torch.randn(5, 8)
    assert count_flops(layer, x) == 2 * 5 * 8 * 4  # 2 FLOPs per multiply-add
    # frozen weight: backward needs no weight gradient, and no input gradient is asked for
    layer.weight.requires_grad_(False)
    x.requires_grad_(True)
    fwd, bwd = forward_backward_flops(lambda: layer(x).sum())
    assert fwd == 2 * 5 * 8 * 4 and bwd == 2 * 5 * 8 * 4  # only dL/dx
    assert count_params(layer) == 32 and nbytes({"w": layer.weight}) == 32 * 4


def test_select_classes_remaps_and_few_shot_balances():
    y = torch.tensor([3, 7, 3, 1, 7, 7])
    x = torch.arange(6)
    xs, ys = select_classes(x, y, [7, 3])
    assert xs.tolist() == [0, 1, 2, 4, 5] and ys.tolist() == [1, 0, 1, 0, 0]
    idx = few_shot(ys, shots=2, seed=0)
    assert sorted(ys[idx].tolist()) == [0, 0, 1, 1]
    img = torch.full((2, 28, 28), 255, dtype=torch.uint8)
    assert to_float(img).shape == (2, 1, 28, 28)


def test_tradeoff_figure_writes_png(tmp_path):
    table = pl.DataFrame({"variant": ["a", "a", "b"], "seed": [0, 1, 0],
                          "dense/bytes": [100.0, 100.0, 50.0], "dense/acc": [90.0, 91.0, 85.0],
                          "compressed:0.5/bytes": [50.0, 50.0, 25.0], "compressed:0.5/acc": [88.0, 87.0, 80.0]})
    out = tradeoff_figure(table, "demo", "bytes", "acc", tmp_path / "t.png")
    assert out is not None and out.stat().st_size > 1000
    assert tradeoff_figure(table, "demo", "missing", "acc", tmp_path / "u.png") is None
