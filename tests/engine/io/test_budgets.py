"""Reader budgets: archives, gzip streams, videos, molecule descriptors and JSON are refused
or trimmed before they are allocated, with the file, the budget and how to raise it."""

from __future__ import annotations

import gzip
import io
import json
import zipfile

import numpy as np
import pytest

from engine.io import FormatError, inspect_file
from engine.io.arrays import npz_members, read_npz
from engine.io.crowd import iter_video_frames, video_frame, video_info, write_video
from engine.io.limits import loads_json, open_decompressed
from engine.io.transcripts import read_transcripts


def _npz_member(archive: zipfile.ZipFile, name: str, shape: tuple, payload: bytes) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    archive.writestr(name, header.getvalue() + payload)


def test_npz_member_over_the_budget_is_refused_from_its_declared_size(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_DECOMPRESSED_BYTES", str(1 << 20))
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        _npz_member(archive, "x.npy", (1 << 18,), bytes(8 << 18))  # 2 MB of zeros
    with pytest.raises(FormatError) as caught:
        inspect_file(bomb)
    assert str(caught.value).startswith(str(bomb))
    assert "STUDIO_MAX_DECOMPRESSED_BYTES" in str(caught.value)
    monkeypatch.setenv("STUDIO_MAX_DECOMPRESSED_BYTES", str(64 << 20))
    assert npz_members(bomb)["x"]["shape"] == [1 << 18]  # raised: the same file opens


def test_a_highly_compressible_normal_npz_opens_and_a_bomb_is_refused_by_its_size(tmp_path):
    """Review of issue 22: an all-zero 512^3 mask (128 MB in about 128 KB, a ratio near 1000)
    was refused by the compression-ratio budget even on inspect; only the size a member
    decompresses to decides, against the decompressed-size budget (1 GB by default)."""
    mask = tmp_path / "brain_mask.npz"
    np.savez_compressed(mask, mask=np.zeros((512, 512, 512), np.uint8))
    assert mask.stat().st_size < (1 << 20)
    assert inspect_file(mask)["metadata"]["mask"]["shape"] == [512, 512, 512]
    assert read_npz(mask)["mask"].shape == (512, 512, 512)
    bomb = tmp_path / "bomb.npz"  # a member declaring 2 GB: over the budget, refused unread
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        _npz_member(archive, "x.npy", (1 << 18,), bytes(8 << 18))
    _declare_member_size(bomb, 2 << 30)
    with pytest.raises(FormatError) as caught:
        inspect_file(bomb)
    assert str(caught.value).startswith(str(bomb))
    assert "member 'x.npy' decompresses to 2,048 MB" in str(caught.value)
    assert "STUDIO_MAX_DECOMPRESSED_BYTES" in str(caught.value)


def _declare_member_size(archive_path, size: int) -> None:
    """Rewrite the single member's declared uncompressed size in both zip headers (local
    header at offset 22, central directory entry at offset 24)."""
    data = bytearray(archive_path.read_bytes())
    data[22:26] = size.to_bytes(4, "little")
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = size.to_bytes(4, "little")
    archive_path.write_bytes(bytes(data))


def test_npz_header_that_lies_about_its_shape_is_refused(tmp_path):
    liar = tmp_path / "liar.npz"
    with zipfile.ZipFile(liar, "w") as archive:
        _npz_member(archive, "x.npy", (10**9,), bytes(80))
    with pytest.raises(FormatError, match="claims shape"):
        read_npz(liar)


def test_gzip_bomb_is_refused_by_ratio_while_normal_gzip_reads(tmp_path, monkeypatch):
    monkeypatch.setattr("engine.io.limits.RATIO_FREE_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as handle:
        handle.write(b" " * (8 << 20))  # a ratio near 1000
    with pytest.raises(FormatError) as caught:
        read_transcripts(bomb)
    assert str(caught.value).startswith(str(bomb))
    assert "STUDIO_MAX_COMPRESSION_RATIO" in str(caught.value)
    plain = tmp_path / "chat.jsonl.gz"
    line = json.dumps({"messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "hello"}]})
    plain.write_bytes(gzip.compress((line + "\n").encode() * 50))
    assert len(read_transcripts(plain).transcripts) == 50
    with open_decompressed(plain) as handle:
        assert handle.read().count(b"\n") == 50


def test_video_inspects_from_metadata_and_decodes_frames_on_demand(tmp_path):
    clip = tmp_path / "clip.mp4"
    frames = np.zeros((40, 64, 96, 3), np.uint8)
    frames[:, :, :, 0] = np.arange(40)[:, None, None] * 6
    write_video(clip, frames, fps=20)
    info = video_info(clip)
    assert (info.frames, info.width, info.height) == (40, 96, 64)
    assert inspect_file(clip)["summary"]["frames"] == 40
    assert sum(1 for _ in iter_video_frames(clip, stop=5)) == 5
    late = video_frame(clip, 30)
    assert abs(int(late[..., 0].mean()) - 180) < 12  # the 31st frame, not the first


def test_large_molecules_skip_descriptors_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_DESCRIPTOR_ATOMS", "20")
    smi = tmp_path / "mixed.smi"
    smi.write_text("CCO ethanol\n" + "C" * 60 + " chain\n")
    report = inspect_file(smi)
    assert report["summary"]["records"] == 2
    assert "over the budget of 20 atoms" in report["summary"]["skipped"][0]
    assert report["metadata"]["properties"]["HeavyAtoms"]["max"] == 3.0


def test_json_depth_limit_names_file_and_budget(tmp_path):
    with pytest.raises(FormatError, match="STUDIO_MAX_JSON_DEPTH"):
        loads_json("[" * 300 + "]" * 300, tmp_path / "deep.json")
    with pytest.raises(FormatError, match="nested too deeply"):
        loads_json("[" * 100_000 + "]" * 100_000, tmp_path / "deeper.json")
    assert loads_json('{"a": [[1]]}', tmp_path / "ok.json") == {"a": [[1]]}


def _png_header_only(path, width: int, height: int) -> None:
    """A PNG whose header declares ``width`` x ``height`` over a few bytes of data."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                     chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def test_the_image_size_budget_decides_not_pillows_own_limit(tmp_path, monkeypatch):
    """Review of issue 22: Pillow's MAX_IMAGE_PIXELS (about 179 M pixels) refused images
    under STUDIO_MAX_IMAGE_PIXELS (256 M by default), so raising the budget did nothing."""
    from engine.io.crowd import frame_folder_info
    from engine.io.inputs import validate_input

    frames = tmp_path / "frames"
    frames.mkdir()
    _png_header_only(frames / "0001.png", 14_000, 14_000)  # 196 M pixels: within our budget
    assert (frame_folder_info(frames).width, frame_folder_info(frames).height) == (14_000,
                                                                                    14_000)
    assert validate_input("folder", frames) == []
    _png_header_only(frames / "0001.png", 20_000, 20_000)  # 400 M: over the default budget
    with pytest.raises(FormatError) as caught:
        validate_input("folder", frames)
    assert str(caught.value).startswith(str(frames / "0001.png"))
    assert "STUDIO_MAX_IMAGE_PIXELS" in str(caught.value)
    monkeypatch.setenv("STUDIO_MAX_IMAGE_PIXELS", str(500_000_000))  # raised: it opens
    assert validate_input("folder", frames) == []
    assert frame_folder_info(frames).width == 20_000
