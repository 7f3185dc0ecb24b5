"""``.studio`` session files: written atomically, read back, inspected, and every bad file
refused naming it (or opened with what was left out listed), never a crash. No Qt."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from engine.io import FormatError, detect, inspect_file
from engine.io.session_file import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    THUMBNAIL,
    read_session,
    write_session,
)

PNG = (b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (64).to_bytes(4, "big")
       + (40).to_bytes(4, "big") + b"\x08\x02\x00\x00\x00" + b"\x00" * 8)


def _manifest(**extra) -> dict:
    return {"app_version": "0.1.0", "created": "2026-12-02T16:00:00Z",
            "documents": [{"path": "/data/a.def", "relative": "a.def", "fingerprint": "f12",
                           "kind": "routing", "panel": "routing", "document": "routing:/data/a.def",
                           "size": 10}],
            "panels": [{"id": "routing", "view_state": {"zoom": 2}}],
            "runs": ["20261202-160000-abcdef"], "layout": {},
            "edits": {"routing:/data/a.def": {"identity": "routing@f12",
                                               "applied": [{"type": "move"}],
                                               "redoable": []}}, **extra}


def _zip(path: Path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _raw(manifest: dict) -> bytes:
    return json.dumps({"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                       **manifest}).encode()


def test_write_then_read_and_inspect(tmp_path):
    path = write_session(tmp_path / "s.studio", _manifest(), PNG)
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    contents = read_session(path)
    assert contents.manifest["format"] == FORMAT_NAME
    assert contents.panels[0]["view_state"] == {"zoom": 2}
    assert contents.thumbnail == PNG and contents.problems == []
    assert detect(path).name == FORMAT_NAME
    report = inspect_file(path)
    assert report["format"] == FORMAT_NAME
    summary = report["summary"]
    assert summary["panels"] == "routing" and summary["documents"] == 1
    assert summary["edits"] == 1 and summary["thumbnail"] == "64x40"
    assert "/data/a.def" in summary["document 1"]


def test_a_write_that_fails_leaves_the_old_session(tmp_path):
    path = write_session(tmp_path / "s.studio", _manifest())
    before = path.read_bytes()
    with pytest.raises(ValueError):  # NaN is not JSON: nothing is half-written
        write_session(path, _manifest(layout={"zoom": float("nan")}))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.studio"]


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.95])
def test_a_truncated_session_is_refused_naming_the_file(tmp_path, cut):
    data = write_session(tmp_path / "full.studio", _manifest(), PNG).read_bytes()
    path = tmp_path / "cut.studio"
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(FormatError) as error:
        read_session(path)
    assert str(error.value).startswith(str(path))


def test_a_corrupt_member_is_refused(tmp_path):
    path = write_session(tmp_path / "s.studio", _manifest())
    data = bytearray(path.read_bytes())
    start = data.index(b"PK\x03\x04") + 30 + len(MANIFEST)  # the manifest's compressed bytes
    for i in range(start + 5, start + 25):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="damaged|not JSON|not a readable"):
        read_session(path)


def test_empty_and_non_zip_files_are_refused(tmp_path):
    for name, data in (("empty.studio", b""), ("text.studio", b"hello"),
                       ("png.studio", PNG)):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(FormatError) as error:
            read_session(path)
        assert str(error.value).startswith(str(path))
    with pytest.raises(FormatError, match="no such file"):
        read_session(tmp_path / "nowhere.studio")


def test_a_zip_bomb_is_refused_before_it_expands(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_DECOMPRESSED_BYTES", str(32 * 1024 * 1024))
    path = tmp_path / "bomb.studio"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MANIFEST, _raw(_manifest()))
        with archive.open("padding.bin", "w", force_zip64=True) as member:
            block = b"\0" * (1 << 20)
            for _ in range(40):
                member.write(block)
    assert path.stat().st_size < 200_000
    with pytest.raises(FormatError, match="STUDIO_MAX_DECOMPRESSED_BYTES"):
        read_session(path)


def test_a_manifest_that_would_expand_past_the_ratio_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_JSON_BYTES", str(200 * 1024 * 1024))
    padding = " " * (80 * 1024 * 1024)
    text = _raw(_manifest())[:-1] + b', "pad": "' + padding.encode() + b'"}'
    path = _zip(tmp_path / "ratio.studio", {MANIFEST: text})
    with pytest.raises(FormatError, match="ratio|STUDIO_MAX"):
        read_session(path)


def test_a_newer_format_is_refused_saying_which(tmp_path):
    newer = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION + 1,
             "app_version": "9.0"}
    path = _zip(tmp_path / "new.studio", {MANIFEST: json.dumps(newer).encode()})
    with pytest.raises(FormatError) as error:
        read_session(path)
    message = str(error.value)
    assert message.startswith(str(path)) and "9.0" in message and "update Studio" in message


@pytest.mark.parametrize("manifest, expected", [
    ({"format": "something else", "format_version": 1}, "not a Studio session"),
    ({"format": FORMAT_NAME}, "format_version"),
    ({"format": FORMAT_NAME, "format_version": "1"}, "format_version"),
    ({"format": FORMAT_NAME, "format_version": 1, "panels": {"a": 1}}, "panels is a dict"),
    ([1, 2, 3], "not a Studio session"),
])
def test_a_manifest_of_the_wrong_shape_is_refused(tmp_path, manifest, expected):
    path = _zip(tmp_path / "odd.studio", {MANIFEST: json.dumps(manifest).encode()})
    with pytest.raises(FormatError, match=expected):
        read_session(path)


def test_no_manifest_deep_json_and_too_many_members(tmp_path):
    path = _zip(tmp_path / "none.studio", {THUMBNAIL: PNG})
    with pytest.raises(FormatError, match="no manifest.json"):
        read_session(path)
    deep = b"[" * 500 + b"]" * 500
    path = _zip(tmp_path / "deep.studio", {MANIFEST: deep})
    with pytest.raises(FormatError, match="nested"):
        read_session(path)
    path = _zip(tmp_path / "many.studio", {f"m{i}": b"" for i in range(100)})
    with pytest.raises(FormatError, match="100 members"):
        read_session(path)


def test_bad_entries_are_left_out_and_listed(tmp_path):
    manifest = _manifest()
    manifest["documents"].append({"path": 3})
    manifest["panels"].append("lab")
    manifest["runs"].append(7)
    manifest["edits"]["x:/y"] = {"identity": "x@1", "applied": "not a list"}
    path = _zip(tmp_path / "partial.studio",
                {MANIFEST: _raw(manifest), THUMBNAIL: b"not a png"})
    contents = read_session(path)
    assert len(contents.documents) == 1 and len(contents.panels) == 1
    assert contents.manifest["runs"] == ["20261202-160000-abcdef"]
    assert "x:/y" not in contents.manifest["edits"] and contents.thumbnail is None
    problems = " | ".join(contents.problems)
    for expected in ("documents entry 2", "panels entry 2", "run id", "edits of x:/y",
                     "thumbnail"):
        assert expected in problems
    assert "left out" in inspect_file(path)["summary"]


def test_the_cli_inspects_a_session(tmp_path):
    import subprocess
    import sys

    path = write_session(tmp_path / "s.studio", _manifest(), PNG)
    done = subprocess.run([sys.executable, "-m", "engine", "inspect", str(path), "--json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == FORMAT_NAME
    path.write_bytes(b"PK\x03\x04broken")
    done = subprocess.run([sys.executable, "-m", "engine", "inspect", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and str(path) in done.stderr


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
