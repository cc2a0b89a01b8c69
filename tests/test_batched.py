"""paperflow.batched: K stacked models trained as one follow, within float tolerance, the trajectories of K separate
models under torch.optim.Adam / AdamW (different inits, per-model or shared batches, one lr per model)."""
from __future__ import annotations

import pytest
import torch
from torch import nn
import torch.nn.functional as F

from paperflow.batched import ForeachStackedAdam, StackedAdam, StackedModels


def mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


@pytest.mark.parametrize("per_model,decoupled", [(True, False), (False, True)])
def test_stacked_training_equals_separate_runs(per_model, decoupled):
    k, steps, lrs, wd = 3, 25, [1e-3, 3e-3, 1e-2], 0.05
    gen = torch.Generator().manual_seed(0)
    xs = torch.randn(steps, k if per_model else 1, 8, 6, generator=gen)
    ys = torch.randint(0, 3, (steps, k if per_model else 1, 8), generator=gen)

    separate = [mlp(s) for s in range(k)]
    opt_cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    for j, model in enumerate(separate):
        opt = opt_cls(model.parameters(), lr=lrs[j], weight_decay=wd)
        for t in range(steps):
            i = j if per_model else 0
            opt.zero_grad()
            F.cross_entropy(model(xs[t, i]), ys[t, i]).backward()
            opt.step()

    stack = StackedModels([mlp(s) for s in range(k)])
    opt = StackedAdam(list(stack.parameters()), lrs, weight_decay=wd, decoupled=decoupled)
    for t in range(steps):
        out = stack(xs[t], per_model=True) if per_model else stack(xs[t, 0])  # (K, 8, 3)
        target = ys[t] if per_model else ys[t, 0].expand(k, -1)
        losses = F.cross_entropy(out.reshape(-1, 3), target.reshape(-1), reduction="none").view(k, -1).mean(1)
        opt.zero_grad()
        losses.sum().backward()  # each slice's gradient is its own model's loss gradient
        opt.step()

    for j, (model, state) in enumerate(zip(separate, stack.state_dicts())):
        for name, p in model.named_parameters():
            assert torch.allclose(state[name], p.detach(), atol=1e-5, rtol=1e-4), (j, name)
    # the models really differ (different inits and lrs), so equality is not trivial
    assert not torch.allclose(stack.state_dicts()[0]["0.weight"], stack.state_dicts()[2]["0.weight"])


def test_bad_stacks_are_refused():
    with pytest.raises(ValueError, match="same parameter names"):
        StackedModels([mlp(0), nn.Sequential(nn.Linear(6, 3))])
    with pytest.raises(ValueError, match="buffers"):
        StackedModels([nn.BatchNorm1d(4), nn.BatchNorm1d(4)])
    stack = StackedModels([mlp(0), mlp(1)])
    with pytest.raises(ValueError, match="2 deep"):
        StackedAdam(list(stack.parameters()), [1e-3])


def test_foreach_stacked_adam_equals_stacked_adam():
    torch.manual_seed(0)
    a = [torch.randn(3, 5, 4, requires_grad=True), torch.randn(3, 1, 4, requires_grad=True)]
    b = [x.detach().clone().requires_grad_() for x in a]
    lrs = [1e-3, 1e-2, 3e-2]
    oa, ob = ForeachStackedAdam(a, lrs), StackedAdam(b, lrs)
    for _ in range(30):
        for x, y in zip(a, b):
            g = torch.randn_like(x)
            x.grad, y.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
    assert max(float((x - y).detach().abs().max()) for x, y in zip(a, b)) < 1e-5
