"""Files that parse but lie: safetensors headers against the file and the dtype list, and
non-finite coordinates in molecule files, refused or flagged with the line."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from engine.io import FormatError, inspect_file
from engine.io.arrays import safetensors_header
from engine.io.molecules import read_molecules


def _safetensors(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("header, data, problem", [
    ({"w": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4096]}},
     bytes(4096), "claims shape"),
    ({"w": {"dtype": "X99", "shape": [2], "data_offsets": [0, 8]}}, bytes(8),
     "unknown dtype 'X99'"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), "overlaps"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(16),
     "belong to none"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8),
     "valid dtype, shape"),
])
def test_lying_safetensors_are_refused_naming_the_file(tmp_path, header, data, problem):
    path = tmp_path / "liar.safetensors"
    _safetensors(path, header, data)
    with pytest.raises(FormatError, match=problem) as caught:
        inspect_file(path)
    assert str(caught.value).startswith(str(path))


def test_honest_safetensors_pass(tmp_path):
    path = tmp_path / "ok.safetensors"
    save_file({"a": np.zeros((3, 4), np.float32), "b": np.ones(5, np.int64)}, str(path))
    assert set(safetensors_header(path)) >= {"a", "b"}
    assert inspect_file(path)["summary"]["parameters"] == 17


def test_pdb_nan_coordinates_are_flagged_with_the_line(tmp_path):
    good = "ATOM      1  CA  ALA A   1      11.104   6.134  -6.504  1.00  0.00           C"
    bad = "ATOM      2  CA  ALA A   2         nan   6.134  -6.504  1.00  0.00           C"
    path = tmp_path / "x.pdb"
    path.write_text(f"{good}\n{bad}\n")
    found = read_molecules(path)
    assert len(found.records[0].atoms) == 1
    assert found.problems == [("line 2", "coordinates are not finite (nan, 6.134, -6.504)")]
    path.write_text(f"{bad}\n")
    with pytest.raises(FormatError, match="line 1: coordinates are not finite"):
        read_molecules(path)


def test_checkpoint_folder_is_a_format_read_from_headers(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "cfg.json").write_text('{"model": "hybrid_lm", "d_model": 8}')
    save_file({"emb": np.zeros((10, 8), np.float32)}, str(folder / "model.safetensors"))
    report = inspect_file(folder)
    assert report["format"] == "checkpoint"
    assert report["summary"] == {"model": "hybrid_lm", "config": "cfg.json", "tensors": 1,
                                 "parameters": 80}
    _safetensors(folder / "model.safetensors",
                 {"emb": {"dtype": "F32", "shape": [10**9], "data_offsets": [0, 320]}},
                 bytes(320))
    with pytest.raises(FormatError, match="claims shape"):
        inspect_file(folder)
