"""The one registry of papers (timm-style): register_paper writes into one dict, get_paper fails loudly.

Paper modules live in paperflow/papers/<id>.py and call register_paper at import time;
`load_all()` imports every module of that package once, `load_paper(id)` only the module named after the id
(one job needs one paper: importing all of them costs seconds of start-up per job, DESIGN.md "Jobs").
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
import sys

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
        # the caller's file (sys._getframe: inspect.stack() reads every frame's source, ~0.1 s per call)
        object.__setattr__(spec, "module", sys._getframe(1).f_code.co_filename)
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


def module_names() -> list[str]:
    """Names of the modules in paperflow.papers, without importing them."""
    from . import papers

    return sorted(info.name for info in pkgutil.iter_modules(papers.__path__))


def load_paper(paper_id: str) -> None:
    """Import the module paperflow.papers.<paper_id> if the id is not registered yet; any other id (a plugin
    registered under another name, a typo) falls back to importing everything."""
    if paper_id in _PAPERS:
        return
    if paper_id in module_names():
        importlib.import_module(f"paperflow.papers.{paper_id}")
    if paper_id not in _PAPERS:
        load_all()


def get_paper(paper_id: str) -> PaperSpec:
    load_paper(paper_id)
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
