"""Pre-registration of headlines (DESIGN.md "Honesty", contract v3): `preregistration.lock` at the repo root.

For every registered paper the lock holds a hash of what decides its headline, the date it was first
registered, and every amendment (date, reason, the hash it moved to). What is hashed (`payload`):
  - the headline rows as the code builds them at the default profile: metric, direction, kind, margin,
    tolerance, target, stage/level, method and baseline, every gate (kind, variant, metric, thresholds,
    nested comparison) and refuted_if;
  - the paper's whole default-profile Config (seeds count included): sizes, steps, lr grids, the data and
    test-data seeds. A setting changed after results exist is an amendment, whatever it is.
`paperflow preregister` registers papers missing from the lock; `paperflow preregister --amend PAPER
"reason"` is the only way to move a registered hash; `paperflow preregister --check` (run by
tests/test_prereg.py, hence by CI) fails when the code and the lock disagree. The report prints each
headline's registration line (`registration_line`), so a reader sees which headlines changed after results.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

LOCK_NAME = "preregistration.lock"
ROOT = Path(__file__).resolve().parents[2]


class PreregError(RuntimeError):
    """The lock and the code disagree, or an amendment was asked for wrongly; the message says what to run."""


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float):
        return repr(obj)  # exact, and nan/inf are valid JSON strings
    return obj


def payload(spec: Any, cfg: Any, seeds: tuple[int, ...]) -> dict:
    """What decides the headline(s) of one paper (module docstring)."""
    heads = [c for c in spec.comparisons(cfg) if c.role == "headline"]
    return {"paper": spec.id, "headlines": _plain(heads), "config": _plain(cfg), "seeds": list(seeds)}


def digest(data: Mapping) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def current_hashes(params_path: Path | None = None) -> dict[str, dict]:
    """{paper: {"hash", "payload"}} for every registered paper at the default profile of params.yaml."""
    from . import config

    settings = config.load(params_path or ROOT / "params.yaml", profile="default", only=None)
    from .registry import get_paper

    out = {}
    for pid in settings.papers:
        data = payload(get_paper(pid), settings.config(pid), settings.seeds(pid))
        out[pid] = {"hash": digest(data), "payload": data}
    return out


def read_lock(path: Path | None = None) -> dict:
    path = path or ROOT / LOCK_NAME
    if not path.exists():
        return {"version": 1, "papers": {}}
    return json.loads(path.read_text())


def write_lock(lock: Mapping, path: Path | None = None) -> None:
    from .artifacts import save_text

    save_text(json.dumps(lock, indent=1, sort_keys=True) + "\n", path or ROOT / LOCK_NAME)


def problems(lock: Mapping, hashes: Mapping[str, Mapping]) -> list[str]:
    """Where the code and the lock disagree, one line each with the command that settles it."""
    out = []
    papers = lock.get("papers", {})
    for pid, cur in sorted(hashes.items()):
        entry = papers.get(pid)
        if entry is None:
            out.append(f"{pid}: not pre-registered; run `paperflow preregister {pid}` before its first default run")
        elif entry["hash"] != cur["hash"]:
            out.append(f"{pid}: what decides its headline changed since it was registered ({entry['hash']} -> "
                       f"{cur['hash']}); if results exist, run `paperflow preregister --amend {pid} \"<reason>\"`")
    for pid in sorted(set(papers) - set(hashes)):
        out.append(f"{pid}: in the lock but not registered in the code (remove it from {LOCK_NAME})")
    return out


def register(lock: dict, hashes: Mapping[str, Mapping], papers: list[str], note: str = "",
             today: str | None = None) -> list[str]:
    """Add papers missing from the lock (all missing ones when `papers` is empty); refuses a registered paper."""
    today = today or _dt.date.today().isoformat()
    entries = lock.setdefault("papers", {})
    wanted = papers or [p for p in sorted(hashes) if p not in entries]
    done = []
    for pid in wanted:
        if pid not in hashes:
            raise PreregError(f"{pid}: no such registered paper")
        if pid in entries:
            if entries[pid]["hash"] == hashes[pid]["hash"]:
                continue
            raise PreregError(f"{pid} is already registered ({entries[pid]['registered']}); a change is an amendment: "
                              f"paperflow preregister --amend {pid} \"<reason>\"")
        entries[pid] = {"hash": hashes[pid]["hash"], "registered": today, "note": note, "amendments": []}
        done.append(pid)
    return done


def amend(lock: dict, hashes: Mapping[str, Mapping], paper: str, reason: str, today: str | None = None) -> None:
    """Move a registered paper's hash to the code's, with a dated reason the report shows."""
    entries = lock.setdefault("papers", {})
    if paper not in entries:
        raise PreregError(f"{paper} is not registered yet: paperflow preregister {paper}")
    if len(reason.strip()) < 10:
        raise PreregError("an amendment needs a reason a reader can follow (what changed, why, and whether results existed)")
    if entries[paper]["hash"] == hashes[paper]["hash"]:
        raise PreregError(f"{paper}: the code matches the lock; nothing to amend")
    entries[paper]["amendments"].append({"date": today or _dt.date.today().isoformat(), "reason": reason.strip(),
                                         "hash": hashes[paper]["hash"], "from": entries[paper]["hash"]})
    entries[paper]["hash"] = hashes[paper]["hash"]


def registration_line(entry: Mapping | None, current_hash: str | None = None) -> str:
    """What the report prints beside a headline: registered <date> / amended <date>: <reason>."""
    if entry is None:
        return "NOT PRE-REGISTERED"
    text = f"registered {entry['registered']}" + (f" ({entry['note']})" if entry.get("note") else "")
    for a in entry.get("amendments", []):
        text += f"; amended {a['date']}: {a['reason']}"
    if current_hash is not None and current_hash != entry["hash"]:
        text += "; CHANGED SINCE ITS LAST REGISTRATION (not amended)"
    return text
