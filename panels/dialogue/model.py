"""The dialogue panel's state without Qt: transcripts, the chosen one and turn, search, the
per-turn belief series, and the undoable edits (relabel or annotate a turn).

Edits are plain command objects (``panels.api.EditCommand``); the view pushes them through
``host.push_edit`` so they join the window's undo history and autosave. ``decode`` turns their
JSON form back into commands (crash recovery). Tests drive this model without a window.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from engine.io.transcripts import Transcript, TranscriptFile, read_transcripts
from engine.io.transcripts import write_jsonl as write_transcripts_jsonl
from engine.io.transcripts import write_metrics_csv as write_csv
from panels.lab.model import Events

# Per-turn numbers a transcript may carry, by priority: scored beliefs (scicl), then the CSV
# layout's named columns, then a raw score.
BELIEF_KEYS = ("belief", "belief_user", "belief_assistant", "score")
SIDE_KEYS = {"belief_user": "user belief", "belief_assistant": "assistant belief",
             "posterior": "relational posterior"}
EDITABLE_FIELDS = ("label", "note", "content")
METRIC_COLUMNS = ["transcript", "turn", "role", "label", "note", "belief", "content"]


@dataclass
class SetTurnField:
    """Set a turn's ``label``, ``note`` or ``content`` (old value kept for undo)."""

    transcript: str
    turn: int
    field: str
    value: str
    previous: str = ""

    @property
    def label(self) -> str:
        verb = {"label": "Relabel", "note": "Annotate"}.get(self.field, "Rewrite")
        return f"{verb} turn {self.turn} of {self.transcript}"

    def apply(self, model: DialogueModel) -> None:
        model.set_turn_field(self.transcript, self.turn, self.field, self.value)

    def revert(self, model: DialogueModel) -> None:
        model.set_turn_field(self.transcript, self.turn, self.field, self.previous)

    def to_json(self) -> dict:
        return {"type": "set_turn_field", "transcript": self.transcript, "turn": self.turn,
                "field": self.field, "value": self.value, "previous": self.previous}


def decode(data: dict) -> SetTurnField:
    """A saved edit back as a command (``host.restore_edits``)."""
    if data.get("type") != "set_turn_field":
        raise ValueError(f"not a dialogue edit: {data.get('type')!r}")
    return SetTurnField(str(data["transcript"]), int(data["turn"]), str(data["field"]),
                        str(data["value"]), str(data.get("previous", "")))


class DialogueModel:
    """Events: ``loaded`` (), ``selected`` (index), ``turn_selected`` (turn),
    ``turn_changed`` (transcript, turn), ``search`` (hits)."""

    def __init__(self) -> None:
        self.file: TranscriptFile | None = None
        self.current = -1
        self.turn: int | None = None   # the chosen turn of the chosen transcript
        self.query = ""                # what was searched for last
        self.hits: list[tuple[int, int]] = []
        self.hit_index = -1            # the hit last gone to (``next_hit``)
        self.events = Events("loaded", "selected", "turn_selected", "turn_changed", "search")

    # -- loading -------------------------------------------------------------------------

    @property
    def transcripts(self) -> list[Transcript]:
        return self.file.transcripts if self.file else []

    @property
    def document(self) -> str:
        """The id of the edit history (one per opened file)."""
        return f"dialogue:{self.file.path}" if self.file else "dialogue:"

    def load(self, path: str | os.PathLike, limit: int | None = None) -> TranscriptFile:
        """Raises ``FormatError`` naming the file; bad lines end up in ``file.problems``."""
        self.file = read_transcripts(path, limit=limit)
        self.query = ""
        self.hits = []
        self.hit_index = -1
        self.events.emit("loaded")
        self.select(0)
        return self.file

    def select(self, index: int) -> None:
        if not 0 <= index < len(self.transcripts):
            raise IndexError(f"no transcript {index}")
        self.current = index
        self.turn = None
        self.events.emit("selected", index=index)

    def select_turn(self, turn: int | None) -> None:
        """Choose a turn of the chosen transcript (``None``: none)."""
        transcript = self.transcript
        if turn is not None and (transcript is None or not 0 <= turn < len(transcript.turns)):
            raise IndexError(f"no turn {turn}")
        self.turn = turn
        self.events.emit("turn_selected", turn=turn)

    @property
    def transcript(self) -> Transcript | None:
        return self.transcripts[self.current] if 0 <= self.current < len(self.transcripts) \
            else None

    def find(self, transcript_id: str) -> Transcript:
        for transcript in self.transcripts:
            if transcript.id == transcript_id:
                return transcript
        raise KeyError(f"no transcript {transcript_id!r}")

    # -- edits ---------------------------------------------------------------------------

    def edit(self, turn: int, field: str, value: str,
             transcript_id: str | None = None) -> SetTurnField:
        """The command that sets ``field`` of a turn of the transcript named (default: the
        current one)."""
        if field not in EDITABLE_FIELDS:
            raise ValueError(f"only {EDITABLE_FIELDS} can be edited, not {field!r}")
        transcript = self.transcript if transcript_id is None else self.find(transcript_id)
        if transcript is None:
            raise ValueError("no transcript is open")
        chosen = transcript.turns[turn]
        previous = chosen.content if field == "content" else str(chosen.meta.get(field) or "")
        return SetTurnField(transcript.id, turn, field, value, previous)

    def set_turn_field(self, transcript_id: str, turn: int, field: str, value: str) -> None:
        chosen = self.find(transcript_id).turns[turn]
        if field == "content":
            chosen.content = value
        elif value:
            chosen.meta[field] = value
        else:
            chosen.meta.pop(field, None)
        self.events.emit("turn_changed", transcript=transcript_id, turn=turn)

    # -- search and series ---------------------------------------------------------------

    def search(self, query: str) -> list[tuple[int, int]]:
        """(transcript index, turn index) of every turn whose text, label or note contains
        ``query`` (case-insensitive); the current transcript's hits first."""
        needle = query.strip().lower()
        hits: list[tuple[int, int]] = []
        if needle:
            order = sorted(range(len(self.transcripts)), key=lambda i: i != self.current)
            for index in order:
                for number, turn in enumerate(self.transcripts[index].turns):
                    haystack = " ".join([turn.content, str(turn.meta.get("label", "")),
                                         str(turn.meta.get("note", ""))]).lower()
                    if needle in haystack:
                        hits.append((index, number))
        self.query = query
        self.hits = hits
        self.hit_index = -1
        self.events.emit("search", hits=hits)
        return hits

    def next_hit(self) -> tuple[int, int] | None:
        """Go to the next search hit (round to the first after the last): its transcript and
        turn chosen; ``None`` when there are no hits."""
        if not self.hits:
            return None
        self.hit_index = (self.hit_index + 1) % len(self.hits)
        transcript, turn = self.hits[self.hit_index]
        if transcript != self.current:
            self.select(transcript)
        self.select_turn(turn)
        return transcript, turn

    def belief_series(self) -> dict[str, tuple[list[int], list[float]]]:
        """Named (turn indices, values) to plot: both sides' beliefs where the turns carry
        them (a simulated dialogue's per-turn CSV), else one belief per role (scored
        transcripts); empty when the turns carry no numbers (e.g. an unscored HH pair)."""
        transcript = self.transcript
        if transcript is None:
            return {}
        series: dict[str, tuple[list[int], list[float]]] = {}

        def add(name: str, x: int, value) -> None:
            if _finite(value):
                xs, ys = series.setdefault(name, ([], []))
                xs.append(x)
                ys.append(float(value))

        for number, turn in enumerate(transcript.turns):
            x = int(turn.meta.get("turn", number)) if _finite(turn.meta.get("turn")) else number
            if any(key in turn.meta for key in SIDE_KEYS):
                for key, name in SIDE_KEYS.items():
                    add(name, x, turn.meta.get(key))
            else:
                add(turn.role or "turn", x, turn_belief(turn.meta))
        return series

    # -- provenance ----------------------------------------------------------------------

    def metric_keys(self) -> list[str]:
        """The per-turn numbers the current transcript's belief plot draws (``BELIEF_KEYS``
        and the sides of a simulated dialogue), in the order the plot prefers them."""
        transcript = self.transcript
        present = {key for turn in (transcript.turns if transcript else [])
                   for key, value in turn.meta.items() if _finite(value)}
        return [key for key in (*BELIEF_KEYS, *SIDE_KEYS) if key in present]

    def view_state(self, turn: int | None = None) -> dict:
        """What a figure or an export of this file shows, for its provenance: the file's
        layout and skipped lines, the transcript and turn selected, the metric plotted."""
        if self.file is None:
            return {}
        transcript = self.transcript
        state: dict = {"layout": self.file.layout, "transcripts": len(self.transcripts),
                       "skipped_lines": [line for line, _ in self.file.problems],
                       "metric": self.metric_keys()}
        if transcript is not None:
            state.update(transcript=transcript.id, transcript_index=self.current,
                         turns=len(transcript.turns))
            if turn is not None and 0 <= turn < len(transcript.turns):
                state.update(selected_turn=turn, selected_role=transcript.turns[turn].role,
                             selected_belief=turn_belief(transcript.turns[turn].meta))
        return state

    # -- export --------------------------------------------------------------------------

    def write_prefix(self, path: str | os.PathLike, turn: int,
                     transcript_id: str | None = None) -> Path:
        """A transcript (default: the current one) up to and including ``turn``: where a
        rerun starts."""
        transcript = self.transcript if transcript_id is None else self.find(transcript_id)
        if transcript is None or not 0 <= turn < len(transcript.turns):
            raise ValueError("choose a turn of an open transcript first")
        kept = Transcript(transcript.id, transcript.turns[:turn + 1], dict(transcript.meta))
        return write_transcripts_jsonl(path, [kept])

    def export_jsonl(self, path: str | os.PathLike) -> Path:
        return write_transcripts_jsonl(path, self.transcripts)

    def export_metrics_csv(self, path: str | os.PathLike) -> Path:
        rows = [[t.id, number, turn.role, turn.meta.get("label", ""),
                 turn.meta.get("note", ""), _or_nan(turn_belief(turn.meta)), turn.content]
                for t in self.transcripts for number, turn in enumerate(t.turns)]
        return write_csv(path, METRIC_COLUMNS, rows)


def turn_belief(meta: dict) -> float | None:
    for key in BELIEF_KEYS:
        if _finite(meta.get(key)):
            return float(meta[key])
    return None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value
