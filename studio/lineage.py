"""Lineage: where each generated document came from, drawn as a tree.

Generative work is a what-if history: open a file, run a method, edit what it made, run again,
compare. The pieces are already recorded; this module joins them:

- each run's ``params.json`` (method, resolved parameters, seed, its inputs by absolute path)
  and ``result.json`` (the outputs it wrote), in the workspace;
- an input inside another run's folder (``engine.provenance.run_folder``) is that run's
  output: the earlier run is its parent, a checkpoint input included;
- the user's edits that led to a run: when a job is submitted, ``LineageRecorder`` writes
  ``<workspace>/lineage/<run id>.json`` with the documents open in the panel that runs the
  method and the edits applied to each (as the workspace journal holds them), so a
  regeneration after dragging a path or masking a region names those edits.

``build_lineage(workspace)`` makes the graph (Qt-free, off the main thread); the lineage dock
(``install_lineage_dock(window)``) shows the part that touches the session on screen as a tree
and can compare two nodes (a panel's ``compare(a, b)`` hook, else both opened), reopen a node,
rerun a run with the same parameters, or export a node with its provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import provenance
from engine.atomic import write_atomic, write_json_atomic
from engine.content import content_hash
from engine.io import FormatError
from engine.io.limits import read_json
from studio.command_widgets import command_action, commands_of, connect, connect_button
from studio.commands import PROMPTED, Command, Refusal
from studio.documents import document_file
from studio.undo import steps_of

log = logging.getLogger("studio.lineage")

LINEAGE_FOLDER = "lineage"
RUN_LIMIT = 500
RUN, FILE, EDITS = "run", "file", "edits"
PARAMS_SHOWN = 4           # parameters shown beside a run (all of them in its tooltip)


# -- the graph (Qt-free) ------------------------------------------------------------------------

@dataclass
class Node:
    key: str                                   # "run:<id>", "file:<path>", "edits:<run>:<n>"
    kind: str                                  # RUN, FILE or EDITS
    label: str
    detail: dict[str, Any] = field(default_factory=dict)
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path | None:
        """The file a node stands for (a file, or the document an edit node edited)."""
        value = self.detail.get("path")
        return Path(value) if isinstance(value, str) and value else None


@dataclass
class Lineage:
    nodes: dict[str, Node] = field(default_factory=dict)

    def add(self, node: Node) -> Node:
        return self.nodes.setdefault(node.key, node)

    def link(self, parent: str, child: str) -> None:
        if parent == child or parent not in self.nodes or child not in self.nodes:
            return
        if child not in self.nodes[parent].children:
            self.nodes[parent].children.append(child)
        if parent not in self.nodes[child].parents:
            self.nodes[child].parents.append(parent)

    def roots(self, keys: set[str] | None = None) -> list[Node]:
        """Nodes with no parent (among ``keys`` when given), files first, oldest run first."""
        chosen = [node for key, node in self.nodes.items()
                  if (keys is None or key in keys)
                  and not any(keys is None or parent in keys for parent in node.parents)]
        return sorted(chosen, key=lambda n: (n.kind != FILE, n.detail.get("created", 0),
                                             n.label))

    def related(self, seeds: set[str]) -> set[str]:
        """Every node connected to ``seeds`` (ancestors and descendants, transitively)."""
        found, stack = set(), [key for key in seeds if key in self.nodes]
        while stack:
            key = stack.pop()
            if key in found:
                continue
            found.add(key)
            node = self.nodes[key]
            stack.extend(node.parents + node.children)
        return found

    def primary_parent(self, key: str, keys: set[str] | None = None) -> str | None:
        """The parent a node is drawn under in a tree: the edits behind it, else what was
        derived (a run's output, an edited copy), else a run, else a plain input file."""
        def rank(parent: str) -> int:
            node = self.nodes[parent]
            if node.kind == EDITS:
                return 0
            return 1 if node.kind == FILE and node.parents else 2 if node.kind == RUN else 3

        parents = [p for p in self.nodes[key].parents if keys is None or p in keys]
        return min(parents, key=rank, default=None)

    def ancestors(self, key: str) -> list[Node]:
        """The nodes ``key`` came from, nearest first."""
        order, seen, queue = [], {key}, list(self.nodes[key].parents)
        while queue:
            current = queue.pop(0)
            if current in seen or current not in self.nodes:
                continue
            seen.add(current)
            order.append(self.nodes[current])
            queue.extend(self.nodes[current].parents)
        return order

    def file_key(self, path: str | Path) -> str:
        return f"file:{Path(path).resolve()}"


def build_lineage(workspace, limit: int = RUN_LIMIT) -> Lineage:
    """The lineage of the workspace's newest ``limit`` runs. Reads files: call it off the Qt
    main thread. A run folder that cannot be read becomes a node saying so."""
    graph = Lineage()
    runs_root = (Path(workspace.root) / "runs").resolve()
    for record in reversed(workspace.runs(limit=limit)):  # oldest first: parents exist first
        run_dir = Path(record["run_dir"])
        params, problem = _read(run_dir / "params.json")
        run = graph.add(Node(f"run:{record['id']}", RUN, f"{record['method']}",
                             _run_detail(record, params, problem)))
        inputs = params.get("inputs") if isinstance(params.get("inputs"), dict) else {}
        notes, _ = _read(workspace.root / LINEAGE_FOLDER / f"{record['id']}.json")
        edit_keys = _add_edits(graph, notes, runs_root)
        through_copy = False
        for name, value in inputs.items():
            if not isinstance(value, str) or not value:
                continue
            key = _add_file(graph, Path(value), runs_root, role=name)
            graph.link(key, run.key)
            written_for_run = Path(value).resolve().is_relative_to(Path(workspace.root).resolve())
            if written_for_run and run_folder_id(value, runs_root) is None and edit_keys:
                for edits in edit_keys:  # the edited copy a panel wrote for this run
                    graph.link(edits, key)
                through_copy = True
        if not through_copy:
            for edits in edit_keys:
                graph.link(edits, run.key)
        outputs = _outputs(run_dir)
        for name, value in outputs.items():
            target = run_dir / value
            if target.exists():
                graph.link(run.key, _add_file(graph, target, runs_root, role=name))
    return graph


def run_folder_id(path: str | Path, runs_root: Path) -> str | None:
    """The id of the workspace run whose folder holds ``path``, or ``None``."""
    folder = provenance.run_folder(path)
    if folder is None or folder.parent.resolve() != runs_root:
        return None
    return folder.name


def _read(path: Path) -> tuple[dict, str]:
    if not path.is_file():
        return {}, ""
    try:
        value = read_json(path)
    except FormatError as exc:
        return {}, str(exc)
    return (value, "") if isinstance(value, dict) else ({}, f"{path}: not a JSON object")


def _outputs(run_dir: Path) -> dict[str, str]:
    result, _problem = _read(run_dir / "result.json")
    outputs = result.get("outputs")
    return {name: value for name, value in (outputs or {}).items()
            if isinstance(value, str) and value} if isinstance(outputs, dict) else {}


def _run_detail(record: dict, params: dict, problem: str) -> dict[str, Any]:
    resolved = params.get("params") if isinstance(params.get("params"), dict) else \
        record.get("params", {})
    inputs = params.get("inputs") if isinstance(params.get("inputs"), dict) else {}
    checkpoints = {name: value for name, value in inputs.items()
                   if "checkpoint" in name.lower() or "/checkpoints/" in str(value)}
    return {"run_id": record["id"], "method": record["method"], "params": resolved,
            "seed": params.get("seed", record.get("seed")), "state": record.get("state"),
            "inputs": inputs, "checkpoint": checkpoints, "created": record.get("created", 0),
            "run_dir": record["run_dir"], "problem": problem}


def _add_file(graph: Lineage, path: Path, runs_root: Path, role: str = "") -> str:
    key = graph.file_key(path)
    if key in graph.nodes:
        return key
    resolved = path.resolve()
    detail: dict[str, Any] = {"path": str(resolved), "role": role, "exists": resolved.exists()}
    if resolved.is_file() and resolved.stat().st_size < (256 << 20):
        detail["fingerprint"] = content_hash(resolved)   # what the run saw, if unchanged
    graph.add(Node(key, FILE, resolved.name or str(resolved), detail))
    owner = run_folder_id(resolved, runs_root)
    if owner is not None:
        graph.link(f"run:{owner}", key)
    return key


def _add_edits(graph: Lineage, notes: dict, runs_root: Path) -> list[str]:
    """Edit nodes for the documents the user had edited when the run was submitted; the
    same edits of the same document behind two regenerations are one node."""
    keys = []
    for document in notes.get("documents", []) or []:
        if not isinstance(document, dict) or not document.get("edits"):
            continue
        path = str(document.get("path") or "")
        labels = [str(label) for label in document.get("labels", [])]
        same = hashlib.blake2b(json.dumps([path, document["edits"]], sort_keys=True,
                                          default=str).encode(), digest_size=8).hexdigest()
        node = graph.add(Node(f"edits:{same}", EDITS,
                              f"{len(document['edits'])} edit(s) of {Path(path).name}",
                              {"path": path, "document": document.get("document"),
                               "edits": document["edits"], "labels": labels,
                               "fingerprint": document.get("fingerprint"),
                               "panel": notes.get("panel"), "run_id": notes.get("run_id")}))
        if path:
            graph.link(_add_file(graph, Path(path), runs_root, role="edited"), node.key)
        keys.append(node.key)
    return keys


def describe(node: Node) -> str:
    """One line beside a node: what made it."""
    detail = node.detail
    if node.kind == RUN:
        params = detail.get("params") or {}
        shown = ", ".join(f"{k}={_short(v)}" for k, v in list(params.items())[:PARAMS_SHOWN])
        more = "…" if len(params) > PARAMS_SHOWN else ""
        checkpoint = " · checkpoint" if detail.get("checkpoint") else ""
        return (f"{detail.get('run_id')} · {detail.get('state')} · seed {detail.get('seed')}"
                f"{checkpoint} · {shown}{more}")
    if node.kind == EDITS:
        labels = detail.get("labels") or []
        return "; ".join(labels[:3]) + ("…" if len(labels) > 3 else "")
    fingerprint = str(detail.get("fingerprint") or "")[:12] or (
        "folder" if node.path is not None and node.path.is_dir() else "not hashed")
    missing = "" if detail.get("exists", True) else " · missing now"
    return f"{detail.get('role') or 'file'} · {fingerprint}{missing}"


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 24 else text[:23] + "…"


def provenance_of(graph: Lineage, key: str) -> dict:
    """The provenance record of a node: its file (if any), the runs it came from (method,
    parameters, seed) and its lineage, nearest first."""
    node = graph.nodes[key]
    chain = [node, *graph.ancestors(key)]
    runs = [provenance.run_entry(n.detail["run_dir"]) for n in chain
            if n.kind == RUN and n.detail.get("run_dir")]
    lineage = [{"kind": n.kind, "label": n.label,
                **{k: v for k, v in n.detail.items() if k in (
                    "path", "fingerprint", "run_id", "method", "params", "seed", "labels",
                    "edits", "checkpoint", "role")}} for n in chain]
    sources = [node.path] if node.kind == FILE and node.path and node.path.exists() else []
    return provenance.record(sources=sources, runs=runs, lineage=lineage,
                             exported_by="Studio lineage")


def export_node(graph: Lineage, key: str, target: str | os.PathLike) -> Path:
    """Export a node with its provenance: a file is copied with its record in it (PNG, SVG,
    PDF) or beside it; a run or an edit is written as its record (JSON)."""
    node = graph.nodes[key]
    record = provenance_of(graph, key)
    target = Path(target)
    source = node.path if node.kind == FILE else None
    if source is None or not source.is_file():
        return write_json_atomic(target, record)
    if target.suffix.lower() in provenance.EMBEDDED and source.suffix.lower() == \
            target.suffix.lower():
        return provenance.write(target, source.read_bytes(), record)
    with open(source, "rb") as stream:  # streamed: a checkpoint need not fit in memory
        write_atomic(target, lambda handle: shutil.copyfileobj(stream, handle, 1 << 20))
    provenance.write_sidecar(target, record)
    return target


# -- recording the edits behind a run -----------------------------------------------------------

class LineageRecorder(QObject):
    """Writes, for each job this window submits, the edits open in the panel that runs it."""

    recorded = Signal(str)      # run id

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self._seen: set[str] = set()
        self._unlisten = window.bridge.jobs.listen(self._on_job)

    def _on_job(self, record, what: str) -> None:
        """Once per job this window submitted: when its method is known (the engine's first
        event may come before the reply that names it)."""
        from studio.jobs import ADDED, STATE

        if what not in (ADDED, STATE) or not record.live or not record.method or \
                record.id in self._seen:
            return
        self._seen.add(record.id)
        try:
            path = self.record(record.id, record.method, dict(record.inputs or {}))
        except Exception:  # the run goes on; its lineage lacks the edits
            log.exception("lineage of %s not recorded", record.id)
            return
        if path is not None:
            self.recorded.emit(record.id)

    def record(self, run_id: str, method: str, inputs: dict | None = None) -> Path | None:
        """``<workspace>/lineage/<run id>.json``: the panel, its documents and their edits."""
        panel_id = self._panel_of(method, inputs or {})
        history = self.window.histories.get(panel_id or "")
        if history is None:
            return None
        documents = []
        for document in _documents(history):
            applied = history.applied(document)
            file = document_file(document)
            documents.append({
                "document": document, "path": str(file.path) if file else "",
                "fingerprint": content_hash(file.path, self.window.workspace) if file else "",
                "edits": [command.to_json() for command in applied],
                "labels": [str(getattr(command, "label", "Edit")) for command in applied]})
        if not any(document["edits"] for document in documents):
            return None
        target = Path(self.window.workspace.root) / LINEAGE_FOLDER / f"{run_id}.json"
        return write_json_atomic(target, {"run_id": run_id, "method": method,
                                          "panel": panel_id, "recorded": time.time(),
                                          "documents": documents})

    def _panel_of(self, method: str, inputs: dict) -> str | None:
        """The panel whose documents the run reads (an edited DEF routed from the route
        canvas, though the engine lists the router under the lab), else the panel that runs
        ``method`` (the engine's list says), else the tab in front."""
        wanted = set()
        for value in inputs.values():
            if isinstance(value, str) and value and not value.startswith("run:"):
                with contextlib.suppress(OSError, ValueError):
                    wanted.add(Path(value).resolve())
        for panel_id, history in self.window.histories.items():
            files = (document_file(document) for document in _documents(history))
            if any(file is not None and Path(file.path).resolve() in wanted for file in files):
                return panel_id
        listed = next((m for m in self.window.bridge.methods if m.get("id") == method), None)
        panel = (listed or {}).get("panel")
        if panel in self.window.panel_widgets:
            return panel
        current = self.window.tabs.currentWidget()
        return next((pid for pid, widget in self.window.panel_widgets.items()
                     if widget is current), None)


def _documents(history) -> list[str]:
    found: dict[str, None] = {}
    for index in range(history.stack.index()):
        for step in steps_of(history.stack.command(index)):
            found[step.document] = None
    return list(found)


# -- the dock -----------------------------------------------------------------------------------

class LineageDock(QWidget):
    """The lineage of what is on screen, as a tree; compare, reopen, rerun, export."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__()
        self.window = window
        self.graph = Lineage()
        self._reads = 0   # refreshes asked for; only the newest one's graph is drawn
        self.recorder = LineageRecorder(window)
        self.recorder.recorded.connect(lambda _run: self.refresh())
        self.tree = QTreeWidget()
        self.tree.setObjectName("lineageTree")
        self.tree.setHeaderLabels(["Lineage", "What made it"])
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setColumnWidth(0, 240)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.tree.itemDoubleClicked.connect(lambda _item, _column: window.commands.trigger(
            "lineage.reopen", nodes=self.selected_keys()))
        self.whole = QCheckBox("Whole workspace")
        self.whole.setToolTip("Every run of the workspace, not only those of this session")
        connect(self.whole.toggled, self.whole, window.commands, "lineage.whole",
                lambda on: {"on": bool(on)})
        self.note = QLabel("")
        self.note.setObjectName("emptyNote")
        self.note.setWordWrap(True)
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        registry = window.commands
        chosen = self.selected_keys
        for text, command_id, args in (
                ("Compare", "lineage.compare", lambda: {"nodes": chosen()}),
                ("Reopen", "lineage.reopen", lambda: {"nodes": chosen()}),
                ("Rerun", "lineage.rerun", lambda: {"nodes": chosen()}),
                ("Export…", "lineage.export", lambda: {"node": (chosen() or [""])[0]}),
                ("Refresh", "lineage.refresh", None)):
            button = QPushButton(text)
            button.setToolTip(registry.get(command_id).help)
            connect_button(button, registry, command_id, args)
            row.addWidget(button)
            self.buttons[text] = button
        row.addStretch(1)
        row.addWidget(self.whole)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(row)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.note)
        self._update_buttons()

    # -- filling --------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the workspace off the main thread, then draw; a read overtaken by a newer
        one (two threads of the I/O pool can finish in either order) is dropped, so an older
        graph never replaces a newer one."""
        workspace = self.window.workspace
        self._reads += 1
        read = self._reads

        def done(graph: Lineage) -> None:
            if read == self._reads:
                self.show_graph(graph)

        def failed(exc: BaseException) -> None:
            if read == self._reads:
                self.note.setText(f"Lineage not read: {exc}")

        self.window.run_in_thread(build_lineage, workspace, on_done=done, on_error=failed)

    def session_seeds(self) -> set[str]:
        """What ties the lineage to the session on screen: its documents and runs."""
        from studio.sessions import RUN_ID, _paths_in, panel_tabs

        seeds: set[str] = set()
        for panel_id, widget in panel_tabs(self.window):
            reader = getattr(widget, "view_state", None)
            state: Any = None
            if callable(reader):
                try:
                    state = reader()
                except Exception:
                    state = None
            for path in _paths_in(state):
                seeds.add(self.graph.file_key(path))
            for run_id in RUN_ID.findall(json.dumps(state, default=str)) if state else []:
                seeds.add(f"run:{run_id}")
            history = self.window.histories.get(panel_id)
            for document in _documents(history) if history is not None else []:
                file = document_file(document)
                if file is not None:
                    seeds.add(self.graph.file_key(file.path))
        for record in self.window.bridge.jobs.records():
            if record.live:
                seeds.add(f"run:{record.id}")
        return seeds

    def show_graph(self, graph: Lineage) -> None:
        self.graph = graph
        self.tree.clear()
        keys = None if self.whole.isChecked() else graph.related(self.session_seeds())
        roots = graph.roots(keys)
        shown: set[str] = set()
        for root in roots:
            self.tree.addTopLevelItem(self._item(root, keys, shown))
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        count = len(graph.nodes) if keys is None else len(keys)
        self.note.setText(
            f"{count} node(s): files, runs and the edits behind them. Choose two to compare."
            if roots else "Nothing generated yet in this session: run a method, or tick "
                          "'Whole workspace'.")
        self._update_buttons()

    def _item(self, node: Node, keys: set[str] | None, shown: set[str],
              elsewhere: str = "") -> QTreeWidgetItem:
        """A node's row; its children in full under their primary parent only (elsewhere a
        row saying where they are drawn)."""
        again = node.key in shown or bool(elsewhere)
        if not elsewhere:
            shown.add(node.key)
        label = {RUN: "▶ ", EDITS: "✎ ", FILE: ""}[node.kind] + node.label
        item = QTreeWidgetItem([label + (f"  (under {elsewhere})" if elsewhere else
                                         "  (above)" if again else ""), describe(node)])
        item.setData(0, Qt.ItemDataRole.UserRole, node.key)
        item.setToolTip(0, node.detail.get("path") or node.key)
        item.setToolTip(1, json.dumps({k: v for k, v in node.detail.items()
                                       if k not in ("edits",)}, indent=1, default=str)[:2000])
        if not again:
            for child in node.children:
                if keys is not None and child not in keys:
                    continue
                primary = self.graph.primary_parent(child, keys)
                under = "" if primary == node.key or primary is None else \
                    self.graph.nodes[primary].label
                item.addChild(self._item(self.graph.nodes[child], keys, shown, under))
        return item

    def selected_keys(self) -> list[str]:
        return [item.data(0, Qt.ItemDataRole.UserRole) for item in self.tree.selectedItems()]

    def select(self, *keys: str) -> None:
        """Choose nodes (tests, scripts): the first item of each key."""
        self.tree.clearSelection()
        for key in keys:
            found = self._find_item(key)
            if found is not None:
                found.setSelected(True)

    def _find_item(self, key: str) -> QTreeWidgetItem | None:
        stack = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        while stack:
            item = stack.pop(0)
            if item.data(0, Qt.ItemDataRole.UserRole) == key:
                return item
            stack.extend(item.child(i) for i in range(item.childCount()))
        return None

    def _update_buttons(self) -> None:
        keys = self.selected_keys()
        kinds = [self.graph.nodes[k].kind for k in keys if k in self.graph.nodes]
        self.buttons["Compare"].setEnabled(len(keys) == 2)
        self.buttons["Reopen"].setEnabled(len(keys) >= 1)
        self.buttons["Rerun"].setEnabled(bool(kinds) and all(k == RUN for k in kinds))
        self.buttons["Export…"].setEnabled(len(keys) == 1)

    # -- actions --------------------------------------------------------------------------------
    def node_file(self, key: str) -> Path | None:
        """The file a node shows: itself, the document edited, or a run's first output."""
        node = self.graph.nodes[key]
        if node.kind == RUN:
            outputs = [self.graph.nodes[c].path for c in node.children
                       if self.graph.nodes[c].kind == FILE]
            return next((p for p in outputs if p is not None and p.exists()), None)
        path = node.path
        return path if path is not None and path.exists() else None

    def nodes(self, keys: list[str], kinds: tuple[str, ...] = (RUN, FILE, EDITS)) -> list[Node]:
        """The nodes named (none: those chosen in the tree); a name the lineage does not
        hold, or a node of another kind, is refused."""
        keys = list(keys) or self.selected_keys()
        if not keys:
            raise Refusal("choose a node in the lineage dock first")
        found = []
        for key in keys:
            node = self.graph.nodes.get(key)
            if node is None:
                raise Refusal(f"no node {key!r} in the lineage (Refresh to read the workspace "
                              "again)")
            if node.kind not in kinds:
                raise Refusal(f"{node.label} is a {node.kind}, not a {' or '.join(kinds)}")
            found.append(node)
        return found

    def compare(self, keys: list[str]) -> str:
        """Two nodes side by side in their panel (its ``compare(a, b)``), else both opened."""
        nodes = self.nodes(keys)
        if len(nodes) != 2:
            raise Refusal(f"choose two nodes to compare ({len(nodes)} chosen)")
        files = [self.node_file(node.key) for node in nodes]
        missing = [node.label for node, path in zip(nodes, files, strict=True) if path is None]
        if missing:
            raise Refusal(f"{', '.join(missing)}: no file to show (it was not written, or is "
                          "gone)")
        first, second = (str(path) for path in files)
        entries = [self.window.panel_for_file(path) for path in (first, second)]
        if entries[0] is not None and entries[1] is not None and entries[0].id == entries[1].id:
            widget = self.window.open_panel(entries[0].id)
            compare = getattr(widget, "compare", None)
            if not callable(compare) and widget is not None:
                compare = _compare_command(self.window, entries[0].id, widget)
            if callable(compare):
                compare(first, second)
                self.window.status(f"Comparing {Path(first).name} and {Path(second).name}")
                return entries[0].id
        self.window.open_paths([first, second])
        self.window.status(f"Opened {Path(first).name} and {Path(second).name} (their panel "
                           "has no side-by-side comparison)")
        return ""

    def reopen(self, keys: list[str]) -> list[str]:
        files = [self.node_file(node.key) for node in self.nodes(keys)]
        paths = [str(path) for path in files if path is not None]
        if not paths:
            raise Refusal("the chosen node has no file on disk")
        self.window.open_paths(paths)
        return paths

    def rerun(self, keys: list[str]) -> list[str]:
        """Each run submitted again with its parameters, inputs and seed."""
        from engine.scrub import MASK  # pydantic: not at start-up

        rerun = []
        for node in self.nodes(keys, kinds=(RUN,)):
            detail = node.detail
            params = dict(detail.get("params") or {})
            masked = sorted(name for name, value in params.items() if value == MASK)
            for name in masked:  # a secret is stored masked: never resent as the mask
                del params[name]
            if masked:
                self.window.status(f"{detail['method']}: secret parameter(s) "
                                   f"{', '.join(masked)} not resent (Runs > Rerun with "
                                   "changes to enter them)")
            self.window.submit(detail["method"], params, dict(detail.get("inputs") or {}),
                               int(detail.get("seed") or 0))
            rerun.append(detail["run_id"])
        return rerun

    def ask_export(self, node: Node) -> None:
        """Export…'s file dialog; the chosen file is written through ``lineage.export``."""
        name = (node.path.name if node.kind == FILE and node.path else
                f"{node.key.replace(':', '-').replace('/', '_')[-60:]}.provenance.json")
        dialog = QFileDialog(self.window, f"Export {node.label} with its provenance", name)
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.fileSelected.connect(lambda path, key=node.key: self.window.commands.trigger(
            "lineage.export", node=key, path=path))
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()

    def export_to(self, key: str, path: str | os.PathLike) -> Path:
        [node] = self.nodes([key])
        try:
            written = export_node(self.graph, node.key, path)
        except (OSError, ValueError) as exc:
            raise Refusal(f"{path}: {exc}") from exc
        self.window.status(f"Exported {written} with its provenance")
        return written


# -- the dock's commands ------------------------------------------------------------------------

ARGS = "studio.session_command_args:"


def _export_command(dock: LineageDock, args) -> Any:
    if not args.path:
        [node] = dock.nodes([args.node] if args.node else [])
        dock.ask_export(node)
        return PROMPTED
    return str(dock.export_to(args.node or (dock.selected_keys() or [""])[0], args.path))


def _show_command(dock: LineageDock, args) -> bool:
    frame = dock.parentWidget()
    shown = frame.isHidden() if args.on is None else bool(args.on)
    frame.setVisible(shown)
    if shown:
        frame.raise_()
    return True


def _whole_command(dock: LineageDock, args) -> bool:
    if dock.whole.isChecked() != args.on:
        with QSignalBlocker(dock.whole):
            dock.whole.setChecked(args.on)
    dock.refresh()
    return True


COMMANDS = (
    Command("lineage.compare", "Compare two lineage nodes", "Two generations (or a source "
            "and a generation) side by side in their panel's own comparison.",
            lambda dock, args: dock.compare(args.nodes), ARGS + "NodesArgs"),
    Command("lineage.reopen", "Reopen a lineage node", "Open the node's file (a run's "
            "output, the document edited) in its panel.",
            lambda dock, args: dock.reopen(args.nodes), ARGS + "NodesArgs"),
    Command("lineage.rerun", "Rerun from the lineage", "Run the chosen runs again with the "
            "same method, parameters, inputs and seed.",
            lambda dock, args: dock.rerun(args.nodes), ARGS + "NodesArgs"),
    Command("lineage.export", "Export a lineage node with its provenance", "A file copied "
            "with its provenance (runs, parameters, seeds, edits); a run as its record.",
            _export_command, ARGS + "ExportNodeArgs"),
    Command("lineage.refresh", "Refresh the lineage", "Read the workspace's runs again.",
            lambda dock, _args: dock.refresh() or True),
    Command("lineage.whole", "Lineage of the whole workspace", "Every run of the workspace, "
            "or only those of the session on screen.", _whole_command, ARGS + "WholeArgs"),
    Command("view.lineage", "Show or hide the lineage", "Where each generated document came "
            "from, as a tree.", _show_command, "studio.shell_command_args:ShowArgs",
            shortcut="Ctrl+Shift+L", menu="View/Lineage", scope="lineage"),
)


def _compare_command(window: QMainWindow, panel_id: str, widget: QWidget):
    """A panel without a ``compare`` hook but with a ``<panel>.compare`` command taking a
    ``path`` (the route canvas overlays a second DEF): open the first file, overlay the
    second through the command (logged as the user's; a refusal is shown)."""
    registry = getattr(window, "commands", None)
    command = registry.get(f"{panel_id}.compare") if registry is not None else None
    opener = getattr(widget, "open_file", None)
    if command is None or "path" not in command.arg_names() or not callable(opener):
        return None

    def compare(first: str, second: str) -> None:
        if opener(first) is False:
            raise ValueError(f"{first} did not open in the {panel_id} panel")
        registry.trigger(f"{panel_id}.compare", path=second)

    return compare


def install_lineage_dock(window: QMainWindow) -> QDockWidget:
    """The Lineage dock (View menu entry through its toggle), hidden until asked for; it
    records the edits behind each job the window submits from now on. Installed once: a
    second call returns the window's dock."""
    if getattr(window, "lineage_dock_widget", None) is not None:
        return window.lineage_dock_widget
    registry = window.commands
    for command in COMMANDS:
        registry.add(command, replace=True)
    panel = LineageDock(window)
    registry.bind("lineage", panel)
    dock = QDockWidget("Lineage", window)
    dock.setObjectName("lineageDock")
    dock.setWidget(panel)
    dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable
                     | QDockWidget.DockWidgetFeature.DockWidgetMovable
                     | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
    dock.hide()
    dock.visibilityChanged.connect(lambda visible: panel.refresh() if visible else None)
    view_menu = next((action.menu() for action in window.menuBar().actions()
                      if action.text().replace("&", "") == "View"), None)
    if view_menu is not None:
        toggle = command_action(window, registry, "view.lineage", "L&ineage")
        toggle.setCheckable(True)
        dock.visibilityChanged.connect(lambda _visible: toggle.setChecked(not dock.isHidden()))
        anchor = next((action for action in view_menu.actions()
                       if "view.command_log" in commands_of(action)), None)
        actions = view_menu.actions()
        after = actions[actions.index(anchor) + 1] if anchor in actions and \
            actions.index(anchor) + 1 < len(actions) else None
        view_menu.insertAction(after, toggle)
        panel.toggle = toggle
    window.lineage_dock = panel
    window.lineage_dock_widget = dock
    return dock
