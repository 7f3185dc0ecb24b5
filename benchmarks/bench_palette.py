"""Command palette: open it, then filter 300 commands and methods per keystroke (target 50 ms
a keystroke, the list redrawn), beside a plain Python substring filter over the same list.

The window's real registry (the shell's commands and the route canvas's) and every method the
engine lists (``engine.registry.all_methods``: their descriptions, no engine process), filled
up to ``ENTRIES`` with synthetic commands of the same shape. Each keystroke of ``QUERY`` is
typed into the palette's search box and the list painted (offscreen unless a display is set).
``python -m benchmarks palette`` (or this file alone) prints the table. No assertions.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

ENTRIES = 300
QUERY = "move a wire"
ROUNDS = 5


def _window(home: str):
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from studio.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    window = MainWindow(settings=QSettings(os.path.join(home, "s.ini"),
                                           QSettings.Format.IniFormat),
                        workspace=os.path.join(home, "ws"), log_dir=os.path.join(home, "logs"))
    window.resize(1360, 860)
    window.show()
    app.processEvents()
    return app, window


def _fill(window, methods: list[dict]) -> None:
    """Synthetic commands until commands + methods make ``ENTRIES``."""
    from studio.commands import Command

    verbs = ("open", "save", "move", "delete", "add", "select", "show", "export", "label",
             "mark", "mask", "compare")
    nouns = ("wire", "via", "net", "layer", "molecule", "feature", "turn", "roi", "track",
             "frame", "scene", "claim")
    k = 0
    while len(window.commands) - 1 + len(methods) < ENTRIES:  # engine.run_method: not listed
        verb, noun = verbs[k % len(verbs)], nouns[(k // len(verbs)) % len(nouns)]
        window.commands.add(Command(f"bench{k // 144}.{verb}_{noun}", f"{verb.capitalize()} "
                                    f"a {noun} {k}", "a synthetic command", lambda t, a: None))
        k += 1


def measure() -> dict:
    from PySide6.QtTest import QTest

    from engine.registry import all_methods
    from studio.palette import entries_of, filter_entries

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="studio-bench-") as home:
        app, window = _window(home)
        methods = [spec.describe() for spec in all_methods().values()]
        window.bridge.methods = methods
        window.open_panel("routing")   # its commands join the registry
        _fill(window, methods)
        opens, keystrokes = [], []
        for _ in range(ROUNDS):
            began = time.perf_counter()
            window.show_palette()
            palette = window._palette
            palette.repaint()
            app.processEvents()
            opens.append(time.perf_counter() - began)
            palette.search.clear()
            app.processEvents()
            for letter in QUERY:
                began = time.perf_counter()
                QTest.keyClick(palette.search, letter)
                palette.list.viewport().repaint()
                app.processEvents()
                keystrokes.append(time.perf_counter() - began)
            found = palette.model.shown[0].id
            palette.hide()
        entries = entries_of(window.commands, methods)
        fuzzy, plain = [], []
        for _ in range(ROUNDS):
            for end in range(1, len(QUERY) + 1):
                typed = QUERY[:end]
                began = time.perf_counter()
                filter_entries(entries, typed)
                fuzzy.append(time.perf_counter() - began)
                began = time.perf_counter()
                needle = typed.lower()
                [e for e in entries if needle in e.haystack]  # noqa: B018 - timed
                plain.append(time.perf_counter() - began)
        window.shutdown()
        window.deleteLater()
        app.processEvents()
    return {"entries": len(entries), "methods": len(methods), "open_s": statistics.median(opens),
            "first_open_s": opens[0], "key_median_s": statistics.median(keystrokes),
            "key_max_s": max(keystrokes), "fuzzy_s": statistics.median(fuzzy),
            "plain_s": statistics.median(plain), "top": found}


def run() -> list[dict]:
    m = measure()
    n = m["entries"]
    return [
        {"name": f"palette: open, {n} commands and methods", "value": 1000 * m["open_s"],
         "unit": "ms", "target": "< 50",
         "reference": f"median of {ROUNDS}; the first open (builds the dialog) "
                      f"{1000 * m['first_open_s']:.1f} ms; {m['methods']} engine methods"},
        {"name": f"palette: a keystroke, filter + redraw ({n})",
         "value": 1000 * m["key_median_s"], "unit": "ms", "target": "< 50",
         "reference": f"max {1000 * m['key_max_s']:.1f} ms over {ROUNDS} x '{QUERY}'; "
                      f"top hit {m['top']}"},
        {"name": f"fuzzy filter alone ({n})", "value": 1000 * m["fuzzy_s"], "unit": "ms",
         "reference": f"plain substring filter over the same list "
                      f"{1000 * m['plain_s']:.3f} ms"},
    ]


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<48} {row['value']:>10.4g} {row['unit']:<6} "
              f"{row.get('target', ''):<8} {row.get('reference', '')}")
