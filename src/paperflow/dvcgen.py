"""dvc.yaml generated from the registry (`paperflow dvc-yaml [--write]`; a test keeps it in sync).

DVC does not repeat Snakemake's DAG job by job (DESIGN.md, "Tracking and versioning"): one stage per
paper runs snakemake on that paper's targets, with params [profile, profiles, papers.<id>], deps on the
paper's module plus the shared modules it imports (found by walking its imports) and the workflow
itself, and outs results/<id> persisted (Snakemake owns and updates them). Its DVC params are its resolved
settings (resolved/<id>.yaml, written by the `params` stage from params.yaml and the active profile). A
`resources` stage builds
the data, and `report` writes the claims report, with each paper's headline numbers as DVC metrics
(reports/metrics/<id>.json) and its figures as DVC plots. So `dvc exp run -S papers.owl.sparsity=0.6` reruns
only the owl stage and the report, and `dvc exp show` / `dvc metrics diff` compare the headline numbers.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import yaml

from .data.resources import RESOURCES
from .registry import list_papers

PKG = Path(__file__).resolve().parent
# The stage runner every job goes through (imported by cli.py at run time).
RUNNER = ("cli.py", "stages.py", "config.py", "registry.py", "spec.py", "artifacts.py", "tracking.py")
WORKFLOW = ("Snakefile", "workflow/rules", "workflow/schemas")
# The .venv that scripts/setup.sh makes (DVC runs cmds with the caller's PATH, where it may not be first).
SNAKEMAKE = ".venv/bin/python -m snakemake --cores 8 --config profile=${profile} --"
REPORT = ".venv/bin/python -m paperflow.cli report --profile ${profile}"
RESOLVED = "resolved"
RESOLVE = f".venv/bin/python -m paperflow.cli resolve-params --out {RESOLVED}"


def _module_file(name: str) -> Path | None:
    parts = name.split(".")[1:]  # drop "paperflow"
    base = PKG.joinpath(*parts) if parts else PKG
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    return None


def _imports(path: Path) -> set[str]:
    """paperflow modules imported by `path` (absolute and relative imports); parsed once per file version
    (the job server parses every paper once, and its forked jobs reuse the result)."""
    st = path.stat()
    return set(_imports_of_version(path, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=None)
def _imports_of_version(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    return frozenset(_parse_imports(path))


def _parse_imports(path: Path) -> set[str]:
    if not path.is_relative_to(PKG):  # a plugin paper kept outside the package: absolute imports only
        return {n for node in ast.walk(ast.parse(path.read_text())) for n in _absolute(node)}
    parts = ["paperflow", *path.relative_to(PKG).with_suffix("").parts]
    package = parts if path.name == "__init__.py" else parts[:-1]  # the package relative imports start from
    if package[-1] == "__init__":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("paperflow")}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            if mod.startswith("paperflow"):
                found.add(mod)
                found |= {f"{mod}.{a.name}" for a in node.names}
    return found


def _absolute(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.startswith("paperflow")}
    if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("paperflow"):
        return {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return set()


def shared_deps(module_path: Path) -> list[str]:
    """Files of the paperflow package that `module_path` imports, transitively (repo-relative)."""
    seen: set[Path] = set()
    todo = [module_path]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            f = _module_file(name)
            if f is not None and f not in seen:
                todo.append(f)
    return sorted(str(p.relative_to(PKG.parents[1])) if p.is_relative_to(PKG.parents[1]) else str(p) for p in seen)


def dvc_stages() -> dict:
    stages: dict[str, dict] = {}
    papers = list_papers()
    used = sorted({r for s in papers for r in s.resources})
    stages["resources"] = {
        "cmd": f"{SNAKEMAKE} resources_all",
        "deps": ["src/paperflow/data/resources.py", "src/paperflow/data/smollm2.py", "workflow/rules/resources.smk"],
        # cache: false: resources are rebuilt byte for byte from package registries by scripts/setup.sh (550 MB,
        # mostly SmolLM2); dvc.lock records their hashes (dvc status checks them) but a remote does not carry them
        "outs": [{f"resources/{RESOURCES[r].output}": {"persist": True, "cache": False}} for r in used],
    }
    # Each paper's settings as its profile resolves them (resolved/<id>.yaml, written by `paperflow resolve-params`
    # only when they change): a paper stage's DVC params are exactly the values its jobs use, so an edit of one
    # profile's override reruns that paper alone, and `-S papers.<id>.<k>` on a key the active profile overrides
    # reruns nothing (DVC recorded a value that was never used when stages read params.yaml directly, issue 26).
    stages["params"] = {
        "cmd": RESOLVE,
        "deps": ["params.yaml", "src/paperflow/config.py"],
        "outs": [{RESOLVED: {"persist": True}}],  # cached: a DVC remote carries it with the results
    }
    runner = [f"src/paperflow/{f}" for f in RUNNER]
    for spec in papers:
        module = Path(spec.module).resolve()
        deps = sorted(set(shared_deps(module)) | set(runner) | set(WORKFLOW))
        deps += [f"resources/{RESOURCES[r].output}" for r in spec.resources]
        stages[spec.id] = {
            "cmd": f"{SNAKEMAKE} results/{spec.id}/metrics.csv",
            "params": [{f"{RESOLVED}/{spec.id}.yaml": None}],
            "deps": deps,
            "outs": [{f"results/{spec.id}": {"persist": True}}],
        }
    # The report's headline numbers per paper are DVC metrics (so `dvc exp show` / `dvc metrics diff` read like
    # a results table) and its figures are DVC plots (`dvc plots diff` renders them side by side).
    # The report stage calls the report directly, never through Snakemake: DVC unprotects (copies) persisted
    # outputs before a stage runs, which makes them newer than their inputs, so Snakemake would say "Nothing to
    # be done" and leave the previous numbers in reports/metrics (issue 26). A report is cheap: always rebuild.
    stages["report"] = {
        "cmd": REPORT,
        "deps": ["src/paperflow/report", "src/paperflow/spec.py", "src/paperflow/contract.py", "src/paperflow/prereg.py",
                 "preregistration.lock", RESOLVED] + [f"results/{s.id}/metrics.csv" for s in papers],
        "outs": [{f"reports/{name}": {"persist": True}} for name in ("claims.csv", "claims.md", "index.html")],
        # cached (not git-tracked: reports/ is ignored), so a DVC remote carries them with the rest of the report
        "metrics": [{f"reports/metrics/{s.id}.json": {"persist": True}} for s in papers],
        "plots": [{"reports/figures": {"persist": True}}],
    }
    return {"stages": stages}


def dvc_yaml_text() -> str:
    header = "# Generated by `paperflow dvc-yaml --write` from the paper registry; do not edit by hand.\n"
    return header + yaml.safe_dump(dvc_stages(), sort_keys=False, width=120)
