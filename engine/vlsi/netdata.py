"""Net datasets for training: routed nets on a GCell grid saved as one ``.npz`` of plain
integer and string arrays (read with ``allow_pickle=False``, so a hostile file cannot run code).

Arrays (N nets, L loads, E tree edges in all; nodes are ``(x, y, layer)`` GCells):

* ``format`` ``"studio-chipstar-nets"``, ``version`` 1;
* ``grid`` (3,) nx, ny, layers; ``directions`` one "H"/"V" per layer (e.g. ``"HVHV"``);
* ``names`` (N,) str; ``drivers`` (N, 3);
* ``load_offsets`` (N + 1,) and ``loads`` (L, 3): net i's loads are rows
  ``load_offsets[i]:load_offsets[i + 1]``;
* ``edge_offsets`` (N + 1,) and ``edges`` (E, 6): a tree edge joins two adjacent nodes.

Tokens are not stored: the trainer rebuilds them from the tree, so a dataset cannot disagree
with the tokenizer. ``read_net_dataset`` checks every shape, offset and coordinate and names
the file in each error.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from engine.vlsi import VlsiError
from engine.vlsi.router import GridSpec
from engine.vlsi.tokens import Edge, Node, edge

FORMAT = "studio-chipstar-nets"
VERSION = 1
MAX_BYTES = 4 << 30  # uncompressed: refuse a zip bomb before inflating it
MAX_GRID = (4096, 4096, 64)  # the vocabulary has a token per coordinate: keep it bounded
ARRAYS = ("format", "version", "grid", "directions", "names", "drivers", "load_offsets",
          "loads", "edge_offsets", "edges")
NetRecord = tuple[str, Node, tuple[Node, ...], frozenset[Edge]]


def write_net_dataset(path: str | Path, nets: list[NetRecord], spec: GridSpec) -> Path:
    """Write ``(name, driver, loads, tree edges)`` records on grid ``spec`` (atomically)."""
    from engine.atomic import write_atomic

    directions = "".join(spec.direction(k) for k in range(spec.layers))
    loads = [node for _, _, net_loads, _ in nets for node in net_loads]
    edges = [a + b for _, _, _, tree in nets for a, b in sorted(tree)]
    arrays = {
        "format": np.array(FORMAT), "version": np.array(VERSION, dtype=np.int64),
        "grid": np.array(spec.shape, dtype=np.int64), "directions": np.array(directions),
        "names": np.array([name for name, *_ in nets], dtype=str),
        "drivers": np.array([driver for _, driver, _, _ in nets], dtype=np.int64).reshape(-1, 3),
        "load_offsets": np.cumsum([0] + [len(n[2]) for n in nets], dtype=np.int64),
        "loads": np.array(loads, dtype=np.int64).reshape(-1, 3),
        "edge_offsets": np.cumsum([0] + [len(n[3]) for n in nets], dtype=np.int64),
        "edges": np.array(edges, dtype=np.int64).reshape(-1, 6),
    }
    return write_atomic(Path(path), lambda handle: np.savez_compressed(handle, **arrays))


def read_net_dataset(path: str | Path) -> tuple[list[NetRecord], GridSpec]:
    """The records and grid of a dataset ``write_net_dataset`` wrote; ``VlsiError`` (naming
    the file) for anything else: not a zip, truncated, pickled objects, wrong shapes, offsets
    or coordinates."""
    path = Path(path)
    arrays = _load(path)
    for key in ARRAYS:
        if key not in arrays:
            raise VlsiError(path, f"not a net dataset: no array {key!r}")
    if str(arrays["format"]) != FORMAT or arrays["version"].shape != ():
        raise VlsiError(path, f"not a net dataset (format {str(arrays['format'])[:40]!r})")
    if int(arrays["version"]) != VERSION:
        raise VlsiError(path, f"net dataset version {int(arrays['version'])}; this Studio "
                              f"reads version {VERSION}")
    grid, names = arrays["grid"], arrays["names"]
    ints = {k: arrays[k] for k in ("grid", "drivers", "load_offsets", "loads", "edge_offsets",
                                   "edges")}
    for key, value in ints.items():
        if not np.issubdtype(value.dtype, np.integer):
            raise VlsiError(path, f"array {key} holds {value.dtype}, not integers")
    if grid.shape != (3,) or (grid < 1).any() or (grid > MAX_GRID).any():
        raise VlsiError(path, f"grid {grid.tolist()[:3]}: expected 3 sizes from 1 up to "
                              f"{list(MAX_GRID)}")
    if names.ndim != 1 or names.dtype.kind != "U":
        raise VlsiError(path, "names must be a list of strings")
    count = len(names)
    shapes = {"drivers": (count, 3), "load_offsets": (count + 1,),
              "edge_offsets": (count + 1,)}
    for key, shape in shapes.items():
        if ints[key].shape != shape:
            raise VlsiError(path, f"array {key} has shape {ints[key].shape}, expected {shape} "
                                  f"for {count} nets")
    for key, width in (("loads", 3), ("edges", 6)):
        if ints[key].ndim != 2 or ints[key].shape[1] != width:
            raise VlsiError(path, f"array {key} has shape {ints[key].shape}, expected (n, "
                                  f"{width})")
    for key, rows in (("load_offsets", "loads"), ("edge_offsets", "edges")):
        offsets = ints[key]
        if offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != len(ints[rows]):
            raise VlsiError(path, f"array {key} does not index {rows} (0, rising, "
                                  f"{len(ints[rows])} at the end)")
    nx, ny, layers = (int(v) for v in grid)
    directions = str(arrays["directions"])
    if len(directions) != layers or set(directions) - {"H", "V"}:
        raise VlsiError(path, f"directions {directions[:20]!r}: expected one H or V per layer")
    upper = np.array([nx, ny, layers])
    for key, nodes in (("drivers", ints["drivers"]), ("loads", ints["loads"]),
                       ("edges", ints["edges"].reshape(-1, 3))):
        outside = ((nodes < 0) | (nodes >= upper)).any(axis=1)
        if outside.any():
            raise VlsiError(path, f"{key} holds node {nodes[outside][0].tolist()} outside the "
                                  f"{nx} x {ny} x {layers} grid")
    steps = np.abs(ints["edges"][:, :3] - ints["edges"][:, 3:]).sum(axis=1)
    if (steps != 1).any():
        raise VlsiError(path, f"edge {ints['edges'][steps != 1][0].tolist()} does not join "
                              "adjacent GCells")
    if count and (np.diff(ints["load_offsets"]) == 0).any():
        raise VlsiError(path, "a net has no load")
    records = []
    drivers, loads, edges = (ints[k].tolist() for k in ("drivers", "loads", "edges"))
    lo, eo = ints["load_offsets"].tolist(), ints["edge_offsets"].tolist()
    for i, name in enumerate(names.tolist()):
        tree = frozenset(edge(tuple(e[:3]), tuple(e[3:])) for e in edges[eo[i]:eo[i + 1]])
        records.append((name, tuple(drivers[i]), tuple(tuple(n) for n in loads[lo[i]:lo[i + 1]]),
                        tree))
    return records, GridSpec(nx, ny, layers, tuple(directions))


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(path) as archive:
            size = sum(info.file_size for info in archive.infolist())
        if size > MAX_BYTES:
            raise VlsiError(path, f"the arrays would take {size >> 20} MiB; refusing more than "
                                  f"{MAX_BYTES >> 20} MiB")
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files if key in ARRAYS}
    except VlsiError:
        raise
    except FileNotFoundError:
        raise VlsiError(path, "no such file") from None
    except ValueError as exc:
        if "pickle" in str(exc):
            raise VlsiError(path, "holds pickled objects; net datasets are plain arrays "
                                  "(refused)") from None
        raise VlsiError(path, f"not a readable net dataset ({exc})") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise VlsiError(path, f"not a readable net dataset (truncated or not an .npz: "
                              f"{type(exc).__name__}: {exc})") from None
