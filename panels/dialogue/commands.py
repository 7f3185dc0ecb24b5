"""The dialogue panel's actions as commands (``studio.commands``): open transcripts, choose a
transcript and a turn, search and go to the next hit, relabel, annotate or rewrite a turn,
export the transcripts, the per-turn metrics and the figure in front, run a ``scicl.*``
method and continue a dialogue from a turn; and, with the panel's window, show a tab, a
method's form or a run's figure.

Elements are named as the panel shows them: a transcript by its id (the list's text before
the turn count), a turn by its number in the table's ``turn`` column, a run's figure by its
line in the Figures list; so a logged command means the same on another file whose
transcripts have the same ids. Each turn edit is one ``SetTurnField`` pushed through
``host.push_edit`` (undo, redo, autosave). The functions act on a ``DialogueState``; tests
build one without a window and call ``registry.run``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from engine import provenance
from engine.io import FormatError
from panels.dialogue.model import DialogueModel, SetTurnField, decode
from panels.widgets.panel_state import DocumentState, Submit
from studio.commands import Command, CommandArgs, CommandRegistry, Refusal

SCOPE = "dialogue"
FORM_METHODS = ("scicl.simulate", "scicl.gain_map", "scicl.llm_dialogue", "scicl.reproduce")
RERUN_METHOD = "scicl.llm_dialogue"
TABS = ("beliefs", "run", "figures")
READ_ERRORS = (FormatError, ValueError, KeyError, OSError)


@dataclass
class DialogueState(DocumentState):
    """What the dialogue commands act on. ``view`` (the ``DialoguePanel``) is needed only by
    the commands that draw (figure export, tabs, forms, run figures)."""

    model: DialogueModel
    host: Any
    view: Any = None
    document: str | None = None     # whose edits this panel put on the history
    submit: Submit | None = None
    # the run figures offered in the Figures list: its line -> (run id, method, artifact)
    figures: dict[str, tuple[str, str, dict]] = field(default_factory=dict)


# -- arguments ---------------------------------------------------------------------------------


class PathArgs(CommandArgs):
    path: str = Field(description="the file's path")


class TranscriptArgs(CommandArgs):
    transcript: str = Field(description="the transcript's id, as the list shows it")


class TurnArgs(CommandArgs):
    transcript: str | None = Field(None, description="the transcript's id (default: the one "
                                                     "shown)")
    turn: int | None = Field(ge=0, description="the turn's number (the table's turn column); "
                                               "none: no turn chosen")


class SearchArgs(CommandArgs):
    query: str = Field(description="text to find in the turns, labels and notes (any case); "
                                   "empty: no search")


class _EditArgs(CommandArgs):
    transcript: str = Field(description="the transcript's id, as the list shows it")
    turn: int = Field(ge=0, description="the turn's number (the table's turn column)")


class LabelArgs(_EditArgs):
    label: str = Field(description="the turn's label (empty: none)")


class NoteArgs(_EditArgs):
    note: str = Field(description="the turn's note (empty: none)")


class TextArgs(_EditArgs):
    text: str = Field(description="the turn's new text")


class ExportFigureArgs(CommandArgs):
    path: str = Field(description="the figure's file: .png, .svg or .pdf")
    dpi: int = Field(192, ge=36, le=1200, description="resolution of a PNG")
    caption: bool = Field(False, description="the information line under the figure")


class RunArgs(CommandArgs):
    method: Literal[FORM_METHODS] = Field(description="the scicl method to run")
    params: dict = Field(default_factory=dict, description="its parameters (default: the "
                                                           "method's defaults)")


class ContinueArgs(CommandArgs):
    transcript: str | None = Field(None, description="the transcript's id (default: the one "
                                                     "shown)")
    turn: int | None = Field(None, ge=0, description="the last turn kept (default: the chosen "
                                                     "turn)")
    params: dict = Field(default_factory=dict, description="scicl.llm_dialogue's parameters "
                                                           "(models, turns, ...)")


class MethodArgs(CommandArgs):
    method: Literal[FORM_METHODS] = Field(description="the method whose form the Run tab shows")


class TabArgs(CommandArgs):
    tab: Literal[TABS] = Field(description="the tab beside the turns")


class FigureArgs(CommandArgs):
    figure: str = Field(description="the run's figure, as the Figures list names it")


# -- lookups: names the user sees -> the model's indices ---------------------------------------


def _file(state: DialogueState) -> str:
    if state.model.file is None:
        raise Refusal("no transcripts are open: open a transcript file first")
    return Path(state.model.file.path).name


def _transcript_index(state: DialogueState, transcript: str | None) -> int:
    """The index of the transcript named (``None``: the one shown)."""
    name = _file(state)
    if transcript is None:
        if state.model.transcript is None:
            raise Refusal(f"{name} holds no transcripts")
        return state.model.current
    for index, candidate in enumerate(state.model.transcripts):
        if candidate.id == transcript:
            return index
    ids = [t.id for t in state.model.transcripts]
    listed = ", ".join(repr(i) for i in ids[:8]) + (", …" if len(ids) > 8 else "")
    raise Refusal(f"no transcript {transcript!r} in {name} (its transcripts: {listed})")


def _turn(state: DialogueState, index: int, turn: int) -> int:
    transcript = state.model.transcripts[index]
    if not 0 <= turn < len(transcript.turns):
        raise Refusal(f"transcript {transcript.id!r} has no turn {turn} (turns 0 to "
                      f"{len(transcript.turns) - 1})")
    return turn


def _view(state: DialogueState, what: str) -> Any:
    if state.view is None:
        raise Refusal(f"cannot {what} without the panel's window")
    return state.view


# -- opening and choosing ----------------------------------------------------------------------


def listed_lines(numbers: list[int], shown: int = 10) -> str:
    """"lines 6, 9 and 12" (and how many more past ``shown``)."""
    head = ", ".join(str(n) for n in numbers[:shown])
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line{'s' if len(numbers) > 1 else ''} {head}{more}"


def open_transcripts(state: DialogueState, args: PathArgs) -> str:
    """Open a transcript file in place of the one shown (which leaves the undo history; its
    autosaved edits stay) and replay the new one's saved edits; the search starts over."""
    try:
        loaded = state.model.load(args.path)
    except READ_ERRORS as exc:  # FormatError and OSError name the file
        raise Refusal(str(exc) if args.path in str(exc) else f"{args.path}: {exc}") from None
    state.leave_document()
    state.document = state.model.document
    restore = getattr(state.host, "restore_edits", None)
    restored = 0
    if callable(restore):
        try:
            restored = restore(state.model.document, state.model, decode)
        except (ValueError, KeyError, IndexError) as exc:
            state.host.show_error("Saved edits do not fit these transcripts", str(exc))
    problems = loaded.problems
    skipped = f"; {len(problems)} malformed line(s) skipped: " \
              f"{listed_lines([n for n, _ in problems])} (first: {problems[0][1]})" \
        if problems else ""
    return (f"{Path(args.path).name}: {len(loaded.transcripts)} transcript(s), "
            f"{loaded.layout} layout{skipped}"
            + (f"; {restored} saved edit(s) restored" if restored else ""))


def select_transcript(state: DialogueState, args: TranscriptArgs) -> bool:
    state.model.select(_transcript_index(state, args.transcript))
    return True


def select_turn(state: DialogueState, args: TurnArgs) -> bool:
    """Choose a turn (marked on the belief plot; where a continued dialogue starts)."""
    index = _transcript_index(state, args.transcript)
    turn = None if args.turn is None else _turn(state, index, args.turn)
    if index != state.model.current:
        state.model.select(index)
    state.model.select_turn(turn)
    return True


def search(state: DialogueState, args: SearchArgs) -> bool:
    """Find the query in every turn's text, label and note; go to the first hit."""
    _file(state)
    if state.model.search(args.query):
        state.model.next_hit()
    return True


def next_hit(state: DialogueState, _args: None) -> bool:
    _file(state)
    if not state.model.hits:
        raise Refusal(f"no search hits to go to (search: {state.model.query!r})")
    state.model.next_hit()
    return True


# -- turn edits --------------------------------------------------------------------------------


def _edit(state: DialogueState, args: _EditArgs, field: str, value: str) -> bool:
    index = _transcript_index(state, args.transcript)
    turn = _turn(state, index, args.turn)
    edit: SetTurnField = state.model.edit(turn, field, value, args.transcript)
    if edit.value == edit.previous:
        what = {"content": "text"}.get(field, field)
        raise Refusal(f"turn {turn} of {args.transcript!r} has this {what} already")
    state.host.push_edit(state.model.document, edit, state.model)
    return True


def label_turn(state: DialogueState, args: LabelArgs) -> bool:
    return _edit(state, args, "label", args.label)


def annotate_turn(state: DialogueState, args: NoteArgs) -> bool:
    return _edit(state, args, "note", args.note)


def rewrite_turn(state: DialogueState, args: TextArgs) -> bool:
    return _edit(state, args, "content", args.text)


# -- exports -----------------------------------------------------------------------------------


def data_provenance(model: DialogueModel, view: dict) -> dict:
    """A record naming the open transcript file, and the run that wrote it if any."""
    path = Path(model.file.path) if model.file is not None else None
    run_dir = provenance.run_folder(path) if path is not None else None
    return provenance.record([path] if path is not None else [], view,
                             [provenance.run_entry(run_dir)] if run_dir else [])


def _export_data(state: DialogueState, path: str, what: str,
                 write: Callable[[str], Path]) -> str:
    """Write a data file, then its ``.provenance.json`` sidecar: the source file and the
    edits' state (every transcript, labels and notes as edited)."""
    _file(state)
    record = data_provenance(state.model, {"panel": "dialogue", "export": what,
                                           **state.model.view_state()})
    try:
        written = write(path)
        provenance.write_sidecar(written, record)
    except (OSError, ValueError) as exc:
        raise Refusal(f"{path}: {exc}" if path not in str(exc) else str(exc)) from None
    return f"Exported {written}"


def export_transcripts(state: DialogueState, args: PathArgs) -> str:
    return _export_data(state, args.path, "transcripts", state.model.export_jsonl)


def export_metrics(state: DialogueState, args: PathArgs) -> str:
    return _export_data(state, args.path, "per-turn metrics", state.model.export_metrics_csv)


def export_figure(state: DialogueState, args: ExportFigureArgs) -> Path:
    """The plot in front (the belief plot or a run's figure) with its provenance."""
    view = _view(state, "export the figure")
    try:
        return view.write_figure(args.path, args.dpi, args.caption)
    except (OSError, ValueError) as exc:
        raise Refusal(f"{args.path}: {exc}" if args.path not in str(exc) else str(exc)) \
            from None


# -- runs --------------------------------------------------------------------------------------


def _listed(state: DialogueState, method: str) -> None:
    listed = {m["id"] for m in state.host.methods()}
    if method not in listed:
        raise Refusal(f"the engine lists no {method} (is the engine running?)")


def run_method(state: DialogueState, args: RunArgs) -> str:
    """Submit a scicl method; its figures and its transcript come back to this panel."""
    _listed(state, args.method)
    state.send(args.method, dict(args.params), {})
    return f"Submitted {args.method}"


def continue_from_turn(state: DialogueState, args: ContinueArgs) -> str:
    """Submit ``scicl.llm_dialogue`` continuing a transcript after a turn (its text as
    edited): the transcript up to that turn is written to the workspace as the prefix."""
    index = _transcript_index(state, args.transcript)
    transcript = state.model.transcripts[index]
    turn = args.turn if args.turn is not None else \
        state.model.turn if index == state.model.current else None
    if turn is None:
        raise Refusal("choose a turn to continue from")
    _turn(state, index, turn)
    _listed(state, RERUN_METHOD)
    name = "".join(c if c.isalnum() else "_" for c in transcript.id)
    try:
        prefix = state.model.write_prefix(Path(scratch_folder(state.host))
                                          / f"prefix-{name}-{turn}.jsonl", turn, transcript.id)
    except (ValueError, OSError) as exc:
        raise Refusal(f"cannot write the dialogue's prefix: {exc}") from None
    params = {**args.params, "prefix_turns": turn + 1}
    state.send(RERUN_METHOD, params, {"prefix": str(prefix)})
    return f"Continuing {transcript.id} after turn {turn}…"


def scratch_folder(host: Any) -> str:
    """Where prefixes for reruns are written: the workspace when the shell says where."""
    workspace = getattr(host, "workspace_path", None)
    if callable(workspace):
        folder = Path(workspace()) / "dialogue"
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder)
    return tempfile.mkdtemp(prefix="studio-dialogue-")


# -- what is shown (the panel's window) --------------------------------------------------------


def choose_method(state: DialogueState, args: MethodArgs) -> bool:
    view = _view(state, "show a method's form")
    _listed(state, args.method)
    view.show_method(args.method)
    return True


def show_tab(state: DialogueState, args: TabArgs) -> bool:
    _view(state, "show a tab").show_tab(args.tab)
    return True


def show_figure(state: DialogueState, args: FigureArgs) -> bool:
    view = _view(state, "show a run's figure")
    if args.figure not in state.figures:
        known = ", ".join(repr(label) for label in state.figures) or "none yet"
        raise Refusal(f"no run figure {args.figure!r} (figures: {known})")
    problem = view.show_figure(args.figure)
    if problem:
        raise Refusal(problem)
    return True


# -- the registry ------------------------------------------------------------------------------

COMMANDS = [
    Command("dialogue.open", "Open transcripts", "Open a transcript file (JSONL chats, "
            "HH-RLHF pairs, per-turn CSV) in the dialogue panel.", open_transcripts, PathArgs,
            menu="Dialogue/Open transcripts…"),
    Command("dialogue.select_transcript", "Choose a transcript", "Show a transcript's turns "
            "and beliefs, by its id.", select_transcript, TranscriptArgs),
    Command("dialogue.select_turn", "Choose a turn", "Choose a turn (marked on the belief "
            "plot; where a continued dialogue starts).", select_turn, TurnArgs),
    Command("dialogue.search", "Search turns", "Find text in the turns, labels and notes and "
            "go to the first hit.", search, SearchArgs, log_last_only=True),
    Command("dialogue.next_hit", "Go to the next hit", "Go to the search's next hit (Enter "
            "in the search box).", next_hit),
    Command("dialogue.label_turn", "Label a turn", "Set a turn's label (sycophantic, "
            "honest, …).", label_turn, LabelArgs, undoable=True),
    Command("dialogue.annotate_turn", "Annotate a turn", "Set a turn's note.", annotate_turn,
            NoteArgs, undoable=True),
    Command("dialogue.rewrite_turn", "Rewrite a turn", "Replace a turn's text (then continue "
            "the dialogue from it).", rewrite_turn, TextArgs, undoable=True),
    Command("dialogue.export_transcripts", "Export the transcripts", "Write every transcript, "
            "edits included, as JSONL with a provenance sidecar.", export_transcripts,
            PathArgs),
    Command("dialogue.export_metrics", "Export the per-turn metrics", "Write each turn's "
            "role, label, note, belief and text as CSV with a provenance sidecar.",
            export_metrics, PathArgs),
    Command("dialogue.export_figure", "Export the dialogue figure", "The plot in front (the "
            "beliefs or a run's figure) as PNG, SVG or PDF with its provenance.",
            export_figure, ExportFigureArgs),
    Command("dialogue.run_method", "Run a scicl method", "Submit scicl.simulate, gain_map, "
            "llm_dialogue or reproduce with the parameters given.", run_method, RunArgs),
    Command("dialogue.continue_from_turn", "Continue the dialogue from a turn", "Rerun "
            "scicl.llm_dialogue from a (rewritten) turn of a transcript.", continue_from_turn,
            ContinueArgs),
    Command("dialogue.choose_method", "Show a method's form", "Show a scicl method's "
            "parameters in the Run tab.", choose_method, MethodArgs),
    Command("dialogue.show_tab", "Show a dialogue tab", "Beliefs, Run or Figures beside the "
            "turns.", show_tab, TabArgs),
    Command("dialogue.show_figure", "Show a run's figure", "Draw a figure a run made, as the "
            "Figures list names it.", show_figure, FigureArgs),
]


def register(registry: CommandRegistry) -> CommandRegistry:
    """Add the dialogue commands (again, for a panel rebuilt in the same window)."""
    return registry.add_all(COMMANDS)
