"""paperflow.diffusion (issue 31: ndm, fadiff): the DDIM-form posterior against DDPM's closed form, the marginal it
preserves, the per-step KL against VDM's SNR form, the discrete decoder's normalisation, Kabsch and rotations."""
from __future__ import annotations

import math

import torch

from paperflow import diffusion as D


def test_posterior_ddim_form_is_ddpm_posterior():
    s = D.Schedule(50, -8.0, 6.0)
    gen = torch.Generator().manual_seed(0)
    x, z = torch.randn(7, 5, generator=gen, dtype=torch.float64), torch.randn(7, 5, generator=gen, dtype=torch.float64)
    i = torch.randint(1, 51, (7,), generator=gen)
    torch.testing.assert_close(s.posterior_mean(z, i, x, x), s.ddpm_posterior_mean(z, i, x))


def test_posterior_keeps_the_marginals():
    """If z_t ~ N(alpha_t x_t, sigma_t^2), the posterior's z_s has mean alpha_s x_s and variance sigma_s^2, for any
    x_s, x_t (what lets NDM put F(x, s) and F(x, t) there): c^2 sigma_t^2 + sigma~^2 = sigma_s^2."""
    s = D.Schedule(40)
    c2 = s.post_c ** 2 * s.sigma[1:] ** 2
    torch.testing.assert_close(c2 + s.post_var, s.sigma[:-1] ** 2)
    assert torch.all(s.alpha ** 2 + s.sigma ** 2 - 1 < 1e-12)


def test_step_kl_equals_vdm_snr_form():
    """DDPM's step KL with x_hat plugged in: ||mean(x) - mean(x_hat)||^2 / (2 sigma~^2) = (SNR_s - SNR_t)/2 ||x - x_hat||^2."""
    s = D.Schedule(20, -6.0, 5.0)
    gen = torch.Generator().manual_seed(1)
    x, xh, z = (torch.randn(6, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    i = torch.arange(1, 7)
    kl = D.kl_equal_var(s.posterior_mean(z, i, x, x), s.posterior_mean(z, i, xh, xh), s.post_var[i - 1])
    snr = s.alpha ** 2 / s.sigma ** 2
    expect = 0.5 * (snr[i - 1] - snr[i]) * ((x - xh) ** 2).sum(1)
    torch.testing.assert_close(kl, expect)


def test_kl_std_normal_matches_torch():
    mean = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = D.kl_std_normal(mean, 0.3)
    q = torch.distributions.Normal(mean, math.sqrt(0.3))
    p = torch.distributions.Normal(torch.zeros_like(mean), torch.ones_like(mean))
    torch.testing.assert_close(got, torch.distributions.kl_divergence(q, p).sum(1))


def test_discrete_decoder_is_normalised():
    levels = torch.linspace(-1, 1, 5, dtype=torch.float64)
    z0 = torch.tensor([[0.31]], dtype=torch.float64)
    total = sum(math.exp(-float(D.discrete_decoder_nll(z0, v.view(1, 1), levels, 0.9, 0.3))) for v in levels)
    assert abs(total - 1.0) < 1e-12
    # the nearest level to z0 / alpha0 is the most likely
    nll = [float(D.discrete_decoder_nll(z0, v.view(1, 1), levels, 0.9, 0.3)) for v in levels]
    assert int(torch.tensor(nll).argmin()) == int((levels - 0.31 / 0.9).abs().argmin())


def test_kabsch_recovers_a_rigid_motion():
    gen = torch.Generator().manual_seed(3)
    R = D.random_rotations(4, gen, dtype=torch.float64)
    torch.testing.assert_close(R @ R.transpose(1, 2), torch.eye(3, dtype=torch.float64).expand(4, 3, 3))
    assert torch.allclose(torch.linalg.det(R), torch.ones(4, dtype=torch.float64))
    P = torch.randn(4, 6, 3, generator=gen, dtype=torch.float64)
    c = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    Q = P @ R.transpose(1, 2) + c[:, None]
    R2, c2 = D.kabsch(P, Q)
    torch.testing.assert_close(R2, R)
    torch.testing.assert_close(c2, c)
    assert float(D.rmsd_after_superposition(P, Q).max()) < 1e-9
    # a reflection is not a proper rotation: RMSD stays > 0
    assert float(D.rmsd_after_superposition(P, P * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)).min()) > 1e-3


def test_time_mlp_zero_out_starts_at_zero():
    net = D.TimeMLP(5, 8, 2, zero_out=True)
    out = net(torch.randn(3, 5), torch.rand(3))
    assert torch.equal(out, torch.zeros(3, 5))
    assert D.n_params(net) == (5 + 16) * 8 + 8 + 8 * 8 + 8 + 8 * 5 + 5


def test_v_prediction_inverts():
    s = D.Schedule(10)
    gen = torch.Generator().manual_seed(4)
    x, eps = torch.randn(4, 3, generator=gen, dtype=torch.float64), torch.randn(4, 3, generator=gen, dtype=torch.float64)
    i = torch.tensor([0, 3, 7, 10])
    z = s.q_sample(x, i, eps)
    torch.testing.assert_close(s.x_from_v(z, i, s.v_target(x, i, eps)), x)
    torch.testing.assert_close(s.x_from_eps(z, i, eps), x)
