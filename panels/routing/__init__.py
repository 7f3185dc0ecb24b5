"""VLSI route canvas: LEF/DEF designs in microns with per-layer styles, net search and
statistics, GCell snapping and congestion, predicted vs reference routes (``chipstar.route``),
and undoable wiring edits with live connectivity and short checks."""

from panels.api import PanelManifest

MANIFEST = PanelManifest(
    id="routing",
    title="VLSI route canvas",
    factory="panels.routing.view:RoutingPanel",
    formats=("def", "lef", "guide"),
    methods=("chipstar.",),
    exports=("png", "svg", "pdf", "def", "guide"),
    papers=("chipstar",),
)
