"""Sessions: the time to save what is on screen, and to open it again beyond the files' own
load time.

Every installed panel is opened in a 1600 x 1000 main window (offscreen, no engine); the route
canvas shows the shared gcd design (``../shared/data/vlsi``; a small design written here when
it is absent) with a wire moved, a layer recoloured and a net selected. Save: the median of
five ``save_session`` calls (view states, content fingerprints (cached by size and time, as
in use), the journal's edits, a thumbnail, the zip written atomically). Open: ``open_session``
from a closed screen, minus the load time of the same screen restored by hand (each panel
opened and given its view state with no session file), measured right before it: what the
session itself adds. ``python -m benchmarks sessions`` (or this file alone) prints the table.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

REPEATS = 5


def _design(folder: Path) -> tuple[Path, Path | None]:
    from engine.vlsi import shared_design_paths

    found = shared_design_paths()
    if found is not None:
        lef, def_ = found
        return Path(def_), Path(lef)
    from tests.panels.routing.conftest import SMALL_DEF

    path = folder / "small.def"
    path.write_text(SMALL_DEF)
    return path, None


def _close_panels(window) -> None:
    from PySide6.QtWidgets import QApplication

    for index in reversed(range(window.tabs.count())):
        if window.tabs.widget(index) is not window.welcome:
            window.close_tab(index)
    QApplication.processEvents()


def measure() -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from studio import main_thread_gc
    from studio.main_window import MainWindow
    from studio.sessions import open_session, panel_tabs, save_session

    app = QApplication.instance() or QApplication([])
    main_thread_gc.install(app)
    folder = Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    settings = QSettings(str(folder / "studio.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=settings, workspace=folder / "workspace",
                        log_dir=folder / "logs")
    window.resize(1600, 1000)
    window.show()
    try:
        for panel_id in sorted(window.panels.entries()):
            window.open_panel(panel_id)
        def_path, lef_path = _design(folder)
        args = {"def_path": str(def_path)} | ({"lef_path": str(lef_path)} if lef_path else {})
        window.command("routing.open_design", **args)
        routing = window.panel_widgets["routing"]
        design = routing.model.design
        net = next(n.name for i, n in enumerate(design.nets) if len(design.net_wiring(i)[0]))
        window.command("routing.select_net", net=net, focus=True)
        window.command("routing.colour_layer", layer=routing.model.styles[0].name,
                       colour="#ff00ff")
        QApplication.processEvents()
        panels = [panel_id for panel_id, _widget in panel_tabs(window)]
        with_state = [panel_id for panel_id, widget in panel_tabs(window)
                      if callable(getattr(widget, "view_state", None))]
        target = folder / "bench.studio"
        save_times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            save_session(window, target)
            save_times.append(time.perf_counter() - started)
        states = {panel_id: widget.view_state() for panel_id, widget in panel_tabs(window)
                  if panel_id in with_state}

        _close_panels(window)
        started = time.perf_counter()
        for panel_id in panels:
            widget = window.open_panel(panel_id)
            if panel_id in states:
                widget.restore_view_state(states[panel_id])
        QApplication.processEvents()
        load_s = time.perf_counter() - started

        _close_panels(window)
        started = time.perf_counter()
        report = open_session(window, target, interactive=False)
        QApplication.processEvents()
        open_s = time.perf_counter() - started
        return {"save_s": statistics.median(save_times), "open_s": open_s, "load_s": load_s,
                "panels": len(panels), "with_state": len(with_state),
                "size_kb": target.stat().st_size / 1024, "design": def_path.name,
                "problems": report.lines()}
    finally:
        window.shutdown()
        window.close()
        window.deleteLater()
        QApplication.processEvents()


def run() -> list[dict]:
    m = measure()
    what = (f"{m['panels']} panels ({m['with_state']} with view states), "
            f"route canvas on {m['design']}")
    return [
        {"name": f"save a session, {what}", "value": m["save_s"], "unit": "s",
         "target": "<= 1", "reference": f"median of {REPEATS}; {m['size_kb']:.0f} KB file"},
        {"name": "open it, beyond the files' own load time", "value": m["open_s"] - m["load_s"],
         "unit": "s", "target": "<= 3",
         "reference": f"open {m['open_s']:.2f} s; the same screen restored by hand (load) "
                      f"{m['load_s']:.2f} s" + (f"; reported: {'; '.join(m['problems'])[:200]}"
                                                 if m["problems"] else "")},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<60} {row['value']:>10.4g} {row['unit']:<4} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")
