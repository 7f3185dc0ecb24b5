"""LEF/DEF in the format registry: detection and what ``inspect`` reports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.io import FormatError, detect, inspect_file
from engine.io.vlsi import inspect_design, inspect_guides, inspect_with_lef
from engine.vlsi import shared_design_paths


@pytest.fixture(scope="module")
def gcd():
    paths = shared_design_paths()
    if paths is None:
        pytest.skip("../shared/data/vlsi (Nangate45.lef, gcd_nangate45_route.def) is absent")
    return paths


def test_detects_def_and_lef_by_content_and_name(tmp_path, gcd):
    assert detect(gcd[1]).name == "def" and detect(gcd[0]).name == "lef"
    odd = tmp_path / "notes.def"
    odd.write_text("just words\n")
    assert detect(odd).name == "def"  # the name alone still claims it
    with pytest.raises(FormatError, match=r"notes.def: line 1: unknown DEF statement 'just'"):
        inspect_file(odd)


def test_inspect_gcd_reports_the_wiring(gcd):
    report = inspect_file(gcd[1])
    summary = report["summary"]
    assert report["format"] == "def" and report["panel"] == "routing"
    assert (summary["nets"], summary["routed_nets"], summary["segments"], summary["vias"]) == (
        439, 404, 2051, 2358)  # the two power nets' wiring is counted apart
    assert summary["components"] == 1877 and summary["pins"] == 54
    assert summary["special_nets"] == 2
    assert report["metadata"]["segments_per_layer"]["metal2"] > 1000
    assert report["metadata"]["die_area_um"] == [0, 0, 100.13, 100.8]


def test_inspect_lef_reports_layers_vias_and_cells(gcd):
    report = inspect_file(gcd[0])
    assert report["summary"]["routing_layers"] == 10 and report["summary"]["macros"] == 135
    metal2 = next(x for x in report["metadata"]["layer_stack"] if x["name"] == "metal2")
    assert metal2["direction"] == "VERTICAL" and metal2["pitch_um"] == 0.19


def test_inspect_with_lef_checks_layer_names(gcd, tmp_path):
    assert inspect_design(gcd[1], gcd[0])["metadata"]["lef"] == str(gcd[0])
    bad = tmp_path / "bad.def"
    bad.write_text(gcd[1].read_text().replace("+ ROUTED metal2 ( 42750 74060 )",
                                              "+ ROUTED metalX ( 42750 74060 )"))
    with pytest.raises(FormatError, match="bad.def: line 2541: layer metalX is not defined"):
        inspect_design(bad, gcd[0])


def test_cli_inspect_json(gcd):
    out = subprocess.run([sys.executable, "-m", "engine", "inspect", str(gcd[1]), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["summary"]["vias"] == 2358


def test_inspect_route_guides(tmp_path, gcd):
    from engine.vlsi.def_ import read_def
    from engine.vlsi.guide import guides_from_design, write_guides
    from engine.vlsi.lef import read_lef

    lef = read_lef(gcd[0])
    path = write_guides(guides_from_design(read_def(gcd[1], lef), lef), tmp_path / "gcd.guide")
    report = inspect_file(path)
    assert report["format"] == "guide" and report["panel"] == "routing"
    assert report["summary"]["nets"] == 404 and report["summary"]["rectangles"] > 404
    assert report["metadata"]["nets_per_layer"]["metal1"] == 404
    assert report["summary"]["rectangles_per_layer"]["metal2"] > 1000
    checked = inspect_with_lef(path, gcd[0])
    assert checked["format"] == "guide" and checked["summary"] == report["summary"]
    renamed = tmp_path / "guides.txt.guide"
    renamed.write_text(path.read_text().replace(" metal3\n", " metalX\n", 1))
    assert detect(renamed).name == "guide"
    assert inspect_file(renamed)["summary"]["layers"] == 8  # metalX: no LEF, no complaint
    with pytest.raises(FormatError, match=r"guides.txt.guide: line \d+: net \S+: layer metalX "
                                          r"is not defined"):
        inspect_guides(renamed, gcd[0])
