"""A corpus of hostile inputs, made at test time, and a guarded probe that feeds each one to
a reader (``inspect``) or to a method's input check (``JobManager.prepare``, the path of
``studio-engine run --input`` and of the GUI's submissions).

Each probe runs in its own process under an address-space limit (2 GiB) and a kill after
60 s, so a blow-up or a hang fails one case instead of the machine. Shared by
``tests/engine/test_hostile_corpus.py`` (every case ends as expected, naming the file) and
``benchmarks/bench_hostile.py`` (each case's peak memory and time).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ADDRESS_SPACE_BYTES = 2 * 1024**3
KILL_AFTER_S = 60.0
ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-corpus-5b0e6a7d93c1f2a4"
DEEP = 100_000  # nesting levels of the deep JSON cases


@dataclass
class Case:
    """One hostile file and what must happen to it: ``refused`` (a FormatError or an
    invalid submission naming ``names``) or ``read`` (within the budgets)."""

    name: str
    path: Path
    probes: list[tuple[str, str, str]]  # (action, method, input): action inspect|input|run
    expect: str = "refused"
    names: str = ""  # the text the message must contain (default: the path)


@dataclass
class Outcome:
    case: str
    probe: str
    status: str  # refused, read, crashed, killed
    message: str
    peak_mb: float
    wall_s: float


# -- making the corpus ---------------------------------------------------------------------

def _npz_bomb(path: Path) -> None:
    """A 2 GB array compressed into about 2 MB: the member's declared size gives it away."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (250_000_000,)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive, \
            archive.open("activations.npy", "w", force_zip64=True) as member:
        member.write(header.getvalue())
        chunk = bytes(1 << 24)
        for _ in range(2_000_000_000 // len(chunk)):
            member.write(chunk)
        member.write(bytes(2_000_000_000 % len(chunk)))


def _zero_mask(path: Path) -> None:
    """A normal file that compresses 1000x: an all-zero 512^3 uint8 mask (128 MB in about
    128 KB). Opened by its size against the budget, never refused for its ratio."""
    np.savez_compressed(path, mask=np.zeros((512, 512, 512), np.uint8))


def _gzip_members(path: Path, unit: bytes, members: int) -> None:
    """Concatenated gzip members: the trailer declares one member, the stream holds all."""
    one = gzip.compress(unit, compresslevel=9)
    with open(path, "wb") as handle:
        for _ in range(members):
            handle.write(one)


def _nifti_bomb(path: Path) -> None:
    """A NIfTI header claiming 512 x 512 x 512 x 4 float32 (2 GiB of zeros, frames of 512 MB)
    over about 2 MB of gzip: a valid file whose frames no reader should hold to inspect it."""
    import nibabel as nib

    header = nib.Nifti1Header()
    header.set_data_shape((512, 512, 512, 4))
    header.set_data_dtype(np.float32)
    header.set_data_offset(352)
    head = header.binaryblock + bytes(4)
    data_bytes = 512**3 * 4 * 4
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 24)
    with open(path, "wb") as handle:
        handle.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip, no name
        crc = zlib.crc32(head)
        handle.write(deflate.compress(head))
        for _ in range(data_bytes // len(chunk)):
            crc = zlib.crc32(chunk, crc)
            handle.write(deflate.compress(chunk))
        handle.write(deflate.flush())
        handle.write(struct.pack("<II", crc, (len(head) + data_bytes) % 2**32))


def _deep(kind: str = "[") -> str:
    close = "]" if kind == "[" else "}"
    opener = "[" if kind == "[" else '{"a":'
    return opener * DEEP + "1" + close * DEEP


def _safetensors(path: Path, header: dict | bytes, data: bytes) -> None:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _png_bomb(path: Path) -> None:
    """A PNG header declaring 60000 x 60000 pixels over a few bytes of data."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", 60_000, 60_000, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                     chunk(b"IDAT", zlib.compress(b"\x00" * 1024)) + chunk(b"IEND", b""))


def _clip(path: Path) -> None:
    from engine.io.crowd import write_video

    frames = np.zeros((48, 1080, 1920, 3), np.uint8)
    frames[:, 500:580, :, 1] = 200
    write_video(path, frames, fps=24)


LEF = """VERSION 5.8 ;
UNITS
  DATABASE MICRONS 1000 ;
END UNITS
LAYER metal1
  TYPE ROUTING ;
  DIRECTION HORIZONTAL ;
  PITCH 0 ;
  WIDTH -0.07 ;
END metal1
END LIBRARY
"""
DEF_CLAIMING = """VERSION 5.8 ;
DESIGN claims ;
UNITS DISTANCE MICRONS 1000 ;
DIEAREA ( 0 0 ) ( 1000 1000 ) ;
COMPONENTS 1000000000 ;
- u1 INV_X1 + PLACED ( 0 0 ) N ;
END COMPONENTS
END DESIGN
"""
PSF_CLAIMING = ("PSF\n\n       1 !NTITLE\n REMARKS claims a billion atoms\n\n"
                "1000000000 !NATOM\n       1 A    1    ALA  CA   CT1    0.070000   12.0110  0\n")


def _sparse(text: str, size: int) -> Callable[[Path], None]:
    """A file of ``size`` bytes (sparse: no disk used) that starts with ``text``."""
    def make(path: Path) -> None:
        path.write_text(text)
        os.truncate(path, size)

    return make


PDB_NAN = "".join(
    f"ATOM  {i:5d}  CA  ALA A{i:4d}         nan     nan     nan  1.00  0.00           C\n"
    for i in range(1, 50))
PDB_OK = "".join(
    f"ATOM  {i:5d}  CA  ALA A{i:4d}    {i:8.3f}{0:8.3f}{0:8.3f}  1.00  0.00           C\n"
    for i in range(1, 50))


@dataclass(frozen=True)
class Spec:
    """How to make one case's file and what to feed it to."""

    name: str
    filename: str | bytes
    make: Callable[[Path], None]
    probes: tuple[tuple[str, str, str], ...]
    expect: str = "refused"
    names: str = ""


INSPECT = ("inspect", "", "")


def _chat_lines(count: int) -> bytes:
    line = json.dumps({"messages": [{"role": "user", "content": "a" * 4000},
                                    {"role": "assistant", "content": "b"}]})
    return (line + "\n").encode() * count


def _checkpoint(cfg: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        from safetensors.numpy import save_file

        path.mkdir()
        (path / "cfg.json").write_text(cfg)
        save_file({"w": np.zeros(4, np.float32)}, str(path / "model.safetensors"))

    return make


def _png_folder(path: Path) -> None:
    path.mkdir()
    _png_bomb(path / "0001.png")


SPECS = (
    Spec("zip bomb npz", "bomb.npz", _npz_bomb,
         (INSPECT, ("input", "sae_pc1.train", "activations"))),
    Spec("all-zero mask npz (1000x, normal)", "mask.npz", _zero_mask,
         (INSPECT, ("input", "sae_pc1.train", "activations")), expect="read"),
    # 3 members of 64 MB of chat lines in about 200 KB, as in the drill's .jsonl.gz
    Spec("gzip bomb transcripts", "bomb.jsonl.gz",
         lambda p: _gzip_members(p, _chat_lines(16_000), 3),
         (INSPECT, ("input", "scicl.score_transcripts", "transcripts"))),
    Spec("gzip bomb smiles", "bomb.smi.gz",
         lambda p: p.write_bytes(gzip.compress(b"C" * (1 << 30), compresslevel=9)),
         (INSPECT, ("input", "kcgm.calibrate", "reference"))),
    Spec("NIfTI gzip bomb", "bomb.nii.gz", _nifti_bomb,
         (INSPECT, ("input", "brainworld.train", "fmri")), expect="read"),
    Spec("1080p clip", "clip.mp4", _clip, (INSPECT, ("input", "c2r.train", "footage")),
         expect="read"),
    Spec("deep JSON scene", "scene.json",
         lambda p: p.write_text('{"camera": [], "ground": ' + _deep() + "}"),
         (INSPECT, ("input", "c2r.simulate", "scene"))),
    Spec("deep JSON Lines table", "logs.jsonl",
         lambda p: p.write_text(('{"b": ' + _deep("{") + "}\n") * 2),
         (INSPECT, ("input", "svan.train", "logs"))),
    Spec("deep JSON transcripts", "chats.jsonl.gz",
         lambda p: p.write_bytes(gzip.compress(('{"messages": ' + _deep() + "}\n").encode())),
         (INSPECT, ("input", "scicl.score_transcripts", "transcripts"))),
    Spec("deep safetensors header", "deep.safetensors",
         lambda p: _safetensors(p, ('{"x": ' + _deep() + "}").encode(), b""),
         (INSPECT, ("input", "sae_pc1.train", "activations"))),
    Spec("safetensors claiming 10^12 parameters", "liar.safetensors",
         lambda p: _safetensors(p, {"W_dec": {"dtype": "F32", "shape": [10**6, 10**6],
                                              "data_offsets": [0, 4096]}}, bytes(4096)),
         (INSPECT, ("input", "sae_pc1.steer", "sae"))),
    Spec("safetensors dtype X99", "x99.safetensors",
         lambda p: _safetensors(p, {"w": {"dtype": "X99", "shape": [4],
                                          "data_offsets": [0, 16]}}, bytes(16)),
         (INSPECT, ("input", "sae_pc1.train", "activations"))),
    Spec("checkpoint with deep cfg.json", "deepcfg", _checkpoint('{"m": ' + _deep() + "}"),
         (("input", "sae_pc1.steer", "decoder"), ("input", "hybrid_tokens.compare",
                                                   "model_a"))),
    Spec("checkpoint with broken cfg.json", "badcfg", _checkpoint('{"model": "brainworld",'),
         (("input", "brainworld.generate", "checkpoint"),)),
    Spec("non-UTF-8 file name", b"mols\xff.smi", lambda p: p.write_text("CCO ethanol\n"),
         (("input", "kcgm.calibrate", "reference"),), names="mols\\xff.smi"),
    Spec("1000-atom SMILES", "chains.smi",
         lambda p: p.write_text("".join(f"{'C' * 1000} chain{i}\n" for i in range(1000))),
         (INSPECT, ("input", "kcgm.calibrate", "reference")), expect="read"),
    Spec("PDB as a molecule reference", "protein.pdb", lambda p: p.write_text(PDB_OK),
         (("input", "kcgm.calibrate", "reference"),)),
    Spec("PDB with NaN coordinates", "nan.pdb", lambda p: p.write_text(PDB_NAN), (INSPECT,)),
    Spec("LEF with zero pitch and negative width", "tech.lef", lambda p: p.write_text(LEF),
         (INSPECT, ("input", "chipstar.export_dataset", "lef"))),
    Spec("DEF declaring 10^9 components", "claims.def",
         lambda p: p.write_text(DEF_CLAIMING),
         (INSPECT, ("input", "chipstar.export_dataset", "def"))),
    Spec("2 GB DEF", "huge.def", _sparse(DEF_CLAIMING.replace("1000000000", "1"), 2 * 1024**3),
         (INSPECT, ("input", "chipstar.export_dataset", "def"))),
    Spec("PSF declaring 10^9 atoms", "claims.psf", lambda p: p.write_text(PSF_CLAIMING),
         (INSPECT,)),
    Spec("PNG decompression bomb", "frames", _png_folder,
         (("input", "bitdance.train", "images"), ("input", "c2r.train", "footage"))),
    Spec("text that is not UTF-8", "eval.txt", lambda p: p.write_bytes(b"ok \xff\xfe bad\n"),
         (("input", "hybrid_tokens.compare", "text"),)),
    Spec("endpoint echoing the API key", "workspace-secret", lambda p: p.mkdir(),
         (("run", "diag.secret", ""),), expect="scrubbed"),
)


def build_corpus(root: Path) -> dict[str, Case]:
    """Write every hostile file under ``root``; the cases by name."""
    root.mkdir(parents=True, exist_ok=True)
    cases = {}
    for spec in SPECS:
        path = Path(os.fsdecode(os.fsencode(root) + b"/" + os.fsencode(spec.filename)))
        spec.make(path)
        cases[spec.name] = Case(spec.name, path, list(spec.probes), spec.expect, spec.names)
    return cases


# -- probing one case in a guarded process ------------------------------------------------

def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def run_probe(case: Case, probe: tuple[str, str, str], workspace: Path) -> Outcome:
    """One probe in a child process (2 GiB address space, killed after 60 s)."""
    action, method, name = probe
    label = action if action == "inspect" else f"{action} {method}:{name}".rstrip(":")
    if action == "run":
        command = [sys.executable, "-m", "engine", "run", method, "--set",
                   f"api_key={SECRET}", "--set", "echo=true", "--json", "--workspace",
                   str(case.path)]
    else:
        command = [sys.executable, "-c", "from tests.engine.hostile_corpus import probe; "
                   "probe()", action, os.fsencode(case.path), method, name, str(workspace)]
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, stdout=out_file, stderr=err_file,
                                   preexec_fn=_limit_address_space)
        code, peak_mb, killed = _wait_guarded(process.pid, started)
        wall = time.monotonic() - started
        out_file.seek(0)
        err_file.seek(0)
        out = out_file.read().decode("utf-8", "replace")
        err = err_file.read().decode("utf-8", "replace")
    process.returncode = code  # reaped by wait4 above
    if killed:
        return Outcome(case.name, label, "killed", err[-300:], peak_mb, wall)
    if action == "run":
        on_disk = any(SECRET.encode() in f.read_bytes() for f in case.path.rglob("*")
                      if f.is_file())
        scrubbed = code == 1 and SECRET not in out + err and not on_disk
        return Outcome(case.name, label, "scrubbed" if scrubbed else "leaked", err[-300:],
                       peak_mb, wall)
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(err.strip().splitlines()[-3:])
        return Outcome(case.name, label, "crashed", tail, peak_mb, wall)
    return Outcome(case.name, label, report["status"], report["message"], peak_mb, wall)


def _wait_guarded(pid: int, started: float) -> tuple[int, float, bool]:
    """(exit status, peak resident MB of the child and its descendants, killed?), killing
    the child at ``KILL_AFTER_S``."""
    killed = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, killed
        if time.monotonic() - started > KILL_AFTER_S and not killed:
            os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.02)


def probe() -> None:
    """In the child: read one file as ``inspect`` or as a method's input; print the outcome
    as one JSON line (``refused`` with the message, or ``read``)."""
    from engine.executors.local import LocalExecutor
    from engine.io import FormatError, inspect_file
    from engine.jobs import InvalidSubmission, JobManager
    from engine.workspace import Workspace

    action, path, method, name, workspace = sys.argv[1:6]
    try:
        if action == "inspect":
            report = inspect_file(path)
            message = json.dumps(report["summary"])
        else:
            manager = JobManager(Workspace(workspace), LocalExecutor(workers=1),
                                 lambda event: None)
            message = "; ".join(manager.prepare(method, {}, {name: path}, 0).notes)
        status = "read"
    except (FormatError, InvalidSubmission) as exc:
        status, message = "refused", str(exc)
    print(json.dumps({"status": status, "message": message}))
