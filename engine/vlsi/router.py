"""The classical router: a rectilinear Steiner tree grown by maze routing on a 3D GCell grid.

Layers alternate preferred directions (layer 0 horizontal, as metal1 in Nangate45): a wire
moves along its layer's direction only, and changing layer costs ``via_cost``. Starting from the
driver, each step runs Dijkstra from the whole tree built so far (every node of the tree is a
source, so new paths branch off it: Steiner points appear where they help) and joins the
nearest unconnected load by its shortest path (Prim-Dijkstra). Blocked nodes (obstructions,
full GCells) are never entered. This is the baseline the learned router is measured against
and the ground truth of synthetic nets.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.vlsi.tokens import Edge, Node, edge

HORIZONTAL, VERTICAL = "H", "V"


@dataclass(frozen=True)
class GridSpec:
    nx: int
    ny: int
    layers: int
    directions: tuple[str, ...] = ()  # per layer "H"/"V"; default H, V, H, ...
    via_cost: float = 2.0

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.nx, self.ny, self.layers)

    def direction(self, layer: int) -> str:
        if self.directions:
            return self.directions[layer]
        return HORIZONTAL if layer % 2 == 0 else VERTICAL

    def index(self, node: Node) -> int:
        x, y, m = node
        return (m * self.ny + y) * self.nx + x

    def node(self, index: int) -> Node:
        m, rest = divmod(int(index), self.nx * self.ny)
        y, x = divmod(rest, self.nx)
        return (x, y, m)


@lru_cache(maxsize=8)
def _graph(spec: GridSpec, blocked_key: bytes | None):
    """The grid's sparse adjacency (scipy CSR), edges into blocked nodes removed."""
    from scipy.sparse import coo_matrix

    ids = np.arange(spec.nx * spec.ny * spec.layers).reshape(spec.layers, spec.ny, spec.nx)
    rows, cols, costs = [], [], []
    for m in range(spec.layers):
        plane = ids[m]
        a, b = ((plane[:, :-1], plane[:, 1:]) if spec.direction(m) == HORIZONTAL
                else (plane[:-1, :], plane[1:, :]))
        rows.append(a.ravel())
        cols.append(b.ravel())
        costs.append(np.ones(a.size))
        if m + 1 < spec.layers:
            rows.append(plane.ravel())
            cols.append(ids[m + 1].ravel())
            costs.append(np.full(plane.size, spec.via_cost))
    r, c, w = np.concatenate(rows), np.concatenate(cols), np.concatenate(costs)
    if blocked_key is not None:
        blocked = np.frombuffer(blocked_key, dtype=bool)
        keep = ~(blocked[r] | blocked[c])
        r, c, w = r[keep], c[keep], w[keep]
    n = ids.size
    return coo_matrix((np.concatenate([w, w]), (np.concatenate([r, c]), np.concatenate([c, r]))),
                      shape=(n, n)).tocsr()


def route_net(spec: GridSpec, driver: Node, loads: list[Node],
              blocked: np.ndarray | None = None) -> set[Edge]:
    """The tree's unit edges joining ``driver`` to every load; ValueError when one is cut off.

    ``blocked``: bool array of ``spec.shape`` (x, y, layer) of nodes no wire may use (the pins
    themselves are always allowed).
    """
    from scipy.sparse.csgraph import dijkstra

    for node in (driver, *loads):
        if not all(0 <= v < s for v, s in zip(node, spec.shape, strict=True)):
            raise ValueError(f"pin {node} is outside the {spec.shape} grid")
    key = None
    if blocked is not None:
        flat = np.asarray(blocked, dtype=bool).transpose(2, 1, 0).copy().ravel()
        for node in (driver, *loads):
            flat[spec.index(node)] = False
        key = flat.tobytes()
    graph = _graph(spec, key)
    tree = {spec.index(driver)}
    edges: set[Edge] = set()
    remaining = {spec.index(n) for n in loads} - tree
    while remaining:
        dist, pred, _ = dijkstra(graph, indices=sorted(tree), min_only=True,
                                 return_predecessors=True)
        targets = sorted(remaining)
        nearest = targets[int(np.argmin(dist[targets]))]
        if not np.isfinite(dist[nearest]):
            raise ValueError(f"load {spec.node(nearest)} cannot be reached from the net")
        node = nearest
        while node not in tree:
            previous = int(pred[node])
            edges.add(edge(spec.node(previous), spec.node(node)))
            tree.add(node)
            node = previous
        remaining -= tree
    return edges


def random_net(rng: np.random.Generator, spec: GridSpec, min_loads: int, max_loads: int,
               pin_layer: int = 0) -> tuple[Node, list[Node]]:
    """A driver and 2..n distinct loads at random GCells on ``pin_layer`` (synthetic data)."""
    count = int(rng.integers(min_loads, max_loads + 1))
    cells = rng.choice(spec.nx * spec.ny, size=count + 1, replace=False)
    pins = [(int(c % spec.nx), int(c // spec.nx), pin_layer) for c in cells]
    return pins[0], pins[1:]
