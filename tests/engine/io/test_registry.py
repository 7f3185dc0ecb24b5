"""Every reader: good files inspected; truncated, empty, wrong-type and hostile files refused
with a FormatError naming the file."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.io import FormatError, detect, inspect_file
from engine.io.arrays import read_npy, read_safetensors
from engine.io.tables import read_table


@pytest.fixture
def files(tmp_path):
    from safetensors.numpy import save_file

    paths = {}
    paths["npy"] = tmp_path / "a.npy"
    np.save(paths["npy"], np.arange(12, dtype=np.int16).reshape(3, 4))
    paths["npz"] = tmp_path / "a.npz"
    np.savez(paths["npz"], x=np.zeros(3), y=np.ones((2, 2)))
    paths["safetensors"] = tmp_path / "w.safetensors"
    save_file({"w": np.ones((4, 5), dtype=np.float32)}, str(paths["safetensors"]))
    paths["csv"] = tmp_path / "t.csv"
    paths["csv"].write_text("name,value,score\na,1,0.5\nb,2,0.7\n")
    paths["parquet"] = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), paths["parquet"])
    paths["jsonl"] = tmp_path / "t.jsonl"
    paths["jsonl"].write_text('{"score": 1, "label": "a"}\n{"score": 2, "label": "b"}\n')
    return paths


def test_good_files_are_detected_and_inspected(files):
    expected = {"npy": {"shape": [3, 4], "dtype": "int16"}, "npz": {"arrays": 2},
                "safetensors": {"tensors": 1, "parameters": 20}, "csv": {"rows": 2, "columns": 3},
                "parquet": {"rows": 3, "columns": 1}, "jsonl": {"rows": 2, "columns": 2}}
    for name, path in files.items():
        report = inspect_file(path)
        assert report["format"] == name
        assert report["summary"] == expected[name]
        json.dumps(report)


def test_content_beats_a_wrong_extension(files, tmp_path):
    disguised = tmp_path / "really_numpy.dat"
    disguised.write_bytes(files["npy"].read_bytes())
    assert detect(disguised).name == "npy"
    parquet_as_csv = tmp_path / "x.csv"
    parquet_as_csv.write_bytes(files["parquet"].read_bytes())
    assert detect(parquet_as_csv).name == "parquet"


@pytest.mark.parametrize("name", ["npy", "npz", "safetensors", "parquet", "jsonl", "csv"])
def test_truncated_files_are_refused_by_name(files, name):
    path = files[name]
    data = path.read_bytes()
    path.write_bytes(data[: max(9, len(data) // 3)] if name != "csv" else data[:-6])
    with pytest.raises(FormatError) as error:
        inspect_file(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("suffix", [".npy", ".safetensors", ".csv", ".parquet", ".jsonl"])
def test_empty_files_are_refused(tmp_path, suffix):
    path = tmp_path / f"empty{suffix}"
    path.write_bytes(b"")
    with pytest.raises(FormatError, match="empty"):
        inspect_file(path)


def test_unknown_and_wrong_type_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(FormatError, match="unknown format"):
        inspect_file(text)
    binary = tmp_path / "image.npy"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)
    with pytest.raises(FormatError, match=str(binary)):
        inspect_file(binary)
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    with pytest.raises(FormatError):
        inspect_file(folder)


def test_pickled_arrays_are_never_unpickled(tmp_path):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(FormatError, match="unpickle"):
        read_npy(path)
    hostile = tmp_path / "hostile.npz"
    np.savez(hostile, x=np.array([object()], dtype=object))
    with pytest.raises(FormatError):
        inspect_file(hostile)
    raw_pickle = tmp_path / "model.safetensors"
    raw_pickle.write_bytes(pickle.dumps({"w": [1, 2, 3]}))
    with pytest.raises(FormatError):
        inspect_file(raw_pickle)


def test_hostile_safetensors_headers(tmp_path):
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(FormatError, match="does not fit"):
        read_safetensors(huge)
    past_end = tmp_path / "past.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}})
    past_end.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\x00" * 8)
    with pytest.raises(FormatError, match="past the end"):
        read_safetensors(past_end)


def test_jsonl_bad_lines_are_skipped_and_named_and_none_readable_is_refused(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n[1, 2]\n{"a": 4}\n')
    problems: list[str] = []
    assert read_table(path, problems).column("a").to_pylist() == [1, 4]
    assert problems[0].startswith("line 2: not JSON")
    assert problems[1] == "line 3: expected a JSON object"
    report = inspect_file(path)
    assert report["summary"] == {"rows": 2, "columns": 1, "skipped": 2}
    assert report["metadata"]["problems"] == problems
    path.write_text('{"a": \n[1, 2]\n')
    with pytest.raises(FormatError, match=r"no readable line \(line 1: not JSON"):
        read_table(path)


def test_npy_opens_memory_mapped(files):
    array = read_npy(files["npy"])
    assert isinstance(array, np.memmap)


def test_text_named_npy_is_called_what_it_is(tmp_path):
    path = tmp_path / "notes.npy"
    path.write_text("just some text, not an array\n" * 10)
    with pytest.raises(FormatError, match="no NPY header"):
        read_npy(path)


def test_parquet_is_read_by_content_whatever_its_suffix(files, tmp_path):
    renamed = tmp_path / "adult.parquet.brotli"
    renamed.write_bytes(files["parquet"].read_bytes())
    assert read_table(renamed).num_rows == 3
    assert inspect_file(renamed)["format"] == "parquet"


def test_a_broken_format_plugin_is_skipped_and_recorded(monkeypatch):
    from importlib.metadata import EntryPoint

    import engine.io as io_registry

    broken = EntryPoint("broken", "engine.io.no_such_module", io_registry.GROUP)
    real = io_registry.entry_points(group=io_registry.GROUP)
    monkeypatch.setattr(io_registry, "entry_points", lambda group: [*real, broken])
    io_registry.all_formats.cache_clear()
    try:
        names = {fmt.name for fmt in io_registry.all_formats()}
        assert {"npy", "csv"} <= names
        assert "ModuleNotFoundError" in io_registry.LOAD_ERRORS["engine.io.no_such_module"]
    finally:
        io_registry.all_formats.cache_clear()
        io_registry.LOAD_ERRORS.pop("engine.io.no_such_module", None)


def test_chats_open_as_transcripts_whatever_their_suffix_and_tables_as_tables(tmp_path):
    """One rule for File > Open, the command line and drops: a chat JSONL went to the lab as
    a 15x4 table."""
    from engine.io import detect

    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "user", "content": "hi"}, '
                    '{"role": "assistant", "content": "hello"}]}\n')
    turns = tmp_path / "turns.jsonl"
    turns.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "b"}\n')
    table = tmp_path / "table.jsonl"
    table.write_text('{"role": "admin", "x": 1}\n{"role": "user", "x": 2}\n')
    assert (detect(chat).name, detect(chat).panel) == ("transcripts", "dialogue")
    assert detect(turns).name == "transcripts"
    assert (detect(table).name, detect(table).panel) == ("jsonl", "lab")

