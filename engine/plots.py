"""Figures as data: a method returns a small plot spec; the GUI draws it, the CLI exports it.

A spec is plain JSON::

    {"kind": "plot", "title": str, "xlabel": str, "ylabel": str, "logx": bool, "logy": bool,
     "series": [{"name": str, "x": [...], "y": [...], "style": "line"|"scatter"|"step"}],
     "hlines": [{"y": float, "name": str}], "provenance": {...}}

``export_figure`` renders one to PNG, SVG or PDF with matplotlib (engine side only).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

MAX_POINTS_PER_SERIES = 4000
EXPORT_FORMATS = ("png", "svg", "pdf")


def series(name: str, x: Sequence[float], y: Sequence[float], style: str = "line") -> dict:
    """One curve, thinned to at most MAX_POINTS_PER_SERIES points so specs stay small."""
    x_arr, y_arr = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x_arr.shape != y_arr.shape:
        raise ValueError(f"series {name!r}: x has {x_arr.size} points, y has {y_arr.size}")
    if x_arr.size > MAX_POINTS_PER_SERIES:
        keep = np.unique(np.linspace(0, x_arr.size - 1, MAX_POINTS_PER_SERIES).astype(int))
        x_arr, y_arr = x_arr[keep], y_arr[keep]
    return {"name": name, "x": _finite_list(x_arr), "y": _finite_list(y_arr), "style": style}


def plot(
    title: str,
    curves: list[dict],
    xlabel: str = "",
    ylabel: str = "",
    logx: bool = False,
    logy: bool = False,
    hlines: list[dict] | None = None,
) -> dict:
    return {"kind": "plot", "title": title, "xlabel": xlabel, "ylabel": ylabel, "logx": logx,
            "logy": logy, "series": curves, "hlines": hlines or []}


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
    for curve in spec.get("series", []):
        x = np.array([np.nan if v is None else v for v in curve["x"]], dtype=float)
        y = np.array([np.nan if v is None else v for v in curve["y"]], dtype=float)
        if curve.get("style") == "scatter":
            axes.scatter(x, y, s=6, label=curve["name"])
        elif curve.get("style") == "step":
            axes.step(x, y, where="post", label=curve["name"])
        else:
            axes.plot(x, y, label=curve["name"], linewidth=1.2)
    for line in spec.get("hlines", []):
        axes.axhline(line["y"], linestyle="--", color="grey", linewidth=1, label=line.get("name"))
    axes.set_title(spec.get("title", ""))
    axes.set_xlabel(spec.get("xlabel", ""))
    axes.set_ylabel(spec.get("ylabel", ""))
    if spec.get("logx"):
        axes.set_xscale("log")
    if spec.get("logy"):
        axes.set_yscale("log")
    if spec.get("series"):
        axes.legend(fontsize=8)
    figure.tight_layout()
    metadata = _figure_metadata(fmt, provenance or spec.get("provenance") or {})
    write_atomic(target, lambda handle: figure.savefig(handle, format=fmt, metadata=metadata))
    return target


def _figure_metadata(fmt: str, provenance: dict[str, Any]) -> dict[str, str]:
    """Each backend accepts different keys; provenance goes where its readers look."""
    import json

    text = json.dumps(provenance, sort_keys=True, default=str)
    if fmt == "png":
        return {"Software": "Studio", "Description": text}
    if fmt == "pdf":
        return {"Creator": "Studio", "Subject": text}
    return {"Creator": "Studio", "Description": text}
