"""Figures as data: a method returns a small plot spec; the GUI draws it, the CLI exports it.

A spec is plain JSON::

    {"kind": "plot", "title": str, "xlabel": str, "ylabel": str, "logx": bool, "logy": bool,
     "series": [{"name": str, "x": [...], "y": [...], "style": "line"|"scatter"|"step"|"bar",
                 "lo": [...], "hi": [...]}],          # lo/hi: optional interval per point
     "hlines": [{"y": float, "name": str}], "xticks": [[x, "label"], ...], "provenance": {...}}

An interval is drawn as error bars on bars and points and as a shaded band around a line.
Bars of several series at the same x stand side by side. A heat map is its own kind::

    {"kind": "heatmap", "title", "xlabel", "ylabel", "zlabel": str, "z": [[row], ...],
     "x": [column centres] | None, "y": [row centres] | None, "xlabels": [...] | None,
     "ylabels": [...] | None, "marks": [[row, col], ...], "colormap": str, "symmetric": bool,
     "series": [curves drawn over it in x/y coordinates]}

``export_figure`` renders one to PNG, SVG or PDF with matplotlib (engine side only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

MAX_POINTS_PER_SERIES = 4000
PLOT_KINDS = ("plot", "heatmap")  # specs the GUI draws and export_figure renders
EXPORT_FORMATS = ("png", "svg", "pdf")


STYLES = ("line", "scatter", "step", "bar")


def series(name: str, x: Sequence[float], y: Sequence[float], style: str = "line",
           interval: tuple[Sequence[float], Sequence[float]] | None = None) -> dict:
    """One curve, thinned to at most MAX_POINTS_PER_SERIES points so specs stay small.

    ``interval`` = (lower, upper) bounds per point (e.g. a bootstrap confidence interval)."""
    if style not in STYLES:
        raise ValueError(f"series {name!r}: unknown style {style!r}; choose one of {STYLES}")
    arrays = [np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()]
    if interval is not None:
        arrays += [np.asarray(bound, dtype=float).ravel() for bound in interval]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"series {name!r}: x, y and interval lengths differ "
                         f"({', '.join(str(a.size) for a in arrays)})")
    if arrays[0].size > MAX_POINTS_PER_SERIES:
        keep = np.unique(np.linspace(0, arrays[0].size - 1, MAX_POINTS_PER_SERIES).astype(int))
        arrays = [a[keep] for a in arrays]
    curve = {"name": name, "x": _finite_list(arrays[0]), "y": _finite_list(arrays[1]),
             "style": style}
    if interval is not None:
        curve["lo"], curve["hi"] = _finite_list(arrays[2]), _finite_list(arrays[3])
    return curve


def plot(
    title: str,
    curves: list[dict],
    xlabel: str = "",
    ylabel: str = "",
    logx: bool = False,
    logy: bool = False,
    hlines: list[dict] | None = None,
    xticks: Sequence[tuple[float, str]] | None = None,
) -> dict:
    """A figure of curves; ``xticks`` names positions on a categorical x axis."""
    spec = {"kind": "plot", "title": title, "xlabel": xlabel, "ylabel": ylabel, "logx": logx,
            "logy": logy, "series": curves, "hlines": hlines or []}
    if xticks:
        spec["xticks"] = [[float(x), str(label)] for x, label in xticks]
    return spec


def heatmap(
    title: str,
    z: np.ndarray | Sequence[Sequence[float]],
    x: Sequence[float] | None = None,
    y: Sequence[float] | None = None,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    xlabel: str = "",
    ylabel: str = "",
    zlabel: str = "",
    marks: Sequence[tuple[int, int]] | None = None,
    colormap: str = "viridis",
    symmetric: bool = False,
    curves: list[dict] | None = None,
) -> dict:
    """A matrix as colours: rows go up the y axis. ``x``/``y`` give numeric column/row centres
    (evenly spaced) so ``curves`` (e.g. a theoretical boundary) can be drawn over it;
    ``xlabels``/``ylabels`` name categorical columns/rows instead; ``marks`` outline cells;
    ``symmetric`` centres the colour scale on zero (for signed values)."""
    matrix = np.asarray(z, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"heatmap {title!r}: z must be 2-D, got shape {matrix.shape}")
    rows, cols = matrix.shape
    for name, values, size in (("x", x, cols), ("xlabels", xlabels, cols), ("y", y, rows),
                               ("ylabels", ylabels, rows)):
        if values is not None and len(values) != size:
            raise ValueError(f"heatmap {title!r}: {name} has {len(values)} entries for {size}")
    return {"kind": "heatmap", "title": title, "xlabel": xlabel, "ylabel": ylabel,
            "zlabel": zlabel, "z": [_finite_list(row) for row in matrix],
            "x": None if x is None else _finite_list(np.asarray(x, dtype=float)),
            "y": None if y is None else _finite_list(np.asarray(y, dtype=float)),
            "xlabels": None if xlabels is None else [str(v) for v in xlabels],
            "ylabels": None if ylabels is None else [str(v) for v in ylabels],
            "marks": [[int(r), int(c)] for r, c in (marks or [])], "colormap": colormap,
            "symmetric": bool(symmetric), "series": curves or []}


def heatmap_extent(spec: dict) -> tuple[float, float, float, float]:
    """(x0, x1, y0, y1): the outer edges of the cells, in the map's x/y coordinates."""
    rows, cols = len(spec["z"]), len(spec["z"][0]) if spec["z"] else 0

    def edges(centres: list | None, count: int) -> tuple[float, float]:
        if not centres or count < 2:
            return (-0.5, count - 0.5) if not centres else (centres[0] - 0.5, centres[0] + 0.5)
        step = (centres[-1] - centres[0]) / (count - 1)
        return centres[0] - step / 2, centres[-1] + step / 2

    return (*edges(spec.get("x"), cols), *edges(spec.get("y"), rows))


def bar_layout(spec: dict) -> dict[int, tuple[float, float]]:
    """Series index -> (x offset, width) so bars of several series at one x stand side by side."""
    bars = [i for i, curve in enumerate(spec.get("series", [])) if curve.get("style") == "bar"]
    xs = sorted({v for i in bars for v in spec["series"][i]["x"] if v is not None})
    spacing = float(np.min(np.diff(xs))) if len(xs) > 1 else 1.0
    width = 0.8 * spacing / max(len(bars), 1)
    return {i: ((k - (len(bars) - 1) / 2) * width, width) for k, i in enumerate(bars)}


def _finite_list(values: np.ndarray) -> list[float | None]:
    """JSON has no NaN: gaps become None (drawn as breaks)."""
    return [float(v) if np.isfinite(v) else None for v in values]


def export_figure(spec: dict, path: str | os.PathLike, provenance: dict[str, Any] | None = None
                  ) -> Path:
    """Render ``spec`` to ``path`` (format from the suffix) with provenance in its metadata."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from engine.atomic import write_atomic

    target = Path(path)
    fmt = target.suffix.lstrip(".").lower()
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"{target}: cannot export to {fmt!r}; choose one of {EXPORT_FORMATS}")
    figure = Figure(figsize=(6.4, 4.2), dpi=150)
    axes = figure.subplots()
    if spec.get("kind") == "heatmap":
        _draw_heatmap(figure, axes, spec)
    _draw_curves(axes, spec)
    for line in spec.get("hlines", []):
        axes.axhline(line["y"], linestyle="--", color="grey", linewidth=1, label=line.get("name"))
    if spec.get("xticks"):
        axes.set_xticks([x for x, _ in spec["xticks"]], [label for _, label in spec["xticks"]],
                        rotation=30 if len(spec["xticks"]) > 4 else 0, ha="right")
    axes.set_title(spec.get("title", ""))
    axes.set_xlabel(spec.get("xlabel", ""))
    axes.set_ylabel(spec.get("ylabel", ""))
    if spec.get("logx"):
        axes.set_xscale("log")
    if spec.get("logy"):
        axes.set_yscale("log")
    if any(curve.get("name") for curve in spec.get("series", [])):
        axes.legend(fontsize=8)
    figure.tight_layout()
    metadata = _figure_metadata(fmt, provenance or spec.get("provenance") or {})
    write_atomic(target, lambda handle: figure.savefig(handle, format=fmt, metadata=metadata))
    return target


def _floats(values: list | None) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values or []], dtype=float)


def _draw_curves(axes: Any, spec: dict) -> None:
    bars = bar_layout(spec)
    for index, curve in enumerate(spec.get("series", [])):
        x, y = _floats(curve["x"]), _floats(curve["y"])
        style, name = curve.get("style"), curve["name"]
        lo, hi = _floats(curve.get("lo")), _floats(curve.get("hi"))
        error = None if "lo" not in curve else np.abs(np.vstack([y - lo, hi - y]))
        if style == "bar":
            offset, width = bars[index]
            axes.bar(x + offset, y, width=width, yerr=error, capsize=3, label=name)
        elif style == "scatter":
            axes.errorbar(x, y, yerr=error, fmt="o", markersize=3, label=name)
        elif style == "step":
            axes.step(x, y, where="post", label=name)
        else:
            (line,) = axes.plot(x, y, label=name, linewidth=1.2)
            if error is not None:
                axes.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)


def _draw_heatmap(figure: Any, axes: Any, spec: dict) -> None:
    z = np.array([_floats(row) for row in spec["z"]])
    limit = float(np.nanmax(np.abs(z))) if spec.get("symmetric") and np.isfinite(z).any() else None
    extent = heatmap_extent(spec)
    image = axes.imshow(z, origin="lower", aspect="auto", extent=extent,
                        cmap=spec.get("colormap") or "viridis",
                        vmin=-limit if limit else None, vmax=limit)
    figure.colorbar(image, ax=axes, label=spec.get("zlabel", ""))
    dx = (extent[1] - extent[0]) / max(z.shape[1], 1)
    dy = (extent[3] - extent[2]) / max(z.shape[0], 1)
    if spec.get("xlabels"):
        axes.set_xticks([extent[0] + (i + 0.5) * dx for i in range(z.shape[1])],
                        spec["xlabels"], rotation=45, ha="right", fontsize=7)
    if spec.get("ylabels"):
        axes.set_yticks([extent[2] + (i + 0.5) * dy for i in range(z.shape[0])],
                        spec["ylabels"], fontsize=7)
    from matplotlib.patches import Rectangle

    for row, col in spec.get("marks", []):
        axes.add_patch(Rectangle((extent[0] + col * dx, extent[2] + row * dy), dx, dy,
                                 fill=False, edgecolor="red", linewidth=1.5))


def _figure_metadata(fmt: str, provenance: dict[str, Any]) -> dict[str, str]:
    """Each backend accepts different keys; provenance goes where its readers look."""
    import json

    text = json.dumps(provenance, sort_keys=True, default=str)
    if fmt == "png":
        return {"Software": "Studio", "Description": text}
    if fmt == "pdf":
        return {"Creator": "Studio", "Subject": text}
    return {"Creator": "Studio", "Description": text}
