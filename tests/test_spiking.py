"""paperflow.nn.spiking: LIF dynamics and surrogate gradient, the Spikformer block, the LSQ quantizer, the
ST-BIF / signed IF / unsigned IF neurons on hand-computed inputs, and the spike-equivalent operators."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from paperflow.nn import spiking as S


def _run(neuron, inputs):
    outs = [float(neuron.step(torch.tensor([x], dtype=torch.float64))) for x in inputs]
    return outs, float(neuron.count)


# ---------------------------------------------------------------------------------------------- LIF


def test_lif_hand_computed_sequence():
    # tau=2, v_th=1: H_t = V + (X_t - V)/2, spike if H >= 1, hard reset to 0
    x = torch.tensor([2.5, 0.5, 2.2, 1.0]).view(4, 1)
    s, v = S.lif_multistep(x, tau=2.0, v_th=1.0, return_v=True)
    # t0: H=1.25 -> spike, V=0; t1: H=0.25, V=0.25; t2: H=0.25+(2.2-0.25)/2=1.225 -> spike, V=0; t3: H=0.5
    assert s.flatten().tolist() == [1.0, 0.0, 1.0, 0.0]
    torch.testing.assert_close(v.flatten(), torch.tensor([0.0, 0.25, 0.0, 0.5]))


def test_surrogate_gradient_nonzero():
    x = torch.tensor([[0.3, 1.9, -0.5]] * 3, requires_grad=True)  # (T=3, 3)
    S.lif_multistep(x, tau=2.0, v_th=1.0, alpha=4.0).sum().backward()
    assert x.grad is not None and bool((x.grad.abs() > 0).all())
    # the surrogate at the threshold: a * sig(0) * (1 - sig(0)) = 4 * 0.25 = 1
    z = torch.zeros(1, requires_grad=True)
    S.spike_fn(z, 4.0).sum().backward()
    assert float(z.grad) == pytest.approx(1.0)


def test_spikformer_attention_is_q_times_kt_v_without_softmax_and_counts_synops():
    torch.manual_seed(0)
    counter = S.SynOpCounter()
    blk = S.SpikformerBlock(8, 2, 16, tau=2.0, v_th=0.5, attn_v_th=0.5, alpha=4.0, scale=0.5, counter=counter).eval()
    x = torch.randn(2, 3, 5, 8) * 2  # (T, B, N, D)
    with torch.no_grad():
        out, q, k = blk.attention(x)
        assert set(torch.unique(q).tolist()) <= {0.0, 1.0} and q.shape == (2, 3, 2, 5, 4)
        s = blk.lif_in(x)
        v = blk.heads(blk.lif_v(blk.v(s)))
        y = ((q @ k.transpose(-2, -1)) @ v) * 0.5  # the quadratic order gives the same map
        ref = x + blk.o(blk.lif_attn(y.transpose(2, 3).reshape(2, 3, 5, 8)))
        torch.testing.assert_close(out, ref)
        assert counter.synops == 0.0  # off while not switched on
        counter.on = True
        blk(x)
        assert counter.synops > 0
        counter.reset()
        assert counter.synops == 0.0 and counter.sublayers == 0


# ---------------------------------------------------------------------------------------------- conversion neurons


def test_st_bif_hand_computed_sequence():
    # V0 = 0.5; +2.6 -> 3.1: spikes at 3.1, 2.1, 1.1 (V = 0.1), then -3.0 -> -2.9: -1 spikes until V = 0.1
    n = S.STBIFNeuron(torch.tensor(1.0, dtype=torch.float64), lo=-4, hi=3)
    outs, count = _run(n, [2.6, 0, 0, 0, -3.0, 0, 0, 0, 0])
    assert outs == [1, 1, 1, 0, -1, -1, -1, 0, 0]
    assert count == 0 == np.floor(2.6 - 3.0 + 0.5)  # count = clamp(floor(X + 1/2)) of the total input


def test_st_bif_count_bounded_by_quantizer_levels_and_threshold_scaling():
    n = S.STBIFNeuron(torch.tensor(0.5, dtype=torch.float64), lo=0, hi=3)
    outs, count = _run(n, [5.0, 0, 0, 0, 0])
    assert outs == [0.5, 0.5, 0.5, 0, 0]  # one spike (x theta) per step, stops at hi = 3 although V stays high
    assert count == 3
    n = S.STBIFNeuron(torch.tensor(0.5, dtype=torch.float64), lo=-2, hi=1)
    outs, count = _run(n, [-5.0, 0, 0, 0])
    assert outs == [-0.5, -0.5, 0, 0] and count == -2  # negative spikes stop at lo


def test_st_bif_count_equals_quantizer_for_random_sequences():
    gen = torch.Generator().manual_seed(0)
    q = S.Quantizer(8, signed=True)
    q.s.data.fill_(0.3)
    q.initialized.fill_(1.0)
    q.eval()
    x = torch.randn(200, 5, generator=gen, dtype=torch.float64)  # 200 neurons, 5 input steps
    n = S.STBIFNeuron(q.s.detach().double(), q.lo, q.hi)
    total = torch.zeros(200, dtype=torch.float64)
    for t in range(5 + 2 * (q.hi - q.lo) + 2):
        total += n.step(x[:, t] if t < 5 else torch.zeros(200, dtype=torch.float64))
    with torch.no_grad():
        expected = q.double()(x.sum(1))
    torch.testing.assert_close(total, expected, rtol=0, atol=1e-12)


def test_signed_if_hand_computed_truncates_and_cannot_retract_below_a_full_threshold():
    one = torch.tensor(1.0, dtype=torch.float64)
    # V0 = 0: +2.6 -> two spikes (V = 0.6), then -1.3 -> V = -0.7 > -1: no retraction; total X = 1.3 but count 2
    outs, count = _run(S.SignedIFNeuron(one, lo=-4, hi=3), [2.6, 0, 0, -1.3, 0, 0])
    assert outs == [1, 1, 0, 0, 0, 0] and count == 2
    # ST-BIF on the same input: round(2.6) = 3 first, then traced back to round(1.3) = 1
    assert _run(S.STBIFNeuron(one, lo=-4, hi=3), [2.6, 0, 0, -1.3, 0, 0])[1] == 1
    # negative side: trunc toward zero (-2.7 -> -2), bounded at lo
    assert _run(S.SignedIFNeuron(one, lo=-4, hi=3), [-2.7, 0, 0, 0])[1] == -2
    assert _run(S.SignedIFNeuron(one, lo=-2, hi=3), [-9.0] + [0] * 5)[1] == -2
    assert _run(S.SignedIFNeuron(one, lo=-4, hi=3), [9.0] + [0] * 5)[1] == 3


def test_rate_coded_if_neuron_hand_computed():
    # V0 = 0, reset by subtraction, unsigned, unbounded: 2.6 -> two spikes (floor), the -3.0 is never undone
    n = S.IFNeuron(torch.tensor(1.0, dtype=torch.float64))
    outs, count = _run(n, [2.6, 0, 0, 0, -3.0, 0, 0])
    assert outs == [1, 1, 0, 0, 0, 0, 0] and count == 2
    n = S.IFNeuron(torch.tensor(1.0, dtype=torch.float64))
    outs, count = _run(n, [5.0] + [0] * 6)
    assert count == 5  # no upper bound
    # the official ORIIFNeuron starts at theta/2: rounds positive inputs, still ignores negative ones
    q = S.Quantizer(8, signed=True)
    ori = S.make_neuron("ori_if", q)
    assert ori.v0 == 0.5 and _run(ori, [2.6, 0, 0, 0, -3.0, 0, 0])[1] == 3
    with pytest.raises(ValueError, match="unknown neuron"):
        S.make_neuron("lif", q)


def test_quantizer_levels_and_init():
    assert S.bounds(16, True) == (-8, 7) and S.bounds(16, False) == (0, 15)
    q = S.Quantizer(8, signed=True)
    x = torch.tensor([-10.0, -0.26, -0.24, 0.0, 0.74, 0.76, 10.0])
    q.train()
    q(torch.ones(4))  # official init: 2 mean|x| / sqrt(hi)
    assert float(q.s.detach()) == pytest.approx(2 / np.sqrt(3))
    q.s.data.fill_(0.5)
    assert q(x).tolist() == [-2.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5]  # clamp(floor(x/s + 1/2), -4, 3) * s


# ---------------------------------------------------------------------------------------------- equivalent operators


def test_step_product_and_through_telescope_to_the_function_of_the_sums():
    g = torch.Generator().manual_seed(0)
    a_steps = [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(5)]
    b_steps = [torch.randn(4, 2, generator=g, dtype=torch.float64) for _ in range(5)]
    st = S.SimState()
    total_prod = torch.zeros(3, 2, dtype=torch.float64)
    total_sm = torch.zeros(3, 4, dtype=torch.float64)
    for a, b in zip(a_steps, b_steps):
        total_prod += S.step_product(st.add("a", a), a, st.add("b", b), b)
        total_sm += st.through("sm", lambda z: z.softmax(-1), a)
    A, B = sum(a_steps), sum(b_steps)
    torch.testing.assert_close(total_prod, A @ B)
    torch.testing.assert_close(total_sm, A.softmax(-1))
