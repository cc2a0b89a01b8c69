"""masc (ICML 2024): the function-preserving merge of the experts into the learner, the authors' energy routing rule
against a per-example loop, the equal-size widths, and a tiny prepare -> train -> compress -> evaluate run."""
from __future__ import annotations

import numpy as np
import torch

from paperflow.continual import MLP
from paperflow.papers import masc
from paperflow.spec import Resources
from synthetic_images import fake_fashion


def test_merge_is_the_sum_of_the_experts():
    torch.manual_seed(0)
    experts = [MLP((4, 4)), MLP((4, 4)), MLP((4, 4))]
    learner = MLP((12, 12))
    learner.load_state_dict(masc.merge_experts([e.state_dict() for e in experts]))
    x = torch.randn(6, 784)
    with torch.no_grad():
        assert torch.allclose(learner(x), sum(e(x) for e in experts), atol=1e-5)


def test_route_matches_a_per_example_loop():
    gen = torch.Generator().manual_seed(2)
    experts = ((0, 1), (2, 3), (4,))
    el = [torch.randn(20, 10, generator=gen) * 3 for _ in experts]
    ll = torch.randn(20, 10, generator=gen)
    seen = [0, 1, 2, 3, 4, 5]
    delta = 0.7
    pred, to_exp = masc.route(el, ll, experts, seen, delta)
    for i in range(20):
        e = [float(torch.logsumexp(l[i, list(c)], 0)) for l, c in zip(el, experts)]
        order = sorted(range(3), key=lambda k: -e[k])
        if e[order[0]] - e[order[1]] >= delta:
            k = order[0]
            want = list(experts[k])[int(el[k][i, list(experts[k])].argmax())]
            assert bool(to_exp[i])
        else:
            want = seen[int(ll[i, seen].argmax())]
            assert not bool(to_exp[i])
        assert int(pred[i]) == want
    p0, t0 = masc.route(el, None, experts, seen, delta)
    assert t0.all()


def test_equal_size_widths():
    cfg = masc.Config()
    sizes = {v: sum(masc.mlp_params(w) for w in masc.variant_widths(cfg, v)) for v in masc.VARIANTS}
    assert max(sizes.values()) - min(sizes.values()) <= 0.01 * sizes["masc"]
    assert all(sizes[v] <= sizes["masc"] for v in ("independent", "single"))


def test_end_to_end_through_spec(tmp_path):
    rng = np.random.default_rng(0)

    yf, yt = np.repeat(np.arange(10), 40), np.repeat(np.arange(10), 12)
    fake_fashion(tmp_path / "f.npz", rng, yf, yt)
    res = Resources(root=str(tmp_path), paths={"fashion_mnist": str(tmp_path / "f.npz")})
    spec = masc.SPEC
    cfg = spec.make_config({"n_train": 25, "n_val": 10, "n_test": 10, "hidden": 8, "mem_per_class": 3, "phase0_steps": 5,
                            "steps_per_task": 4, "batch_size": 8, "replay_batch": 8, "lr_grid": [1e-3, 3e-3]})
    data = spec.prepare(cfg, res)
    assert set(data["tuning"]) == set(masc.VARIANTS)
    rows = []
    for v in spec.variants:
        model = spec.train(cfg, data, v, 0, lambda step, **m: None)
        m = spec.evaluate(cfg, model, data)
        assert 0 <= m["old_acc"] <= 100 and 0 <= m["new_acc"] <= 100
        assert m["forgetting"] == m["old_acc_phase0"] - m["old_acc"]
        if v.startswith("masc"):
            assert "learner_old_acc" in m and 0 <= m["delta_q"] < 1
        comp = spec.compress(cfg, model, data, v, 0)
        assert np.isfinite(spec.evaluate(cfg, comp["0.50"], data)["old_acc"])
        rows.append({"paper": "masc", "variant": v, "seed": 0, **{f"dense/{k}": val for k, val in m.items()}})
    view = [r for r in spec.derive(cfg, rows) if r["variant"] == "masc|learner"]
    assert len(view) == 1 and view[0]["dense/old_acc"] == rows[0]["dense/learner_old_acc"]
    a, b = spec.train(cfg, data, "masc", 0, None), spec.train(cfg, data, "masc", 0, None)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(a["states"], b["states"]) for k in x)
