"""Atomic artifact I/O: every file is written to a temporary sibling and renamed into place, so a
job killed mid-way never leaves a half-written artifact that Snakemake or DVC would take as done."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:  # make the bytes durable before the rename publishes them
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600 files; publish with normal modes
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def save_json(obj: Any, path: str | os.PathLike) -> Path:
    text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n"
    return write_atomic(path, lambda p: p.write_text(text))


def load_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def save_text(text: str, path: str | os.PathLike) -> Path:
    return write_atomic(path, lambda p: p.write_text(text))


def save_torch(obj: Any, path: str | os.PathLike) -> Path:
    import torch

    return write_atomic(path, lambda p: torch.save(obj, p))


def load_torch(path: str | os.PathLike) -> Any:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def unprotect_tree(*roots: str | os.PathLike) -> int:
    """Replace every read-only hard link under `roots` (what `dvc commit` leaves with cache.type = hardlink: the
    workspace file and the cache entry share one read-only inode) by a private writable copy with the same
    mtime, as `dvc unprotect` would; the cache entry is never touched. Snakemake refuses to rerun a job whose
    existing output is not writable (ProtectedOutputException) for every user but root; hard links are kept as the
    cache type because they keep mtimes (a copy cache rewrote every out and Snakemake reran everything).
    Returns the number of files unprotected."""
    import shutil
    import stat

    count = 0
    for root in map(Path, roots):
        if not root.exists():
            continue
        for path in (p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            st = path.stat()
            if st.st_mode & stat.S_IWUSR or st.st_nlink < 2:
                continue
            tmp = path.with_name(f".{path.name}.unprotect")
            shutil.copyfile(path, tmp)
            os.chmod(tmp, (st.st_mode | stat.S_IWUSR) & 0o7777)
            os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
            os.replace(tmp, path)
            count += 1
    return count
