"""2D depictions with RDKit: one molecule as PNG bytes (cached), a grid as PNG or SVG.

The grid asks for a depiction only when a cell becomes visible; the cache keeps the most
recent ones, so scrolling back is free and memory stays bounded with 100k molecules.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.io.molecules import parse_smiles

CACHE_SIZE = 2000
EXPORT_LIMIT = 60  # molecules in an exported grid
EXPORT_COLUMNS = 6
MISSING = object()


class DepictionCache:
    """Depictions per (SMILES, size, highlighted atoms), least recently used dropped first.
    ``convert`` turns the PNG bytes into what is kept (the grid keeps ready ``QPixmap``s, so a
    repaint decodes nothing); ``None`` is kept for a SMILES that does not parse."""

    def __init__(self, size: int = CACHE_SIZE, convert: Callable[[bytes], Any] | None = None
                 ) -> None:
        self.size = size
        self.convert = convert
        self.rendered = 0  # how many depictions were drawn (tests and benchmarks read it)
        self._items: OrderedDict[tuple, Any] = OrderedDict()

    def get(self, smiles: str, width: int, height: int, highlight: tuple[int, ...] = ()) -> Any:
        """The depiction, drawn now on a miss (one molecule: the editor's preview)."""
        key = (smiles, width, height, highlight)
        found = self.lookup(key)
        if found is not MISSING:
            return found
        return self.store(key, render_png(*key))

    def lookup(self, key: tuple) -> Any:
        """The kept depiction for ``key`` (SMILES, width, height, atoms), or ``MISSING``."""
        if key not in self._items:
            return MISSING
        self._items.move_to_end(key)
        return self._items[key]

    def store(self, key: tuple, png: bytes | None) -> Any:
        """Keep a depiction drawn elsewhere (the grid draws them on a worker thread)."""
        self.rendered += 1
        image = self.convert(png) if png is not None and self.convert is not None else png
        self._items[key] = image
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return image

    def __len__(self) -> int:
        return len(self._items)


def render_png(smiles: str, width: int, height: int,
               highlight: tuple[int, ...] = ()) -> bytes | None:
    """A depiction, or ``None`` when the SMILES does not parse."""
    from rdkit.Chem.Draw import rdMolDraw2D

    mol = parse_smiles(smiles)
    if mol is None:
        return None
    drawer = rdMolDraw2D.MolDraw2DCairo(width, height)  # on white: black bonds stay legible
    drawer.DrawMolecule(mol, highlightAtoms=list(highlight))
    drawer.FinishDrawing()
    return drawer.GetDrawingText()


def export_grid(path: str | os.PathLike, smiles: list[str], legends: list[str],
                highlights: list[tuple[int, ...]] | None = None, record: dict | None = None,
                scale: float = 2.0, cell: tuple[int, int] = (220, 180)) -> Path:
    """The first ``EXPORT_LIMIT`` molecules as one figure, ``.svg`` or ``.png`` by suffix,
    drawn at ``scale`` times the screen's size (bonds and legends in proportion), with the
    provenance ``record`` inside (``engine.provenance``)."""
    from rdkit.Chem import Draw

    from engine import provenance

    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise ValueError(f"{target}: export a grid as .png or .svg")
    kept = [(s, legend, atoms) for s, legend, atoms in
            zip(smiles, legends, highlights or [()] * len(smiles), strict=True)
            if parse_smiles(s) is not None][:EXPORT_LIMIT]
    if not kept:
        raise ValueError(f"{target}: no valid molecule to export")
    mols = [parse_smiles(s) for s, _, _ in kept]
    options = Draw.MolDrawOptions()
    options.legendFontSize = round(options.legendFontSize * scale)
    options.bondLineWidth = options.bondLineWidth * scale
    options.minFontSize = round(options.minFontSize * scale)
    options.maxFontSize = round(options.maxFontSize * scale)
    image = Draw.MolsToGridImage(mols, molsPerRow=min(EXPORT_COLUMNS, len(mols)),
                                 subImgSize=(round(cell[0] * scale), round(cell[1] * scale)),
                                 legends=[legend for _, legend, _ in kept],
                                 highlightAtomLists=[list(a) for _, _, a in kept],
                                 useSVG=suffix == ".svg", drawOptions=options)
    if suffix == ".svg":
        data = image.encode()
    else:
        import io

        buffer = io.BytesIO()
        dpi = round(96 * scale)
        image.save(buffer, format="PNG", dpi=(dpi, dpi))
        data = buffer.getvalue()
    return provenance.write(target, data, record or provenance.record())
