"""The one registry of papers (timm-style): register_paper writes into one dict, get_paper fails loudly.

Paper modules live in paperflow/papers/<id>.py and call register_paper at import time;
`load_all()` imports every module of that package once.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil

from .spec import PaperSpec

_PAPERS: dict[str, PaperSpec] = {}
_loaded = False


class UnknownPaperError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


def register_paper(spec: PaperSpec) -> PaperSpec:
    """Add spec under spec.id; a second registration of the same id raises."""
    if spec.id in _PAPERS:
        raise ValueError(f"paper id {spec.id!r} is registered twice ({_PAPERS[spec.id].module} and {spec.module})")
    if not spec.module:
        frame = inspect.stack()[1]
        object.__setattr__(spec, "module", frame.filename)
    _PAPERS[spec.id] = spec
    return spec


def unregister_paper(paper_id: str) -> None:
    """Remove a paper (benchmarks and tests register dummy specs)."""
    _PAPERS.pop(paper_id, None)


def load_all(plugins: list[str] | tuple[str, ...] = ()) -> None:
    """Import every module in paperflow.papers (and the named plugin modules, e.g. papers kept
    outside this package, listed under `plugins:` in params.yaml) so that each registers itself."""
    global _loaded
    if not _loaded:
        from . import papers

        for info in sorted(pkgutil.iter_modules(papers.__path__), key=lambda m: m.name):
            importlib.import_module(f"{papers.__name__}.{info.name}")
        _loaded = True
    for name in plugins:
        importlib.import_module(name)


def get_paper(paper_id: str) -> PaperSpec:
    load_all()
    if paper_id not in _PAPERS:
        close = difflib.get_close_matches(paper_id, list(_PAPERS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownPaperError(
            f"unknown paper id {paper_id!r}{hint} Registered papers: {', '.join(sorted(_PAPERS))} "
            "(`paperflow list` prints them)."
        )
    return _PAPERS[paper_id]


def list_papers() -> list[PaperSpec]:
    load_all()
    return [_PAPERS[k] for k in sorted(_PAPERS)]
