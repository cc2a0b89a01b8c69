"""ndm (ICML 2024): the NDM bound reduces to DDPM's when the transformation is the identity (the zero-initialised G,
and DDPM's bound against VDM's SNR form), F(x, 0) = x, the parameter matching of ddpm_wide, the departure measure,
and a tiny prepare -> train -> compress -> evaluate run."""
from __future__ import annotations

import math

import torch

from paperflow.diffusion import Schedule, TimeMLP
from paperflow.papers import ndm as P

TINY = dict(n_val=20, n_test=20, width=16, f_width=8, train_steps=3, batch=8, r_train=40, r_val=20, r_test=20,
            r_width=8, r_f_width=4, r_train_steps=3, steps_T=5, lrs=(0.001, 0.002, 0.004))


def _terms(cfg, nets, x, i, discrete=True):
    sched = Schedule(cfg.steps_T, cfg.gamma_min, cfg.gamma_max)
    gen = torch.Generator().manual_seed(0)
    eps, eps0 = torch.randn(x.shape, generator=gen), torch.randn(x.shape, generator=gen)
    return sched, P.bound_terms(sched, nets, x, i, eps, discrete, torch.linspace(-1, 1, P.LEVELS), eps0), eps


def test_identity_transformation_gives_ddpm_bound():
    cfg = P.Config(**TINY)
    nets = P.build(cfg, "ndm", "digits", 0)  # G starts at zero: F = identity
    x = torch.randint(0, 17, (6, 64)).float() / 8 - 1
    i = torch.tensor([1, 2, 3, 4, 5, 5])
    _, (kl_ndm, prior_ndm, rec_ndm), _ = _terms(cfg, nets, x, i)
    _, (kl_ddpm, prior_ddpm, rec_ddpm), eps = _terms(cfg, {"x": nets["x"], "g": None}, x, i)
    torch.testing.assert_close(kl_ndm, kl_ddpm)
    torch.testing.assert_close(prior_ndm, prior_ddpm)
    torch.testing.assert_close(rec_ndm, rec_ddpm)
    # DDPM's step KL is VDM's (SNR_s - SNR_t)/2 ||x - x_hat||^2
    sched = Schedule(cfg.steps_T, cfg.gamma_min, cfg.gamma_max)
    z = sched.q_sample(x, i, eps)
    with torch.no_grad():
        xh = sched.x_from_eps(z, i, nets["x"](z, sched.t[i].float()))
    snr = (sched.alpha ** 2 / sched.sigma ** 2).float()
    torch.testing.assert_close(kl_ddpm.detach(), 0.5 * (snr[i - 1] - snr[i]) * ((x - xh) ** 2).sum(1), rtol=1e-4, atol=1e-4)


def test_transformation_is_identity_at_time_zero_and_moves_later():
    g = TimeMLP(3, 8, 2)  # not zero-initialised: F departs from x at t > 0
    x = torch.randn(5, 3)
    torch.testing.assert_close(P.transform(g, x, torch.zeros(5)), x)
    assert not torch.allclose(P.transform(g, x, torch.ones(5)), x)
    sched = Schedule(4)
    assert P.departure(sched, None, x) == 0.0 and P.departure(sched, g, x) > 0


def test_wide_ddpm_matches_ndm_parameters():
    cfg = P.Config()
    from paperflow.diffusion import n_params
    ndm = sum(n_params(n) for n in P.build(cfg, "ndm", "digits", 0).values() if n is not None)
    wide = n_params(P.build(cfg, "ddpm_wide", "digits", 0)["x"])
    assert ndm <= wide < ndm + 64 + 16 + 64 + 2 * cfg.width + 10


def test_prior_kl_and_decoder_on_a_hand_case():
    """A perfect x_hat gives zero diffusion KL; the decoder of a level far inside its bin is near certain."""
    cfg = P.Config(**TINY, gamma_min=-10.0)  # sigma_0 = 0.0067, far inside half a grey level (0.0625)
    x = torch.zeros(2, 64)

    class Oracle(torch.nn.Module):  # eps_hat = the true eps: x_hat = x exactly
        def forward(self, z, t):
            return self.eps
    o = Oracle()
    sched = Schedule(cfg.steps_T, cfg.gamma_min, cfg.gamma_max)
    gen = torch.Generator().manual_seed(0)
    eps = torch.randn(x.shape, generator=gen)
    o.eps = eps
    kl, prior, rec = P.bound_terms(sched, {"x": o, "g": None}, x, torch.tensor([2, 3]), eps, True,
                                   torch.linspace(-1, 1, P.LEVELS), torch.zeros_like(x))
    assert float(kl.abs().max()) < 1e-6
    s1 = float(sched.sigma[-1])
    assert abs(float(prior[0]) - 0.5 * 64 * (s1 ** 2 - 1 - math.log(s1 ** 2))) < 1e-4
    assert float(rec.max()) < 1e-3  # z0 = alpha0 x exactly: the right level, sigma0 well inside half a level


def test_tiny_end_to_end():
    cfg = P.Config(**TINY)
    data = P.prepare(cfg, None)
    assert data["digits"]["test"].shape == (20, 64) and set(data["tuning"]) == {f"{v}/{d}" for v in P.VARIANTS for d in P.SETS}
    assert data["digits"]["train"].shape[0] == 1797 - 40  # a partition: 20 test, 20 validation, the rest training
    for variant in P.VARIANTS:
        model = P.train(cfg, data, variant, 0, None)
        m = P.evaluate(cfg, model, data)
        assert math.isfinite(m["nll_bpd"]) and math.isfinite(m["nll_bpd_ring"])
        assert (m["f_departure"] == 0.0) == (variant != "ndm")
        comp = P.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.30", "0.60"}
        mc = P.evaluate(cfg, comp["0.60"], data)
        assert math.isfinite(mc["nll_bpd"])
    names = {c.metric for c in P.comparisons(cfg)}
    assert {"nll_bpd", "f_departure", "nll_bpd_ring"} <= names


def test_oracle_gives_zero_kl_and_the_hand_kl_with_a_learned_transformation():
    """With a non-zero G, an x_hat network that returns x exactly makes every step KL zero (F enters q and p the same
    way); a wrong x_hat gives the KL of the two posteriors written out by hand from the paper's formula."""
    cfg = P.Config(**TINY)
    sched = Schedule(cfg.steps_T, cfg.gamma_min, cfg.gamma_max)
    g = TimeMLP(64, 8, 2)  # not zero-initialised: F(x, t) = x + t G(x, t) departs from x
    gen = torch.Generator().manual_seed(4)
    x = torch.randint(0, 17, (6, 64), generator=gen).float() / 8 - 1
    eps, eps0 = torch.randn(x.shape, generator=gen), torch.randn(x.shape, generator=gen)
    i = torch.tensor([1, 2, 3, 4, 5, 5])

    class Oracle(torch.nn.Module):  # eps_hat such that x_hat = (z - sigma eps_hat) / alpha equals `target`
        def forward(self, z, t):
            k = i
            return (z - sched.at("alpha", k, z) * self.target) / sched.at("sigma", k, z)
    o = Oracle()
    o.target = x
    with torch.no_grad():
        kl, _, _ = P.bound_terms(sched, {"x": o, "g": g}, x, i, eps, True, torch.linspace(-1, 1, P.LEVELS), eps0)
    assert float(kl.abs().max()) < 1e-4
    o.target = x.flip(0)  # a wrong prediction: the KL by hand
    with torch.no_grad():
        kl, _, _ = P.bound_terms(sched, {"x": o, "g": g}, x, i, eps, True, torch.linspace(-1, 1, P.LEVELS), eps0)
        t, s = sched.t[i].float(), sched.t[i - 1].float()
        a_t, a_s = sched.alpha[i].float()[:, None], sched.alpha[i - 1].float()[:, None]
        sg_t, sg_s = sched.sigma[i].float()[:, None], sched.sigma[i - 1].float()[:, None]
        var = (sg_t ** 2 - (a_t / a_s) ** 2 * sg_s ** 2) * sg_s ** 2 / sg_t ** 2
        F = lambda y, tt: y + tt[:, None] * g(y, tt)  # noqa: E731
        z = a_t * F(x, t) + sg_t * eps
        mean = lambda y: a_s * F(y, s) + (sg_s ** 2 - var).sqrt() * (z - a_t * F(y, t)) / sg_t  # noqa: E731
        want = ((mean(x) - mean(o.target)) ** 2).sum(1) / (2 * var[:, 0])
    torch.testing.assert_close(kl, want, rtol=1e-3, atol=1e-3)
