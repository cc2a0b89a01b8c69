"""A small MLflow client over the tracking server's REST API (urllib + json, no `import mlflow`).

Why: importing mlflow costs a workflow job ~2-4 s before its first stage (python -X importtime; the
largest import after torch), and every job of the DAG pays it. When the tracking URI is an http(s) server
(a team's server, or the loopback server the Snakefile starts: paperflow.tracking_server), jobs talk to it
with the handful of calls paperflow.tracking makes, through this client; the mlflow library is then only
imported by the server itself and by tools that read the store.

It implements exactly the MlflowClient methods paperflow.tracking uses, with the same names and the fields
tracking reads (run.info.run_id / status / artifact_uri, run.data.tags, experiment.experiment_id). Endpoints
are MLflow's stable REST API 2.0 (mlflow.org/docs/latest/api_reference/rest-api.html). Errors carry the
server's message, so tracking._retry recognises "database is locked" from a sqlite backend, and a server
that is down ("connection refused") is retried with backoff and then fails loudly.
"""
from __future__ import annotations

import json
import math
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

API = "/api/2.0/mlflow"
ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"


def _json_float(value: Any) -> float | str:
    """A metric value as MLflow's protobuf JSON reads it: non-finite values as the strings "NaN" / "Infinity" /
    "-Infinity" (json.dumps would write bare NaN, which is not JSON: the server then rejects the whole batch, and a
    variant's every metric went missing for one undefined one, e.g. slab's sla_share on a model without SLA)."""
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


class RestError(RuntimeError):
    """An MLflow server answered with an error (message = HTTP status + the server's JSON), or is unreachable."""

    def __init__(self, message: str, status: int | None = None, code: str = ""):
        super().__init__(message)
        self.status, self.code = status, code


@dataclass(frozen=True)
class Metric:
    """The fields of mlflow.entities.Metric that log_batch sends."""

    key: str
    value: float
    timestamp: int
    step: int


@dataclass(frozen=True)
class Param:
    key: str
    value: str


@dataclass
class RunInfo:
    run_id: str
    experiment_id: str
    status: str
    artifact_uri: str
    run_name: str = ""


@dataclass
class RunData:
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    info: RunInfo
    data: RunData


@dataclass
class Experiment:
    experiment_id: str
    name: str
    artifact_location: str


def _kv(items: Mapping[str, Any] | None) -> list[dict[str, str]]:
    return [{"key": str(k), "value": str(v)} for k, v in (items or {}).items()]


def _run(obj: Mapping[str, Any]) -> Run:
    info, data = obj.get("info", {}), obj.get("data", {})
    return Run(
        RunInfo(info["run_id"], str(info.get("experiment_id", "")), info.get("status", ""), info.get("artifact_uri", ""),
                info.get("run_name", "")),
        RunData(tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
                params={p["key"]: p.get("value", "") for p in data.get("params", [])},
                metrics={m["key"]: m.get("value") for m in data.get("metrics", [])}),
    )


class RestClient:
    """MlflowClient's subset used by paperflow.tracking, for an http(s) tracking URI."""

    def __init__(self, uri: str, timeout_s: float = 60.0):
        if not uri.startswith(("http://", "https://")):
            raise ValueError(f"RestClient needs an http(s) tracking URI, got {uri!r}")
        self.base = uri.rstrip("/")
        self.timeout_s = timeout_s

    # -- transport ---------------------------------------------------------------------------------
    def _request(self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]) -> bytes:
        req = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode("utf-8", "replace")
            try:
                code = json.loads(text).get("error_code", "")
            except ValueError:
                code = ""
            raise RestError(f"MLflow server {url}: HTTP {err.code} {text[:2000]}", err.code, code) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            # "connection refused" is in tracking._RETRYABLE: a restarting server is waited for, then this fails
            raise RestError(f"MLflow server {self.base} unreachable (connection refused?): {err}") from None

    def _call(self, method: str, endpoint: str, payload: Mapping[str, Any] | None = None) -> dict:
        url = f"{self.base}{API}/{endpoint}"
        if method == "GET":
            url += "?" + urllib.parse.urlencode(payload or {})
            raw = self._request("GET", url, None, {})
        else:
            raw = self._request(method, url, json.dumps(payload or {}).encode(), {"Content-Type": "application/json"})
        return json.loads(raw or b"{}")

    # -- experiments -------------------------------------------------------------------------------
    def get_experiment_by_name(self, name: str) -> Experiment | None:
        try:
            exp = self._call("GET", "experiments/get-by-name", {"experiment_name": name})["experiment"]
        except RestError as err:
            if err.code == "RESOURCE_DOES_NOT_EXIST" or err.status == 404:
                return None
            raise
        return Experiment(str(exp["experiment_id"]), exp["name"], exp.get("artifact_location", ""))

    def create_experiment(self, name: str, artifact_location: str | None = None, tags: Mapping[str, str] | None = None) -> str:
        payload: dict[str, Any] = {"name": name, "tags": _kv(tags)}
        if artifact_location:
            payload["artifact_location"] = artifact_location
        return str(self._call("POST", "experiments/create", payload)["experiment_id"])

    # -- runs --------------------------------------------------------------------------------------
    def create_run(self, experiment_id: str, run_name: str | None = None, tags: Mapping[str, str] | None = None) -> Run:
        payload = {"experiment_id": str(experiment_id), "start_time": int(time.time() * 1000), "tags": _kv(tags)}
        if run_name:
            payload["run_name"] = run_name
        return _run(self._call("POST", "runs/create", payload)["run"])

    def get_run(self, run_id: str) -> Run:
        return _run(self._call("GET", "runs/get", {"run_id": run_id})["run"])

    def log_batch(self, run_id: str, metrics: Sequence[Any] = (), params: Sequence[Any] = (), tags: Sequence[Any] = ()) -> None:
        payload = {
            "run_id": run_id,
            "metrics": [{"key": m.key, "value": _json_float(m.value), "timestamp": int(m.timestamp), "step": int(m.step)}
                        for m in metrics],
            "params": [{"key": p.key, "value": str(p.value)} for p in params],
            "tags": [{"key": t.key, "value": str(t.value)} for t in tags],
        }
        self._call("POST", "runs/log-batch", payload)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self._call("POST", "runs/set-tag", {"run_id": run_id, "key": key, "value": str(value)})

    def set_terminated(self, run_id: str, status: str = "FINISHED") -> None:
        self._call("POST", "runs/update", {"run_id": run_id, "status": status, "end_time": int(time.time() * 1000)})

    def search_runs(self, experiment_ids: Iterable[str], filter_string: str = "", max_results: int = 1000) -> list[Run]:
        runs: list[Run] = []
        token = None
        while len(runs) < max_results:
            payload: dict[str, Any] = {"experiment_ids": [str(e) for e in experiment_ids], "filter": filter_string,
                                       "max_results": min(1000, max_results - len(runs))}
            if token:
                payload["page_token"] = token
            page = self._call("POST", "runs/search", payload)
            runs += [_run(r) for r in page.get("runs", [])]
            token = page.get("next_page_token")
            if not token:
                break
        return runs

    # -- artifacts ---------------------------------------------------------------------------------
    def log_artifact(self, run_id: str, local_path: str) -> None:
        """Upload one file into the run's artifact root: a file:// root (a sqlite store's mlartifacts/ on this
        machine) is written directly; an mlflow-artifacts:/ root goes through the server's artifact proxy."""
        src = Path(local_path)
        root = self.get_run(run_id).info.artifact_uri
        if root.startswith("file://") or root.startswith("/"):
            # a file URI is percent-encoded (a checkout path with spaces holds "%20"): decode it, or the artifact
            # lands in a literal "%20" folder that list_artifacts never finds
            dest = Path(urllib.parse.unquote(urllib.parse.urlparse(root).path) if root.startswith("file://") else root)
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / src.name)
        elif root.startswith("mlflow-artifacts:"):
            path = urllib.parse.urlparse(root).path.lstrip("/")
            url = f"{self.base}{ARTIFACTS_API}/{urllib.parse.quote(path)}/{urllib.parse.quote(src.name)}"
            self._request("PUT", url, src.read_bytes(), {"Content-Type": "application/octet-stream"})
        else:
            raise RestError(f"log_artifact: artifact root {root!r} needs the mlflow library (unset the http "
                            "tracking URI or upload with mlflow.MlflowClient)")
