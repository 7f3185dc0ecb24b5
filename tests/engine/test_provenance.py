"""Every export says where it came from: the record is written into PNG, SVG and PDF files
(a sidecar beside other files) and read back, also by ``studio-engine inspect``."""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import pytest

from engine import provenance
from engine.cli import main as cli_main
from engine.content import content_hash


def tiny_png(extra_text: tuple[str, str] | None = None) -> bytes:
    """A 2x1 grey PNG, optionally with another program's tEXt chunk."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 1, 8, 0, 0, 0, 0))
    pixels = chunk(b"IDAT", zlib.compress(b"\x00\x80\x80"))
    text = chunk(b"tEXt", f"{extra_text[0]}\0{extra_text[1]}".encode("latin-1")) \
        if extra_text else b""
    return provenance.PNG_SIGNATURE + header + text + pixels + chunk(b"IEND", b"")


@pytest.fixture
def made(tmp_path: Path) -> dict:
    source = tmp_path / "data (v2)" / "sub-01_bold.nii.gz"
    source.parent.mkdir()
    source.write_bytes(b"\x1f\x8b" + bytes(range(200)))
    return provenance.record(
        [source], view={"time_point": 12, "seconds": 24.0, "cursor_voxel": [10, 20, 30],
                        "display_range": [0.0, 1.5], "colour_map": "grey",
                        "note": "a <b> & (c) \\ d"},
        runs=[{"run_id": "20260101-000000-abcdef", "method": "brainworld.generate",
               "params": {"steps": 3}, "seed": 7}])


def test_the_record_names_sources_by_resolved_path_and_content_hash(made, tmp_path) -> None:
    source = made["sources"][0]
    assert Path(source["path"]).is_absolute() and source["size"] == 202
    assert source["hash"] == content_hash(Path(source["path"]))
    assert made["versions"]["python"] and "numpy" in made["versions"]
    assert made["studio"] and made["written"].endswith("Z")
    assert json.loads(json.dumps(made)) == made  # plain JSON


def test_png_carries_the_record_beside_other_programs_text(made, tmp_path) -> None:
    target = provenance.write(tmp_path / "figure.png",
                              tiny_png(("Description", "a photo of my cat")), made)
    assert provenance.read(target) == made
    keys = [key for key, _text in provenance.png_texts(target.read_bytes())]
    assert keys == ["Description", "Description"]  # theirs kept, ours added
    assert provenance.read(provenance.write(tmp_path / "plain.png", tiny_png(), {})) is None


def test_svg_and_pdf_carry_the_record(made, tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure()
    figure.add_subplot().plot([0, 1], [1, 0])
    svg = io.StringIO()
    figure.savefig(svg, format="svg")
    assert provenance.read(provenance.write(tmp_path / "f.svg", svg.getvalue().encode(),
                                            made)) == made
    pdf = tmp_path / "f.pdf"
    figure.savefig(pdf, format="pdf", metadata=provenance.pdf_metadata(made))
    assert provenance.read(pdf) == made  # parentheses and backslashes survive PDF escaping


def test_data_files_get_a_sidecar(made, tmp_path) -> None:
    target = provenance.write(tmp_path / "metrics.csv", b"step,loss\n0,1.0\n", made)
    assert target.read_bytes() == b"step,loss\n0,1.0\n"
    assert (tmp_path / "metrics.csv.provenance.json").exists()
    assert provenance.read(target) == made


def test_inspect_prints_a_figures_provenance(made, tmp_path, capsys) -> None:
    target = provenance.write(tmp_path / "figure.png", tiny_png(), made)
    assert cli_main(["inspect", str(target)]) == 0
    printed = capsys.readouterr().out
    assert f"{target}: png" in printed and "width: 2" in printed
    assert made["sources"][0]["path"] in printed and "brainworld.generate" in printed
    assert '"time_point": 12' in printed
    bare = provenance.write(tmp_path / "bare.png", tiny_png(), {})
    assert cli_main(["inspect", str(bare)]) == 0
    assert "provenance: none" in capsys.readouterr().out


def test_inspect_prints_a_data_files_sidecar(made, tmp_path, capsys) -> None:
    target = provenance.write(tmp_path / "picked.smi", b"CCO ethanol\nCCN ethylamine\n", made)
    assert cli_main(["inspect", str(target)]) == 0
    printed = capsys.readouterr().out
    assert f"{target}: smiles" in printed and "brainworld.generate" in printed
