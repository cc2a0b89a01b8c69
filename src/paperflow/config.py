"""params.yaml -> validated, profile-resolved settings (used by the Snakefile and the CLI only).

params.yaml layout:
    profile: default            # smoke | default | paper (Snakemake: --config profile=smoke)
    only: []                    # paper ids to run; empty = every registered paper
    profiles:
      <name>: {seeds: [...], max_seeds: N, papers: {<id>: {<size overrides>}}}
    papers:
      <id>: {seeds: N, <every Config field, default-profile values>}

Seeds: a paper runs seeds 0..N-1 when its section (or the profile's override of it) sets `seeds: N`,
else the profile's `seeds` list; a profile's `max_seeds` caps every paper (smoke: 1). `seeds` is not a
Config field: it is taken out of the section before Config(**section), so it is not a params rerun
trigger of existing jobs (adding seeds adds jobs, it does not rerun the old ones).

A profile may only override sizes of a paper (its keys must exist in the paper's section), so the
code path is the same in every profile. Everything is checked before any job starts: unknown paper
ids, unknown keys, out-of-range values (each Config's __post_init__) and a profile that is not defined.
"""
from __future__ import annotations

import copy
import os
import importlib
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from .registry import get_paper, list_papers
from .spec import ConfigError, PaperSpec

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "params.schema.yaml"


@dataclass(frozen=True)
class Settings:
    profile: str
    papers: tuple[str, ...]  # ids to run, sorted
    sections: Mapping[str, dict]  # id -> merged params section (plain dict of Config fields)
    configs: Mapping[str, Any]  # id -> Config instance
    paper_seeds: Mapping[str, tuple[int, ...]]  # id -> the seeds this paper runs
    device: str = "auto"  # cpu | cuda | auto: where train_loop trains (paperflow/device.py)

    def config(self, paper: str) -> Any:
        return self.configs[paper]

    def seeds(self, paper: str) -> tuple[int, ...]:
        return self.paper_seeds[paper]


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, same resolvers: ~10x faster


def read_params(path: str | Path) -> dict:
    """params.yaml as a dict (every job reads it: the C parser saves ~0.5 s per job over the pure-Python one)."""
    with open(path) as fh:
        return yaml.load(fh, Loader=_SAFE_LOADER) or {}


def import_jsonschema():
    """jsonschema without its optional "iri" format checker: rfc3987_syntax (installed beside jsonschema by jupyter's
    format extras) compiles a Lark grammar at import, 1-4 s of every process that validates params.yaml; our schema
    uses no string formats. Measured with `python -X importtime -c "import jsonschema"`: 3.95 s -> 0.17 s (loaded)."""
    import sys

    if "jsonschema" not in sys.modules and "rfc3987_syntax" not in sys.modules:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # `import` raises ImportError, as if absent
        try:
            import jsonschema
        finally:
            del sys.modules["rfc3987_syntax"]  # a later, deliberate import still finds the real package
    import jsonschema

    return jsonschema


def validate_schema(params: Mapping[str, Any]) -> None:
    jsonschema = import_jsonschema()

    schema = yaml.load(SCHEMA.read_text(), Loader=_SAFE_LOADER)
    try:
        jsonschema.validate(dict(params), schema)
    except jsonschema.ValidationError as err:
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        hint = ""
        if err.validator == "additionalProperties" and isinstance(err.instance, Mapping):
            import difflib

            known = sorted((err.schema.get("properties") or {}))
            unknown = sorted(set(err.instance) - set(known))
            close = {k: difflib.get_close_matches(k, known, n=1) for k in unknown}
            hint = "".join(f"; did you mean {c[0]!r} instead of {k!r}?" for k, c in close.items() if c)
            hint += f" Allowed keys here: {', '.join(known)}"
        raise ConfigError(f"params.yaml {where}: {err.message}{hint}") from None


def resolve(params: Mapping[str, Any], profile: str | None = None, only: list[str] | None = None) -> Settings:
    """Validate params (already merged with Snakemake --config overrides) and resolve one profile."""
    validate_schema(params)
    from .registry import load_all, module_names

    plugins = list(params.get("plugins") or [])
    wanted = list(only if only is not None else params.get("only") or [])
    for name in plugins:
        importlib.import_module(name)
    if not wanted:
        load_all(plugins)
    profile = profile or params.get("profile", "default")
    profiles = params.get("profiles", {})
    if profile not in profiles:
        raise ConfigError(f"profile {profile!r} is not defined in params.yaml profiles (defined: {', '.join(profiles)})")
    prof = profiles[profile] or {}
    sections = params.get("papers", {}) or {}
    # Every section must name a paper. With `only`, a section named after a paper module passes without
    # importing it (a job loads just its own paper); anything else is checked against the full registry.
    known = set(module_names()) if wanted else {spec.id for spec in list_papers()}
    for pid in list(sections) + list((prof.get("papers") or {})):
        if pid not in known:
            get_paper(pid)  # registers a plugin paper, or raises UnknownPaperError with the list of ids
    for pid in wanted:
        get_paper(pid)
    ids = tuple(sorted(wanted)) if wanted else tuple(sorted(spec.id for spec in list_papers()))
    default_seeds = tuple(int(s) for s in prof.get("seeds", [0]))
    if not default_seeds:
        raise ConfigError(f"params.yaml profiles.{profile}.seeds is empty")
    max_seeds = prof.get("max_seeds")
    merged: dict[str, dict] = {}
    configs: dict[str, Any] = {}
    paper_seeds: dict[str, tuple[int, ...]] = {}
    for pid in ids:
        spec = get_paper(pid)
        base = copy.deepcopy(sections.get(pid) or {})
        overrides = (prof.get("papers") or {}).get(pid) or {}
        for key in overrides:
            if key not in base and key not in _field_names(spec) and key != "seeds":
                raise ConfigError(f"params.yaml profiles.{profile}.papers.{pid}.{key}: not a key of papers.{pid}")
        if overrides and profile != "default":
            # the default-profile values this profile hides are still checked: a bad one would surface only
            # when someone runs the default profile, hours later
            spec.make_config({k: v for k, v in base.items() if k != "seeds"})
        base.update(copy.deepcopy(overrides))
        n_seeds = base.pop("seeds", None)
        if n_seeds is None:
            seeds = default_seeds
        elif isinstance(n_seeds, int) and not isinstance(n_seeds, bool) and n_seeds >= 1:
            seeds = tuple(range(n_seeds))
        else:
            raise ConfigError(f"params.yaml papers.{pid}.seeds: a number of seeds >= 1, got {n_seeds!r}")
        if max_seeds is not None:
            seeds = seeds[: int(max_seeds)]
        paper_seeds[pid] = seeds
        configs[pid] = spec.make_config(base)
        merged[pid] = config_dict(configs[pid])
    device = os.environ.get("PAPERFLOW_DEVICE") or prof.get("device") or params.get("device") or "auto"
    if device not in ("cpu", "cuda", "auto"):
        raise ConfigError(f"device must be cpu, cuda or auto (params.yaml `device`, profiles.{profile}.device or "
                          f"PAPERFLOW_DEVICE), got {device!r}")
    return Settings(profile=profile, papers=ids, sections=merged, configs=configs, paper_seeds=paper_seeds, device=device)


def attribute(message: str, file_params: Mapping[str, Any], merged: Mapping[str, Any]) -> str:
    """A validation message names "params.yaml <path>"; when the value at that path came from Snakemake's --config
    (it differs from the file's), say so instead."""
    import re

    m = re.match(r"params\.yaml ([A-Za-z0-9_.]+)", message)
    if not m:
        return message
    parts = m.group(1).rstrip(":").split(".")
    a, b = file_params, merged
    for key in parts:
        a = a.get(key) if isinstance(a, Mapping) else None
        b = b.get(key) if isinstance(b, Mapping) else None
    if a != b:
        return "--config " + message[len("params.yaml "):] + " (a --config value on the command line; params.yaml has " \
            + (repr(a) if a is not None else "no such key") + ")"
    return message


def load(path: str | Path, profile: str | None = None, only: list[str] | None = None) -> Settings:
    return resolve(read_params(path), profile=profile, only=only)


def config_dict(cfg: Any) -> dict:
    """A Config as plain YAML/JSON-able values (tuples become lists)."""
    if not is_dataclass(cfg):
        return dict(cfg)
    return _plain(asdict(cfg))


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _field_names(spec: PaperSpec) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(spec.Config)}


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# ------------------------------------------------------------------ the Snakefile's plan
PACKAGE = Path(__file__).resolve().parent


def _code_fingerprint(extra_modules: list[str]) -> list:
    """(path, mtime, size) of every module that can change what the registry holds."""
    files = sorted(PACKAGE.rglob("*.py"))
    for name in extra_modules:
        import importlib.util

        found = importlib.util.find_spec(name)
        if found and found.origin:
            files.append(Path(found.origin))
    return [[str(f), f.stat().st_mtime_ns, f.stat().st_size] for f in files]


def paper_code(spec: PaperSpec) -> list[str]:
    """Repo-relative source files of a paper: its module and the package modules it imports.
    The Snakefile lists them as inputs, so editing the paper's code reruns its jobs."""
    from .dvcgen import shared_deps

    return shared_deps(Path(spec.module).resolve()) if spec.module and Path(spec.module).exists() else []


def workflow_plan(params: Mapping[str, Any], cache: str | Path | None = None) -> dict:
    """What the Snakefile needs: profile, and per paper its seeds, variants, resources, weight and
    resolved params section.

    Building it imports every paper module (torch, scipy: ~2.5 s), so it is cached under .snakemake/
    keyed by the params (with --config overrides) and by the mtime and size of every package file; a
    no-op `snakemake all` then costs Snakemake's own start-up only. A miss recomputes and validates.
    """
    from .registry import load_all

    plugins = list(params.get("plugins") or [])

    def build() -> dict:
        load_all(plugins)
        settings = resolve(params)
        return {
            "profile": settings.profile,
            "papers": {
                pid: {
                    "seeds": list(settings.seeds(pid)),
                    "variants": list(get_paper(pid).variants),
                    "resources": list(get_paper(pid).resources),
                    "weight": int(get_paper(pid).weight),
                    "threads": get_paper(pid).job_threads(),
                    "code": paper_code(get_paper(pid)),
                    "section": settings.sections[pid],
                }
                for pid in settings.papers
            },
        }

    return cached(cache, [params, _code_fingerprint(plugins)], build)


def write_resolved(out: str | Path, plan: Mapping[str, Any]) -> list[str]:
    """resolved/<paper>.yaml from a workflow plan of params.yaml as written (its own profile): each paper's settings
    as that profile resolves them, the DVC params of its stage (dvcgen.py). A file is rewritten only when its
    content changes; files of papers no longer in the plan are removed. Returns the papers whose file changed."""
    from .artifacts import save_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    changed = []
    for pid, paper in sorted(plan["papers"].items()):
        text = yaml.safe_dump({"profile": plan["profile"], "seeds": list(paper["seeds"]), "config": paper["section"]},
                              sort_keys=True)
        path = out / f"{pid}.yaml"
        if not path.exists() or path.read_text() != text:
            save_text(text, path)
            changed.append(pid)
    for stale in out.glob("*.yaml"):
        if stale.stem not in plan["papers"]:
            stale.unlink()
    return changed


def cached(cache: str | Path | None, key_parts: Any, build: Callable[[], Any]) -> Any:
    """build(), memoised in the JSON file `cache` under a hash of key_parts (params, code fingerprint):
    a hit returns without importing any paper module (torch, scipy)."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()
    if cache is not None and Path(cache).exists():
        try:
            hit = json.loads(Path(cache).read_text())
            if hit.get("key") == key:
                return hit["value"]
        except (OSError, ValueError):
            pass
    value = build()
    if cache is not None:
        from .artifacts import save_json

        save_json({"key": key, "value": value}, cache)
    return value


def paper_index(cache: str | Path | None = None) -> list[dict]:
    """What `paperflow list` prints for every registered paper (id, title, variants, claim, headline rows,
    row counts per role, fidelity, data, resources), cached like the plan: no torch import on a hit."""
    from .registry import list_papers

    def build() -> list[dict]:
        rows = []
        for s in list_papers():
            comps = list(s.comparisons(s.make_config({})))
            rows.append({
                "id": s.id, "title": s.title, "variants": list(s.variants), "claim": s.claim, "fidelity": s.fidelity,
                "headline": [c.text or f"{c.method} vs {c.baseline}" for c in comps if c.role == "headline"],
                "rows": {role: sum(c.role == role for c in comps) for role in ("headline", "secondary", "control", "fact")},
                "data": s.data, "resources": list(s.resources),
            })
        return rows

    return cached(cache, ["index", _code_fingerprint([])], build)
