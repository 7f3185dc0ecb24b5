"""The report's pictures and its PDF, drawn with matplotlib (Agg, no pyplot state: safe in the
engine's request thread) and no torch.

- A forest plot per paper: one row per criterion, each with its own axis (criteria have their
  own units): the threshold (dashed) or band (shaded), the interval (a whisker; an arrow where
  it is unbounded) and the estimate (a dot) in the verdict's colour; a combined criterion is a
  row of text above its parts.
- The run's figures: plot specs rendered by ``engine.plots.export_figure`` (with the run's
  provenance in each PNG), PNG files copied.
- ``report.pdf``: the HTML's content as A4 pages (``PdfPages``): text pages, the forest plot,
  the figures six to a page.
"""

from __future__ import annotations

import math
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

from engine.report import (
    NOT_RUN,
    VERDICT_COLOURS,
    PaperReport,
    flatten,
    fmt,
    interval_text,
    marks,
    provenance_rows,
    row_verdict,
    rule_text,
    settings_text,
)
from engine.workspace import Workspace

PAGE_IN = (8.27, 11.69)  # A4 portrait
MARGIN_IN = 0.6
THRESHOLD_COLOUR, BAND_COLOUR = "#34495e", "#d6eaf8"
FIGURES_PER_PAGE = 6
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _figure(width_in: float, height_in: float) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), dpi=110)


def draw_pictures(workspace: Workspace, paper: PaperReport, out: Path,
                  max_figures: int) -> dict[str, Any]:
    """The forest plot and the run's figures as PNGs in ``out``; their names."""
    if not paper.reported:
        return {}
    from engine.atomic import write_atomic
    from engine.plots import PLOT_KINDS, export_figure
    from engine.provenance import run_entry

    forest_name = f"{paper.slug}-forest.png"
    figure = forest_figure(paper.claim["criteria"], paper.slug)
    write_atomic(out / forest_name, lambda handle: figure.savefig(handle, format="png"))
    run_dir = workspace.run_dir(paper.run["id"])
    provenance = {"runs": [run_entry(run_dir)], "report": "studio-engine report"}
    names: list[str] = []
    for artifact in paper.figures[:max_figures]:
        source = run_dir / artifact["path"]
        name = f"{paper.slug}-{len(names) + 1:02d}-{_UNSAFE.sub('_', artifact['name'])}.png"
        try:
            if artifact["kind"] == "plot":
                import json

                spec = json.loads(source.read_text(encoding="utf-8"))
                if not isinstance(spec, dict) or spec.get("kind") not in PLOT_KINDS:
                    continue
                export_figure(spec, out / name, provenance)
            else:
                shutil.copyfile(source, out / name)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a damaged artifact is left out of the report, not fatal to it
        names.append(name)
    return {"forest": forest_name, "figures": names,
            "left_out": max(len(paper.figures) - max_figures, 0)}


# -- the forest plot ----------------------------------------------------------------------------

def forest_figure(criteria: list[dict], title: str = "", width_in: float = 10.0) -> Any:
    """One row per criterion (parts indented under the criterion that combines them)."""
    rows = flatten(criteria)
    row_in = 0.55
    figure = _figure(width_in, 0.9 + row_in * max(len(rows), 1))
    figure.subplots_adjust(left=0.42, right=0.84, top=1 - 0.45 / figure.get_figheight(),
                           bottom=0.35 / figure.get_figheight(), hspace=0.9)
    if title:
        figure.suptitle(f"{title}: criteria (estimate, interval, threshold or band)",
                        fontsize=10, x=0.02, ha="left")
    axes_list = figure.subplots(max(len(rows), 1), 1, squeeze=False)[:, 0]
    if not rows:
        axes_list[0].set_axis_off()
        axes_list[0].text(0.5, 0.5, "no criteria (the verdict is INCONCLUSIVE)",
                          ha="center", va="center", transform=axes_list[0].transAxes)
    for axes, (depth, item) in zip(axes_list, rows, strict=False):
        _forest_row(axes, depth, item)
    return figure


def _forest_row(axes: Any, depth: int, item: dict) -> None:
    verdict = row_verdict(item)
    colour = VERDICT_COLOURS.get(verdict, "#7f8c8d")
    axes.text(-0.02, 0.5, _label(axes, depth, item.get("name", "")), transform=axes.transAxes,
              ha="right", va="center", fontsize=8, linespacing=1.1)
    axes.text(1.02, 0.62, verdict, transform=axes.transAxes, ha="left", va="center",
              fontsize=8, color=colour, fontweight="bold")
    if not item.get("parts"):
        axes.text(1.02, 0.05, fmt(item.get("estimate")), transform=axes.transAxes, ha="left",
                  va="center", fontsize=7, color="#5d6d7e")
    axes.set_yticks([])
    from matplotlib.ticker import FuncFormatter

    axes.xaxis.set_major_formatter(FuncFormatter(_tick))
    for side in ("left", "right", "top"):
        axes.spines[side].set_visible(False)
    axes.tick_params(axis="x", labelsize=7, length=2, pad=1)
    if item.get("parts"):
        axes.set_xticks([])
        axes.spines["bottom"].set_visible(False)
        axes.text(0.0, 0.5, rule_text(item), transform=axes.transAxes, va="center",
                  fontsize=8, color=colour, style="italic")
        return
    rule = item.get("rule") or {}
    estimate = _finite(item.get("estimate"))
    lo, hi = (_finite(v) for v in (item.get("interval") or [None, None]))
    threshold = _finite(rule.get("threshold"))
    band = [_finite(v) for v in rule["band"]] if rule.get("band") is not None else None
    left, right = _axis(estimate, lo, hi, threshold, band)
    axes.set_xlim(left, right)
    axes.set_ylim(-1, 1)
    if band is not None:
        axes.axvspan(left if band[0] is None else band[0], right if band[1] is None else band[1],
                     color=BAND_COLOUR, zorder=0)
    for value in [threshold] + (band or []):
        if value is not None:
            axes.axvline(value, color=THRESHOLD_COLOUR, linestyle="--", linewidth=1.2)
    if estimate is None and lo is None and hi is None:
        axes.text(0.5, 0.6, "no finite value", transform=axes.transAxes, ha="center",
                  va="center", fontsize=8, color=colour)
        return
    x_lo = left if lo is None else lo
    x_hi = right if hi is None else hi
    axes.plot([x_lo, x_hi], [0, 0], color=colour, linewidth=2.5, solid_capstyle="butt")
    for end, bounded, marker in ((x_lo, lo is not None, "<"), (x_hi, hi is not None, ">")):
        axes.plot([end], [0], marker="|" if bounded else marker, markersize=10 if bounded else 7,
                  color=colour, markeredgewidth=2)
    if estimate is not None:
        axes.plot([estimate], [0], marker="o", markersize=7, color=colour,
                  markeredgecolor="white", zorder=3)


def _label(axes: Any, depth: int, name: str) -> str:
    """The criterion's name in at most two lines that fit left of its axis (indented by its
    depth), shortened with an ellipsis beyond."""
    room_pt = axes.get_position().x0 * axes.figure.get_figwidth() * 72 - 12
    per_line = max(int(room_pt / (8 * 0.58)) - 2 * depth, 12)
    lines = textwrap.wrap(name, per_line)
    if len(lines) > 2:
        lines = [lines[0], textwrap.shorten(" ".join(lines[1:]), per_line, placeholder="…")]
    lines[0] = "› " * depth + lines[0]  # right-aligned: a part is marked, not indented
    return "\n".join(lines)


def _tick(value: float, _position: Any) -> str:
    return f"{value:.3g}"  # never an offset or multiplier line that would sit on the next row


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _axis(*values: Any) -> tuple[float, float]:
    points = [v for value in values for v in (value if isinstance(value, list) else [value])
              if v is not None]
    if not points:
        return -1.0, 1.0
    left, right = min(points), max(points)
    pad = 0.12 * (right - left) if right > left else max(abs(left) * 0.1, 0.5)
    return left - pad, right + pad


# -- the PDF ---------------------------------------------------------------------------------

class _Pages:
    """Lines of wrapped text laid down A4 pages, a new page when one is full."""

    def __init__(self, pdf: Any) -> None:
        self.pdf = pdf
        self.figure: Any = None
        self.y_in = 0.0

    def _room(self, height_in: float) -> None:
        if self.figure is None or self.y_in + height_in > PAGE_IN[1] - MARGIN_IN:
            self.flush()
            self.figure = _figure(*PAGE_IN)
            self.y_in = MARGIN_IN

    def text(self, text: str, size: float = 9, indent_in: float = 0.0, colour: str = "black",
             bold: bool = False, mono: bool = False, gap_in: float = 0.0) -> None:
        width_in = PAGE_IN[0] - 2 * MARGIN_IN - indent_in
        per_line = max(int(width_in * 72 / (size * (0.6 if mono or bold else 0.52))), 20)
        lines = []
        for paragraph in str(text).splitlines() or [""]:
            lines += textwrap.wrap(paragraph, per_line, break_long_words=True,
                                   replace_whitespace=False) or [""]
        line_in = size * 1.35 / 72
        self.y_in += gap_in
        for line in lines:
            self._room(line_in)
            self.figure.text((MARGIN_IN + indent_in) / PAGE_IN[0],
                             1 - (self.y_in + line_in * 0.8) / PAGE_IN[1], line, fontsize=size,
                             color=colour, fontweight="bold" if bold else "normal",
                             family="monospace" if mono else "sans-serif")
            self.y_in += line_in

    def flush(self) -> None:
        if self.figure is not None:
            self.pdf.savefig(self.figure)
            self.figure = None

    def whole_page(self, figure: Any) -> None:
        self.flush()
        self.pdf.savefig(figure)


def write_pdf(report: dict, findings: dict[str, str], out: Path, path: Path) -> None:
    """``report.pdf``: a summary page, then each paper's pages."""
    from matplotlib.backends.backend_pdf import PdfPages

    from engine.atomic import write_atomic

    def draw(handle: Any) -> None:
        with PdfPages(handle, metadata={"Title": "Studio reproductions",
                                        "Creator": "studio-engine report"}) as pdf:
            pages = _Pages(pdf)
            pages.text("Reproductions", size=18, bold=True)
            pages.text(f"Generated {report['generated']} from {report['workspace']}: each "
                       "paper's latest finished, non-exploratory reproduction.", size=9,
                       colour="#5d6d7e")
            for entry in report["papers"]:
                verdict = NOT_RUN if entry["status"] == NOT_RUN else entry["verdict"]
                extra = "" if entry["status"] == NOT_RUN else (
                    f"  (spec {entry['spec']}, profile {entry['profile']}, run "
                    f"{entry['run_id']})")
                pages.text(f"{entry['slug']}: {verdict}{extra}", size=10, gap_in=0.04,
                           colour=VERDICT_COLOURS.get(verdict, "#5d6d7e"))
            for entry in report["papers"]:
                _paper_pages(pages, entry, findings.get(entry["slug"]), out)
            pages.flush()

    write_atomic(path, draw)


def _paper_pages(pages: _Pages, entry: dict, findings: str | None, out: Path) -> None:
    if entry["status"] == NOT_RUN and not findings and not entry["exploratory_runs"]:
        return  # the summary page lists it as not run
    pages.flush()
    pages.text(f"{entry['slug']} — {entry['title']}", size=15, bold=True)
    if entry["status"] == NOT_RUN:
        pages.text("not run: no finished, non-exploratory reproduction in the workspace "
                   f"(studio-engine reproduce {entry['slug']}).", size=10, gap_in=0.1)
    else:
        verdict = entry["verdict"]
        pages.text(f"Verdict {verdict} · spec {entry['spec']} · profile {entry['profile']} · "
                   f"run {entry['run_id']}", size=11, bold=True,
                   colour=VERDICT_COLOURS.get(verdict, "black"), gap_in=0.05)
        if marks(entry):
            pages.text(marks(entry), size=9, colour="#9a5b00", bold=True)
        pages.text("Claim tested", size=10, bold=True, gap_in=0.12)
        pages.text(entry["statement"], size=9, indent_in=0.2)
        pages.text(f"Profile settings: {settings_text(entry['settings'])}", size=9, gap_in=0.08)
        pages.text("Criteria", size=10, bold=True, gap_in=0.12)
        for depth, item in flatten(entry["criteria"]):
            verdict = row_verdict(item)
            indent = 0.25 * depth
            pages.text(f"{item.get('name', '')}: {verdict}", size=9, bold=True, indent_in=indent,
                       colour=VERDICT_COLOURS.get(verdict, "black"), gap_in=0.06)
            if item.get("quote"):
                pages.text(f"“{item['quote']}”", size=8.5, indent_in=indent + 0.15)
            numbers = rule_text(item) if item.get("parts") else (
                f"estimate {fmt(item.get('estimate'))}, interval {interval_text(item)} "
                f"({item.get('method', '')}), rule {rule_text(item)}")
            pages.text(numbers, size=8.5, indent_in=indent + 0.15, colour="#34495e")
            if item.get("decides_with"):
                pages.text(f"would be decided by: {item['decides_with']}", size=8.5,
                           indent_in=indent + 0.15, colour="#9a5b00")
        if entry.get("notes"):
            pages.text("Notes of the run", size=10, bold=True, gap_in=0.12)
            pages.text(entry["notes"], size=8, indent_in=0.15)
        pages.text("Sanity checks (never counted)", size=10, bold=True, gap_in=0.12)
        if not entry["sanity"]:
            pages.text("none", size=8.5, indent_in=0.15)
        for check in entry["sanity"]:
            state = "ok" if check.get("passed") else "FAILED"
            detail = f": {check['detail']}" if check.get("detail") else ""
            pages.text(f"{state} {check.get('name', '')}{detail}", size=8.5, indent_in=0.15)
        pages.text("Provenance", size=10, bold=True, gap_in=0.12)
        for key, value in provenance_rows(entry):
            pages.text(f"{key}: {value}", size=8.5, indent_in=0.15)
        pages.text("Rerun:", size=9, gap_in=0.06)
        pages.text(entry["command"], size=8, mono=True, indent_in=0.15)
        if entry.get("figures_left_out"):
            pages.text(f"{entry['figures_left_out']} more figure(s) in the run folder.", size=8.5)
        pages.whole_page(forest_figure(entry["criteria"], entry["slug"], PAGE_IN[0]))
        _figure_pages(pages, [out / name for name in entry["figures"]], entry["slug"])
    if entry["exploratory_runs"]:
        pages.text("Exploratory runs (never the verdict): " + ", ".join(entry["exploratory_runs"]),
                   size=8.5, gap_in=0.1)
    if findings:
        pages.flush()
        pages.text(f"{entry['slug']}: findings (written by hand)", size=12, bold=True)
        pages.text(findings, size=8, mono=True, gap_in=0.08)


def _figure_pages(pages: _Pages, images: list[Path], slug: str) -> None:
    from matplotlib.image import imread

    for start in range(0, len(images), FIGURES_PER_PAGE):
        shown = images[start:start + FIGURES_PER_PAGE]
        rows = (len(shown) + 1) // 2
        figure = _figure(PAGE_IN[0], 0.5 + 2.9 * rows)  # a page as tall as its figures
        figure.suptitle(f"{slug}: the run's figures", fontsize=11, x=0.08, ha="left")
        grid = figure.subplots(rows, 2, squeeze=False)
        for index, axes in enumerate(grid.ravel()):
            axes.set_axis_off()
            if index < len(shown):
                axes.imshow(imread(shown[index]))
        figure.subplots_adjust(left=0.04, right=0.96, top=1 - 0.45 / figure.get_figheight(),
                               bottom=0.05 / figure.get_figheight(), hspace=0.05, wspace=0.05)
        pages.whole_page(figure)
