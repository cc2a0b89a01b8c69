"""Shared optimizers (paperflow.optim): ExpSGDM against torch.optim.SGD and its expectation; PaperAdam against
torch.optim.Adam and a hand-written recursion."""
from __future__ import annotations

import math

import pytest
import torch

from paperflow.optim import ExpSGDM, PaperAdam


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))


def _run(model, opt, steps=6, seed=1):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("kw", [dict(momentum=0.9), dict(momentum=0.5, weight_decay=1e-3), dict(momentum=0.9, dampening=0.1),
                                dict(momentum=0.0)])
def test_expsgdm_with_scale_one_is_torch_sgd_bit_for_bit(kw):
    a, b = _model(), _model()
    pa = _run(a, ExpSGDM(a.parameters(), lr=0.05, scale=1.0, **kw))
    pb = _run(b, torch.optim.SGD(b.parameters(), lr=0.05, **kw))
    assert all(torch.equal(x, y) for x, y in zip(pa, pb))


def test_expsgdm_draws_are_exp1_and_scale_the_whole_update():
    opt = ExpSGDM([torch.nn.Parameter(torch.zeros(1))], lr=0.1, seed=3)
    draws = torch.tensor([opt.draw() for _ in range(20000)], dtype=torch.float64)
    assert float(draws.min()) >= 0
    assert float(draws.mean()) == pytest.approx(1.0, abs=4 / math.sqrt(20000))  # Exp(1): mean 1, sd 1
    assert float((draws > 1.0).double().mean()) == pytest.approx(math.exp(-1), abs=0.015)  # P(s > 1) = e^-1
    # one scalar per step for every parameter: the update of each tensor is s * (the SGDM update)
    a, b = _model(), _model()
    sa, sb = ExpSGDM(a.parameters(), lr=0.05, seed=7), ExpSGDM(b.parameters(), lr=0.05, scale=1.0)
    before = [p.detach().clone() for p in a.parameters()]
    _run(a, sa, steps=1), _run(b, sb, steps=1)
    ratios = [float(((pa - p0).norm() / (pb - p0).norm()).detach()) for pa, pb, p0 in zip(a.parameters(), b.parameters(), before)]
    assert ratios == pytest.approx([sa.last_scale] * len(ratios), rel=1e-5)


def test_expsgdm_expectation_equals_sgdm_on_a_quadratic():
    """f(x) = 1/2 x^T A x - b^T x has a linear gradient and s_n is independent of the past, so
    E[x_n] follows the SGDM recursion exactly; Monte Carlo over independent chains, 4 standard errors."""
    A = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    bvec = torch.tensor([1.0, -1.0], dtype=torch.float64)
    x0 = torch.tensor([3.0, -2.0], dtype=torch.float64)

    def chain(scale, seed, steps=5):
        x = torch.nn.Parameter(x0.clone())
        opt = ExpSGDM([x], lr=0.2, momentum=0.8, scale=scale, seed=seed)
        for _ in range(steps):
            x.grad = A @ x.detach() - bvec  # the gradient of f at the current (randomly scaled) iterate
            opt.step()
        return x.detach()

    sgdm = chain(1.0, 0)
    runs = torch.stack([chain("exp", s) for s in range(1000)])
    mean, se = runs.mean(0), runs.std(0) / math.sqrt(runs.shape[0])
    assert torch.all((mean - sgdm).abs() < 4 * se + 1e-12), (mean, sgdm, se)
    assert float(runs.std(0).min()) > 0.05  # the scaling does randomize the iterates


def test_expsgdm_clip_bounds_the_update_and_bad_config():
    p = torch.nn.Parameter(torch.zeros(4))
    opt = ExpSGDM([p], lr=1.0, momentum=0.0, scale=1.0, max_delta_norm=0.5)
    p.grad = torch.full((4,), 10.0)
    opt.step()
    assert float(p.detach().norm()) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="scale"):
        ExpSGDM([p], lr=0.1, scale=-1.0)
    with pytest.raises(ValueError, match="momentum"):
        ExpSGDM([p], lr=0.1, momentum=1.0)


@pytest.mark.parametrize("betas,eps", [((0.9, 0.999), 1e-8), ((0.5, 0.9), 1e-3), ((0.0, 0.99), 1e-6)])
def test_paper_adam_eps_outside_equals_torch_adam(betas, eps):
    a, b = _model(), _model()
    pa = _run(a, PaperAdam(a.parameters(), lr=1e-2, betas=betas, eps=eps, eps_inside=False))
    pb = _run(b, torch.optim.Adam(b.parameters(), lr=1e-2, betas=betas, eps=eps, foreach=False))
    for x, y in zip(pa, pb):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-7)


def test_paper_adam_eps_inside_follows_the_papers_recursion():
    """Scalar hand recursion of the paper's Adam (their test_optimizers.correct_adam) on f(t) = (t - 1)^4."""
    h, beta, rho, eps = 0.05, 0.8, 0.95, 0.3
    t = torch.nn.Parameter(torch.tensor([2.5], dtype=torch.float64))
    opt = PaperAdam([t], lr=h, betas=(beta, rho), eps=eps)
    ref, m, nu = 2.5, 0.0, 0.0
    for n in range(1, 8):
        opt.zero_grad()
        ((t - 1) ** 4).sum().backward()
        opt.step()
        g = 4 * (ref - 1) ** 3
        m, nu = beta * m + (1 - beta) * g, rho * nu + (1 - rho) * g * g
        ref -= h * (m / (1 - beta ** n)) / math.sqrt(nu / (1 - rho ** n) + eps)
        assert float(t.detach()) == pytest.approx(ref, rel=1e-12)
    with pytest.raises(ValueError):
        PaperAdam([t], lr=0.1, betas=(1.0, 0.9))
