"""A run's samples opened for inspection (``MoleculeSetModel.load_invalid``) are read whole
or refused naming the file: a ``.csv.gz`` was cut at the inspection limit, and after its first
gzip member, without a word (review of issue 22)."""

from __future__ import annotations

import gzip

import pytest

from engine.io import FormatError
from panels.molecules import model as molecules_model
from panels.molecules.model import MoleculeSetModel

ROWS = "".join(f"kcgm,C1CC{i},False\n" for i in range(400))


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
    assert model.entries[-1].smiles == "C1CC399"


def test_a_truncated_gzip_sample_file_names_the_file(tmp_path):
    samples = tmp_path / "generated.csv.gz"
    samples.write_bytes(gzip.compress(("model,smiles,valid\n" + ROWS).encode())[:-40])
    with pytest.raises(FormatError) as caught:  # its trailer is cut: read until the cut
        MoleculeSetModel().load_invalid(samples)
    assert str(caught.value).startswith(str(samples))
