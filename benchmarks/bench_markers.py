"""Route canvas markers: 10,000 markers listed and stepped through on the gcd design.

The shared routed gcd (Nangate45) design is opened in the ``RoutingPanel`` (1400 x 850,
offscreen) and its own checks run on the worker; then a TritonRoute-style DRC report of
``MARKERS`` violations (each at a wire of the design, on its layer, naming its net) is written
and imported through ``routing.import_markers``: the seconds to read, check against the design
and list it. Stepping = ``routing.step_marker`` (F4) zooming the canvas to the next marker,
highlighting it and selecting its row, then Qt painting the panel: frames/s over ``FRAMES``
steps by wall time and by this process's CPU time. ``python -m benchmarks markers`` (or this
file alone) prints the table; without the gcd design the rows say so.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

MARKERS = int(os.environ.get("BENCH_MARKERS", "10000"))
FRAMES = 60


class _Host:
    """Just enough of ``PanelHost`` for a panel that shows and waives."""

    def subscribe(self, callback):
        return lambda: None

    def show_error(self, title: str, message: str) -> None:
        raise RuntimeError(f"{title}: {message}")

    def push_edit(self, document, command, model) -> None:
        command.apply(model)


def drc_report(design, count: int, seed: int = 0) -> str:
    """``count`` violations at the midpoints of the design's signal wires."""
    from engine.vlsi.def_ import SEG

    rng = np.random.default_rng(seed)
    rows = design.segments[rng.integers(0, len(design.segments), count)]
    scale = design.dbu_per_micron
    lines = []
    for number, row in enumerate(rows):
        x = (row[SEG["x1"]] + row[SEG["x2"]]) / 2 / scale
        y = (row[SEG["y1"]] + row[SEG["y2"]]) / 2 / scale
        kind = ("Short", "MetSpc", "EOLSpc", "CutSpc")[number % 4]
        lines += [f"  violation type: {kind}",
                  f"    srcs: net:{design.nets[int(row[SEG['net']])].name}",
                  f"    bbox = ( {x - 0.05:.3f}, {y - 0.05:.3f} ) - ( {x + 0.05:.3f}, "
                  f"{y + 0.05:.3f} ) on Layer {design.layer_names[int(row[SEG['layer']])]}"]
    return "\n".join(lines) + "\n"


def measure(count: int = MARKERS, frames: int = FRAMES) -> dict | None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
    from PySide6.QtWidgets import QApplication

    from engine.vlsi import shared_design_paths
    from panels.routing.view import RoutingPanel
    from studio import main_thread_gc

    found = shared_design_paths()
    if found is None:
        return None
    app = QApplication.instance() or QApplication([])
    main_thread_gc.install(app)
    panel = RoutingPanel(_Host())
    panel.resize(1400, 850)
    panel.show()
    if not panel.open_design(found[1], found[0]):
        raise RuntimeError(panel.status.text())
    deadline = time.time() + 60
    while not (panel.worker.idle() and panel.state.checked) and time.time() < deadline:
        app.processEvents()
        time.sleep(0.01)
    panel.tabs.setCurrentWidget(panel.markers_tab)
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "gcd.drc"
        report.write_text(drc_report(panel.model.design, count))
        began = time.perf_counter()
        panel.commands.run("routing.import_markers", path=str(report))
        app.processEvents()
        import_s = time.perf_counter() - began
    listed = panel.markers_tab.table.rowCount()
    wall, cpu = [], []
    for _ in range(frames):
        began, began_cpu = time.perf_counter(), time.process_time()
        panel.commands.run("routing.step_marker", step=1)
        panel.repaint()  # the paint the step causes, synchronously
        app.processEvents()
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    began = time.perf_counter()
    name = panel.state.current
    panel.commands.run("routing.waive_marker", marker=name)
    app.processEvents()
    waive_s = time.perf_counter() - began
    panel.shutdown()
    panel.close()
    panel.deleteLater()
    app.processEvents()
    return {"listed": listed, "import_s": import_s, "step_fps": 1 / statistics.mean(wall),
            "step_cpu_fps": 1 / statistics.mean(cpu), "waive_s": waive_s, "frames": frames}


def run() -> list[dict]:
    m = measure()
    if m is None:
        return [{"name": "markers: step through 10k on gcd", "value": float("nan"),
                 "unit": "frames/s", "reference": "the shared gcd design is absent"}]
    label = f"{m['listed']:,} markers on gcd"
    return [
        {"name": f"markers: step (zoom, highlight, row), {label}", "value": m["step_fps"],
         "unit": "frames/s", "target": ">= 30",
         "reference": f"{m['step_cpu_fps']:.1f} frames/s by CPU time; {m['frames']} steps, "
                      "each painted"},
        {"name": f"markers: import a DRC report and list it, {label}", "value": m["import_s"],
         "unit": "s", "reference": "read, checked against the design, sorted, listed"},
        {"name": f"markers: waive one and relist, {label}", "value": m["waive_s"],
         "unit": "s"},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<52} {row['value']:>10.4g} {row['unit']:<9} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")
