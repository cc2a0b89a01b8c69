"""Stage outputs keyed by the settings each stage reads: a compress-only knob reruns compress and evaluate,
not prepare or train (issue: `dvc exp run -S papers.dcmha.sparsity=0.6` retrained every variant)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from paperflow import stagecache, stages
from paperflow.config import Settings
from paperflow.registry import register_paper, unregister_paper
from paperflow.spec import Comparison, PaperSpec, check


@dataclass(frozen=True)
class Config:
    width: int = 3  # read by prepare and train
    steps: int = 2  # read by train
    sparsity: float = 0.5  # read only by compress

    def __post_init__(self) -> None:
        check(self.width > 0 and self.steps > 0 and 0 <= self.sparsity < 1, "bad config")


def test_recording_sees_only_the_fields_read():
    cfg, reads = stagecache.recording(Config())
    assert reads == set()  # __post_init__'s reads do not count
    assert cfg.width == 3 and reads == {"width"}
    assert isinstance(cfg, Config) and dataclasses.replace(cfg, steps=5).steps == 5
    assert dataclasses.asdict(cfg) == {"width": 3, "steps": 2, "sparsity": 0.5}
    _, reads2 = stagecache.recording(Config())
    assert reads2 == set()
    cfg3, reads3 = stagecache.recording(Config())
    vars(cfg3)  # reading __dict__ counts as reading everything
    assert reads3 == {"width", "steps", "sparsity"}


CALLS = {"prepare": 0, "train": 0}


def _prepare(cfg, res):
    CALLS["prepare"] += 1
    return {"x": torch.ones(cfg.width)}


def _train(cfg, data, variant, seed, log):
    CALLS["train"] += 1
    w = data["x"] * (seed + 1)
    for step in range(cfg.steps):
        log(step, **{"train/loss": 1.0 / (step + 1)})
    return {"w": w}


def _compress(cfg, model, data, variant, seed):
    w = model["w"].clone()
    w[: int(len(w) * cfg.sparsity)] = 0
    return {f"{cfg.sparsity:.2f}": {"w": w}}


def _settings(cfg: Config) -> Settings:
    return Settings(profile="test", papers=("cachedemo",), sections={"cachedemo": dataclasses.asdict(cfg)},
                    configs={"cachedemo": cfg}, paper_seeds={"cachedemo": (0,)})


def test_a_compress_only_knob_reuses_prepare_and_train(tmp_path):
    register_paper(PaperSpec(id="cachedemo", title="t", claim="c", Config=Config, variants=("a",), prepare=_prepare,
                             train=_train, compress=_compress, evaluate=lambda cfg, m, d: {"nnz": float((m["w"] != 0).sum())},
                             comparisons=lambda cfg: [Comparison("nnz", "a", "a", role="headline", text="t")], module=__file__))
    try:
        def run(cfg: Config) -> dict:
            ctx = stages.Context(root=tmp_path, settings=_settings(cfg), tracking_uri=None)
            stages.prepare(ctx, "cachedemo")
            return stages.artifacts.load_json(stages.run(ctx, "cachedemo", "a", 0))["metrics"]

        first = run(Config())
        assert CALLS == {"prepare": 1, "train": 1}
        second = run(Config(sparsity=0.0))  # compress-only knob: prepare and train reused
        assert CALLS == {"prepare": 1, "train": 1}
        assert first["dense/nnz"] == second["dense/nnz"] == 3.0
        assert first["compressed:0.50/nnz"] == 2.0 and second["compressed:0.00/nnz"] == 3.0
        assert stages.artifacts.load_json(tmp_path / "results/cachedemo/a/seed0/run.json")["reused"] is True
        run(Config(sparsity=0.0, steps=3))  # a knob train reads: train reruns, prepare is still reused
        assert CALLS == {"prepare": 1, "train": 2}
        run(Config(width=4))  # prepare's knob: both rerun
        assert CALLS == {"prepare": 2, "train": 3}
    finally:
        unregister_paper("cachedemo")
