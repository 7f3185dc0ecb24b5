"""VLSI physical design: LEF/DEF reading and writing, GCell grids, a maze router, route tokens.

``lef.read_lef`` and ``def_.read_def`` turn the two text formats into plain dataclasses with
numpy arrays of wire segments and vias (what the route canvas draws in batches);
``def_.write_def`` writes a design back. ``grid`` snaps routed nets onto a 3D GCell grid,
``router`` routes nets on that grid (the classical baseline and the ground truth for
synthetic nets) and ``tokens`` serialises a routing tree as iPCL-style tokens. Torch-free.
"""

from pathlib import Path

from engine.io import FormatError
from engine.io.limits import check_text_file

# The parsed design (tuples, strings, arrays) takes about this many times the text's size.
PARSE_EXPANSION = 12


class VlsiError(FormatError):
    """A LEF/DEF problem; the message starts with the file and, where known, the line."""

    def __init__(self, path, problem: str, line: int | None = None) -> None:
        super().__init__(path, f"line {line}: {problem}" if line else problem)
        self.line = line


def read_text(path: Path) -> str:
    """A LEF, DEF or guide file's text, within the text size budget and the memory its
    parse needs; ``VlsiError`` when it cannot be read."""
    try:
        check_text_file(path, PARSE_EXPANSION)
    except FormatError as exc:
        raise VlsiError(path, exc.problem) from None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise VlsiError(path, f"cannot read it ({exc.strerror})") from None


def shared_design_paths() -> tuple[Path, Path] | None:
    """(Nangate45 LEF, routed gcd DEF) from ``../shared/data/vlsi`` beside the checkout, or
    None when that folder is absent (a checkout without the shared data)."""
    folder = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "vlsi"
    lef, def_ = folder / "Nangate45.lef", folder / "gcd_nangate45_route.def"
    return (lef, def_) if lef.is_file() and def_.is_file() else None
