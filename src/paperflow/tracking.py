"""MLflow tracking: the only module that imports mlflow (and only for a sqlite/file store).

Layout in the store: one experiment per paper; one parent run per (variant, seed), named
`{paper}__{variant}__seed{seed}` (cleanrl-style), created by the train stage; one nested run per stage
(prepare, train, compress, evaluate) under it, named "<stage> <paper> <variant> seed<k>". The parent run
holds what the UI's compare flow shows: params, the per-step curves and the final dense and compressed
metrics (each logged once, on the parent); the nested runs hold their stage's time and artifacts. Every
run carries the tags paper, variant, seed, stage, profile and git_commit.

Reruns stay true: a new parent for a (paper, variant, seed) ends every earlier parent of it (a RUNNING one,
left by a killed job, and its RUNNING stage runs become KILLED) and tags it `current=false`,
`superseded_by=<new run id>`; the new parent is tagged `current=true`. Filter on `tags.current = 'true'`
to see one run per (variant, seed).

Safe under parallel Snakemake jobs on the embedded sqlite store:
- the schema and the experiments are created once, before any job starts (`init_store`, called from
  the Snakefile's onstart): concurrent first use of a fresh sqlite file races on schema creation;
- every write is retried with backoff when sqlite reports "database is locked";
- metrics are buffered and sent with log_batch (few transactions, low overhead);
- a stage that raises marks its run (and its parent) FAILED before the error propagates.
The URI is absolute (a relative sqlite path makes stray stores when a tool runs in another folder).

Two clients, one interface: an http(s) URI (a team's server, or the loopback server the Snakefile starts,
paperflow.tracking_server) is spoken to by paperflow.mlflow_rest.RestClient over the REST API, so a workflow
job never imports mlflow (~2-4 s of its start-up); any other URI (sqlite:///, a file store) goes through
mlflow's own MlflowClient, wrapped to take the same light Metric/Param records.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

T = TypeVar("T")
_RETRYABLE = ("database is locked", "database table is locked", "unique constraint", "already exists", "busy",
              "connection refused", "unreachable", "http 502", "http 503", "http 504")


# MLflow 3's UI opens an experiment in its GenAI view unless told otherwise: this tag makes it open the classic
# model-training view (Runs table, Compare, charts) that paperflow's runs are made for.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def ui_url(base: str, experiment_id: str | None = None) -> str:
    """A link into the MLflow UI that opens the model-training view (runs table, Compare, charts): MLflow 3's UI
    defaults to its GenAI view and reads the experiment's kind tag only when its workflow selector is off, so the
    link carries workflowType=machine_learning (tests/test_browser.py checks the runs table appears)."""
    route = f"#/experiments/{experiment_id}" if experiment_id else "#/experiments"
    return f"{base.rstrip('/')}/{route}?workflowType=machine_learning"


def default_uri(repo_root: str | Path) -> str:
    return f"sqlite:///{Path(repo_root).resolve() / 'mlflow.db'}"


def _retry(fn: Callable[..., T], *args: Any, attempts: int = 1000, **kwargs: Any) -> T:
    """Call fn, retrying transient errors (sqlite locks, a tracking server that is restarting) with backoff for
    at most PAPERFLOW_TRACKING_RETRY_S seconds (120 by default), then raise: a job whose tracking server stays
    down fails loudly instead of running on untracked."""
    delay = 0.05
    try:
        budget = float(os.environ.get("PAPERFLOW_TRACKING_RETRY_S", "120"))
    except ValueError:
        budget = 120.0
    deadline = time.monotonic() + budget
    for attempt in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # mlflow wraps sqlalchemy errors in MlflowException
            if (attempt == attempts - 1 or time.monotonic() > deadline
                    or not any(s in str(err).lower() for s in _RETRYABLE)):
                raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 1.6, 2.0)
    raise AssertionError("unreachable")


_CLIENTS: dict[str, Any] = {}


class _LibraryClient:
    """mlflow.MlflowClient for sqlite/file stores, taking mlflow_rest's light Metric/Param records in log_batch."""

    def __init__(self, uri: str):
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=uri)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def log_batch(self, run_id: str, metrics: Any = (), params: Any = (), tags: Any = ()) -> None:
        from mlflow.entities import Metric, Param, RunTag

        self._client.log_batch(run_id, metrics=[Metric(m.key, m.value, m.timestamp, m.step) for m in metrics],
                               params=[Param(p.key, p.value) for p in params], tags=[RunTag(t.key, t.value) for t in tags])


def _client(uri: str):
    """The client for `uri`, made once per process: REST for http(s), mlflow's library otherwise."""
    if uri not in _CLIENTS:
        if uri.startswith(("http://", "https://")):
            from .mlflow_rest import RestClient

            _CLIENTS[uri] = RestClient(uri)
        else:
            _CLIENTS[uri] = _LibraryClient(uri)
    return _CLIENTS[uri]


def _artifact_root(uri: str) -> str | None:
    """Artifacts of a sqlite store live beside it (mlartifacts/), at an absolute path; also when the store is
    behind paperflow's own loopback server (PAPERFLOW_TRACKING_STORE names it), so that the store read directly
    (mlflow ui, MlflowClient on sqlite) finds every artifact without a server."""
    store = os.environ.get("PAPERFLOW_TRACKING_STORE", "")
    if uri.startswith(("http://", "https://")) and store.startswith("sqlite:///"):
        uri = store
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
    return None  # a server decides


_EXPERIMENT_IDS: dict[tuple[str, str], str] = {}  # (uri, name) -> id: one lookup per process, not one per stage
_RUNS_MADE_HERE: set[str] = set()  # parent runs this process created: known to exist without asking the server


def experiment_id(uri: str, name: str) -> str:
    if (uri, name) in _EXPERIMENT_IDS:
        return _EXPERIMENT_IDS[(uri, name)]
    client = _client(uri)

    def get_or_create() -> str:
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        root = _artifact_root(uri)
        return client.create_experiment(name, artifact_location=f"{root}/{name}" if root else None, tags=EXPERIMENT_TAGS)

    _EXPERIMENT_IDS[(uri, name)] = _retry(get_or_create)
    return _EXPERIMENT_IDS[(uri, name)]


def set_tags(uri: str, run_id: str, tags: Mapping[str, str]) -> None:
    """Several tags in one request (log_batch) instead of one set-tag call each."""
    from .mlflow_rest import Param

    if tags:
        _retry(_client(uri).log_batch, run_id, tags=[Param(str(k), str(v)) for k, v in tags.items()])


def init_store(uri: str, experiments: list[str]) -> None:
    """Create the store's schema and the experiments once, before parallel jobs start."""
    for name in experiments:
        experiment_id(uri, name)


@dataclass
class StageRun:
    """A live nested run; `log` buffers per-step metrics, flushed in batches."""

    uri: str
    run_id: str
    parent_id: str | None
    flush_every_s: float = 5.0
    _buffer: list[Any] = field(default_factory=list)
    _last_flush: float = field(default_factory=time.monotonic)
    seconds_logging: float = 0.0

    @property
    def target_id(self) -> str:
        """Where curves and final metrics go: the parent run (what Compare shows), else this run."""
        return self.parent_id or self.run_id

    def log(self, step: int, **metrics: float) -> None:
        from .mlflow_rest import Metric

        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), now, int(step)) for k, v in metrics.items())
        if len(self._buffer) >= 900 or time.monotonic() - self._last_flush > self.flush_every_s:
            self.flush()
        self.seconds_logging += time.perf_counter() - t0

    def log_final(self, metrics: Mapping[str, float], on_parent: bool = True) -> None:
        """Final metrics, logged once: on the parent run (side-by-side Compare), or on this stage's run."""
        from .mlflow_rest import Metric

        now = int(time.time() * 1000)
        items = [Metric(_clean(k), float(v), now, 0) for k, v in metrics.items()]
        run_id = self.target_id if on_parent else self.run_id
        for i in range(0, len(items), 900):
            _retry(_client(self.uri).log_batch, run_id, metrics=items[i : i + 900])

    def log_params(self, params: Mapping[str, Any], also_parent: bool = False) -> None:
        from .mlflow_rest import Param

        items = [Param(_clean(k), str(v)[:6000]) for k, v in params.items()]
        targets = [self.run_id] + ([self.parent_id] if also_parent and self.parent_id else [])
        for run_id in targets:
            for i in range(0, len(items), 90):
                _retry(_client(self.uri).log_batch, run_id, params=items[i : i + 90])

    def set_tag(self, key: str, value: str) -> None:
        _retry(_client(self.uri).set_tag, self.run_id, key, value)

    def set_parent_tag(self, key: str, value: str) -> None:
        """A tag on the (variant, seed) parent run (this run's when it has none); `mlflow.note.content` is the
        description the UI shows at the top of the run page."""
        self.set_parent_tags({key: value})

    def set_parent_tags(self, tags: Mapping[str, str]) -> None:
        set_tags(self.uri, self.target_id, tags)

    def log_artifact(self, path: str | Path) -> None:
        if Path(path).exists():
            _retry(_client(self.uri).log_artifact, self.run_id, str(path))

    def flush(self) -> None:
        if self._buffer:
            batch, self._buffer = self._buffer, []
            for i in range(0, len(batch), 900):
                _retry(_client(self.uri).log_batch, self.target_id, metrics=batch[i : i + 900])
        self._last_flush = time.monotonic()


def _clean(key: str) -> str:
    """MLflow keys allow alphanumerics, _ - . space / : only."""
    return "".join(c if c.isalnum() or c in "_-. /:" else "_" for c in key)


def store_id(uri: str | None) -> str | None:
    """The store behind a tracking URI: the sqlite store paperflow's loopback server fronts (PAPERFLOW_TRACKING_STORE),
    else the URI itself. run.json records this, so a later stage run outside the workflow finds the same parent."""
    store = os.environ.get("PAPERFLOW_TRACKING_STORE", "")
    return store if store and uri and uri.startswith("http://127.0.0.1:") else uri


def create_parent_run(uri: str, paper: str, variant: str, seed: int, tags: Mapping[str, str]) -> str:
    """A new (variant, seed) parent run (the train stage creates one per training); earlier parents of the
    same (paper, variant, seed) are ended and marked superseded (module docstring)."""
    client = _client(uri)
    exp = experiment_id(uri, paper)
    run = _retry(
        client.create_run,
        exp,
        run_name=f"{paper}__{variant}__seed{seed}",
        tags={**tags, "paper": paper, "variant": variant, "seed": str(seed), "stage": "run", "current": "true"},
    )
    supersede(uri, exp, variant, seed, run.info.run_id, profile=tags.get("profile"))
    _RUNS_MADE_HERE.add(run.info.run_id)
    return run.info.run_id


def _quote(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


def supersede(uri: str, experiment: str, variant: str, seed: int, current: str, profile: str | None = None) -> list[str]:
    """End every other parent run of (variant, seed) in the experiment, of the same profile (a smoke rerun leaves
    the default profile's runs current): RUNNING ones (a killed job) and their RUNNING stage runs become KILLED;
    all are tagged current=false and superseded_by=<current>."""
    client = _client(uri)
    query = f"tags.stage = 'run' and tags.variant = {_quote(variant)} and tags.seed = {_quote(str(seed))}"
    if profile:
        query += f" and tags.profile = {_quote(profile)}"
    old = [r for r in _retry(client.search_runs, [experiment], filter_string=query, max_results=1000)
           if r.info.run_id != current and r.data.tags.get("current") != "false"]
    for r in old:
        if r.info.status == "RUNNING":
            children = _retry(client.search_runs, [experiment],
                              filter_string=f"tags.`mlflow.parentRunId` = {_quote(r.info.run_id)}", max_results=100)
            for child in children:
                if child.info.status == "RUNNING":
                    set_run_status(uri, child.info.run_id, "KILLED")
            set_run_status(uri, r.info.run_id, "KILLED")
        set_tags(uri, r.info.run_id, {"current": "false", "superseded_by": current})
    return [r.info.run_id for r in old]


def supersede_stage(uri: str, experiment: str, stage: str, current: str) -> list[str]:
    """End every other current run of a parent-less stage (prepare) in the experiment: a RUNNING one (its job was
    killed) becomes KILLED; all are tagged current=false and superseded_by=<current>."""
    client = _client(uri)
    query = f"tags.stage = {_quote(stage)}"
    old = [r for r in _retry(client.search_runs, [experiment], filter_string=query, max_results=1000)
           if r.info.run_id != current and r.data.tags.get("current") != "false"
           and not r.data.tags.get("mlflow.parentRunId")]
    for r in old:
        if r.info.status == "RUNNING":
            set_run_status(uri, r.info.run_id, "KILLED")
        set_tags(uri, r.info.run_id, {"current": "false", "superseded_by": current})
    return [r.info.run_id for r in old]


def parent_exists(uri: str, run_id: str | None) -> bool:
    if not run_id:
        return False
    if run_id in _RUNS_MADE_HERE:  # the train stage of this same job created it
        return True
    try:
        _retry(_client(uri).get_run, run_id)
        return True
    except Exception:
        return False


def set_run_status(uri: str, run_id: str, status: str) -> None:
    _retry(_client(uri).set_terminated, run_id, status=status)


@contextlib.contextmanager
def stage_run(
    uri: str,
    *,
    paper: str,
    stage: str,
    tags: Mapping[str, str],
    parent_id: str | None = None,
    run_name: str | None = None,
    finish_parent: bool = False,
) -> Iterator[StageRun]:
    """A nested run for one stage; FAILED (with its parent) if the block raises, else FINISHED."""
    client = _client(uri)
    exp = experiment_id(uri, paper)
    all_tags = {**tags, "paper": paper, "stage": stage}
    if parent_id:
        all_tags["mlflow.parentRunId"] = parent_id
    if run_name is None:  # "train dcmha mha seed0": says what it is in the UI's run list
        run_name = " ".join([stage, paper] + ([tags["variant"], f"seed{tags['seed']}"]
                                              if tags.get("variant") not in (None, "data") and "seed" in tags else []))
    if parent_id is None:  # a stage without a (variant, seed) parent (prepare): one current run per paper and stage
        all_tags["current"] = "true"
    run = _retry(client.create_run, exp, run_name=run_name, tags=all_tags)
    if parent_id is None:
        supersede_stage(uri, exp, stage, run.info.run_id)
    live = StageRun(uri=uri, run_id=run.info.run_id, parent_id=parent_id)
    try:
        yield live
    except BaseException as err:
        # SIGTERM (Snakemake cancelling the job, Ctrl-C of the workflow) arrives as Terminated (cli.py): KILLED
        status = "KILLED" if isinstance(err, (KeyboardInterrupt, SystemExit)) else "FAILED"
        with contextlib.suppress(Exception):
            live.flush()
            _retry(client.set_tag, live.run_id, "error", f"{type(err).__name__}: {err}"[:5000])
            set_run_status(uri, live.run_id, status)
            if parent_id:
                set_run_status(uri, parent_id, status)
        raise
    live.flush()
    set_run_status(uri, live.run_id, "FINISHED")
    if parent_id and finish_parent:
        set_run_status(uri, parent_id, "FINISHED")


class NullStageRun:
    """Stand-in when tracking is switched off (benchmarks measure the overhead against it)."""

    run_id = parent_id = None
    seconds_logging = 0.0

    def log(self, step: int, **metrics: float) -> None: ...
    def log_final(self, metrics: Mapping[str, float], on_parent: bool = True) -> None: ...
    def log_params(self, params: Mapping[str, Any], also_parent: bool = False) -> None: ...
    def log_artifact(self, path: str | Path) -> None: ...
    def set_tag(self, key: str, value: str) -> None: ...
    def set_parent_tag(self, key: str, value: str) -> None: ...
    def set_parent_tags(self, tags: Mapping[str, str]) -> None: ...
    def flush(self) -> None: ...
