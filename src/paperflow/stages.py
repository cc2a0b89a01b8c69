"""The stage runner: what one Snakemake job does (prepare, train, compress, evaluate, collect).

Each function loads its inputs, calls the paper's pure function, writes its outputs atomically and
tracks the stage as a nested MLflow run. Paths (DESIGN.md):
    results/{paper}/data/data.pt
    results/{paper}/{variant}/seed{seed}/{model.pt, curves.json, run.json, compressed.pt, metrics.json}
    results/{paper}/metrics.csv   (one row per variant and seed, after the paper's derive())
"""
from __future__ import annotations

import contextlib
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from . import artifacts, progress, stagecache, tracking
from .config import Settings, config_dict, flatten
from .device import to_device
from .registry import get_paper
from .spec import ConfigError, Resources


@dataclass(frozen=True)
class Context:
    """Everything a stage needs besides its wildcards."""

    root: Path  # repository root (results/, resources/ live here)
    settings: Settings
    tracking_uri: str | None  # None = tracking off
    threads: int = 1

    def run_dir(self, paper: str, variant: str, seed: int) -> Path:
        return self.root / "results" / paper / variant / f"seed{seed}"

    def data_path(self, paper: str) -> Path:
        return self.root / "results" / paper / "data" / "data.pt"

    def tags(self, **extra: Any) -> dict[str, str]:
        return {"profile": self.settings.profile, "git_commit": git_commit(self.root), **{k: str(v) for k, v in extra.items()}}


def check_variant(paper: str, variant: str) -> None:
    """A ConfigError naming the paper's variants when `variant` is not one of them."""
    spec = get_paper(paper)
    if variant not in spec.variants:
        raise ConfigError(f"{paper} has no variant {variant!r}; its variants are: {', '.join(spec.variants)}")


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, int(n)))


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def _tracked(ctx: Context, paper: str, stage: str, parent_id: str | None, finish_parent: bool = False, **tags: Any) -> Iterator[Any]:
    if ctx.tracking_uri is None:
        yield tracking.NullStageRun()
        return
    with tracking.stage_run(
        ctx.tracking_uri, paper=paper, stage=stage, tags=ctx.tags(**tags), parent_id=parent_id, finish_parent=finish_parent
    ) as run:
        yield run


def _progress(msg: str) -> None:
    print(f"[paperflow] {msg}", flush=True)


# ------------------------------------------------------------------ stages
def prepare(ctx: Context, paper: str) -> Path:
    spec, cfg = get_paper(paper), ctx.settings.config(paper)
    set_threads(ctx.threads)
    seed_everything(0)
    from .data.resources import get_resource

    res = Resources(
        root=str(ctx.root / "resources"),
        paths={name: str(ctx.root / "resources" / get_resource(name).output) for name in spec.resources},
    )
    inputs = stagecache.file_hash(_code_files(paper) + [ctx.root / "resources" / f"{get_resource(n).output}.sha256.json"
                                                         for n in spec.resources])
    cache = stagecache.StageCache(ctx.root, "prepare", paper)
    out = ctx.data_path(paper)
    with _tracked(ctx, paper, "prepare", None, variant="data", seed="-") as run:
        run.log_params(flatten(config_dict(cfg)))
        hit = cache.lookup(cfg, inputs)
        if hit:  # the settings prepare reads, its code and resources are unchanged (stagecache.py)
            _progress(f"{paper}: prepare (reused: its settings, code and resources are unchanged)")
            cache.restore(hit, out.parent)
            run.set_tag("cache", "hit")
            return out
        _progress(f"{paper}: prepare")
        t0 = time.perf_counter()
        recorder, reads = stagecache.recording(cfg)
        data = spec.prepare(recorder, res)
        artifacts.save_torch(data, out)
        run.log_final({"time/prepare_s": time.perf_counter() - t0})
        cache.store(cfg, reads, inputs, out.parent, [out.name])
    return out


def train(ctx: Context, paper: str, variant: str, seed: int) -> Path:
    spec, cfg = get_paper(paper), ctx.settings.config(paper)
    check_variant(paper, variant)
    set_threads(ctx.threads)
    data = artifacts.load_torch(ctx.data_path(paper))
    out_dir = ctx.run_dir(paper, variant, seed)
    parent = None
    if ctx.tracking_uri is not None:
        parent = tracking.create_parent_run(ctx.tracking_uri, paper, variant, seed, ctx.tags())
    curves: dict[str, list[list[float]]] = {}
    inputs = stagecache.file_hash(_code_files(paper) + [ctx.data_path(paper)])
    cache = stagecache.StageCache(ctx.root, "train", paper, variant, seed)
    with _tracked(ctx, paper, "train", parent, variant=variant, seed=seed) as run:
        run.log_params({"variant": variant, "seed": seed, **flatten(config_dict(cfg))}, also_parent=True)
        hit = cache.lookup(cfg, inputs)
        if hit:  # only settings train does not read changed (e.g. a sparsity): reuse the trained model
            _progress(f"{paper}/{variant}/seed{seed}: train (reused: the settings it reads, its code and data are unchanged)")
            cache.restore(hit, out_dir)
            for key, points in artifacts.load_json(out_dir / "curves.json").items():  # the new parent shows the curves too
                for step, value in points:
                    run.log(int(step), **{key: value})
            run.set_tag("cache", "hit")
            run.log_final({"time/train_s": hit["train_s"]})
            artifacts.save_json({"parent_run_id": parent, "tracking_uri": ctx.tracking_uri, **_made(ctx, paper, cfg),
                                 "tracking_store": tracking.store_id(ctx.tracking_uri), "train_s": hit["train_s"],
                                 "reused": True}, out_dir / "run.json")
            return out_dir / "model.pt"
        _progress(f"{paper}/{variant}/seed{seed}: train")
        progress.set_label(f"{paper}/{variant}/seed{seed}")

        def log(step: int, **metrics: float) -> None:
            for key, value in metrics.items():
                curves.setdefault(key, []).append([int(step), float(value)])
            run.log(step, **metrics)
            # loops without a known length (paper-specific ones) still show life; train_loop prints step/total
            progress.note(f"train: step {step}", **{k: v for k, v in metrics.items() if "loss" in k or k.startswith("val/")})

        seed_everything(seed)
        t0 = time.perf_counter()
        recorder, reads = stagecache.recording(cfg)
        model = spec.train(recorder, data, variant, seed, log)
        seconds = time.perf_counter() - t0
        artifacts.save_torch(to_device(model, "cpu"), out_dir / "model.pt")  # artifacts hold CPU tensors only
        artifacts.save_json(curves, out_dir / "curves.json")
        run.log_final({"time/train_s": seconds, "time/logging_s": run.seconds_logging})
        run.log_artifact(out_dir / "curves.json")
        cache.store(cfg, reads, inputs, out_dir, ["model.pt", "curves.json"], train_s=seconds)
    artifacts.save_json({"parent_run_id": parent, "tracking_uri": ctx.tracking_uri, "tracking_store": tracking.store_id(ctx.tracking_uri),
                         **_made(ctx, paper, cfg), "train_s": seconds}, out_dir / "run.json")
    return out_dir / "model.pt"


def _code_files(paper: str) -> list[Path]:
    """The paper's module and the package modules it imports (what its stages' results depend on)."""
    from .config import paper_code

    root = Path(__file__).resolve().parents[2]
    return [root / rel for rel in paper_code(get_paper(paper))]


def _parent(ctx: Context, paper: str, variant: str, seed: int) -> str | None:
    """The (variant, seed) parent run made by train; a new one if the store no longer has it."""
    if ctx.tracking_uri is None:
        return None
    info_path = ctx.run_dir(paper, variant, seed) / "run.json"
    info = artifacts.load_json(info_path) if info_path.exists() else {}
    parent = info.get("parent_run_id")
    # the same store, whichever way it is reached: the workflow's loopback server is gone after the run, and a
    # later `paperflow stage compress` writes the same store directly (run.json keeps the store, not the URL)
    recorded = info.get("tracking_store") or info.get("tracking_uri")
    if recorded == tracking.store_id(ctx.tracking_uri) and tracking.parent_exists(ctx.tracking_uri, parent):
        return parent
    return tracking.create_parent_run(ctx.tracking_uri, paper, variant, seed, ctx.tags())


def compress(ctx: Context, paper: str, variant: str, seed: int) -> Path:
    spec, cfg = get_paper(paper), ctx.settings.config(paper)
    set_threads(ctx.threads)
    run_dir = ctx.run_dir(paper, variant, seed)
    data = artifacts.load_torch(ctx.data_path(paper))
    model = artifacts.load_torch(run_dir / "model.pt")
    _progress(f"{paper}/{variant}/seed{seed}: compress")
    with _tracked(ctx, paper, "compress", _parent(ctx, paper, variant, seed), variant=variant, seed=seed) as run:
        seed_everything(seed)
        t0 = time.perf_counter()
        levels = spec.compress(cfg, model, data, variant, seed) if spec.compress else None
        out = artifacts.save_torch({"levels": dict(levels or {})}, run_dir / "compressed.pt")
        run.log_final({"time/compress_s": time.perf_counter() - t0}, on_parent=False)
    return out


def evaluate(ctx: Context, paper: str, variant: str, seed: int) -> Path:
    spec, cfg = get_paper(paper), ctx.settings.config(paper)
    set_threads(ctx.threads)
    run_dir = ctx.run_dir(paper, variant, seed)
    data = artifacts.load_torch(ctx.data_path(paper))
    model = artifacts.load_torch(run_dir / "model.pt")
    levels = artifacts.load_torch(run_dir / "compressed.pt")["levels"]
    _progress(f"{paper}/{variant}/seed{seed}: evaluate dense + {len(levels)} compressed level(s)")
    parent = _parent(ctx, paper, variant, seed)
    with _tracked(ctx, paper, "evaluate", parent, finish_parent=True, variant=variant, seed=seed) as run:
        seed_everything(seed)
        t0 = time.perf_counter()
        metrics = {f"dense/{k}": float(v) for k, v in spec.evaluate(cfg, model, data).items()}
        for level, compressed in levels.items():
            metrics.update({f"compressed:{level}/{k}": float(v) for k, v in spec.evaluate(cfg, compressed, data).items()})
        timing = {"time/evaluate_s": time.perf_counter() - t0}
        info = artifacts.load_json(run_dir / "run.json")
        timing["time/train_s"] = info.get("train_s", float("nan"))
        record = {"paper": paper, "variant": variant, "seed": seed, "profile": ctx.settings.profile, "metrics": metrics, "timing": timing}
        out = artifacts.save_json(record, run_dir / "metrics.json")
        run.log_final({**metrics, "time/evaluate_s": timing["time/evaluate_s"]})  # train logged its own time
        run.log_artifact(out)
        claim, metric, note = claim_note(spec, cfg, variant, metrics)
        if claim:  # what a person sees first on the parent run's page: the claim and this run's value of its metric
            run.set_parent_tags({"claim_metric": metric, "mlflow.note.content": note})
    return out


def claim_note(spec: Any, cfg: Any, variant: str, metrics: dict[str, float]) -> tuple[str, str, str]:
    """(headline claim text, its metric column, a markdown note) for a (variant, seed) run; ("", "", "") if the
    paper declares no headline. A derived metric (e.g. Delta-m% against other runs) is named, not valued."""
    heads = [c for c in spec.comparisons(cfg) if getattr(c, "role", "") == "headline"]
    if not heads:
        return "", "", ""
    c = heads[0]
    column = f"dense/{c.metric}" if c.stage == "dense" else f"compressed:{c.level}/{c.metric}"
    role = "method" if variant == c.method else "baseline" if variant == c.baseline else "other variant"
    value = metrics.get(column)
    shown = f"`{column}` = **{value:.6g}**" if value is not None else \
        f"`{column}` is derived across runs (results/{spec.id}/metrics.csv, reports/claims.md)"
    note = (f"**Claim ({spec.id}):** {c.text or spec.claim}\n\nThis run: `{variant}` ({role} of the headline "
            f"row: {c.method} vs {c.baseline or c.target}); {shown}; better = {c.better}.")
    return c.text or spec.claim, column, note


def run(ctx: Context, paper: str, variant: str, seed: int) -> Path:
    """train -> compress -> evaluate in one process (one Snakemake job per variant and seed).

    Each stage still writes its own atomic artifacts and its own nested MLflow run; running them in
    one process saves the ~5 s that every job pays to import torch and mlflow and open the store,
    which would otherwise dominate the smoke profile (DESIGN.md, "Jobs")."""
    train(ctx, paper, variant, seed)
    compress(ctx, paper, variant, seed)
    return evaluate(ctx, paper, variant, seed)


def _made(ctx: Context, paper: str, cfg: Any) -> dict[str, str]:
    return {"profile": ctx.settings.profile, "config_hash": config_hash(cfg, ctx.settings.seeds(paper))}


def config_hash(cfg: Any, seeds: tuple[int, ...]) -> str:
    """A short hash of a paper's resolved settings and seeds (what made a results table)."""
    import hashlib
    import json

    data = json.dumps({"config": config_dict(cfg), "seeds": list(seeds)}, sort_keys=True, default=str)
    return "cfg-" + hashlib.sha256(data.encode()).hexdigest()[:12]  # a prefix: never parsed as a number


def collect(ctx: Context, paper: str) -> Path:
    """results/{paper}/metrics.csv: one row per (variant, seed), derived metrics added."""
    import polars as pl

    spec, cfg = get_paper(paper), ctx.settings.config(paper)
    rows = []
    for variant in spec.variants:
        for seed in ctx.settings.seeds(paper):
            record = artifacts.load_json(ctx.run_dir(paper, variant, seed) / "metrics.json")
            rows.append({"paper": paper, "variant": variant, "seed": seed, **record["metrics"], **record["timing"]})
    if spec.derive is not None:
        rows = spec.derive(cfg, rows)
    columns = sorted({k for row in rows for k in row} - {"paper", "variant", "seed"})
    # every row says which profile and settings made it: the report refuses to judge results of another profile
    # with this profile's claim settings, and marks results made with other settings (issue 26)
    made = {"profile": ctx.settings.profile, "config_hash": config_hash(cfg, ctx.settings.seeds(paper))}
    table = pl.DataFrame(
        [{"paper": r["paper"], "variant": r["variant"], "seed": r["seed"], **made, **{c: r.get(c) for c in columns}} for r in rows],
        schema={"paper": pl.Utf8, "variant": pl.Utf8, "seed": pl.Int64, "profile": pl.Utf8, "config_hash": pl.Utf8,
                **{c: pl.Float64 for c in columns}},
    )
    out = ctx.root / "results" / paper / "metrics.csv"
    artifacts.write_atomic(out, lambda p: table.write_csv(p))
    return out


def resource(root: Path, name: str, sources_dir: Path) -> str:
    from .data.resources import build_resource

    _progress(f"resource {name}: build")
    return build_resource(name, sources_dir, root / "resources")
