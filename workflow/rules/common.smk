# Settings, input functions and the thread policy shared by every rule.
import json
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # runs from a checkout without `pip install -e`

from paperflow import config as pf_config
from paperflow.data.resources import RESOURCES
from paperflow.spec import ConfigError
from snakemake.exceptions import WorkflowError

# Validated before any job: unknown paper ids or keys, out-of-range values, undefined profile.
try:
    PLAN = pf_config.workflow_plan(config, cache=Path(".snakemake/paperflow-plan.json"))
except (ConfigError, KeyError) as err:
    message = str(err.args[0] if isinstance(err, KeyError) else err)
    raise ConfigError(pf_config.attribute(message, pf_config.read_params("params.yaml"), config)) from None

PROFILE = PLAN["profile"]
PAPERS = sorted(PLAN["papers"])
SOURCES = Path(config.get("sources_dir") or "sources")


def paper_seeds(paper):
    return PLAN["papers"][paper]["seeds"]


# Thread policy: one job slot per `--cores` unit, but never more torch threads in flight than the
# machine has CPUs. With --cores 8 on 2 CPUs a 1-thread job takes 4 slots (2 jobs at once); a paper whose
# measured 2-thread speedup reaches spec.THREADS_RULE (PaperSpec.thread_speedup, from
# benchmarks/bench_efficiency.py --scaling) takes 8 slots and runs 2 threads. Resource jobs keep weight 2.
NCPU = os.cpu_count() or 1
try:
    CORES = workflow.cores
except WorkflowError:  # --unlock, --lint and other calls that run no job set no --cores
    CORES = NCPU
SLOTS_PER_CPU = max(1, CORES // NCPU)


# Jobs run `python3 -m paperflow.cli` with the interpreter running Snakemake (the .venv) and this
# checkout's code, whatever `pip install -e` points at. It is set in the shell prefix rather than in
# each rule's params, so that moving the checkout or the venv does not change a params rerun trigger.
shell.prefix(
    "set -euo pipefail; "
    f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH; "
    f"export PYTHONPATH={shlex.quote(str(Path(workflow.basedir) / 'src'))}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    "export MLFLOW_DISABLE_TELEMETRY=true; "
    # Run-environment values live here, not in job params (each param is a rerun trigger): the CLI turns a
    # job's Snakemake threads into torch threads with PAPERFLOW_SLOTS_PER_CPU, so `--cores 1`, `--cores 8`
    # or a dry run without --cores rerun nothing; PAPERFLOW_SOURCES is where resource jobs read sources.
    f"export PAPERFLOW_SLOTS_PER_CPU={SLOTS_PER_CPU}; "
    f"export PAPERFLOW_SOURCES={shlex.quote(str(SOURCES.resolve()))}; "
)


def job_threads(paper, weight=None):
    w = weight if weight is not None else PLAN["papers"][paper]["threads"]
    return min(CORES, max(1, w) * SLOTS_PER_CPU)


# Cluster resources (SLURM profile, workflow/profiles/slurm): memory and time scale with the paper's weight
# (weight 2 = a 135M LM); the local executor ignores them unless --resources limits are given.
def job_mem_mb(wildcards):
    return 3000 * max(1, PLAN["papers"][wildcards.paper]["weight"])


def job_runtime_min(wildcards):
    return {"smoke": 10, "default": 60}.get(PROFILE, 240) * max(1, PLAN["papers"][wildcards.paper]["weight"])


def resource_path(name):
    return f"resources/{RESOURCES[name].output}"


def used_resources():
    return sorted({r for p in PAPERS for r in PLAN["papers"][p]["resources"]})


def resource_marker(name):
    return f"resources/{RESOURCES[name].output}.sha256.json"


def paper_resources(wildcards):
    # A paper depends on each resource through its small checksum file (written by the same rule, after the
    # build), not the resource itself: Snakemake compares the content of small inputs, so DVC re-linking an
    # unchanged resource (new mtimes, e.g. the smollm2-135m directory after `dvc repro`) reruns nothing,
    # while a rebuilt resource with other content changes its checksum and reruns the paper.
    return [resource_marker(r) for r in PLAN["papers"][wildcards.paper]["resources"]]


def paper_code(wildcards):
    # The paper's module and the shared modules it imports: a code change reruns its jobs.
    return PLAN["papers"][wildcards.paper]["code"]


def run_dir(paper, variant, seed):
    return f"results/{paper}/{variant}/seed{seed}"


def paper_metrics(wildcards):
    variants = PLAN["papers"][wildcards.paper]["variants"]
    return [f"{run_dir(wildcards.paper, v, s)}/metrics.json" for v in variants for s in paper_seeds(wildcards.paper)]


RUN_OUTPUTS = ("model.pt", "curves.json", "run.json", "compressed.pt", "metrics.json")


def all_job_outputs():
    # Every artifact under results/ that a job writes (inputs of rule all), so a hole (a file deleted by an
    # interrupted --forcerun, or by hand) is rebuilt by `snakemake all` instead of being hidden behind
    # up-to-date downstream files (and versioned by DVC as a hole).
    out = []
    for paper in PAPERS:
        out.append(f"results/{paper}/data/data.pt")
        for v in PLAN["papers"][paper]["variants"]:
            for s in paper_seeds(paper):
                out += [f"{run_dir(paper, v, s)}/{name}" for name in RUN_OUTPUTS]
    return out


def paper_params(wildcards):
    # Jobs rerun when their paper's resolved params change (Snakemake's params rerun trigger);
    # canonical JSON, so the cached and the freshly built plan compare equal.
    return json.dumps(PLAN["papers"][wildcards.paper]["section"], sort_keys=True)


REPORT_CODE = ("src/paperflow/report", "src/paperflow/spec.py", "src/paperflow/contract.py", "src/paperflow/prereg.py")


def report_code():
    # What decides the verdicts besides the metrics: the claims/report modules, the contract and the lock.
    files = []
    for entry in REPORT_CODE:
        path = Path(workflow.basedir) / entry
        files += sorted(str(p) for p in path.glob("*.py")) if path.is_dir() else [str(path)]
    lock = Path(workflow.basedir) / "preregistration.lock"
    return files + ([str(lock)] if lock.exists() else [])


def claim_settings():
    # The resolved sections and seeds of every paper of this run, as one canonical string (a params trigger).
    return json.dumps({p: [PLAN["papers"][p]["section"], PLAN["papers"][p]["seeds"]] for p in PAPERS}, sort_keys=True)


def check_sources():
    """Fail before any job starts when a resource is neither built nor installable from its source."""
    for name in used_resources():
        if not Path(resource_path(name)).exists():
            RESOURCES[name].require_sources(SOURCES, verify=True)  # a corrupt source fails here, not in its job


LOCK_OWNER = Path(".snakemake") / "paperflow-lock-owner.json"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def clear_stale_lock():
    # A workflow process killed outright (kill -9) leaves Snakemake's lock files, and every later run stops with
    # LockException until the user finds `--unlock`. record_lock_owner() notes, at onstart, which lock files this
    # run created and its pid; if that process is gone, exactly those files are stale and are removed here (a lock
    # of a live run, or one we did not record, is left alone and Snakemake says what to do).
    try:
        owner = json.loads(LOCK_OWNER.read_text())
    except (FileNotFoundError, ValueError):
        return
    if _pid_alive(int(owner.get("pid", 0))):
        return
    stale = [Path(f) for f in owner.get("locks", []) if Path(f).exists()]
    for f in stale:
        f.unlink()
    LOCK_OWNER.unlink(missing_ok=True)
    if not stale:
        return
    others = [f for f in Path(".snakemake/locks").glob("*.lock")] if Path(".snakemake/locks").exists() else []
    redo = [] if others else clear_incomplete()  # with another run holding a lock, its jobs may be running: leave them
    print(f"paperflow: removed the lock left by workflow process {owner['pid']}, which died without releasing it"
          + (f"; the {len(redo)} output(s) its jobs left incomplete are removed and will be rebuilt" if redo else ""),
          file=sys.stderr)


def clear_incomplete():
    # Snakemake marks each running job's outputs in .snakemake/incomplete/ (file names: the output path, urlsafe
    # base64, split into "@"-prefixed chunks) and refuses to start until --rerun-incomplete. When the run that owned
    # them is dead, remove the marked outputs (partial or not: every artifact is written by rename, so an existing one
    # is whole, but its job did not finish) and the markers: the jobs are then simply missing and rebuilt.
    import base64

    root = Path(".snakemake/incomplete")
    removed = []
    for marker in (p for p in root.rglob("*") if p.is_file()) if root.exists() else []:
        parts = marker.relative_to(root).parts
        try:
            target = base64.urlsafe_b64decode("".join(p.lstrip("@") for p in parts).encode()).decode()
        except ValueError:
            continue
        if target == "migration_underway":
            continue
        Path(target).unlink(missing_ok=True)
        marker.unlink()
        removed.append(target)
    return removed


def record_lock_owner():
    locks = sorted(str(Path(f).resolve()) for f in getattr(workflow.persistence, "_lockfile", {}).values())
    if locks:  # --nolock and dry runs hold no lock: nothing to record
        LOCK_OWNER.write_text(json.dumps({"pid": os.getpid(), "locks": locks}))


def release_lock_owner():
    LOCK_OWNER.unlink(missing_ok=True)


def write_resolved_params():
    # resolved/<paper>.yaml (the DVC params of each paper's stage, dvcgen.py) as params.yaml itself resolves them, so
    # that `dvc commit` after a Snakemake run finds them (the plan is cached: no paper import on a hit)
    file_params = pf_config.read_params("params.yaml")
    file_params["only"] = []
    pf_config.write_resolved("resolved", pf_config.workflow_plan(file_params, cache=Path(".snakemake/paperflow-resolved.json")))


def init_tracking():
    # A loopback MLflow server in front of mlflow.db (paperflow/tracking_server.py): jobs inherit its http URI
    # and log over REST without importing mlflow (job start-up), and one process writes the sqlite file.
    from paperflow import tracking_server

    uri = tracking_server.start_for_workflow(Path.cwd())
    if uri:
        from paperflow.tracking import ui_url

        print(f"paperflow: MLflow tracking server {uri} (store mlflow.db, log logs/mlflow_server.log); runs: {ui_url(uri)}",
              file=sys.stderr)
    shell(f"python3 -m paperflow.cli init-tracking --papers {' '.join(PAPERS)}")
    # Then the job fork server (paperflow/jobserver.py): torch and the papers imported once, a fork per job, so
    # a job starts in ~0.1 s instead of ~3 s; it inherits the tracking URI exported above. Jobs fall back to
    # their own interpreter without it (PAPERFLOW_JOBSERVER=off, SLURM jobs).
    from paperflow import jobserver

    plugin = workflow.executor_plugin
    if plugin is not None and plugin.common_settings.non_local_exec:
        # cluster jobs run on their own nodes and never use it (paperflow/job.py): starting it cost ~10 s and 600 MB
        return
    n_jobs, papers = stage_jobs_to_run()
    if n_jobs < jobserver.MIN_JOBS and not jobserver.forced():
        # a rerun of a job or two: each job's own start-up (~1.5 s) costs less than the server's (5-10 s, torch and
        # every paper imported), which the rerun would wait for
        return
    # LM papers among the jobs to run: the job server loads SmolLM2 once and every job shares it (~2.7 s per job saved)
    lm = [resource_path("smollm2")] if any("smollm2" in PLAN["papers"][p]["resources"] for p in papers) else []
    if jobserver.start_for_workflow(Path.cwd(), preload_lm=lm):
        print("paperflow: job server up (log logs/jobserver.log; PAPERFLOW_JOBSERVER=off to disable)", file=sys.stderr)


def stage_jobs_to_run():
    """(count, papers) of this invocation's jobs that run a paperflow stage (prepare, run, collect), from the DAG
    Snakemake built before onstart."""
    jobs = [j for j in workflow.dag.needrun_jobs() if j.rule.name in ("prepare", "run", "collect")]
    return len(jobs), {j.wildcards.get("paper") for j in jobs} & set(PAPERS)


def stop_tracking():
    from paperflow import jobserver, tracking_server

    jobserver.stop_for_workflow(Path.cwd())
    tracking_server.stop_for_workflow(Path.cwd())


check_sources()
if workflow.is_main_process and not workflow.dryrun:  # never from a job's own parse (SLURM), never in a dry run
    clear_stale_lock()
    # outputs `dvc commit` hard-linked into its cache are read-only: give jobs writable copies (same mtimes)
    from paperflow.artifacts import unprotect_tree

    if unprotect_tree("results", "reports"):
        print("paperflow: replaced outputs DVC had made read-only (hard links into its cache) by writable copies", file=sys.stderr)
