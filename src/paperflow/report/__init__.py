"""The claims report: reports/claims.csv, reports/claims.md, reports/index.html, reports/figures/."""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import polars as pl

from ..artifacts import save_json, save_text, write_atomic
from ..config import Settings
from ..registry import get_paper
from . import costs, figures
from .claims import claims_frame, claims_rows

VERDICT_COLOR = {"reproduced": "#1a7f37", "inconclusive": "#9a6700", "not reproduced": "#cf222e", "not testable": "#6e7781"}
ROLE_TITLES = (("headline", "Headline"), ("secondary", "Secondary claims (Holm-adjusted within the paper)"),
               ("control", "Controls and diagnostics"), ("fact", "Facts (deterministic quantities, no verdict)"))


def build_report(root: Path, settings: Settings, out: Path, tracking_uri: str | None = None) -> Path:
    results = root / "results"
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    all_rows: list[dict[str, Any]] = []
    sections = []
    registrations = _registrations(root)
    for pid in settings.papers:
        spec = get_paper(pid)
        table = read_metrics(results / pid / "metrics.csv")
        made_by = _made_by(root, settings, pid, table)
        rows = claims_rows(spec, made_by["cfg"], table, made_by["profile"])
        for r in rows:
            r["registration"] = registrations.get(pid, "NOT PRE-REGISTERED") if r["role"] == "headline" else ""
            if made_by["problem"] and r["role"] != "fact":
                r["verdict"], r["reason"] = "not testable", made_by["problem"]
            elif made_by["note"]:
                r["reason"] += f"; {made_by['note']}"
        all_rows.extend(rows)
        figs = []
        curve = figures.learning_curves(results, pid, spec.variants, settings.seeds(pid), fig_dir / f"{pid}_curves.png")
        if curve:
            figs.append(curve)
        comps = list(spec.comparisons(made_by["cfg"]))
        if spec.figure == "layer_profile":
            level = next((c.level for c in comps if c.level), None)
            if level and (f := figures.layer_profile_figure(table, pid, level, fig_dir / f"{pid}_layers.png")):
                figs.append(f)
        if spec.tradeoff and (f := figures.tradeoff_figure(table, pid, *spec.tradeoff, fig_dir / f"{pid}_tradeoff.png")):
            figs.append(f)
        lead = next((c for c in comps if c.role == "headline"), comps[0] if comps else None)
        if lead and (f := figures.compression_figure(table, pid, lead.metric, fig_dir / f"{pid}_compression.png")):
            figs.append(f)
        sections.append((spec, rows, figs, _timing(table)))
    frame = claims_frame(all_rows)
    write_atomic(out / "claims.csv", lambda p: frame.write_csv(p))
    for spec, rows, _figs, _t in sections:  # DVC metrics: `dvc metrics diff`, `dvc exp show` columns
        save_json(paper_metrics(rows), out / "metrics" / f"{spec.id}.json")
    # every paper's latest run of this profile in this workspace, not only the papers of this run: the projection
    # to the whole registry (issue 27) needs them all
    cost = costs.latest_costs([root], profile=settings.profile)
    cost_md = costs.cost_lines(cost, costs.projection(cost)) if cost else []
    save_text(_markdown(sections, settings, cost_md), out / "claims.md")
    index = save_text(_html(sections, settings, out, cost_md), out / "index.html")
    if tracking_uri:
        _track(tracking_uri, settings, out)
    return index


def read_metrics(path: Path) -> pl.DataFrame:
    """results/<paper>/metrics.csv with its text columns read as text (a hex config hash like "15111e069324" would
    otherwise parse as a float)."""
    return pl.read_csv(path, schema_overrides={"paper": pl.Utf8, "variant": pl.Utf8, "profile": pl.Utf8, "config_hash": pl.Utf8})


def _made_by(root: Path, settings: Settings, pid: str, table: pl.DataFrame) -> dict[str, Any]:
    """Which profile and settings made a paper's results (metrics.csv's profile/config_hash columns), and the
    config to judge them with: the claim settings of the profile that made them, never this report's (a smoke
    table judged with default margins and texts is wrong). Mixed profiles in one table are refused; results made
    with other settings than the current ones are marked."""
    out: dict[str, Any] = {"profile": settings.profile, "cfg": settings.config(pid), "problem": "", "note": ""}
    if "profile" not in table.columns:
        out["note"] = "results carry no profile (made before profiles were recorded)"
        return out
    profiles = sorted(set(table["profile"].drop_nulls().to_list()))
    if len(profiles) > 1:
        out["problem"] = f"results mix profiles {profiles}: rerun the paper under one profile"
        return out
    made = profiles[0] if profiles else settings.profile
    if made != settings.profile:
        from .. import config

        other = config.load(root / "params.yaml", profile=made, only=[pid])
        out.update(profile=made, cfg=other.config(pid), note=f"results made under profile {made!r}")
        seeds = other.seeds(pid)
    else:
        seeds = settings.seeds(pid)
    from ..stages import config_hash

    hashes = set(table["config_hash"].drop_nulls().to_list()) if "config_hash" in table.columns else set()
    if hashes and hashes != {config_hash(out["cfg"], seeds)}:
        out["note"] = (out["note"] + "; " if out["note"] else "") + "results made with other settings than params.yaml's current ones"
    return out


def _registrations(root: Path) -> dict[str, str]:
    """{paper: "registered <date>; amended <date>: <reason>"} from preregistration.lock, flagging a headline whose
    code no longer matches its registered hash."""
    from .. import prereg

    lock = prereg.read_lock(root / prereg.LOCK_NAME)
    try:
        hashes = prereg.current_hashes(root / "params.yaml")
    except Exception as err:  # noqa: BLE001 - the report must still be written; the line says why
        return {pid: prereg.registration_line(e) + f" (hash not checked: {err})" for pid, e in lock.get("papers", {}).items()}
    return {pid: prereg.registration_line(lock.get("papers", {}).get(pid), h["hash"]) for pid, h in hashes.items()}


def paper_metrics(rows: list[dict]) -> dict:
    """The small per-paper file DVC declares as metrics (`dvc exp show` columns): per headline its verdict, as a
    word (an unlabelled 1/0/-1 meant nothing in `exp show`), the paired delta with its interval, and the seeds.
    Nothing else, so that `dvc exp show --only-changed` fits a screen (README "DVC")."""
    def numbers(r: dict) -> dict:
        out = {"verdict": r["verdict"]}
        out.update({k: (None if isinstance(r[k], float) and math.isnan(r[k]) else r[k])
                    for k in ("delta", "ci_low", "ci_high", "n_seeds")})
        return out

    heads = [r for r in rows if r["role"] == "headline"]
    return {"headline": numbers(heads[0])} if len(heads) == 1 else {f"headline{i + 1}": numbers(r) for i, r in enumerate(heads)}


def _timing(table: pl.DataFrame) -> dict[str, float]:
    return {c: float(table[c].sum()) for c in table.columns if c.startswith("time/") and table[c].dtype.is_numeric()}


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "n/a"
        return f"{x:.4g}"
    return str(x)


def _mean_sd(mean: float, sd: float, n: int) -> str:
    """mean ± sd over seeds; with one seed there is no spread to show (not "± 0")."""
    return f"{_fmt(mean)} ± {_fmt(sd)}" if n and n > 1 else f"{_fmt(mean)} (1 seed)"


def _headline_verdict(r: dict) -> str:
    """The verdict, with why when the row could not be judged (the reader should not have to scroll)."""
    return r["verdict"] + (f" ({r['reason']})" if r["verdict"] == "not testable" else "")


def _interval(r: dict) -> str:
    return f"{_fmt(r['delta'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"


def _value(r: dict) -> str:
    """A fact's value: the method's mean, and the baseline's with their ratio when there is one."""
    text = _fmt(r["method_mean"])
    if r["baseline"]:
        text += f" vs {_fmt(r['baseline_mean'])} (ratio {_fmt(r['ratio'])})"
    return text


def _what(r: dict) -> str:
    extra = {"close": f", within {_fmt(r['margin'])} x baseline", "matches": f", target {_fmt(r['target'])} ± {_fmt(r['tolerance'])}"}
    return f"{r['metric']} ({r['better']} is better{extra.get(r['kind'], '')})"


HEADLINE_INTRO = (
    "One line per paper: the abstract's claim, its verdict, the paired delta (method - baseline) with its 95% "
    "interval over seeds, the number of seeds, `mde` (the smallest paired effect these seeds could detect) and "
    "`fidelity` (how we know the method: official code, paper text, or our reconstruction). Secondary rows, "
    "controls and facts follow in each paper's section."
)


COST_INTRO = ("What each paper's jobs cost in its latest run of this profile in this workspace (Snakemake benchmark "
              "files: summed wall time and CPU time of its jobs, peak memory of one job; job/CPU near 1 for a one-thread "
              "job on an idle machine, higher where jobs waited for CPUs). The projection scales the mean per paper to "
              "the whole registry; `python benchmarks/bench_costs.py --check 4h` fails when it exceeds the budget.")


def _markdown(sections, settings: Settings, cost_md: list[str]) -> str:
    lines = [
        "# paperflow claims report",
        "",
        f"Profile `{settings.profile}`{_profile_mix(sections, settings)}. Verdicts come from paired differences over seeds with a 95% t interval "
        "(reproduced / inconclusive / not reproduced; not testable when a precondition fails); secondary rows are "
        "Holm-adjusted within each paper; facts carry values, not verdicts; nothing is hard-coded.",
        "",
        "## Headline claims",
        "",
        HEADLINE_INTRO,
        "",
        "| paper | headline | verdict | delta [95% CI] | n | mde | mechanism (measured in these runs) | registration | fidelity |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for spec, rows, _figs, _timing in sections:
        for r in (r for r in rows if r["role"] == "headline"):
            lines.append(f"| [{spec.id}](#{spec.id}) | {r['comparison']} | **{_cell(_headline_verdict(r))}** | {_interval(r)} | {r['n_seeds']} "
                         f"| {_fmt(r['mde'])} | {_cell(r['mechanism'])} | {_cell(r['registration'])} | {r['fidelity']} |")
    lines.append("")
    if cost_md:
        lines += ["## Cost per paper", "", COST_INTRO, ""] + cost_md + [""]
    for spec, rows, _figs, timing in sections:
        lines += [f"## {spec.id}: {spec.title}", "", f"**Claim:** {spec.claim}", "",
                  f"**Seeds:** {len(settings.seeds(spec.id))}; **fidelity:** {spec.fidelity or 'n/a'}", "",
                  f"**Data:** {spec.data}", ""]
        if spec.substitutions:
            lines += [f"**Substitutions:** {spec.substitutions}", ""]
        if spec.compression:
            lines += [f"**Compression stage:** {spec.compression}", ""]
        for role, title in ROLE_TITLES:
            chosen = [r for r in rows if r["role"] == role]
            if not chosen:
                continue
            lines += [f"### {title}", ""]
            if role == "fact":
                lines += ["| fact | metric | value | n |", "|---|---|---|---|"]
                lines += [f"| {r['comparison']} | {r['metric']} | {_value(r)} | {r['n_seeds']} |" for r in chosen]
            else:
                lines += ["| comparison | metric | method (mean ± sd) | baseline (mean ± sd) | delta [95% CI] | n | mde | verdict |",
                          "|---|---|---|---|---|---|---|---|"]
                for r in chosen:
                    lines.append(
                        f"| {r['comparison']} | {_what(r)} | {_mean_sd(r['method_mean'], r['method_std'], r['n_seeds'])} "
                        f"| {_mean_sd(r['baseline_mean'], r['baseline_std'], r['n_seeds'])} | {_interval(r)} | {r['n_seeds']} "
                        f"| {_fmt(r['mde'])} | **{r['verdict']}** |")
                lines += [""] + [f"- {r['comparison']}: {r['reason']}" + (f" Mechanism: {r['mechanism']}." if r["mechanism"] else "")
                                 + (f" Refuted if: {r['refuted_if']}." if r["refuted_if"] else "")
                                 + (f" Pre-registration: {r['registration']}." if r["registration"] else "") for r in chosen]
            lines.append("")
        if timing:
            lines += ["Time spent (s, all jobs): " + ", ".join(f"{k[5:]} {v:.1f}" for k, v in sorted(timing.items())), ""]
    return "\n".join(lines)


def _profile_mix(sections, settings: Settings) -> str:
    """" (smoke results: a, b)" when some papers' results were made under another profile than the report's."""
    other: dict[str, list[str]] = {}
    for spec, rows, _f, _t in sections:
        prof = rows[0]["profile"] if rows else settings.profile
        if prof != settings.profile:
            other.setdefault(prof, []).append(spec.id)
    return "".join(f" (results made under profile `{p}`: {', '.join(ids)})" for p, ids in sorted(other.items()))


def _cell(text: str) -> str:
    return (text or "none declared").replace("|", "/").replace("\n", " ")


def _html(sections, settings: Settings, out: Path, cost_md: list[str]) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>paperflow report</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1f2328}"
        "table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #d0d7de;padding:.3em .5em}"
        "th{background:#f6f8fa}.v{font-weight:600;color:#fff;padding:.1em .4em;border-radius:4px}"
        "img{max-width:100%;margin:.3em 0}.note{color:#59636e;font-size:.9em}</style></head><body>",
        f"<h1>paperflow claims report</h1><p class='note'>Profile <b>{e(settings.profile)}</b>{e(_profile_mix(sections, settings))}. "
        "Each verdict is computed from paired per-seed differences with a 95% Student-t interval; secondary rows are "
        "Holm-adjusted within each paper; a failed precondition gives <i>not testable</i>; facts carry values, not verdicts. "
        "Tables: <a href='claims.csv'>claims.csv</a>, <a href='claims.md'>claims.md</a>.</p>",
        f"<h2 id='headlines'>Headline claims</h2><p class='note'>{e(HEADLINE_INTRO)}</p>",
        "<table><tr><th>paper</th><th>headline</th><th>verdict</th><th>delta [95% CI]</th><th>n</th><th>mde</th>"
        "<th>mechanism (measured in these runs)</th><th>registration</th><th>fidelity</th></tr>",
    ]
    for spec, rows, _f, _t in sections:
        for r in (r for r in rows if r["role"] == "headline"):
            parts.append(f"<tr><td><a href='#{e(spec.id)}'>{e(spec.id)}</a></td><td>{e(r['comparison'])}</td>"
                         f"<td>{_badge(r['verdict'])}" + (f"<div class='note'>{e(r['reason'])}</div>" if r["verdict"] == "not testable" else "")
                         + f"</td><td>{e(_interval(r))}</td><td>{r['n_seeds']}</td>"
                         f"<td>{_fmt(r['mde'])}</td><td class='note'>{e(_cell(r['mechanism']))}</td>"
                         f"<td class='note'>{e(r['registration'])}</td><td>{e(r['fidelity'])}</td></tr>")
    parts.append("</table>")
    if cost_md:
        parts.append(f"<h2 id='costs'>Cost per paper</h2><p class='note'>{e(COST_INTRO)}</p><table>")
        for line in (ln for ln in cost_md if ln.startswith("| ") and not ln.startswith("|---")):
            cells = [c.strip() for c in line.strip("|").split("|")]
            tag = "th" if line is cost_md[0] else "td"
            parts.append("<tr>" + "".join(f"<{tag}>{e(c)}</{tag}>" for c in cells) + "</tr>")
        parts.append(f"</table><p>{e(cost_md[-1])}</p>")
    # One row per paper: what was used instead of the paper's data/model/scale (the substitutions column).
    parts.append("<h2>Data and substitutions</h2><table><tr><th>paper</th><th>data</th><th>substitutions</th>"
                 "<th>compression stage</th></tr>")
    for spec, _r, _f, _t in sections:
        parts.append(f"<tr><td><a href='#{e(spec.id)}'>{e(spec.id)}</a></td><td>{e(spec.data)}</td>"
                     f"<td>{e(spec.substitutions or 'none')}</td><td>{e(spec.compression or 'none')}</td></tr>")
    parts.append("</table>")
    for spec, rows, figs, timing in sections:
        parts += [
            f"<h2 id='{e(spec.id)}'>{e(spec.id)}: {e(spec.title)}</h2>",
            f"<p><b>Claim:</b> {e(spec.claim)}</p><p><b>Seeds:</b> {len(settings.seeds(spec.id))}; "
            f"<b>fidelity:</b> {e(spec.fidelity or 'n/a')}</p><p><b>Data:</b> {e(spec.data)}</p>",
        ]
        if spec.substitutions:
            parts.append(f"<p><b>Substitutions:</b> {e(spec.substitutions)}</p>")
        if spec.compression:
            parts.append(f"<p><b>Compression stage:</b> {e(spec.compression)}</p>")
        for role, title in ROLE_TITLES:
            chosen = [r for r in rows if r["role"] == role]
            if not chosen:
                continue
            parts.append(f"<h3>{e(title)}</h3>")
            if role == "fact":
                parts.append("<table><tr><th>fact</th><th>metric</th><th>value</th><th>n</th></tr>")
                parts += [f"<tr><td>{e(r['comparison'])}</td><td>{e(r['metric'])}</td><td>{e(_value(r))}</td>"
                          f"<td>{r['n_seeds']}</td></tr>" for r in chosen]
                parts.append("</table>")
                continue
            parts.append("<table><tr><th>comparison</th><th>metric</th><th>method</th><th>baseline</th><th>delta [95% CI]</th>"
                         "<th>n</th><th>mde</th><th>compressed (method / baseline)</th><th>verdict</th></tr>")
            for r in chosen:
                parts.append(
                    f"<tr><td>{e(r['comparison'])}</td><td>{e(_what(r))}</td>"
                    f"<td>{_mean_sd(r['method_mean'], r['method_std'], r['n_seeds'])}</td>"
                    f"<td>{_mean_sd(r['baseline_mean'], r['baseline_std'], r['n_seeds'])}</td>"
                    f"<td>{e(_interval(r))}</td><td>{r['n_seeds']}</td><td>{_fmt(r['mde'])}</td>"
                    f"<td>@{e(str(r['compressed_level']))}: {_fmt(r['compressed_method_mean'])} / {_fmt(r['compressed_baseline_mean'])}</td>"
                    f"<td>{_badge(r['verdict'])}<div class='note'>{e(r['reason'])}"
                    + (f"<br>mechanism: {e(r['mechanism'])}" if r["mechanism"] else "")
                    + (f"<br>refuted if: {e(r['refuted_if'])}" if r["refuted_if"] else "")
                    + (f"<br>pre-registration: {e(r['registration'])}" if r["registration"] else "") + "</div></td></tr>"
                )
            parts.append("</table>")
        for f in figs:
            parts.append(f"<img src='{e(str(Path(f).relative_to(out)))}' alt='{e(Path(f).stem)}'>")
        if timing:
            parts.append("<p class='note'>Time spent (s, all jobs): " + ", ".join(f"{e(k[5:])} {v:.1f}" for k, v in sorted(timing.items())) + "</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _badge(verdict: str) -> str:
    return f"<span class='v' style='background:{VERDICT_COLOR.get(verdict, '#59636e')}'>{html.escape(verdict)}</span>"


def _track(uri: str, settings: Settings, out: Path) -> None:
    from .. import tracking

    with tracking.stage_run(uri, paper="report", stage="report", tags={"profile": settings.profile}, run_name=f"report__{settings.profile}") as run:
        for name in ("claims.csv", "claims.md", "index.html"):
            run.log_artifact(out / name)
