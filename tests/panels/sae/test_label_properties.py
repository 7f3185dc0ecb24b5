"""Property test of SAE feature labels (issue 20): hypothesis draws edit histories of the SAE
browser (choose an SAE of the run, choose a feature row, sort, type a label or a note and press
Enter, undo, redo, reopen the run, restart the app) on a tiny hand-made ``sae_pc1.train`` run
of two SAEs, through the window's real undo history and autosave, and after every step checks
that

- nothing raised and nothing was reported as an error;
- the labels and notes equal those of a fresh open of the run with the history's applied edits
  replayed (as their JSON, the way autosave keeps them);
- the feature page shows a feature of the SAE shown, with its label as the model holds it, and
  the table's current row is that feature;

and at the end that undoing everything leaves no label (reopen and restart: see
``tests.panels.edit_sessions``). The "ci" profile runs 25 derandomized examples."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from engine.io.sae import write_sae
from panels.sae.model import SAEBrowserModel, decode
from panels.sae.view import SAEPanel
from tests.panels.edit_sessions import EditSession, check_history

NAMES = ("L0-raw-s0", "L0-raw-s1")
D_IN, D_SAE, TOKENS = 4, 6, 12
FEATURE_COLUMNS = ["feature", "density", "importance", "reproducibility", "hungarian",
                   "top_tokens"]
TEXTS = ("", "rivers", "stone", "seen near water")

ACTIONS = st.one_of(
    st.tuples(st.just("sae"), st.integers(0, len(NAMES) - 1)),
    st.tuples(st.just("row"), st.integers(0, D_SAE - 1)),
    st.tuples(st.just("sort"), st.sampled_from(("feature", "importance", "label")),
              st.booleans()),
    st.tuples(st.just("type"), st.sampled_from(("label", "note")), st.sampled_from(TEXTS)),
    st.tuples(st.just("type"), st.just("label"), st.sampled_from(TEXTS)),
    st.tuples(st.just("undo")), st.tuples(st.just("undo")),
    st.tuples(st.just("redo")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("restart")),
)


def write_tiny_run(run: Path) -> Path:
    """A run folder as ``sae_pc1.train`` leaves it, for two SAEs of six features."""
    rng = np.random.default_rng(0)
    artifacts = run / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "tokens.json").write_text(json.dumps([f"w{i % 5}" for i in range(TOKENS)]))
    for name in NAMES:
        encoder = rng.normal(size=(D_IN, D_SAE)).astype(np.float32)
        folder = run / "checkpoints" / name
        folder.mkdir(parents=True)
        write_sae(folder, {"W_enc": encoder, "b_enc": np.zeros(D_SAE), "W_dec": encoder.T,
                           "b_dec": np.zeros(D_IN)}, {"architecture": "standard"})
        rows = [[f, 0.1 * (f + 1), float(D_SAE - f), 0.5, 0.5, f"w{f}"] for f in range(D_SAE)]
        others = [other for other in NAMES if other != name]
        (artifacts / f"{name}-features.json").write_text(json.dumps(
            {"columns": FEATURE_COLUMNS, "rows": rows, "other_seeds": others}))
        np.save(artifacts / f"{name}-code_indices.npy", rng.integers(0, D_SAE, (TOKENS, 2)))
        np.save(artifacts / f"{name}-code_values.npy",
                rng.random((TOKENS, 2)).astype(np.float32))
    return run


def state(model: SAEBrowserModel) -> dict:
    """Every label and note, without the features that have none."""
    return {(sae, feature): dict(fields) for sae, features in model.notes.items()
            for feature, fields in features.items() if fields}


def fresh_read(run: Path, commands=()) -> dict:
    model = SAEBrowserModel()
    model.open(run)
    for command in commands:
        decode(command.to_json()).apply(model)
    return state(model)


def act(panel: SAEPanel, action: tuple) -> None:
    """One user action, through the panel's own widgets."""
    name, *args = action
    if name == "sae":
        panel.sae_box.setCurrentIndex(args[0])
    elif name == "row":
        panel.table.selectRow(args[0])
    elif name == "sort":
        panel.sort_by(*args)
    elif name == "type":
        field, text = args
        editor = panel.label_edit if field == "label" else panel.note_edit
        editor.setText(text)
        editor.editingFinished.emit()  # Enter, or the focus leaving the box


def page_problem(panel: SAEPanel) -> str | None:
    """Where the feature page or the table shows what the model does not hold."""
    model, page = panel.model, panel.page
    if page is None or not 0 <= page.feature < len(model.table):
        return f"the page shows feature {page and page.feature} of {len(model.table)}"
    if panel.sae_box.currentText() != model.current_sae:
        return f"the SAE box says {panel.sae_box.currentText()}, not {model.current_sae}"
    held = model.notes.get(model.current_sae, {}).get(page.feature, {})
    shown = (panel.label_edit.text(), panel.note_edit.text())
    if shown != (held.get("label", ""), held.get("note", "")):
        return f"feature {page.feature} shows {shown}, holds {held}"
    row = panel.table.currentIndex().row()
    if panel.features.rowCount() != len(model.table) or \
            panel.features.feature_at(row) != page.feature:
        return f"the table's current row {row} is not feature {page.feature}"
    return None


@given(st.lists(ACTIONS, min_size=4, max_size=25))
def test_label_edit_histories_keep_the_labels_and_the_page_true(qapp, actions) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run = write_tiny_run(folder / "run")
        session = EditSession(folder, SAEPanel, lambda panel: panel.open_path(run))
        check_history(session, actions, act, state,
                      lambda commands: fresh_read(run, commands), page_problem)
