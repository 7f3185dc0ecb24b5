"""Atomic writes give files the mode the user's umask asks for (exports were all 0600)."""

from __future__ import annotations

import os
import stat

import pytest

from engine.atomic import current_umask, write_bytes_atomic, write_json_atomic


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    saved = os.umask(0o022)
    os.umask(saved)
    yield set_mask
    os.umask(saved)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_new_files_get_the_mode_the_umask_gives(tmp_path, umask, mask, mode) -> None:
    umask(mask)
    assert current_umask() == mask
    written = write_json_atomic(tmp_path / "figure.provenance.json", {"a": 1})
    assert stat.S_IMODE(written.stat().st_mode) == mode
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    assert stat.S_IMODE(plain.stat().st_mode) == mode  # as a plain open() would


def test_a_replaced_file_keeps_its_mode(tmp_path, umask) -> None:
    umask(0o022)
    target = tmp_path / "private.json"
    target.write_text("{}")
    target.chmod(0o600)
    write_bytes_atomic(target, b"[]")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == "[]"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
