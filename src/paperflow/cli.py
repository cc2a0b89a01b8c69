"""`paperflow` command line: the thin I/O layer around the stages, the registry, the report and DVC.

    paperflow list [--json]
    paperflow check [--profile P]                   validate params.yaml (what the Snakefile does first)
    paperflow stage prepare|train|compress|evaluate|run|collect --paper ID [--variant V --seed S]
    paperflow resource NAME                          build resources/<NAME> from sources/
    paperflow init-tracking                          create the MLflow store and experiments
    paperflow report [--out reports]
    paperflow dvc-yaml [--write]
    paperflow preregister [PAPER ...] | --check | --amend PAPER "reason"   the headline lock (prereg.py)
Environment: MLFLOW_TRACKING_URI (a server instead of the repo's sqlite store), PAPERFLOW_TRACKING=off.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .spec import ConfigError

ROOT_MARKERS = ("params.yaml", "Snakefile")


def find_root(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if all((folder / m).exists() for m in ROOT_MARKERS):
            return folder
    raise SystemExit(f"paperflow: no params.yaml + Snakefile found in {here} or its parents; run from the repository")


def tracking_uri(root: Path) -> str | None:
    if os.environ.get("PAPERFLOW_TRACKING", "").lower() in ("off", "0", "false", "no"):
        return None
    from .tracking import default_uri

    return os.environ.get("MLFLOW_TRACKING_URI") or default_uri(root)


def _settings(root: Path, args: argparse.Namespace):
    from . import config

    only = [args.paper] if getattr(args, "paper", None) else None
    return config.load(root / "params.yaml", profile=args.profile, only=only)


def _torch_threads(args: argparse.Namespace) -> int:
    """--threads N, or --job-threads T from a Snakemake job: T slots / PAPERFLOW_SLOTS_PER_CPU (set by the
    workflow's shell prefix), never more than the machine's CPUs (workflow/rules/common.smk, thread policy)."""
    if getattr(args, "job_threads", None) is None:
        return max(1, args.threads)
    slots = max(1, int(os.environ.get("PAPERFLOW_SLOTS_PER_CPU", "1")))
    return max(1, min(os.cpu_count() or 1, args.job_threads // slots))


def cmd_list(args: argparse.Namespace) -> int:
    from .config import paper_index

    rows = paper_index(_cache(find_root(), "paperflow-index.json"))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['id']:<12} {r['title']}\n{'':<12} variants: {', '.join(r['variants'])}\n{'':<12} claim: {r['claim']}"
                  f"\n{'':<12} headline: {' | '.join(r['headline']) or '(none declared)'}")
    return 0


def _cache(root: Path, name: str) -> Path:
    """Where list/check memoise what needs every paper module imported (a hit needs no torch)."""
    return root / ".snakemake" / name


def cmd_check(args: argparse.Namespace) -> int:
    from . import config

    root = find_root()
    params = config.read_params(root / "params.yaml")
    if args.profile:
        params["profile"] = args.profile
    plan = config.workflow_plan(params, cache=_cache(root, "paperflow-check.json"))  # validates on a miss
    seeds = ", ".join(f"{p} {len(v['seeds'])}" for p, v in sorted(plan["papers"].items()))
    print(f"params.yaml ok: profile {plan['profile']}; papers and their seeds: {seeds}")
    return 0


class Terminated(SystemExit):
    """SIGTERM as an exception (Snakemake cancels a job, the job server stops, Ctrl-C of the workflow): the
    stage's tracking context then marks its MLflow runs KILLED instead of leaving them RUNNING forever."""


def _raise_on_sigterm() -> None:
    import signal

    def handler(signum, _frame):
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def cmd_stage(args: argparse.Namespace) -> int:
    from . import device, stages

    _raise_on_sigterm()

    root = find_root()
    ctx = stages.Context(root=root, settings=_settings(root, args), tracking_uri=tracking_uri(root), threads=_torch_threads(args))
    device.use(ctx.settings.device)
    if args.name in ("train", "compress", "evaluate", "run") and (args.variant is None or args.seed is None):
        raise SystemExit(f"paperflow stage {args.name} needs --variant and --seed")
    if args.variant is not None:
        stages.check_variant(args.paper, args.variant)
    fn = getattr(stages, args.name)
    out = fn(ctx, args.paper) if args.name in ("prepare", "collect") else fn(ctx, args.paper, args.variant, args.seed)
    print(f"[paperflow] wrote {Path(out).relative_to(root)}")
    return 0


def cmd_resource(args: argparse.Namespace) -> int:
    from . import stages

    root = find_root()
    stages.set_threads(_torch_threads(args))
    digest = stages.resource(root, args.name, Path(args.sources or root / "sources"))
    print(f"[paperflow] resource {args.name}: sha256 {digest}")
    return 0


def cmd_init_tracking(args: argparse.Namespace) -> int:
    from . import tracking
    from .registry import list_papers

    uri = tracking_uri(find_root())
    if uri is None:
        return 0
    # only the experiments of the papers this run runs (an empty experiment per registered paper is noise)
    tracking.init_store(uri, list(args.papers or [s.id for s in list_papers()]) + ["report"])
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report import build_report

    from . import config

    root = find_root()
    papers = args.papers
    if not papers:  # every registered paper with results, whatever `only` ran this time
        from .registry import list_papers

        papers = [s.id for s in list_papers() if (root / "results" / s.id / "metrics.csv").exists()]
        if not papers:
            raise ConfigError("no results/<paper>/metrics.csv yet: run the workflow first (snakemake --cores 8 all)")
    settings = config.load(root / "params.yaml", profile=args.profile, only=papers)
    out = build_report(root, settings, Path(args.out) if args.out else root / "reports", tracking_uri(root))
    print(f"[paperflow] report: {out}")
    return 0


def cmd_dvc_yaml(args: argparse.Namespace) -> int:
    from .dvcgen import dvc_yaml_text

    root = find_root()
    text = dvc_yaml_text()
    if args.write:
        from .artifacts import save_text

        save_text(text, root / "dvc.yaml")
        print("[paperflow] wrote dvc.yaml")
    else:
        sys.stdout.write(text)
    return 0


def cmd_preregister(args: argparse.Namespace) -> int:
    from . import prereg

    root = find_root()
    path = root / prereg.LOCK_NAME
    hashes = prereg.current_hashes(root / "params.yaml")
    lock = prereg.read_lock(path)
    try:
        if args.check:
            found = prereg.problems(lock, hashes)
            for line in found:
                print(f"paperflow: {line}", file=sys.stderr)
            if not found:
                print(f"[paperflow] {prereg.LOCK_NAME}: {len(hashes)} papers, code and lock agree")
            return 1 if found else 0
        if args.amend:
            paper, reason = args.amend
            prereg.amend(lock, hashes, paper, reason)
            prereg.write_lock(lock, path)
            print(f"[paperflow] {paper}: amended ({hashes[paper]['hash']})")
            return 0
        done = prereg.register(lock, hashes, list(args.papers), note=args.note)
    except prereg.PreregError as err:
        print(f"paperflow: error: {err}", file=sys.stderr)
        return 2
    prereg.write_lock(lock, path)
    print(f"[paperflow] registered: {', '.join(done) or 'nothing new'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paperflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="registered papers, variants and claims")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("check", help="validate params.yaml")
    p.add_argument("--profile")
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("stage", help="run one workflow stage")
    p.add_argument("name", choices=["prepare", "train", "compress", "evaluate", "run", "collect"],
                   help="run = train, compress and evaluate in one process (what the Snakemake job does)")
    p.add_argument("--paper", required=True)
    p.add_argument("--variant")
    p.add_argument("--seed", type=int)
    p.add_argument("--profile")
    p.add_argument("--threads", type=int, default=1, help="torch threads for this job")
    p.add_argument("--job-threads", type=int, help="the Snakemake job's threads (converted to torch threads)")
    p.set_defaults(fn=cmd_stage)
    p = sub.add_parser("resource", help="build one data resource")
    p.add_argument("name")
    p.add_argument("--sources", help="folder of downloaded sources (default: sources/)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--job-threads", type=int, help="the Snakemake job's threads (converted to torch threads)")
    p.set_defaults(fn=cmd_resource)
    p = sub.add_parser("init-tracking", help="create the MLflow store and one experiment per paper")
    p.add_argument("--papers", nargs="*", help="paper ids (default: every registered paper)")
    p.set_defaults(fn=cmd_init_tracking)
    p = sub.add_parser("report", help="claims table, figures and HTML report")
    p.add_argument("--profile")
    p.add_argument("--out")
    p.add_argument("--papers", nargs="*", help="paper ids (default: every registered paper with results)")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("dvc-yaml", help="print (or --write) dvc.yaml generated from the registry")
    p.add_argument("--write", action="store_true")
    p.set_defaults(fn=cmd_dvc_yaml)
    p = sub.add_parser("preregister", help="pre-register headlines in preregistration.lock (register, --check, --amend)")
    p.add_argument("papers", nargs="*", help="papers to register (default: every paper missing from the lock)")
    p.add_argument("--check", action="store_true", help="exit 1 when the code and the lock disagree (CI)")
    p.add_argument("--amend", nargs=2, metavar=("PAPER", "REASON"), help="move PAPER's registered hash, with a reason")
    p.add_argument("--note", default="", help="a note stored with new registrations")
    p.set_defaults(fn=cmd_preregister)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ConfigError, KeyError, FileNotFoundError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"paperflow: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
