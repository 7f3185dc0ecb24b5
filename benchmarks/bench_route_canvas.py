"""Route canvas: frames per second while panning and zooming a 100k-segment layout offscreen.

A synthetic design (``SEGMENTS`` wires over six metal layers of a 1 mm die, each wire from a
few to a few hundred microns on its layer's preferred direction, plus one via per four
wires) is drawn by the panel's own ``LayoutCanvas`` in a 1200 x 800 widget. Each frame moves
the view (a pan, or a zoom step in to 5 % and back out) and lets Qt paint it (one paint per
frame, checked; the rows say how many frames were rasterised anew: the others shift or scale
a kept image, and the exact frame follows once the view rests). Frames/s = frames / wall
time, and frames / CPU time of this process: what an idle core gives (the wall clock of a
shared machine does not). ``BENCH_CANVAS_SEGMENTS`` changes the size. ``python -m benchmarks
route_canvas`` (or this file alone) prints the table.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

SEGMENTS = int(os.environ.get("BENCH_CANVAS_SEGMENTS", "100000"))
FRAMES = 60
LAYERS = 6
DIE_DBU = 2_000_000  # 1 mm at 2000 dbu per micron


def synthetic_design(segments: int = SEGMENTS, seed: int = 0):
    """A routed-looking design: ``segments`` wires on alternating H/V layers, vias, nets."""
    from engine.vlsi.def_ import SEG, VIA, Design, Net

    rng = np.random.default_rng(seed)
    nets = max(segments // 8, 1)
    design = Design(path="<synthetic>", name="synthetic", dbu_per_micron=2000,
                    die_area=(0, 0, DIE_DBU, DIE_DBU),
                    gcell_grid={"X": (0, 238, 8400), "Y": (0, 238, 8400)})
    design.nets = [Net(f"n{i}") for i in range(nets)]
    design.layer_names = [f"metal{k + 1}" for k in range(LAYERS)]
    design.via_names = [f"via{k + 1}" for k in range(LAYERS - 1)]
    rows = np.zeros((segments, len(SEG)), dtype=np.int64)
    rows[:, SEG["net"]] = np.sort(rng.integers(0, nets, segments))
    rows[:, SEG["layer"]] = rng.integers(0, LAYERS, segments)
    start = rng.integers(0, DIE_DBU, (segments, 2)) // 280 * 280
    length = (rng.pareto(1.5, segments) * 4000 + 1000).astype(np.int64).clip(0, 600_000)
    horizontal = rows[:, SEG["layer"]] % 2 == 0
    end = start.copy()
    end[horizontal, 0] = np.minimum(start[horizontal, 0] + length[horizontal], DIE_DBU)
    end[~horizontal, 1] = np.minimum(start[~horizontal, 1] + length[~horizontal], DIE_DBU)
    rows[:, [SEG["x1"], SEG["y1"]]] = start
    rows[:, [SEG["x2"], SEG["y2"]]] = end
    rows[:, [SEG["ext1"], SEG["ext2"]]] = -1
    design.segments = rows
    picked = rows[:: 4]
    vias = np.zeros((len(picked), len(VIA)), dtype=np.int64)
    vias[:, VIA["net"]] = picked[:, SEG["net"]]
    vias[:, VIA["layer"]] = np.minimum(picked[:, SEG["layer"]], LAYERS - 2)
    vias[:, VIA["via"]] = vias[:, VIA["layer"]]
    vias[:, [VIA["x"], VIA["y"]]] = picked[:, [SEG["x2"], SEG["y2"]]]
    design.vias_placed = vias
    return design


def measure(segments: int = SEGMENTS, frames: int = FRAMES) -> dict:
    """Frames/s of pans and of zooms, and the time to build the batched items."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
    from PySide6.QtCore import QRectF
    from PySide6.QtWidgets import QApplication

    from panels.routing.canvas import LayoutCanvas
    from panels.routing.model import RouteModel
    from studio import main_thread_gc

    app = QApplication.instance() or QApplication([])
    main_thread_gc.install(app)  # as the app does: no collection on worker threads
    model = RouteModel()
    started = time.perf_counter()
    model._set_design(synthetic_design(segments))
    canvas = LayoutCanvas(model)
    canvas.resize(1200, 800)
    canvas.show()
    canvas.redraw()
    app.processEvents()
    build_s = time.perf_counter() - started
    drawn = sum(canvas.raster.count(s.name) for s in model.styles if s.kind == "routing")
    die = DIE_DBU / 2000

    def rest() -> float:
        """Let the view rest: seconds the exact frame that follows took to draw."""
        time.sleep(canvas.raster.SETTLE_MS / 1000 + 0.05)
        began = time.perf_counter()
        app.processEvents()  # the settle timer asks for a paint ...
        app.processEvents()  # ... drawn here
        return time.perf_counter() - began

    def frame_rate(ranges: list[QRectF]) -> tuple[float, float, int, float]:
        """Frames/s by wall and CPU time, frames rasterised, and the exact frame's seconds
        once the view rests, moving through ``ranges[1:]`` from ``ranges[0]`` at rest (as a
        user's view starts)."""
        canvas.box.setRange(ranges[0], padding=0)
        app.processEvents()
        rest()
        painted, rasterised = canvas.raster.painted, canvas.raster.rasterised
        wall, cpu = [], []
        for rect in ranges[1:]:
            began, began_cpu = time.perf_counter(), time.process_time()
            canvas.box.setRange(rect, padding=0)
            app.processEvents()  # the view's update request: one paint, drawn when it returns
            wall.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
        if canvas.raster.painted - painted < len(ranges) - 1:
            raise RuntimeError("the canvas did not paint every frame")
        return (1.0 / statistics.mean(wall), 1.0 / statistics.mean(cpu),
                canvas.raster.rasterised - rasterised, rest())

    pans = [QRectF(die * 0.1 * np.sin(k / 9), die * 0.1 * np.cos(k / 7), die, die)
            for k in range(frames + 1)]
    zooms = []
    for k in range(frames + 1):
        scale = 0.05 + 0.95 * abs(np.cos(k * np.pi / frames))  # in to 5 % and back out
        centre = die / 2
        zooms.append(QRectF(centre - die * scale / 2, centre - die * scale / 2, die * scale,
                            die * scale))
    pan_fps, pan_cpu_fps, pan_rasterised, _ = frame_rate(pans)
    zoom_fps, zoom_cpu_fps, zoom_rasterised, zoom_rest_s = frame_rate(zooms)
    edit_s = _edit_latency(model, canvas, app)
    canvas.close()
    canvas.deleteLater()
    app.processEvents()
    return {"segments": drawn, "build_s": build_s, "pan_fps": pan_fps,
            "pan_cpu_fps": pan_cpu_fps, "zoom_fps": zoom_fps, "zoom_cpu_fps": zoom_cpu_fps,
            "pan_rasterised": pan_rasterised, "zoom_rasterised": zoom_rasterised,
            "zoom_rest_s": zoom_rest_s, "frames": frames, "edit_s": edit_s}


def _edit_latency(model, canvas, app, edits: int = 5) -> float:
    """Seconds from a wire move to its net's connectivity and short checks and the redraw
    (what the panel does on the main thread after each edit), median of ``edits``."""
    from engine.vlsi.def_ import SEG

    times = []
    for k in range(edits):
        net = int(model.design.segments[k * 997, SEG["net"]])
        model.select(net)
        row = model.segment_row(model.design.net_wiring(net)[0][0])
        began = time.perf_counter()
        model.move_command("segment", row, 280, 0).apply(model)
        canvas.draw_wiring()
        app.processEvents()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def run() -> list[dict]:
    m = measure()
    label = f"{m['segments'] // 1000}k segments"
    return [
        {"name": f"canvas pan, whole die, {label}", "value": m["pan_fps"], "unit": "frames/s",
         "target": ">= 30",
         "reference": f"{m['pan_cpu_fps']:.1f} frames/s by CPU time (on an idle core); "
                      f"{m['pan_rasterised']} of {m['frames']} frames rasterised (a pan "
                      "shifts one frame drawn beyond the view)"},
        {"name": f"canvas zoom to 5 % and back, {label}", "value": m["zoom_fps"],
         "unit": "frames/s", "target": ">= 30",
         "reference": f"{m['zoom_cpu_fps']:.1f} frames/s by CPU time (on an idle core); "
                      f"{m['zoom_rasterised']} of {m['frames']} frames rasterised (a zoom "
                      "scales a kept frame until it would be magnified or shrunk 2x or no "
                      "longer covers the view); the exact frame once it rests took "
                      f"{1000 * m['zoom_rest_s']:.0f} ms"},
        {"name": f"build the batched layers, {label}", "value": m["build_s"], "unit": "s"},
        {"name": f"move a wire: live checks + redraw, {label}", "value": m["edit_s"],
         "unit": "s", "reference": "median of 5; on the main thread"},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<48} {row['value']:>10.4g} {row['unit']:<9} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")
