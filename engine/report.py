"""The reproduction report: what each paper's latest reproduction found, in one place.

``studio-engine report [SLUG ...] --out DIR`` (and the engine's ``report`` request) takes, for
each paper, the latest finished, non-exploratory ``<slug>.reproduce`` run of the workspace (a
smoke run only when it is the only kind there is, and marked so; exploratory runs are listed,
never reported as the verdict) and writes:

- ``DIR/report.json``: per paper the run, profile, settings, seeds, threads, whether the run is
  deterministic, and each criterion's estimate, interval and verdict. ``studio-engine verify``
  reruns from it (``engine.verify``).
- ``DIR/index.html``: one page, no scripts or remote files, one section per paper: the claim
  tested, spec and profile, the criteria table, a forest plot, the run's figures, the sanity
  checks apart, hand-written findings (``docs/findings/<slug>.md``) and provenance with the
  exact command to rerun. Pictures are PNG files beside it.
- ``DIR/report.pdf``: the same pages drawn with matplotlib; optionally the same as Markdown
  (``docs/reproductions.md`` is made this way: ``make report``).

Torch-free: the GUI's engine builds it on request, and it runs where torch is absent.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.atomic import strict_jsonable, write_bytes_atomic
from engine.workspace import Workspace

REPORT_FORMAT = "studio-reproduction-report"
REPORT_VERSION = 1
INDEX_NAME, PDF_NAME, JSON_NAME = "index.html", "report.pdf", "report.json"
MAX_FIGURES = 12  # per paper; the rest stay in the run folder (the report says how many)
FINDINGS_DIR = Path(__file__).resolve().parent.parent / "docs" / "findings"
NOT_RUN = "not run"
VERDICT_COLOURS = {"PASS": "#1e8449", "FAIL": "#c0392b", "INCONCLUSIVE": "#d68910"}
_THREADS = re.compile(r"(\d+) thread")


class ReportError(Exception):
    """A report that cannot be made or read: the message names the paper or file."""


@dataclass
class PaperReport:
    """One paper's section: the run reported (None: not run) and what was passed over."""

    slug: str
    title: str
    run: dict | None = None  # the workspace's record of the run
    claim: dict | None = None
    recorded: dict = field(default_factory=dict)  # the run's params.json
    exploratory: list[str] = field(default_factory=list)  # run ids never reported as verdict
    findings: Path | None = None
    figures: list[dict] = field(default_factory=list)  # plot/PNG artifacts, in run order

    @property
    def reported(self) -> bool:
        return self.claim is not None


# -- which runs ---------------------------------------------------------------------------------

def reproducible_papers() -> dict[str, str]:
    """slug -> title of every paper with a ``<slug>.reproduce`` method that users see."""
    from engine.developer import listed
    from engine.registry import all_methods

    return {spec.id.removesuffix(".reproduce"): spec.title
            for spec in all_methods().values()
            if spec.id.endswith(".reproduce") and listed({"paper": spec.paper})}


def _known_slugs(slugs: Sequence[str]) -> dict[str, str]:
    """The papers asked for (all users see when none), refusing an unknown slug."""
    from engine.registry import all_methods

    papers = reproducible_papers()
    if not slugs:
        return papers
    methods = all_methods()
    chosen = {}
    for slug in slugs:
        spec = methods.get(f"{slug}.reproduce")
        if spec is None:
            raise ReportError(f"unknown paper {slug!r}: papers with a reproduction are "
                              + ", ".join(sorted(papers)))
        chosen[slug] = spec.title
    return chosen


def collect(workspace: Workspace, slugs: Sequence[str] = (),
            findings_dir: Path | None = FINDINGS_DIR) -> list[PaperReport]:
    """Each paper's reported run, chosen as the module docstring says."""
    papers = []
    for slug, title in _known_slugs(slugs).items():
        paper = PaperReport(slug, title)
        candidates: list[tuple[dict, dict]] = []
        for run in workspace.runs(f"{slug}.reproduce", "succeeded"):  # newest first
            claim = _claim_of(workspace, run["id"])
            if claim is None:
                continue
            if claim.get("exploratory"):
                paper.exploratory.append(run["id"])
            else:
                candidates.append((run, claim))
        full = [pair for pair in candidates if not pair[1].get("smoke")]
        chosen = (full or candidates)[:1]
        if chosen:
            paper.run, paper.claim = chosen[0]
            paper.recorded = _read_json(workspace.run_dir(paper.run["id"]) / "params.json")
            paper.figures = [a for a in paper.run["artifacts"] if _is_figure(a)]
        if findings_dir is not None and (findings_dir / f"{slug}.md").is_file():
            paper.findings = findings_dir / f"{slug}.md"
        papers.append(paper)
    return papers


def _claim_of(workspace: Workspace, run_id: str) -> dict | None:
    result = _read_json(workspace.run_dir(run_id) / "result.json")
    claim = (result.get("outputs") or {}).get("claim")
    return claim if isinstance(claim, dict) and isinstance(claim.get("criteria"), list) else None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_figure(artifact: dict) -> bool:
    return artifact["kind"] == "plot" or (artifact["kind"] == "file"
                                          and artifact["path"].lower().endswith(".png"))


# -- the machine-readable record ----------------------------------------------------------------

def threads_of(recorded: dict) -> int | None:
    """Torch threads per worker, from the executor line the run recorded."""
    found = _THREADS.search(str(recorded.get("executor", "")))
    return int(found.group(1)) if found else None


def is_deterministic(claim: dict, recorded: dict) -> bool:
    """One thread on the local executor gives the same numbers on a rerun; more threads (the
    order of parallel sums) or a cluster may not. A claim may say ``deterministic: false``."""
    return (claim.get("deterministic", True) is not False and threads_of(recorded) == 1
            and recorded.get("cluster", "local") == "local")


def rerun_command(slug: str, claim: dict, recorded: dict) -> str:
    """The command that runs this reproduction again at its profile, settings and seed: the
    settings that differ from the profile's current ones (or from a changed profile) are
    named with ``--set``."""
    profile = _profile_of(claim)
    words = ["studio-engine", "reproduce", slug, "--profile", profile,
             "--seed", str(recorded.get("seed", 0))]
    threads = threads_of(recorded)
    if threads:
        words += ["--threads", str(threads)]
    current = _current_settings(slug, profile)
    for key, value in (claim.get("settings") or {}).items():
        if current is None or current.get(key) != value:
            words += ["--set", f"{key}={json.dumps(value)}"]
    return shlex.join(words)


def _profile_of(claim: dict) -> str:
    """The profile a claim ran; one written before profiles existed says only ``smoke``."""
    return claim.get("profile") or ("smoke" if claim.get("smoke") else "cpu")


def _current_settings(slug: str, profile: str) -> dict | None:
    from engine.api import ReproduceParams, profile_settings
    from engine.registry import all_methods

    spec = all_methods().get(f"{slug}.reproduce")
    if spec is None or not issubclass(spec.params, ReproduceParams):
        return None
    return profile_settings(spec.params, profile)


def paper_record(paper: PaperReport, pictures: dict[str, Any]) -> dict:
    """``report.json``'s entry for a paper (``pictures``: the PNGs drawn for it)."""
    entry: dict[str, Any] = {"slug": paper.slug, "title": paper.title,
                             "status": "reported" if paper.reported else NOT_RUN,
                             "exploratory_runs": paper.exploratory,
                             "findings": _shown_path(paper.findings)}
    if not paper.reported:
        return entry
    claim, recorded, run = paper.claim, paper.recorded, paper.run
    return entry | {
        "run_id": run["id"], "method": run["method"],
        "statement": claim.get("statement", ""), "spec": claim.get("spec", "v1"),
        "verdict": claim_verdict(claim), "profile": _profile_of(claim),
        "smoke": bool(claim.get("smoke")), "settings": claim.get("settings") or {},
        "seed": run["seed"], "seeds": claim.get("seeds", []),
        "threads": threads_of(recorded), "cluster": run.get("cluster", "local"),
        "deterministic": is_deterministic(claim, recorded), "wall_s": claim.get("wall_s"),
        "criteria": claim["criteria"], "sanity": claim.get("sanity") or [],
        "notes": claim.get("notes", ""),
        "provenance": {key: recorded.get(key) for key in (
            "git", "code_version", "packages", "python", "host", "executor", "created")},
        "command": rerun_command(paper.slug, claim, recorded),
        "forest": pictures.get("forest"), "figures": pictures.get("figures", []),
        "figures_left_out": pictures.get("left_out", 0),
    }


def _shown_path(path: Path | None) -> str | None:
    """A findings file relative to the checkout when it is in it (a report committed to the
    repository names no one's home folder)."""
    if path is None:
        return None
    try:
        return path.resolve().relative_to(FINDINGS_DIR.parent.parent).as_posix()
    except ValueError:
        return str(path)


def claim_verdict(claim: dict) -> str:
    """The claim's verdict; one written before the schema has only ``passed``."""
    return claim.get("verdict") or ("PASS" if claim.get("passed") else "FAIL")


def flatten(criteria: Iterable[dict], depth: int = 0) -> list[tuple[int, dict]]:
    """Each criterion with its depth, a combined one's parts right after it."""
    rows = []
    for item in criteria:
        rows.append((depth, item))
        rows += flatten(item.get("parts") or [], depth + 1)
    return rows


# -- building ---------------------------------------------------------------------------------

def build_report(workspace: Workspace, out: str | Path, slugs: Sequence[str] = (),
                 markdown: str | Path | None = None, findings_dir: Path | None = FINDINGS_DIR,
                 max_figures: int = MAX_FIGURES) -> dict[str, str]:
    """Write report.json, index.html, report.pdf and the PNGs into ``out`` (and the Markdown
    form to ``markdown``); returns their paths."""
    from engine import report_draw

    out = Path(out).expanduser().resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"{out}: cannot write the report there ({exc.strerror})") from None
    papers = collect(workspace, slugs, findings_dir)
    records = []
    for paper in papers:
        pictures = report_draw.draw_pictures(workspace, paper, out, max_figures)
        records.append(paper_record(paper, pictures))
    report = {"format": REPORT_FORMAT, "version": REPORT_VERSION,
              "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "workspace": str(workspace.root), "papers": records}
    findings = {p.slug: p.findings.read_text(encoding="utf-8") for p in papers if p.findings}
    paths = {"path": str(out / INDEX_NAME), "pdf": str(out / PDF_NAME),
             "json": str(out / JSON_NAME)}
    _write_text(out / JSON_NAME, json.dumps(strict_jsonable(report), indent=2,
                                            allow_nan=False) + "\n")
    _write_text(out / INDEX_NAME, render_html(report, findings))
    report_draw.write_pdf(report, findings, out, out / PDF_NAME)
    if markdown is not None:
        markdown = Path(markdown).expanduser().resolve()
        _write_text(markdown, render_markdown(report, findings, out, markdown.parent))
        paths["markdown"] = str(markdown)
    return paths


def read_report(folder: str | Path) -> dict:
    """A report folder's ``report.json``, checked enough to rerun from."""
    path = Path(folder).expanduser() / JSON_NAME
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
        raise ReportError(f"{path}: not a Studio reproduction report (no \"format\": "
                          f"\"{REPORT_FORMAT}\")")
    if not isinstance(report.get("papers"), list):
        raise ReportError(f"{path}: \"papers\" is not a list")
    return report


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, text.encode("utf-8"))


# -- words shared by the HTML, Markdown and PDF forms ---------------------------------------------

def fmt(value: Any) -> str:
    """A number in four significant digits; None (NaN, unbounded) as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}"


def interval_text(item: dict) -> str:
    interval = item.get("interval")
    if not interval:
        return ""
    lo, hi = interval
    text = f"[{'−∞' if lo is None else fmt(lo)}, {'∞' if hi is None else fmt(hi)}]"
    level = item.get("level", 0.95)
    return text if level == 0.95 else f"{text} at level {level:.4g}"


def rule_text(item: dict) -> str:
    if item.get("parts"):
        return f"{item.get('aggregate', 'all')} of {len(item['parts'])} parts"
    rule = item.get("rule") or {}
    if not rule:
        return ""
    censored = " (censored)" if rule.get("censored") else ""
    if rule.get("band") is None:
        return f"{'>' if rule['kind'] == 'above' else '<'} {fmt(rule['threshold'])}{censored}"
    lo, hi = rule["band"]
    band = f"[{'−∞' if lo is None else fmt(lo)}, {'∞' if hi is None else fmt(hi)}]"
    return f"{'in' if rule['kind'] == 'inside_band' else 'outside'} {band}{censored}"


def row_verdict(item: dict) -> str:
    return item.get("verdict") or ("PASS" if item.get("passed") else "FAIL")


def marks(entry: dict) -> str:
    """What the reader must know before the verdict: smoke sizes, a nondeterministic run."""
    words = []
    if entry.get("smoke"):
        words.append("SMOKE: sizes too small for a verdict (no other run of this paper)")
    if not entry.get("deterministic", True):
        words.append("nondeterministic (threads or a cluster): a rerun is checked against "
                     "the intervals")
    return "; ".join(words)


def settings_text(settings: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in settings.items()) or "(the defaults)"


def provenance_rows(entry: dict) -> list[tuple[str, str]]:
    prov = entry.get("provenance") or {}
    packages = ", ".join(f"{k} {v}" for k, v in (prov.get("packages") or {}).items())
    return [("run", f"{entry['run_id']} ({entry['method']}, {prov.get('created') or '?'})"),
            ("commit", f"{prov.get('git') or '?'} (studio {prov.get('code_version') or '?'})"),
            ("seed", f"{entry['seed']} (seeds in the claim: {entry.get('seeds')})"),
            ("threads", f"{entry.get('threads') or '?'} on {entry.get('cluster')}; "
                        f"{'deterministic' if entry.get('deterministic') else 'nondeterministic'}"),
            ("host", f"{prov.get('host') or '?'}, Python {prov.get('python') or '?'}, "
                     f"{prov.get('executor') or '?'}"),
            ("packages", packages or "?"),
            ("wall time", f"{fmt(entry.get('wall_s'))} s")]


# -- HTML ---------------------------------------------------------------------------------------

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1180px; margin: 2em auto;
       padding: 0 1em; color: #1c2833; }
h1 { margin-bottom: 0.2em; } h2 { border-top: 2px solid #d5d8dc; padding-top: 1em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 13.5px; }
th, td { border: 1px solid #d5d8dc; padding: 4px 7px; vertical-align: top; text-align: left; }
th { background: #f4f6f7; white-space: nowrap; } td.num { text-align: right; white-space: nowrap;
     font-variant-numeric: tabular-nums; }
.verdict { font-weight: bold; padding: 1px 8px; border-radius: 4px; color: white;
           white-space: nowrap; }
.mark { color: #9a5b00; font-weight: bold; } .muted { color: #5d6d7e; }
blockquote { border-left: 4px solid #aab7b8; margin: 0.5em 0; padding: 0.2em 1em;
             background: #f8f9f9; }
pre { background: #f4f6f7; padding: 0.6em; overflow-x: auto; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr));
           gap: 10px; } .figures img { width: 100%; border: 1px solid #eaeded; }
img.forest { max-width: 100%; } p.notes { white-space: pre-wrap; font-size: 13.5px; }
.findings { border: 1px dashed #aab7b8; padding: 0 1em; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _badge(verdict: str) -> str:
    colour = VERDICT_COLOURS.get(verdict, "#7f8c8d")
    return f'<span class="verdict" style="background:{colour}">{_e(verdict)}</span>'


def render_html(report: dict, findings: dict[str, str]) -> str:
    """The report as one HTML page (styles inline, no scripts, pictures beside it)."""
    papers = report["papers"]
    summary = "".join(
        f'<tr><td><a href="#{_e(p["slug"])}">{_e(p["slug"])}</a></td><td>{_e(p["title"])}</td>'
        + (f'<td>{_badge(p["verdict"])}{" (smoke)" if p["smoke"] else ""}</td>'
           f'<td>{_e(p["spec"])}</td><td>{_e(p["profile"])}'
           f'</td><td>{_e(p["run_id"])}</td></tr>'
           if p["status"] != NOT_RUN else '<td colspan="4" class="muted">not run</td></tr>')
        for p in papers)
    sections = "".join(_html_section(p, findings.get(p["slug"])) for p in papers)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>Studio reproductions</title><style>{_STYLE}</style></head><body>"
            f"<h1>Reproductions</h1><p class=\"muted\">Generated {_e(report['generated'])} "
            f"from the workspace {_e(report['workspace'])} by <code>studio-engine report"
            f"</code>: each paper's latest finished, non-exploratory reproduction. "
            f"<code>studio-engine verify</code> on this folder reruns them.</p>"
            f"<table><tr><th>paper</th><th>title</th><th>verdict</th><th>spec</th>"
            f"<th>profile</th><th>run</th></tr>{summary}</table>{sections}</body></html>\n")


def _html_section(entry: dict, findings: str | None) -> str:
    parts = [f'<h2 id="{_e(entry["slug"])}">{_e(entry["slug"])} — {_e(entry["title"])}</h2>']
    if entry["status"] == NOT_RUN:
        parts.append(f"<p><b>not run</b>: no finished, non-exploratory reproduction in this "
                     f"workspace. Run <code>studio-engine reproduce {_e(entry['slug'])}</code>."
                     "</p>")
    else:
        parts.append(_html_run(entry))
    if findings:
        parts.append(_html_findings(findings))
    if entry.get("status") != NOT_RUN:
        provenance = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>"
                             for k, v in provenance_rows(entry))
        parts.append(f"<h3>Provenance</h3><table>{provenance}</table><p>Rerun:</p>"
                     f"<pre>{_e(entry['command'])}</pre>")
    if entry["exploratory_runs"]:
        parts.append(f'<p class="muted">Exploratory runs (settings other than a profile\'s; '
                     f'never the verdict): {_e(", ".join(entry["exploratory_runs"]))}</p>')
    return "".join(parts)


def _html_run(entry: dict) -> str:
    """A reported run: verdict, claim, settings, criteria, forest, notes, sanity, figures."""
    parts = [f"<p>Verdict {_badge(entry['verdict'])} · spec {_e(entry['spec'])} · profile "
             f"<b>{_e(entry['profile'])}</b> · run <code>{_e(entry['run_id'])}</code></p>"]
    if marks(entry):
        parts.append(f'<p class="mark">{_e(marks(entry))}</p>')
    rows = "".join(_html_row(depth, item) for depth, item in flatten(entry["criteria"]))
    parts.append(f"<p><b>Claim tested</b></p><blockquote>{_e(entry['statement'])}</blockquote>"
                 f"<p><b>Profile settings</b>: <code>{_e(settings_text(entry['settings']))}"
                 f"</code></p><table><tr><th>criterion</th><th>quote</th><th>estimate</th>"
                 f"<th>95% interval</th><th>method</th><th>rule</th><th>verdict</th>"
                 f"<th>decides with</th></tr>{rows}</table>")
    if entry.get("forest"):
        parts.append(f'<img class="forest" src="{_e(entry["forest"])}" alt="forest plot">')
    if entry.get("notes"):
        parts.append(f'<h3>Notes of the run</h3><p class="notes">{_e(entry["notes"])}</p>')
    sanity = "".join(
        f'<li><span style="color:{VERDICT_COLOURS["PASS" if s.get("passed") else "FAIL"]}">'
        f'{"ok" if s.get("passed") else "FAILED"}</span> {_e(s.get("name", ""))}'
        f'{": " + _e(s["detail"]) if s.get("detail") else ""}</li>' for s in entry["sanity"])
    parts.append("<h3>Sanity checks (never counted)</h3>"
                 + (f"<ul>{sanity}</ul>" if sanity else '<p class="muted">none</p>'))
    if entry["figures"]:
        figures = "".join(f'<figure><img src="{_e(name)}" alt="{_e(name)}"></figure>'
                          for name in entry["figures"])
        parts.append(f'<h3>Figures</h3><div class="figures">{figures}</div>')
    if entry.get("figures_left_out"):
        parts.append(f'<p class="muted">{entry["figures_left_out"]} more figure(s) in the run '
                     "folder.</p>")
    return "".join(parts)


def _html_row(depth: int, item: dict) -> str:
    verdict = row_verdict(item)
    indent = f' style="padding-left:{7 + 18 * depth}px"' if depth else ""
    return (f"<tr><td{indent}>{_e(item.get('name', ''))}</td><td>{_e(item.get('quote', ''))}"
            f'</td><td class="num">{"" if item.get("parts") else _e(fmt(item.get("estimate")))}'
            f'</td><td class="num">{_e(interval_text(item))}</td><td>{_e(item.get("method", ""))}'
            f"</td><td>{_e(rule_text(item))}</td><td>{_badge(verdict)}</td>"
            f"<td>{_e(item.get('decides_with', ''))}</td></tr>")


def _html_findings(text: str) -> str:
    """Hand-written Markdown as HTML (raw HTML in it is shown as text, never run)."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # still readable without the renderer
        body = f"<pre>{_e(text)}</pre>"
    else:
        body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return f'<h3>Findings (written by hand)</h3><div class="findings">{body}</div>'


# -- Markdown ---------------------------------------------------------------------------------

def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict, findings: dict[str, str], out: Path, base: Path) -> str:
    """The report as Markdown; pictures linked relative to ``base`` (the file's folder)."""
    import os

    def link(name: str) -> str:
        return Path(os.path.relpath(out / name, base)).as_posix()

    lines = ["# Reproductions", "",
             f"Generated {report['generated']} by `studio-engine report` (`make report`) from "
             "each paper's latest finished, non-exploratory reproduction in the workspace; do "
             "not edit by hand: findings written by hand live in `docs/findings/<slug>.md`. "
             f"The HTML and PDF forms are in `{link(INDEX_NAME)}` and `{link(PDF_NAME)}`; "
             f"`studio-engine verify {_cwd_relative(out)}` reruns every run.", "",
             "| paper | verdict | spec | profile | run |", "|---|---|---|---|---|"]
    for p in report["papers"]:
        if p["status"] == NOT_RUN:
            lines.append(f"| [{p['slug']}](#{p['slug']}) | not run | | | |")
        else:
            smoke = " (smoke)" if p["smoke"] else ""
            lines.append(f"| [{p['slug']}](#{p['slug']}) | **{p['verdict']}**{smoke} | "
                         f"{p['spec']} | {p['profile']} | `{p['run_id']}` |")
    for p in report["papers"]:
        lines += ["", f'<a id="{p["slug"]}"></a>', "", f"## {p['slug']} — {p['title']}", ""]
        if p["status"] == NOT_RUN:
            lines.append(f"**not run**: no finished, non-exploratory reproduction in the "
                         f"workspace (`studio-engine reproduce {p['slug']}`).")
        else:
            lines += _markdown_section(p, link)
        if p["exploratory_runs"]:
            lines += ["", "Exploratory runs (never the verdict): "
                      + ", ".join(f"`{r}`" for r in p["exploratory_runs"])]
        if p["slug"] in findings:
            lines += ["", "### Findings (written by hand)", "", findings[p["slug"]].strip()]
    return "\n".join(lines) + "\n"


def _cwd_relative(path: Path) -> str:
    """``path`` as typed from here when it is below the current folder, else absolute."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


def _markdown_section(p: dict, link: Any) -> list[str]:
    lines = [f"Verdict **{p['verdict']}**, spec {p['spec']}, profile **{p['profile']}**, run "
             f"`{p['run_id']}`."]
    if marks(p):
        lines += ["", f"**{marks(p)}**"]
    lines += ["", f"> {_cell(p['statement'])}", "",
              f"Profile settings: `{settings_text(p['settings'])}`", "",
              "| criterion | quote | estimate | 95% interval | method | rule | verdict | "
              "decides with |", "|---|---|---|---|---|---|---|---|"]
    for depth, item in flatten(p["criteria"]):
        estimate = "" if item.get("parts") else fmt(item.get("estimate"))
        lines.append(f"| {'&nbsp;&nbsp;' * 2 * depth}{_cell(item.get('name', ''))} | "
                     f"{_cell(item.get('quote', ''))} | {estimate} | "
                     f"{_cell(interval_text(item))} | {_cell(item.get('method', ''))} | "
                     f"{_cell(rule_text(item))} | **{row_verdict(item)}** | "
                     f"{_cell(item.get('decides_with', ''))} |")
    if p.get("forest"):
        lines += ["", f"![forest plot of {p['slug']}]({link(p['forest'])})"]
    if p.get("notes"):
        lines += ["", "Notes of the run:", ""] + [f"> {line}" if line else ">"
                                                  for line in p["notes"].splitlines()]
    lines += ["", "Sanity checks (never counted): " + ("; ".join(
        f"{'ok' if s.get('passed') else 'FAILED'} {s.get('name', '')}"
        + (f" ({s['detail']})" if s.get("detail") else "") for s in p["sanity"]) or "none")]
    if p["figures"]:
        lines += ["", "Figures: " + " ".join(f"[{Path(n).stem}]({link(n)})"
                                            for n in p["figures"])]
    lines += ["", "Provenance:", ""] + [f"- {k}: {_cell(v)}" for k, v in provenance_rows(p)]
    lines += ["", "```", p["command"], "```"]
    return lines
