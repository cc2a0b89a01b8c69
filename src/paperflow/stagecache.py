"""Stage outputs keyed by the settings each stage reads (DESIGN.md "Parameters per stage").

A Snakemake job reruns when its paper's params change, but a compress-only knob (a sparsity, a level)
must not retrain: `dvc exp run -S papers.dcmha.sparsity=0.6` should cost compress + evaluate only.
Rather than make every paper declare which Config fields each stage reads, the stage runner RECORDS it:
prepare() and train() get an instance of a subclass of the paper's Config whose attribute reads are
logged (`recording`). After the stage, its outputs are hard-linked into .paperflow-cache/ with the names
and values of the fields it read, the content hash of the paper's code (its module and the package
modules it imports) and of its inputs (resources, data.pt). When the job runs again, the cached entry is
reused if those same fields have the same values now, and the code and inputs are unchanged: the stage
would compute the same thing (every stage is deterministic given its seed). Anything read through
__dict__ (vars(cfg)) counts as reading every field, so the key errs on the side of recomputing.
Snakemake deletes a job's outputs before it runs, which is why the cache lives outside results/.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from . import artifacts

CACHE_DIR = ".paperflow-cache"


def recording(cfg: Any) -> tuple[Any, set[str]]:
    """(a copy of cfg that records which of its fields are read, the set they are recorded into).
    The copy is an instance of a subclass of cfg's dataclass: isinstance, dataclasses.replace and asdict work."""
    if not dataclasses.is_dataclass(cfg):
        return cfg, {"*"}
    names = {f.name for f in dataclasses.fields(cfg)}
    reads: set[str] = set()
    base = type(cfg)

    def __getattribute__(self: Any, name: str) -> Any:
        if name in names:
            reads.add(name)
        elif name == "__dict__":
            reads.update(names)
        return base.__getattribute__(self, name)

    recorder = type(base.__name__, (base,), {"__getattribute__": __getattribute__, "__module__": base.__module__})
    copy = recorder(**{n: object.__getattribute__(cfg, n) for n in names})
    reads.clear()  # __post_init__'s validation read every field; only the stage's own reads count
    return copy, reads


def file_hash(paths: Iterable[str | os.PathLike]) -> str:
    """sha256 over the names and contents of files (a missing file counts as its name only)."""
    digest = hashlib.sha256()
    for p in sorted(str(x) for x in paths):
        digest.update(p.encode())
        if os.path.isfile(p):
            with open(p, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _key(cfg: Any, reads: Iterable[str], inputs: str) -> str:
    values = {n: getattr(cfg, n) for n in sorted(reads)} if "*" not in reads else repr(cfg)
    return hashlib.sha256(json.dumps([values, inputs], sort_keys=True, default=repr).encode()).hexdigest()


class StageCache:
    """One cache entry: .paperflow-cache/<stage>/<paper>/<variant>/seed<k>/ with the stage's files and meta.json."""

    def __init__(self, root: Path, stage: str, paper: str, variant: str = "data", seed: int | str = "-") -> None:
        self.dir = Path(root) / CACHE_DIR / stage / paper / variant / f"seed{seed}"

    def lookup(self, cfg: Any, inputs: str) -> dict | None:
        """The entry's meta if it holds what the stage would compute now (same read fields, code, inputs).
        PAPERFLOW_STAGE_CACHE=off recomputes every stage (determinism checks, timing runs)."""
        meta_path = self.dir / "meta.json"
        if os.environ.get("PAPERFLOW_STAGE_CACHE", "").lower() in ("off", "0", "false", "no") or not meta_path.exists():
            return None
        try:
            meta = artifacts.load_json(meta_path)
            if meta["key"] != _key(cfg, meta["reads"], inputs):
                return None
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        if not all((self.dir / name).exists() for name in meta["files"]):
            return None
        return meta

    def restore(self, meta: dict, out_dir: Path) -> None:
        for name in meta["files"]:
            _link(self.dir / name, out_dir / name)

    def store(self, cfg: Any, reads: set[str], inputs: str, out_dir: Path, files: list[str], **extra: Any) -> None:
        """Link the stage's outputs into the entry and record its key (meta.json is written last)."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        for name in files:
            _link(out_dir / name, self.dir / name)
        artifacts.save_json({"key": _key(cfg, reads, inputs), "reads": sorted(reads), "files": files, **extra},
                            self.dir / "meta.json")


def _link(src: Path, dst: Path) -> None:
    """dst becomes the same file as src (a hard link; a copy across file systems), atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)
