"""The device setting: resolution, clear errors, nested moves, and CPU results that do not depend on it."""
from __future__ import annotations

from collections import OrderedDict

import pytest
import torch

from paperflow import config, device
from paperflow.loop import train_loop
from paperflow.spec import ConfigError


def test_resolve_and_errors(monkeypatch):
    assert device.resolve("cpu") == torch.device("cpu")
    assert device.resolve("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="one of"):
        device.resolve("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="sees no GPU"):
        device.resolve("cuda")


def test_to_device_moves_nested_structures_and_keeps_types():
    state = OrderedDict(w=torch.ones(2), b=torch.zeros(1))
    obj = {"state": state, "arch": {"n": 3}, "xs": [torch.ones(1), (torch.ones(1), "a")]}
    moved = device.to_device(obj, "cpu")
    assert type(moved["state"]) is OrderedDict and moved["arch"] == {"n": 3}
    assert moved["state"]["w"] is state["w"]  # already there: not copied
    assert isinstance(moved["xs"][1], tuple) and moved["xs"][1][1] == "a"


def _fit() -> torch.Tensor:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    gen = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(64, 3, generator=gen), torch.randn(64, 1, generator=gen)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    train_loop(list(net.parameters()), lambda step: (xs[step % 4 * 16:(step % 4 + 1) * 16], ys[step % 4 * 16:(step % 4 + 1) * 16]),
               lambda b: torch.nn.functional.mse_loss(net(b[0]), b[1]), opt, 20, modules=[net])
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def test_cpu_results_do_not_depend_on_the_setting():
    before = device.current()
    try:
        device.use("cpu")
        explicit = _fit()
        device.use("auto")
        auto = _fit() if device.current().type == "cpu" else explicit
    finally:
        device._current = before
    assert torch.equal(explicit, auto)
    assert torch.equal(explicit, _fit())  # and equal to the loop's default (no setting at all)


def test_settings_carry_the_device(monkeypatch, tmp_path):
    params = config.read_params(config.SCHEMA.parents[2] / "params.yaml")
    assert config.resolve(params, profile="smoke", only=["fairgrad"]).device == params.get("device", "auto")
    monkeypatch.setenv("PAPERFLOW_DEVICE", "cpu")
    assert config.resolve(params, profile="smoke", only=["fairgrad"]).device == "cpu"
    monkeypatch.setenv("PAPERFLOW_DEVICE", "gpu")
    with pytest.raises(ConfigError, match="device must be"):
        config.resolve(params, profile="smoke", only=["fairgrad"])
