"""Shared colored Fashion-MNIST builder (paperflow.data.biased_fashion): correlation rates, group layout,
colour and patch rendering against hand examples."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.data import biased_fashion as bf


def test_correlation_rate_matches_p_align_within_binomial_error():
    n = 40000
    y = torch.arange(n) % 10
    gen = torch.Generator().manual_seed(0)
    for p in (0.99, 0.95, 0.5):
        a = bf.draw_attribute(y, p, gen)
        rate = bf.correlation_rate(y, a)
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9
    unc = bf.draw_attribute(y, None, gen)
    assert abs(bf.correlation_rate(y, unc) - 0.1) < 4 * math.sqrt(0.09 / n)  # uncorrelated: 1 / 10 by chance


def test_conflicting_attribute_is_uniform_over_other_values():
    n = 30000
    y = torch.full((n,), 3)
    a = bf.draw_attribute(y, 0.0, torch.Generator().manual_seed(1))
    assert not bool((a == 3).any())
    counts = torch.bincount(a, minlength=10).float()
    assert counts[3] == 0
    others = counts[torch.arange(10) != 3]
    assert float((others - n / 9).abs().max()) < 4 * math.sqrt(n / 9)


def test_colorize_and_patch_hand_example():
    x = torch.zeros(2, 28, 28, dtype=torch.uint8)
    x[:, 10, 10] = 200
    img = bf.colorize(x, torch.tensor([0, 2]))
    assert img.shape == (2, 3, 28, 28) and img.dtype == torch.uint8
    assert img[0, :, 10, 10].tolist() == [200, 20, 20]  # 200 x (1.0, 0.1, 0.1)
    assert img[1, :, 10, 10].tolist() == [30, 70, 200]  # 200 x (0.15, 0.35, 1.0)
    assert int(img[:, :, 0, 0].sum()) == 0  # background stays black
    out = bf.stamp_patch(img, torch.tensor([0, 9]))
    assert int(out[0, :, 0:4, 0:4].min()) == 255 and int(out[0, :, 4:, 4:].max()) == 200  # position 0: top-left
    assert int(out[1, :, 24:28, 24:28].min()) == 255 and int(out[1, :, 0:24].max()) == 200  # position 9: bottom-right
    assert torch.equal(img[0, :, 10, 10], out[0, :, 10, 10])  # stamp_patch copies


def test_group_type_layout_and_class_group():
    y = torch.tensor([1, 1, 1, 1])
    color = torch.tensor([1, 1, 5, 5])
    pos = torch.tensor([1, 7, 1, 7])
    assert bf.group_type(y, color, pos).tolist() == [0, 1, 2, 3]  # gg, gc, cg, cc
    assert bf.GROUP_TYPES == ("gg", "gc", "cg", "cc")


def test_build_biased_set_rates_groups_and_determinism():
    n = 4000
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, 256, (n, 28, 28), generator=gen, dtype=torch.uint8)
    y = torch.randint(0, 10, (n,), generator=gen)
    s = bf.build_biased_set(x, y, 0.9, 0.8, seed=5)
    again = bf.build_biased_set(x, y, 0.9, 0.8, seed=5)
    assert all(torch.equal(s[k], again[k]) for k in s)
    assert s["x"].shape == (n, 3, 28, 28)
    assert abs(bf.correlation_rate(y, s["color"]) - 0.9) < 0.03
    assert abs(bf.correlation_rate(y, s["position"]) - 0.8) < 0.04
    frac = torch.bincount(s["group_type"], minlength=4).float() / n  # independent biases: products
    expected = torch.tensor([0.9 * 0.8, 0.9 * 0.2, 0.1 * 0.8, 0.1 * 0.2])
    assert float((frac - expected).abs().max()) < 0.03
    assert torch.equal(s["class_group"], 4 * y + s["group_type"])
    small = bf.build_biased_set(x[:8], y[:8], None, None, seed=5, factor=2)
    assert small["x"].shape == (8, 3, 14, 14)
    with pytest.raises(ValueError, match="28, 28"):
        bf.build_biased_set(x[:, :14], y, 0.9, 0.9, seed=0)
