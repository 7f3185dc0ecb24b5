"""Figure export as an interactive request: the GUI asks, the engine renders with matplotlib.

The GUI never imports matplotlib for PDFs (see ARCHITECTURE.md, pitfalls); it sends
``request figure.export {spec, path, provenance}`` and gets ``{path}`` back.
"""

from __future__ import annotations

from engine.plots import export_figure


def _export(args: dict) -> dict:
    spec, path = args.get("spec"), args.get("path")
    if not isinstance(spec, dict) or spec.get("kind") != "plot":
        raise ValueError("figure.export needs a plot spec ({\"kind\": \"plot\", ...})")
    if not isinstance(path, str) or not path:
        raise ValueError("figure.export needs an output path")
    written = export_figure(spec, path, args.get("provenance") or {})
    return {"path": str(written)}


REQUESTS = {"figure.export": _export}
SPECS: list = []
