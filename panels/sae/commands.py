"""The SAE browser's actions as commands (``studio.commands``): open a run or an SAE folder,
choose an SAE and a feature, sort the table, search for a word, label and annotate features,
export the dashboard, the labels and the SAE folder, train SAEs and steer the decoder LM; and,
with the panel's window, show a tab or a summary figure.

Elements are named as the panel shows them: an SAE by its name in the SAE box
(``L0-bypass-s0``), a feature by its id (the table's ``feature`` column, "feature 12" on its
page), a column by its header; so a logged command means the same on another run whose SAEs
have the same names. Each label or note is one ``SetFeatureNote`` pushed through
``host.push_edit`` (undo, redo, autosave). The functions act on an ``SaeState``; tests build
one without a window and call ``registry.run``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from engine import provenance
from engine.atomic import write_atomic, write_json_atomic
from engine.io import FormatError
from panels.sae.model import COLUMNS, FeaturePage, SAEBrowserModel, SetFeatureNote, decode
from panels.widgets.panel_state import DocumentState, Submit
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal

SCOPE = "sae"
TRAIN_METHOD = "sae_pc1.train"
STEER_METHOD = "sae_pc1.steer"
SUMMARY_FIGURES = ("anisotropy", "recovery", "importance_vs_reproducibility")
LEFT_TABS = ("features", "density", "summary", "search", "train")
PAGE_TABS = ("activations", "neighbours", "steer")   # under the feature's contexts
DASHBOARD_SUFFIXES = (".html", ".png", ".svg", ".pdf")
DEFAULT_DPI = 192
READ_ERRORS = (FormatError, ValueError, KeyError, OSError)

# background(work, done, failed): ``work()`` off the main thread (the view's); None: at once
Background = Callable[[Callable[[], Any], Callable[[Any], None],
                       Callable[[Exception], None]], None]


@dataclass
class SaeState(DocumentState):
    """What the SAE commands act on. ``view`` (the ``SAEPanel``) is needed only by the
    commands that draw (a dashboard figure, tabs, summary figures)."""

    model: SAEBrowserModel
    host: Any
    view: Any = None
    document: str | None = None     # whose labels this panel put on the history
    submit: Submit | None = None
    background: Background | None = None


# -- arguments ---------------------------------------------------------------------------------


class PathArgs(CommandArgs):
    path: str = Field(description="the file's path")


class OpenArgs(CommandArgs):
    path: str = Field(description="a sae_pc1.train run folder, a checkpoint folder in one, or "
                                  "an SAELens SAE folder (a file opens its folder)")


class SaeArgs(CommandArgs):
    sae: str = Field(description="the SAE's name, as the SAE box shows it (L0-bypass-s0)")


class FeatureArgs(CommandArgs):
    feature: int = Field(ge=0, description="the feature's id (the table's feature column)")


class SortArgs(CommandArgs):
    column: Literal[COLUMNS] = Field(description="the column, as its header names it")  # type: ignore[valid-type]
    descending: bool = Field(False, description="largest first (text: Z first)")


class SearchArgs(CommandArgs):
    text: str = Field(description="a word: the features that fire on the tokens matching it "
                                  "(empty: no search)")


class _NoteArgs(CommandArgs):
    sae: str | None = Field(None, description="the SAE's name (default: the one shown; "
                                              "another is refused: choose it first)")
    feature: int = Field(ge=0, description="the feature's id")


class LabelArgs(_NoteArgs):
    label: str = Field(description="a short name for the feature (empty: none)")


class NoteArgs(_NoteArgs):
    note: str = Field(description="the feature's note (empty: none)")


class DashboardArgs(CommandArgs):
    path: str = Field(description="the dashboard's file: .html (a web page), .png, .svg or "
                                  ".pdf (a figure drawn for the page)")
    feature: int | None = Field(None, ge=0, description="the feature (default: the one shown)")
    dpi: int = Field(DEFAULT_DPI, ge=36, le=1200, description="resolution of a PNG")
    caption: bool = Field(False, description="the information line under the figure")


class FolderArgs(CommandArgs):
    folder: str = Field(description="the folder the SAE and its labels are written into")


class TrainArgs(CommandArgs):
    params: dict = Field(default_factory=dict, description="sae_pc1.train's parameters "
                                                           "(default: the method's defaults)")
    inputs: dict[str, str] = Field(default_factory=dict, description="activations, tokens, "
                                   "text, decoder: files or run:<id>/<artifact>")


class SteerArgs(CommandArgs):
    feature: int | None = Field(None, ge=0, description="the feature (default: the one shown)")
    alpha: float = Field(8.0, ge=-1000, le=1000, description="added: alpha x the feature's "
                                                             "unit decoder direction")
    prompt: str = Field("The", description="the prompt to continue")
    new_tokens: int = Field(24, ge=1, le=256, description="tokens to generate")


class TabArgs(CommandArgs):
    tab: Literal[LEFT_TABS + PAGE_TABS] = Field(description="features, density, summary, "  # type: ignore[valid-type]
                                                "search or train (left); activations, "
                                                "neighbours or steer (the feature page)")


class SummaryArgs(CommandArgs):
    figure: Literal[SUMMARY_FIGURES] = Field(description="the run's summary figure")  # type: ignore[valid-type]


# -- lookups: names the user sees -> the model's state -----------------------------------------


def _opened(state: SaeState) -> str:
    """The name of what is open (a run folder or an SAE folder)."""
    model = state.model
    if model.table is None:
        raise Refusal("no SAE is open: open a sae_pc1.train run or an SAELens folder first")
    return model.run_dir.name if model.run_dir is not None else model.current_sae


def _feature(state: SaeState, feature: int | None) -> int:
    """A feature of the SAE shown (``None``: the one on the page)."""
    name = _opened(state)
    model = state.model
    if feature is None:
        if model.current < 0:
            raise Refusal("no feature is chosen: choose one first (sae.select_feature)")
        return model.current
    width = len(model.table)
    if not 0 <= feature < width:
        raise Refusal(f"no feature {feature} in {model.current_sae} of {name} (features 0 to "
                      f"{width - 1})")
    return feature


def _shown_sae(state: SaeState, sae: str | None) -> str:
    name = _opened(state)
    model = state.model
    if sae is None or sae == model.current_sae:
        return model.current_sae
    if sae in model.sae_names:
        raise Refusal(f"{sae} is not the SAE shown ({model.current_sae}): choose it first "
                      "(sae.select_sae)")
    raise Refusal(f"no SAE {sae!r} in {name} (its SAEs: {', '.join(model.sae_names)})")


def _view(state: SaeState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


def _listed(state: SaeState, method: str) -> None:
    if method not in {m["id"] for m in state.host.methods()}:
        raise Refusal(f"the engine lists no {method} (is the engine running?)")


def first_feature(model: SAEBrowserModel) -> int:
    """The feature in the table's first row, -1 for an empty table."""
    ordered = model.ordered_features()
    return int(ordered[0]) if ordered.size else -1


# -- opening and choosing ----------------------------------------------------------------------


def open_path(state: SaeState, args: OpenArgs) -> str:
    """A run or SAE folder in place of the one shown (which leaves the undo history; its
    autosaved labels stay), with its saved labels replayed, sorted most important first and
    its first feature shown; the search starts over."""
    model = state.model
    try:
        model.open(args.path)
    except READ_ERRORS as exc:  # FormatError, ValueError and OSError name the folder
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise Refusal(text if args.path in text else f"{args.path}: {text}") from None
    state.leave_document()
    state.document = model.document
    restore = getattr(state.host, "restore_edits", None)
    restored = 0
    if callable(restore):
        try:
            restored = restore(model.document, model, decode)
        except (ValueError, KeyError) as exc:
            state.host.show_error("Saved labels do not fit this SAE", str(exc))
    model.set_sort(*model.default_sort())
    first = first_feature(model)
    if first >= 0:
        model.select(first)
    return (f"{model.run_dir.name}: {len(model.sae_names)} SAE(s); {len(model.table)} "
            f"features in {model.current_sae}"
            + (f"; {restored} saved edit(s) restored" if restored else ""))


def select_sae(state: SaeState, args: SaeArgs) -> bool:
    """Show another SAE of the run (layer, raw or bypass, seed); its first row is shown."""
    name = _opened(state)
    model = state.model
    if args.sae not in model.sae_names:
        raise Refusal(f"no SAE {args.sae!r} in {name} (its SAEs: {', '.join(model.sae_names)})")
    if args.sae != model.current_sae:
        try:
            model.select_sae(args.sae)
        except READ_ERRORS as exc:
            raise Refusal(f"{args.sae}: {exc}") from None
        first = first_feature(model)
        if first >= 0:
            model.select(first)
    return True


def select_feature(state: SaeState, args: FeatureArgs) -> bool:
    """Show a feature's page: contexts, activations, neighbours, cross-seed matches."""
    state.model.select(_feature(state, args.feature))
    return True


def sort_features(state: SaeState, args: SortArgs) -> bool:
    _opened(state)
    state.model.set_sort(args.column, args.descending)
    return True


def search(state: SaeState, args: SearchArgs) -> list[dict]:
    """Which features fire on a word: (feature, summed activation, tokens), strongest
    first."""
    _opened(state)
    hits = state.model.run_search(args.text)
    return [{"feature": feature, "sum": total, "tokens": count}
            for feature, total, count in hits]


# -- labels and notes --------------------------------------------------------------------------


def _note(state: SaeState, args: _NoteArgs, field: str, value: str) -> bool:
    sae = _shown_sae(state, args.sae)
    feature = _feature(state, args.feature)
    edit: SetFeatureNote = state.model.note_command(feature, field, value)
    if edit.value == edit.previous:
        raise Refusal(f"feature {feature} of {sae} has this {field} already")
    state.host.push_edit(state.model.document, edit, state.model)
    return True


def label_feature(state: SaeState, args: LabelArgs) -> bool:
    return _note(state, args, "label", args.label)


def annotate_feature(state: SaeState, args: NoteArgs) -> bool:
    return _note(state, args, "note", args.note)


# -- exports -----------------------------------------------------------------------------------


def export_record(model: SAEBrowserModel, view: dict) -> dict:
    """A record naming the shown SAE (its checkpoint and feature table by path and hash), the
    run that trained it (id, method, params, seed) and ``view``."""
    return provenance.record(model.provenance_sources(),
                             {"panel": "sae", "run_folder": str(model.run_dir),
                              "sae": model.current_sae, **view},
                             model.training_runs())


def measures(page: FeaturePage) -> str:
    """A feature's measures as its page and its dashboard's caption say them."""
    return (f"density {_fmt(page.density)} · importance {_fmt(page.importance)} · "
            f"reproducibility {_fmt(page.reproducibility)} (Hungarian {_fmt(page.hungarian)})"
            f" · top tokens: {page.top_tokens or '—'}"
            + (f" · promotes: {page.output_tokens}" if page.output_tokens else ""))


def page_title(sae: str, page: FeaturePage) -> str:
    return f"{sae} · feature {page.feature}" + (f" · {page.label}" if page.label else "")


def write_dashboard(state: SaeState, path: str | Path, feature: int | None,
                    dpi: int = DEFAULT_DPI, caption: bool = False) -> Path:
    """A feature's dashboard: .html (self-contained, provenance beside it) or, through the
    panel's window, a figure drawn for the page (.png, .svg, .pdf at ``dpi``), provenance
    inside. Raises ``ValueError`` or ``OSError`` (the shell's Ctrl+E says them)."""
    target = Path(path)
    if state.model.table is None:
        raise ValueError("open a run or an SAE first")
    if feature is None:
        if state.model.current < 0:
            raise ValueError("choose a feature first")
        feature = state.model.current
    suffix = target.suffix.lower()
    if suffix not in DASHBOARD_SUFFIXES:
        raise ValueError(f"{target}: choose .html, .png, .svg or .pdf")
    model = state.model
    page = model.page(feature)
    record = export_record(model, {"features": [page.feature], "label": page.label,
                                   "note": page.note})
    if suffix == ".html":
        provenance.write(target, model.dashboard_html(page.feature).encode(), record)
        return target
    if state.view is None:
        raise ValueError(f"{target}: a figure is drawn by the panel's window (.html is "
                         "written without it)")
    info = f"{page_title(model.current_sae, page)} · {measures(page)}"
    return state.view.draw_dashboard(target, page, record, dpi, caption, info)


def export_dashboard(state: SaeState, args: DashboardArgs) -> Path:
    feature = _feature(state, args.feature)
    try:
        return write_dashboard(state, args.path, feature, args.dpi, args.caption)
    except (OSError, ValueError) as exc:
        raise Refusal(str(exc) if args.path in str(exc) else f"{args.path}: {exc}") from None


def export_labels(state: SaeState, args: PathArgs) -> Path:
    """The shown SAE's feature labels and notes as JSON, with a provenance sidecar."""
    _opened(state)
    try:
        target = write_json_atomic(Path(args.path), state.model.labels_json())
        provenance.write_sidecar(target, export_record(state.model, {"export": "labels"}))
    except (OSError, ValueError) as exc:
        raise Refusal(str(exc) if args.path in str(exc) else f"{args.path}: {exc}") from None
    return target


def write_sae_folder(source: Path, target: Path, labels: dict, sources: list[Path],
                     view: dict, runs: list[dict]) -> Path:
    """An SAE's checkpoint files copied into ``target`` (streamed, never whole in memory),
    its ``labels.json``, and provenance sidecars for both (the sources hashed once). Runs on
    a worker thread: it touches no widget."""
    for file in sorted(source.iterdir()):
        if file.is_file() and not file.name.endswith(provenance.SIDECAR_SUFFIX):
            with open(file, "rb") as stream:
                write_atomic(target / file.name, partial(shutil.copyfileobj, stream))
    record = provenance.record(sources, {**view, "export": "sae checkpoint"}, runs)
    provenance.write_sidecar(target / "cfg.json", record)
    written = write_json_atomic(target / "labels.json", labels)
    provenance.write_sidecar(written, {**record, "view": {**view, "export": "labels"}})
    return target


def _writable_folder(target: Path) -> None:
    """Refuse, before a worker starts copying, a folder that cannot be made or written: a
    file in its place or above it, or a parent the user may not write in."""
    if target.exists() and not target.is_dir():
        raise Refusal(f"{target} is a file, not a folder")
    existing = target
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise Refusal(f"{target}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise Refusal(f"{target}: cannot write in {existing}")


def export_sae(state: SaeState, args: FolderArgs) -> str:
    """The shown SAE as an SAELens folder (cfg.json, weights and bypass as trained) with
    ``labels.json``; cfg.json and the labels get provenance sidecars. With the window the
    weights (gigabytes, maybe) are copied on a worker thread and the status line says when
    they are written; a failure then is shown as an error."""
    _opened(state)
    model = state.model
    source, target, name = model.sae_folder, Path(args.folder), model.current_sae
    if source is None:
        raise Refusal("no SAE is open")
    _writable_folder(target)
    if target.resolve() == source.resolve():
        raise Refusal(f"{target} is the SAE's own folder: choose another")
    view = {"panel": "sae", "run_folder": str(model.run_dir), "sae": name}
    write = partial(write_sae_folder, source, target, model.labels_json(),
                    model.provenance_sources(), view, model.training_runs())
    if state.background is None:
        try:
            write()
        except (OSError, ValueError) as exc:
            raise Refusal(f"{target}: {exc}") from None
        return f"Exported {name} to {target}"
    done = state.view.sae_exported if state.view is not None else (lambda *_: None)
    state.background(write, lambda _written: done(name, target, None),
                     lambda exc: done(name, target, exc))
    return f"Exporting {name} to {target}…"


# -- runs --------------------------------------------------------------------------------------


def train(state: SaeState, args: TrainArgs) -> str:
    """Submit sae_pc1.train; its SAEs open when it is done (after asking, when a run is
    open)."""
    _listed(state, TRAIN_METHOD)
    state.send(TRAIN_METHOD, dict(args.params), dict(args.inputs))
    return f"Submitted {TRAIN_METHOD}"


def steer(state: SaeState, args: SteerArgs) -> str:
    """Submit sae_pc1.steer: the decoder LM continues the prompt with and without the
    feature's direction added."""
    feature = _feature(state, args.feature)
    try:
        params, inputs = state.model.steer_job(feature, args.alpha, args.prompt,
                                               args.new_tokens)
    except ValueError as exc:
        raise Refusal(str(exc)) from None
    _listed(state, STEER_METHOD)
    state.send(STEER_METHOD, params, inputs)
    return f"Steering with feature {feature} of {state.model.current_sae}…"


# -- what is shown (the panel's window) --------------------------------------------------------


def show_tab(state: SaeState, args: TabArgs) -> bool:
    _view(state, "show a tab").show_tab(args.tab)
    return True


def show_summary(state: SaeState, args: SummaryArgs) -> bool:
    view = _view(state, "draw a summary figure")
    name = _opened(state)
    run_dir = state.model.run_dir
    spec = run_dir / "artifacts" / f"{args.figure}.json" if run_dir is not None else None
    if spec is None or not spec.is_file():
        raise Refusal(f"{name} has no {args.figure} figure (artifacts/{args.figure}.json)")
    problem = view.show_summary(args.figure)
    if problem:
        raise Refusal(problem)
    view.show_tab("summary")
    return True


def _fmt(value: float) -> str:
    return "—" if not np.isfinite(value) else f"{value:.4g}"


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("sae.open", "Open an SAE run", "Open a sae_pc1.train run, a checkpoint in one or "
            "an SAELens folder in the SAE browser.", open_path, OpenArgs,
            menu="SAE/Open run or SAE…"),
    Command("sae.select_sae", "Choose an SAE", "Show another SAE of the run (layer, raw or "
            "bypass, seed), by its name.", select_sae, SaeArgs),
    Command("sae.select_feature", "Choose a feature", "Show a feature's page by its id: "
            "contexts, activations, neighbours, matches in other seeds.", select_feature,
            FeatureArgs),
    Command("sae.sort_features", "Sort the features", "Order the feature table by a column "
            "(importance, density, reproducibility, label, …).", sort_features, SortArgs),
    Command("sae.search", "Which features fire on a word", "List the features active on the "
            "tokens matching a word, strongest first.", search, SearchArgs),
    Command("sae.label_feature", "Label the feature", "Give a feature a short name (undoable, "
            "autosaved).", label_feature, LabelArgs, undoable=True),
    Command("sae.annotate_feature", "Annotate the feature", "Set a feature's note (undoable, "
            "autosaved).", annotate_feature, NoteArgs, undoable=True),
    Command("sae.export_dashboard", "Export the feature dashboard", "A feature's dashboard "
            "as a web page or a PNG, SVG or PDF figure, with its provenance.",
            export_dashboard, DashboardArgs),
    Command("sae.export_labels", "Export the feature labels", "The shown SAE's labels and "
            "notes as JSON with a provenance sidecar.", export_labels, PathArgs),
    Command("sae.export_sae", "Export the SAE with its labels", "The shown SAE as an SAELens "
            "folder with labels.json, provenance beside both.", export_sae, FolderArgs),
    Command("sae.train", "Train SAEs", "Submit sae_pc1.train (SAEs across seeds, with or "
            "without the PC1 bypass) with the parameters and inputs given.", train, TrainArgs),
    Command("sae.steer", "Steer the decoder LM", "Submit sae_pc1.steer: continue a prompt "
            "with and without a feature's direction added.", steer, SteerArgs),
    Command("sae.show_tab", "Show an SAE tab", "Features, Density, Summary, Search or Train; "
            "Activations, Neighbours or Steer on the feature page.", show_tab, TabArgs),
    Command("sae.show_summary", "Show a summary figure", "Draw one of the run's summary "
            "figures (anisotropy, recovery, importance vs reproducibility).", show_summary,
            SummaryArgs),
]


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the SAE commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)
