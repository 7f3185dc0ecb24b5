"""Content hashes: what documents are keyed by and what exports name their sources with."""

from __future__ import annotations

from pathlib import Path

from engine import content
from engine.content import content_hash
from engine.workspace import Workspace


def test_unchanged_files_are_hashed_once_and_large_ones_by_samples(
        tmp_path, workspace, monkeypatch) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    calls: list[Path] = []
    real = content._file_hash
    monkeypatch.setattr(content, "_file_hash",
                        lambda p, size: calls.append(p) or real(p, size))
    first = content_hash(path, workspace)
    assert content_hash(path, Workspace(workspace.root)) == first and len(calls) == 1

    monkeypatch.setattr(content, "SAMPLED_OVER", 1 << 16)  # "large" from 64 KiB up
    sampled = content._file_hash(path, path.stat().st_size)
    assert sampled.startswith("s") and sampled != first
    with open(path, "r+b") as stream:  # a byte in the last sampled block changes the hash
        stream.seek(path.stat().st_size - 1)
        stream.write(b"\x00")
    assert content._file_hash(path, path.stat().st_size) != sampled


def test_a_folder_document_is_its_files(tmp_path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "cfg.json").write_text("{}")
    (folder / ".swap").write_text("editor noise")
    before = content_hash(folder)
    (folder / ".swap").write_text("other noise")
    assert content_hash(folder) == before
    (folder / "cfg.json").write_text('{"d_sae": 8}')
    assert content_hash(folder) != before
