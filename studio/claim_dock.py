"""The "Paper claims" dock: for the panel in front, the latest claim of each paper it owns,
drawn by the lab's claim view (``studio.widgets.claim_view``), with "Reproduce…" (a profile)
and "Open report" (the engine's ``report`` request).

A paper is owned by the panel whose manifest lists it (``PanelManifest.papers``), else by the
panel its methods name in the engine's listing (``panel``), else by the lab; only papers with a
``<paper>.reproduce`` method have claims. The latest claim is that of the newest succeeded run
of the paper's reproduce method, read from the workspace off the main thread.

``install_claim_dock(window)`` adds the dock (hidden until asked) and its View menu entry to a
``studio.main_window.MainWindow``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine.developer import listed
from studio.command_widgets import command_action, connect, connect_button, mark_argument
from studio.commands import Command, Refusal
from studio.jobs import STATE
from studio.widgets.claim_view import (
    PROFILE_HINTS,
    PROFILES,
    VERDICT_COLOURS,
    ClaimView,
    claim_verdict,
    request_report,
    settings_text,
)

LAB = "lab"
REPRODUCE_SUFFIX = ".reproduce"
MAX_CLAIM_FILE_BYTES = 64 * 2**20  # a claim is a few kB; a bigger file is not one
PAPER_ROLE = Qt.ItemDataRole.UserRole
TERMINAL_STATES = ("succeeded", "failed", "cancelled")
DOCK_WIDTH_PX = 580   # the claim view's forest and quote columns need about this much
PAPER_ROWS_SHOWN = 6  # the paper list grows to this many rows, then scrolls


def reproduce_methods(methods: list[dict]) -> dict[str, dict]:
    """Each paper's reproduce method (from the engine's listing), by paper; the diagnostics
    only in developer mode, as everywhere else."""
    return {method.get("paper") or method["id"].split(".")[0]: method for method in methods
            if method["id"].endswith(REPRODUCE_SUFFIX) and listed(method)}


def paper_owners(methods: list[dict], manifests: dict[str, Any]) -> dict[str, str]:
    """The panel that owns each paper with a reproduction: the one whose manifest lists the
    paper, else the first panel other than the lab that its methods name, else the lab."""
    listed = {paper: panel_id for panel_id, manifest in manifests.items()
              if manifest is not None and panel_id != LAB
              for paper in getattr(manifest, "papers", ())}
    owners = {}
    for paper in reproduce_methods(methods):
        named = [m.get("panel") or LAB for m in methods
                 if (m.get("paper") or m["id"].split(".")[0]) == paper]
        owners[paper] = listed.get(paper) or next((p for p in named if p != LAB), LAB)
    return owners


@dataclass(frozen=True)
class LatestClaim:
    """The newest succeeded reproduce run of a paper: its claim, or why it cannot be read."""

    paper: str
    run_id: str = ""
    created: str = ""
    claim: dict | None = None
    problem: str = ""


def latest_claim(workspace: Any, paper: str, method_id: str) -> LatestClaim:
    """Reads the workspace (call it off the main thread): the run's ``result.json`` outputs,
    else its ``artifacts/claim.json``."""
    runs = workspace.runs(method=method_id, state="succeeded", limit=5)
    runs = [run for run in runs if run["method"] == method_id]
    if not runs:
        return LatestClaim(paper)
    run = runs[0]
    folder = Path(run["run_dir"])
    created = run.get("created")
    found = LatestClaim(paper, run["id"], time.strftime("%Y-%m-%d %H:%M", time.localtime(
        float(created))) if isinstance(created, (int, float)) else str(created or ""))
    problems = []
    for path, pick in ((folder / "result.json", lambda data: (data.get("outputs") or {})
                        .get("claim")), (folder / "artifacts" / "claim.json", lambda data: data)):
        try:
            if path.stat().st_size > MAX_CLAIM_FILE_BYTES:
                raise ValueError(f"larger than {MAX_CLAIM_FILE_BYTES // 2**20} MiB")
            claim = pick(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(f"{path}: not a readable claim ({exc})")
            continue
        if isinstance(claim, dict):
            return LatestClaim(paper, found.run_id, found.created, claim)
    return LatestClaim(paper, found.run_id, found.created,
                       problem="; ".join(problems) or f"{folder}: the run saved no claim")


class ClaimDock(QWidget):
    """What the dock shows; ``refresh()`` reads the claims of the panel in front again."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window = window
        self.setObjectName("claim-dock")
        self.panel_id: str | None = None
        self.claims: dict[str, LatestClaim] = {}
        self._generation = 0
        self._user_choice: str | None = None  # the paper the user picked, kept over refreshes
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.heading = QLabel()
        self.heading.setWordWrap(True)
        self.papers = QListWidget()
        self.papers.currentItemChanged.connect(self._picked)
        self.run_label = QLabel()
        self.run_label.setWordWrap(True)
        self.run_label.setStyleSheet("color: #808080;")
        self.run_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.claim_view = ClaimView()
        self.claim_view.set_compact()
        self.claim_area = QScrollArea()  # a long claim scrolls rather than squeezing its rows
        self.claim_area.setWidgetResizable(True)
        self.claim_area.setFrameShape(QScrollArea.Shape.NoFrame)
        self.claim_area.setWidget(self.claim_view)
        self.reproduce_button = QPushButton("Reproduce…")
        self.reproduce_button.setToolTip("run the paper's reproduction with a profile's "
                                         "settings (the verdict shows here when it ends)")
        self.profile_menu = QMenu(self.reproduce_button)
        self.profile_actions: dict[str, QAction] = {}
        registry = window.commands
        for profile in PROFILES:
            action = self.profile_menu.addAction(f"{profile}: {PROFILE_HINTS[profile]}")
            connect(action.triggered, action, registry, "claims.reproduce",
                    lambda *_checked, p=profile: {"paper": self.selected_paper(), "profile": p})
            self.profile_actions[profile] = action
        self.reproduce_button.setMenu(self.profile_menu)
        mark_argument(self.reproduce_button, "claims.reproduce")  # it only offers the profiles
        self.report_button = QPushButton("Open report")
        connect_button(self.report_button, registry, "claims.open_report",
                       lambda: {"paper": self.selected_paper()})
        self.report_button.setToolTip("write the paper's report (its latest reproduction: "
                                      "criteria, figures, provenance) and open it")
        buttons = QHBoxLayout()
        buttons.addWidget(self.reproduce_button)
        buttons.addStretch(1)
        buttons.addWidget(self.report_button)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.heading)
        layout.addWidget(self.papers)
        layout.addWidget(self.run_label)
        layout.addWidget(self.claim_area, 1)
        self.filler = QWidget()  # takes the room the claim leaves when there is none
        layout.addWidget(self.filler, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.status)
        self._set_buttons()

    # -- what is in front ------------------------------------------------------------------
    def front_panel(self) -> str | None:
        """The id of the panel whose tab is in front (None: the welcome page)."""
        current = self.window.tabs.currentWidget()
        return next((panel_id for panel_id, widget in self.window.panel_widgets.items()
                     if widget is current), None)

    def owned_papers(self, panel_id: str | None) -> list[str]:
        if panel_id is None:
            return []
        manifests = {panel_id: entry.manifest
                     for panel_id, entry in self.window.panels.entries().items()}
        owners = paper_owners(list(self.window.bridge.methods), manifests)
        return sorted(paper for paper, owner in owners.items() if owner == panel_id)

    def refresh(self) -> None:
        """Show the papers of the panel in front and read their latest claims (in the I/O
        pool; an answer overtaken by a newer refresh is dropped)."""
        self._generation += 1
        generation = self._generation
        panel_id = self.front_panel()
        if panel_id != self.panel_id:
            self._user_choice = None
        self.panel_id = panel_id
        papers = self.owned_papers(self.panel_id)
        entry = self.window.panels.get(self.panel_id) if self.panel_id else None
        title = entry.title if entry is not None else self.panel_id
        if self.panel_id is None:
            self.heading.setText("Open a panel: this dock shows the claims of the papers "
                                 "the panel in front owns.")
        elif not papers:
            self.heading.setText(f"The {title} owns no paper with a reproduction"
                                 + ("" if self.window.bridge.methods
                                    else " (the engine has not listed its methods yet)."))
        else:
            self.heading.setText(f"<b>{title}</b>: the latest claim of "
                                 f"{'its paper' if len(papers) == 1 else 'each of its papers'}")
        methods = reproduce_methods(list(self.window.bridge.methods))
        workspace = self.window.workspace

        def read() -> dict[str, LatestClaim]:
            return {paper: latest_claim(workspace, paper, methods[paper]["id"])
                    for paper in papers}

        def done(claims: dict[str, LatestClaim]) -> None:
            if generation == self._generation:
                self._show_claims(papers, claims)

        def failed(exc: BaseException) -> None:
            if generation == self._generation:
                self.status.setText(f"Cannot read the workspace's runs: {exc}")

        self._show_claims(papers, {})  # the papers at once; their claims when read
        if papers:
            self.window.run_in_thread(read, on_done=done, on_error=failed)

    def _show_claims(self, papers: list[str], claims: dict[str, LatestClaim]) -> None:
        selected = self._user_choice
        self.claims = claims
        self.papers.blockSignals(True)
        self.papers.clear()
        for paper in papers:
            latest = claims.get(paper)
            if latest is None:
                text, colour = f"{paper}  …", None
            elif latest.claim is not None:
                verdict = claim_verdict(latest.claim)
                marks = [latest.claim.get("profile") or "",
                         "exploratory" if latest.claim.get("exploratory") else ""]
                text = f"{paper}  {verdict}  ({', '.join(filter(None, marks))})"
                colour = VERDICT_COLOURS.get(verdict)
            else:
                text = f"{paper}  — " + ("unreadable claim" if latest.problem
                                         else "not reproduced yet")
                colour = None
            item = QListWidgetItem(text)
            item.setData(PAPER_ROLE, paper)
            if colour is not None:
                item.setForeground(colour)
            self.papers.addItem(item)
        self.papers.setVisible(len(papers) > 1)
        shown = min(len(papers), PAPER_ROWS_SHOWN)
        self.papers.setFixedHeight(self.papers.sizeHintForRow(0) * shown
                                   + 2 * self.papers.frameWidth() if shown else 0)
        rows = [self.papers.item(i).data(PAPER_ROLE) for i in range(self.papers.count())]
        with_claims = [paper for paper in rows if (claims.get(paper) or LatestClaim(paper))
                       .claim is not None]
        chosen = selected if selected in rows else (with_claims or rows or [None])[0]
        self.papers.setCurrentRow(rows.index(chosen) if chosen in rows else -1)
        self.papers.blockSignals(False)
        self._show_selected()

    def _picked(self, *_args: Any) -> None:
        self._user_choice = self.selected_paper()
        self._show_selected()

    def selected_paper(self) -> str | None:
        item = self.papers.currentItem()
        return item.data(PAPER_ROLE) if item is not None else None

    def _show_selected(self) -> None:
        paper = self.selected_paper()
        latest = self.claims.get(paper) if paper else None
        self.claim_area.setVisible(latest is not None and latest.claim is not None)
        self.filler.setVisible(self.claim_area.isHidden())
        if latest is not None and latest.claim is not None:
            self.claim_view.set_claim(latest.claim)
            self.run_label.setText(f"{paper} · run {latest.run_id} · {latest.created}")
        else:
            self.claim_view.clear()
            self.run_label.setText(
                "" if paper is None else latest.problem if latest is not None and
                latest.problem else f"{paper}: no succeeded reproduction in this workspace "
                "yet (Reproduce… runs one)." if latest is not None else f"{paper}: reading…")
        self._set_buttons()

    def _set_buttons(self) -> None:
        paper = self.selected_paper()
        method = reproduce_methods(list(self.window.bridge.methods)).get(paper or "")
        self.reproduce_button.setEnabled(method is not None)
        self.report_button.setEnabled(paper is not None)
        profiles = (method or {}).get("profiles") or {}
        for profile, action in self.profile_actions.items():
            settings = profiles.get(profile) or {}
            action.setToolTip(settings_text(settings) or PROFILE_HINTS[profile])
            action.setStatusTip(f"{profile} profile: {settings_text(settings)}"
                                if settings else PROFILE_HINTS[profile])
        self.profile_menu.setToolTipsVisible(True)

    # -- actions (the commands below call these) ------------------------------------------
    def _paper(self, paper: str | None) -> str:
        """``paper``, or the one selected; refused unless the panel in front owns it."""
        paper = paper or self.selected_paper()
        owned = self.owned_papers(self.front_panel())
        if paper is None:
            raise Refusal("no paper is selected (the panel in front owns "
                          f"{', '.join(owned) if owned else 'none'})")
        if paper not in reproduce_methods(list(self.window.bridge.methods)):
            raise Refusal(f"no paper {paper!r} has a reproduction in this engine")
        return paper

    def reproduce(self, profile: str, paper: str | None = None) -> None:
        """Run the paper's (default: the selected one's) reproduction with ``profile``'s
        settings."""
        paper = self._paper(paper)
        method = reproduce_methods(list(self.window.bridge.methods))[paper]
        self.status.setText(f"Starting {method['id']} ({profile} profile)…")
        self.window.submit(method["id"], {"profile": profile}, on_accepted=lambda job_id:
                           self.status.setText(f"Running {method['id']} ({profile}) as "
                                               f"{job_id}; its claim shows here when it "
                                               "ends."),
                           on_error=lambda message: self.status.setText(
                               f"Not started: {message}"))

    def open_report(self, paper: str | None = None) -> None:
        paper = self._paper(paper)
        self.status.setText(f"Writing the report of {paper}…")
        request_report(self.window.host, [paper],
                       on_opened=lambda path: self.status.setText(f"Opened the report {path}"),
                       on_error=lambda message: self.status.setText(f"No report: {message}"))


def install_claim_dock(window: Any) -> QDockWidget:
    """Add the "Paper claims" dock to ``window`` (hidden until View > Paper claims), kept in
    step with the tab in front, the engine's methods and finished reproductions. Installed
    once: a second call returns the window's dock."""
    if getattr(window, "claim_dock_widget", None) is not None:
        return window.claim_dock_widget
    registry = window.commands
    registry.add_all(COMMANDS)
    content = ClaimDock(window)
    registry.bind("claims", content)
    # the window's own dock maker (closable, movable, floatable, like the Runs dock)
    dock = window._dock("Paper claims", "claimDock", content, Qt.DockWidgetArea.RightDockWidgetArea)
    dock.hide()
    window.restoreDockWidget(dock)  # shown and placed as the last session left it
    toggle = command_action(window, registry, "view.paper_claims", "Paper &claims")
    toggle.setCheckable(True)
    dock.visibilityChanged.connect(lambda _visible: toggle.setChecked(not dock.isHidden()))
    _add_to_view_menu(window, toggle)
    window.claim_dock_widget = dock
    window.claim_dock = content

    def refresh_if_shown(*_args: Any) -> None:
        if dock.isVisible():
            content.refresh()

    sized = []

    def shown(visible: bool) -> None:
        if not visible:
            return
        if not sized and not dock.isFloating():  # the first time: wide enough to read
            sized.append(True)
            window.resizeDocks([dock], [DOCK_WIDTH_PX], Qt.Orientation.Horizontal)
        content.refresh()

    dock.visibilityChanged.connect(shown)
    window.tabs.currentChanged.connect(refresh_if_shown)
    window.bridge.methods_changed.connect(refresh_if_shown)
    window.bridge.jobs.listen(_when_a_reproduction_ends(refresh_if_shown))
    return dock


def _when_a_reproduction_ends(callback: Callable[[], None]) -> Callable[[Any, str], None]:
    def listener(record: Any, what: str) -> None:
        if (what == STATE and record.state in TERMINAL_STATES
                and str(record.method).endswith(REPRODUCE_SUFFIX)):
            callback()

    return listener


def _add_to_view_menu(window: Any, action: QAction) -> None:
    """After the other docks' entries in the View menu (at its end when it has none)."""
    for menu_action in window.menuBar().actions():
        menu = menu_action.menu()
        if menu is None or menu_action.text().replace("&", "") != "View":
            continue
        entries = menu.actions()
        history = getattr(window, "history_dock_widget", None)
        anchor = history.toggleViewAction() if history is not None else None
        if anchor in entries and entries.index(anchor) + 1 < len(entries):
            menu.insertAction(entries[entries.index(anchor) + 1], action)
        else:
            menu.addAction(action)
        return
    window.menuBar().addAction(action)


def _show(dock: ClaimDock, args: Any) -> bool:
    frame = dock.parentWidget()
    shown = frame.isHidden() if args.on is None else bool(args.on)
    frame.setVisible(shown)
    if shown:
        frame.raise_()
    return shown


COMMANDS = (
    Command("view.paper_claims", "Show or hide the paper claims", "The latest claim of each "
            "paper the panel in front owns.", _show, "studio.shell_command_args:ShowArgs",
            menu="View/Paper claims", scope="claims"),
    Command("claims.reproduce", "Reproduce a paper's claim", "Run the paper's reproduction "
            "with a profile's settings; its verdict shows in the dock when it ends.",
            lambda dock, args: dock.reproduce(args.profile, args.paper),
            "studio.shell_command_args:ReproduceClaimArgs"),
    Command("claims.open_report", "Open a paper's report", "Write the report of the paper's "
            "latest reproduction (criteria, figures, provenance) and open it.",
            lambda dock, args: dock.open_report(args.paper),
            "studio.shell_command_args:PaperArgs"),
)
