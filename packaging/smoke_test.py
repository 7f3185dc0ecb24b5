"""``make package-test``: the built bundle starts, its engine answers, a tiny job runs.

Usage: ``python packaging/smoke_test.py dist/Studio [--wheel dist/*.whl]``. Prints what it
measured (bundle size, engine start, GUI self-test) and exits non-zero on any failure. The GUI
part runs under Xvfb (``xvfb-run``) when there is no display.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def run(command: list[str], timeout: float, env: dict | None = None) -> tuple[str, float]:
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    elapsed = time.monotonic() - started
    if out.returncode != 0:
        raise SystemExit(f"FAILED ({out.returncode}): {' '.join(command)}\n{out.stdout}\n"
                         f"{out.stderr[-3000:]}")
    return out.stdout, elapsed


def check_bundle(bundle: Path, workspace: Path) -> None:
    executable = bundle / "Studio"
    print(f"bundle {bundle}: {folder_size(bundle) / 2**30:.2f} GiB")
    stdout, elapsed = run([str(bundle / "studio-engine"), "list", "--json"], 600)
    methods = json.loads(stdout)
    print(f"studio-engine list: {len(methods)} methods in {elapsed:.1f} s")
    gui = [str(executable), "--self-test", "--workspace", str(workspace)]
    if not os.environ.get("DISPLAY") and shutil.which("xvfb-run"):
        gui = ["xvfb-run", "-a", *gui]
    stdout, elapsed = run(gui, 600, env={"QT_QPA_PLATFORM": os.environ.get(
        "QT_QPA_PLATFORM", "xcb" if "xvfb-run" in gui else "offscreen")})
    report = json.loads(stdout.strip().splitlines()[-1])
    print(f"studio --self-test: {json.dumps(report)} ({elapsed:.1f} s wall, exit 0)")


def check_wheel(wheel: Path) -> None:
    """A fresh virtual environment: torch first (the pinned CPU build), then the wheel."""
    with tempfile.TemporaryDirectory() as folder:
        venv = Path(folder) / "venv"
        run([sys.executable, "-m", "venv", str(venv)], 300)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        _, torch_s = run([*pip, "torch==2.13.0"], 1800)
        _, wheel_s = run([*pip, f"{wheel}[engine]"], 1800)
        stdout, list_s = run([str(venv / "bin" / "studio-engine"), "list", "--json"], 600)
        print(f"wheel {wheel.name}: torch {torch_s:.0f} s, wheel {wheel_s:.0f} s, "
              f"studio-engine list {len(json.loads(stdout))} methods in {list_s:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", type=Path, nargs="?")
    parser.add_argument("--wheel", type=Path)
    args = parser.parse_args()
    if args.bundle:
        with tempfile.TemporaryDirectory() as workspace:
            check_bundle(args.bundle, Path(workspace))
    if args.wheel:
        check_wheel(args.wheel)
    print("package-test: PASS")


if __name__ == "__main__":
    main()
