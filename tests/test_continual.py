"""paperflow.continual (shared by mrfa and masc): splits, the replay memory, the CL loop, the metrics against hand
examples and brute force, the augmentation against a per-pixel loop, the MLP's feature hook."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow import continual as cl


def test_splits_and_take_classes():
    assert cl.class_incremental_splits(range(10), 5) == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert cl.class_incremental_splits([3, 1, 2, 0], 2) == [(3, 1), (2, 0)]
    with pytest.raises(ValueError):
        cl.class_incremental_splits(range(10), 3)
    x, y = torch.arange(6).float(), torch.tensor([0, 1, 2, 0, 1, 2])
    xs, ys = cl.take_classes(x, y, [2, 0])
    assert ys.tolist() == [0, 2, 0, 2] and xs.tolist() == [0.0, 2.0, 3.0, 5.0]


def test_class_balanced_split_is_disjoint_and_seeded():
    y = torch.tensor([0] * 10 + [1] * 10 + [2] * 3)
    a, b = cl.class_balanced_split(y, [0, 1], 4, 3, seed=5)
    assert len(a) == 8 and len(b) == 6 and not set(a.tolist()) & set(b.tolist())
    assert (y[a] == torch.tensor([0] * 4 + [1] * 4)).all()
    a2, _ = cl.class_balanced_split(y, [0, 1], 4, 3, seed=5)
    assert torch.equal(a, a2)
    with pytest.raises(ValueError):
        cl.class_balanced_split(y, [2], 2, 2, seed=0)


def test_cl_metrics_hand_examples():
    R = np.array([[90.0, np.nan], [70.0, 80.0]])
    m = cl.cl_metrics(R)
    assert m["final_acc"] == pytest.approx(75.0) and m["avg_inc_acc"] == pytest.approx((90 + 75) / 2)
    assert m["forgetting"] == pytest.approx(20.0)
    # three tasks: task 0 peaks after task 1 (max over l in {0, 1}), task 1 forgets 10
    R = np.array([[50.0, 0, 0], [60.0, 90.0, 0], [40.0, 80.0, 70.0]])
    m = cl.cl_metrics(R)
    assert m["forgetting"] == pytest.approx(((60 - 40) + (90 - 80)) / 2)
    assert m["final_acc"] == pytest.approx(190 / 3)
    assert m["avg_inc_acc"] == pytest.approx((50 + 75 + 190 / 3) / 3)
    assert cl.cl_metrics(np.array([[42.0]])) == {"final_acc": 42.0, "avg_inc_acc": 42.0, "forgetting": 0.0}


def test_forgetting_matches_brute_force():
    rng = np.random.default_rng(0)
    R = rng.uniform(0, 100, (5, 5))
    T = 5
    brute = np.mean([max(R[l, j] for l in range(T - 1) if l >= j) - R[T - 1, j] for j in range(T - 1)])
    assert cl.cl_metrics(R)["forgetting"] == pytest.approx(brute)


def test_replay_buffer():
    gen = torch.Generator().manual_seed(0)
    x = torch.arange(30, dtype=torch.uint8).repeat_interleave(784).view(30, 28, 28)
    y = torch.tensor([0] * 10 + [1] * 15 + [2] * 5)
    mem = cl.ReplayBuffer(4)
    assert len(mem) == 0 and mem.sample(3, gen)[0].shape[0] == 0
    mem.add(x[:25], y[:25], gen)
    assert len(mem) == 8 and mem.classes == [0, 1]
    assert all((x[int(x_[0, 0])] == x_).all() and y[int(x_[0, 0])] == y_ for x_, y_ in zip(mem.x, mem.y))  # stored pairs are real
    with pytest.raises(ValueError):
        mem.add(x[:5], y[:5], gen)
    mem.add(x[25:], y[25:], gen)
    assert len(mem) == 12 and (mem.y == 2).sum() == 4
    xs, ys = mem.sample(50, gen)
    assert xs.shape == (50, 28, 28) and set(ys.tolist()) <= {0, 1, 2}
    again = cl.ReplayBuffer.from_state(mem.state())
    assert torch.equal(again.x, mem.x) and torch.equal(again.y, mem.y) and again.per_class == 4


def test_run_tasks_calls_hooks_in_order():
    calls = []
    R = cl.run_tasks(2, 3, lambda t, s: calls.append(("step", t, s)), lambda t: [10.0 * (t + 1), 5.0],
                     before_task=lambda t: calls.append(("before", t)), after_task=lambda t: calls.append(("after", t)))
    assert calls[:5] == [("before", 0), ("step", 0, 0), ("step", 0, 1), ("step", 0, 2), ("after", 0)]
    assert R.tolist() == [[10.0, 5.0], [20.0, 5.0]]


def test_random_shift_flip_matches_a_per_pixel_loop():
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, 255, (6, 5, 7), generator=gen, dtype=torch.uint8)
    assert torch.equal(cl.random_shift_flip(x, 0, gen, flip=False), x)
    s = 2
    g1, g2 = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    out = cl.random_shift_flip(x, s, g1, flip=True)
    dy = torch.randint(0, 2 * s + 1, (6,), generator=g2)
    dx = torch.randint(0, 2 * s + 1, (6,), generator=g2)
    flip = torch.rand(6, generator=g2) < 0.5
    for b in range(6):
        ref = torch.zeros(5, 7, dtype=torch.uint8)
        for i in range(5):
            for j in range(7):
                si, sj = i + int(dy[b]) - s, j + int(dx[b]) - s
                if 0 <= si < 5 and 0 <= sj < 7:
                    ref[i, j] = x[b, si, sj]
        if flip[b]:
            ref = ref.flip(1)
        assert torch.equal(out[b], ref)


def test_mlp_feature_hook_and_mask():
    torch.manual_seed(0)
    m = cl.MLP((5, 4), 3)
    x = torch.randn(2, 784)
    d = {2: torch.randn(2, 4)}
    h1 = torch.relu(m.layers[1](torch.relu(m.layers[0](x))))
    assert torch.allclose(m(x, d), m.layers[2](h1 + d[2]))
    logits, inputs = m(x, keep_inputs=True)
    assert m.feature_layers == [1, 2] and torch.allclose(inputs[2], h1) and torch.allclose(logits, m.layers[2](h1))
    z = cl.mask_unseen(torch.zeros(2, 3), [0, 2])
    assert z[0, 1] == float("-inf") and z[0, 0] == 0 and z.argmax(1).tolist() == [0, 0]
    acc = cl.per_class_accuracy(torch.tensor([[1.0, 0], [0, 1.0], [1.0, 0]]), torch.tensor([0, 0, 1]), [[0], [1], [0, 1]])
    assert acc == pytest.approx([50.0, 0.0, 100 / 3])
