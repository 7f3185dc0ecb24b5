"""Property test of transcripts (issue 20): hypothesis draws edit histories of the dialogue panel
(choose a transcript, type a turn's label, note or text into its cell, search, go to the next
hit, undo, redo, reopen the file, restart the app) on a small JSONL file, through the window's
real undo history and autosave, and after every step checks that

- nothing raised and nothing was reported as an error;
- the transcripts equal a fresh read of the file with the history's applied edits replayed (as
  their JSON, the way autosave keeps them);
- the table shows the chosen transcript's turns as the model holds them (text, label, note:
  issue 20, finding 5 blanked the text);
- the chosen transcript, the list's and the table's current rows and every search hit exist,
  and the hit count speaks of the file shown;

and at the end that undoing everything gives the file as read (reopen and restart: see
``tests.panels.edit_sessions``). The "ci" profile runs 25 derandomized examples (a few seconds)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from panels.dialogue.model import DialogueModel, decode
from panels.dialogue.view import COL_CONTENT, COL_LABEL, COL_NOTE, DialoguePanel
from tests.panels.edit_sessions import EditSession, check_history

LINES = [
    {"transcript": "plan", "role": "user", "content": "is my plan good?"},
    {"transcript": "plan", "role": "assistant", "content": "yes, a great plan",
     "label": "sycophantic"},
    {"transcript": "plan", "role": "user", "content": "thanks"},
    {"transcript": "risks", "role": "user", "content": "is my plan good?"},
    {"transcript": "risks", "role": "assistant", "content": "it has risks", "note": "honest"},
]
COLUMNS = {"content": COL_CONTENT, "label": COL_LABEL, "note": COL_NOTE}
TEXTS = ("", "agrees", "plan", "it has risks", "Great")

ACTIONS = st.one_of(
    st.tuples(st.just("choose"), st.integers(0, 1)),
    st.tuples(st.just("type"), st.integers(0, 2), st.sampled_from(sorted(COLUMNS)),
              st.sampled_from(TEXTS)),
    st.tuples(st.just("type"), st.integers(0, 2), st.just("label"), st.sampled_from(TEXTS)),
    st.tuples(st.just("search"), st.sampled_from(("", "plan", "RISKS", "agrees", "zzz"))),
    st.tuples(st.just("next hit")),
    st.tuples(st.just("undo")), st.tuples(st.just("undo")),
    st.tuples(st.just("redo")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("restart")),
)


def state(model: DialogueModel) -> list[tuple]:
    return [(t.id, [(turn.content, turn.meta.get("label", ""), turn.meta.get("note", ""))
                    for turn in t.turns]) for t in model.transcripts]


def fresh_read(path: Path, commands=()) -> list[tuple]:
    model = DialogueModel()
    model.load(path)
    for command in commands:
        decode(command.to_json()).apply(model)
    return state(model)


def view_problem(panel: DialoguePanel) -> str | None:
    """Where the panel shows something the model does not hold, or refers to nothing."""
    model, table = panel.model, panel.turns_table
    if not 0 <= model.current < len(model.transcripts):
        return f"transcript {model.current} of {len(model.transcripts)} chosen"
    if panel.transcript_list.currentRow() != model.current:
        return f"the list shows {panel.transcript_list.currentRow()}, not {model.current}"
    turns = model.transcript.turns
    if table.rowCount() != len(turns) or table.currentRow() >= table.rowCount():
        return f"the table has {table.rowCount()} rows (current {table.currentRow()})"
    for row, turn in enumerate(turns):
        shown = tuple(table.item(row, column).text() for column in COLUMNS.values())
        held = (turn.content, turn.meta.get("label", ""), turn.meta.get("note", ""))
        if shown != held:
            return f"row {row} shows {shown}, the turn holds {held}"
    for transcript, turn in model.hits:
        if not (0 <= transcript < len(model.transcripts)
                and 0 <= turn < len(model.transcripts[transcript].turns)):
            return f"a hit at ({transcript}, {turn}) that does not exist"
    counted = f"{len(model.hits)} hit(s)" if panel.search_edit.text().strip() else ""
    if panel.hits_label.text() != counted:
        return f"the hit count says {panel.hits_label.text()!r}, not {counted!r}"
    return None


def act(panel: DialoguePanel, action: tuple) -> None:
    """One user action, through the panel's own widgets and handlers."""
    name, *args = action
    if name == "choose":
        panel.transcript_list.setCurrentRow(args[0])
    elif name == "type":
        turn, column, text = args
        row = turn % panel.turns_table.rowCount()
        panel.turns_table.item(row, COLUMNS[column]).setText(text)
    elif name == "search":
        panel.search_edit.setText(args[0])
    elif name == "next hit":
        panel.next_hit()


@given(st.lists(ACTIONS, min_size=4, max_size=25))
@example([("type", 1, "label", "agrees"), ("undo",), ("redo",), ("reopen",)])  # finding 5
@example([("search", "plan"), ("choose", 1), ("reopen",), ("next hit",)])  # a stale count
def test_transcript_edit_histories_keep_the_file_the_table_and_the_hits_true(qapp, actions
                                                                             ) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "chats.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
        session = EditSession(folder, DialoguePanel, lambda panel: panel.open_file(path))
        check_history(session, actions, act, state,
                      lambda commands: fresh_read(path, commands), view_problem)
