"""The desktop integration and the frozen bundle's routing, without building a bundle."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine import commands

ROOT = Path(__file__).resolve().parents[2]
MIME_NS = "{http://www.freedesktop.org/standards/shared-mime-info}"
STANDARD_TYPES = {"text/csv", "application/vnd.apache.parquet", "chemical/x-mdl-sdfile",
                  "chemical/x-mdl-molfile", "chemical/x-pdb"}


def test_children_start_through_the_bundle_when_frozen(monkeypatch):
    assert commands.python_module("engine")[1:] == ["-m", "engine"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert commands.python_module("engine.worker") == [
        sys.executable, commands.RUN_MODULE_FLAG, "engine.worker"]


def test_the_bundle_entry_runs_a_module_like_python_m(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "packaging" / "studio_main.py"),
                          commands.RUN_MODULE_FLAG, "engine", "list", "--json",
                          "--workspace", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert any(method["id"] == "eos.reproduce" for method in json.loads(out.stdout))


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_install_desktop_registers_the_app_icon_and_file_types(tmp_path):
    out = subprocess.run(["make", "-s", "install-desktop", f"DATA_HOME={tmp_path}"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    entry = configparser.ConfigParser(interpolation=None)
    entry.read(tmp_path / "applications" / "neurips-studio.desktop")
    desktop = entry["Desktop Entry"]
    executable = desktop["Exec"].split()[0]
    assert Path(executable).is_absolute() and desktop["Exec"].endswith("%F")
    assert (tmp_path / "icons/hicolor/scalable/apps" / f"{desktop['Icon']}.svg").is_file()
    declared = {t for t in desktop["MimeType"].split(";") if t}
    ours = {node.get("type") for node in ET.parse(
        tmp_path / "mime/packages/neurips-studio.xml").getroot().iter(f"{MIME_NS}mime-type")}
    assert {"image/x-nifti", "application/x-def", "chemical/x-daylight-smiles"} <= declared
    assert declared <= ours | STANDARD_TYPES  # every type we claim is defined somewhere
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(["desktop-file-validate",
                                str(tmp_path / "applications/neurips-studio.desktop")],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout
