"""A run's samples opened for inspection (``MoleculeSetModel.load_invalid``) are read whole
or refused naming the file: a ``.csv.gz`` was cut at the inspection limit, and after its first
gzip member, without a word (review of issue 22)."""

from __future__ import annotations

import gzip

import pytest

from engine.io import FormatError
from panels.molecules import model as molecules_model
from panels.molecules.model import MoleculeSetModel

SMILES = [f"C9{'C' * (i % 50)}N" for i in range(400)]  # ring bond 9 never closed: invalid
ROWS = "".join(f"kcgm,{smiles},False\n" for smiles in SMILES)


def test_a_gzip_sample_file_over_the_limit_is_refused_not_cut(tmp_path, monkeypatch):
    samples = tmp_path / "generated.csv.gz"
    samples.write_bytes(gzip.compress(("model,smiles,valid\n" + ROWS).encode()))
    assert MoleculeSetModel().load_invalid(samples) == 400  # within the limit: every row
    monkeypatch.setattr(molecules_model, "INSPECT_LIMIT_BYTES", 4096)
    with pytest.raises(FormatError) as caught:
        MoleculeSetModel().load_invalid(samples)
    assert str(caught.value).startswith(str(samples))
    assert "inspected sample by sample" in str(caught.value)


def test_every_gzip_member_of_a_sample_file_is_read(tmp_path):
    samples = tmp_path / "generated.csv.gz"
    samples.write_bytes(gzip.compress(b"model,smiles,valid\n" + ROWS[:200].encode())
                        + gzip.compress(ROWS[200:].encode()))
    model = MoleculeSetModel()
    assert model.load_invalid(samples) == ROWS.count("\n")
    assert [entry.smiles for entry in model.entries] == SMILES


def test_a_truncated_gzip_sample_file_names_the_file(tmp_path):
    samples = tmp_path / "generated.csv.gz"
    samples.write_bytes(gzip.compress(("model,smiles,valid\n" + ROWS).encode())[:-40])
    with pytest.raises(FormatError) as caught:  # its trailer is cut: read until the cut
        MoleculeSetModel().load_invalid(samples)
    assert str(caught.value).startswith(str(samples))


def test_a_runs_samples_are_parsed_off_the_main_thread(panel, qtbot, tmp_path, monkeypatch):
    """Review of issue 22: the samples of a run without a valid molecule were parsed on the
    Qt main thread. They are read on a worker; the set opens when they are read."""
    import threading

    from panels.molecules import view as molecules_view

    parsed_on: list[bool] = []

    def watched(path):
        parsed_on.append(threading.current_thread() is threading.main_thread())
        return molecules_model.read_samples(path)

    monkeypatch.setattr(molecules_view, "read_samples", watched)
    samples = tmp_path / "generated.csv"
    samples.write_text("model,smiles,valid\n" + ROWS)
    assert panel.open_output(samples)
    assert "reading its samples" in panel.status.text()
    qtbot.waitUntil(lambda: len(panel.model.entries) == 400, timeout=10_000)
    assert parsed_on == [False] and panel.model.inspecting
    assert "none is a valid molecule" in panel.status.text()
