"""iPCL-style route tokens: a routing tree on a 3D grid as a depth-first string of moves.

A node is ``(x, y, m)`` (GCell column, row, routing layer). A tree is a set of unit edges
between neighbouring nodes, rooted at the driver. ``tree_to_tokens`` walks it depth first from
the driver, merging straight runs into one relative move (``R3`` = 3 cells in +x, ``L`` -x,
``U``/``D`` +-y, ``T``/``B`` one layer up/down) and bracketing every branch but the last at a
node with ``<PUSH>`` ... ``<POP>`` (children in the fixed order R L U D T B, so a tree has one
serialisation). Runs longer than ``max_step`` are split (``R40`` -> ``R31 R9``).
``tokens_to_tree`` replays the moves; the positions where branches end (at ``<POP>`` and at the
end) are the tree's leaves.

The source side names the net: ``<DRIVER> X.. Y.. M..`` then, per load, ``<LOAD>`` and its
offset from the driver as three moves (``R2 D5 T0``), then ``<SRC_END>``. Every token also
carries a 3D coordinate (``source_coords``, ``replay``): the driver or the load it describes on
the source side, the cumulative position after it on the target side; the model's coordinate
rotary encoding and attention prior read these.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Node = tuple[int, int, int]
Edge = tuple[Node, Node]
DIRECTIONS = {"R": (1, 0, 0), "L": (-1, 0, 0), "U": (0, 1, 0), "D": (0, -1, 0),
              "T": (0, 0, 1), "B": (0, 0, -1)}
SPECIALS = ("<PAD>", "<BOS>", "<EOS>", "<PUSH>", "<POP>", "<DRIVER>", "<LOAD>", "<SRC_END>")
PAD, BOS, EOS, PUSH, POP, DRIVER, LOAD, SRC_END = range(len(SPECIALS))


def edge(a: Node, b: Node) -> Edge:
    return (a, b) if a <= b else (b, a)


def step_of(a: Node, b: Node) -> str:
    delta = (b[0] - a[0], b[1] - a[1], b[2] - a[2])
    for name, d in DIRECTIONS.items():
        if d == delta:
            return name
    raise ValueError(f"{a} and {b} are not grid neighbours")


@dataclass
class Vocab:
    """Token strings <-> ids: specials, moves of 0..max_step per direction, absolute X/Y/M."""

    max_step: int = 31
    max_coord: int = 63
    layers: int = 10
    itos: list[str] = field(init=False)
    stoi: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.itos = list(SPECIALS)
        self.itos += [f"{d}{n}" for d in DIRECTIONS for n in range(self.max_step + 1)]
        self.itos += [f"{a}{n}" for a in "XY" for n in range(self.max_coord + 1)]
        self.itos += [f"M{n}" for n in range(self.layers)]
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        try:
            return [self.stoi[t] for t in tokens]
        except KeyError as exc:
            raise ValueError(f"token {exc.args[0]} is outside the vocabulary (max_step "
                             f"{self.max_step}, max_coord {self.max_coord})") from None

    def decode(self, ids: list[int]) -> list[str]:
        return [self.itos[i] for i in ids]


def _moves(direction: str, length: int, max_step: int) -> list[str]:
    out = []
    while length > 0:
        out.append(f"{direction}{min(length, max_step)}")
        length -= max_step
    return out


def tree_to_tokens(root: Node, edges: set[Edge], max_step: int = 31) -> list[str]:
    """The depth-first move string of a tree (see the module docstring); edges must form a
    tree containing ``root`` (a cycle or a detached edge is a ValueError)."""
    neighbours: dict[Node, list[Node]] = {}
    for a, b in edges:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    if edges and root not in neighbours:
        raise ValueError(f"the root {root} is not on the tree")
    order = {name: i for i, name in enumerate(DIRECTIONS)}
    tokens: list[str] = []
    seen = {root}

    def children(node: Node) -> list[Node]:
        out = [n for n in neighbours.get(node, []) if n not in seen]
        return sorted(out, key=lambda n: order[step_of(node, n)])

    def walk(node: Node) -> None:
        kids = children(node)
        for number, kid in enumerate(kids):
            if kid in seen:  # reached again through another branch
                raise ValueError(f"the edges hold a cycle through {kid}")
            last = number == len(kids) - 1
            if not last:
                tokens.append("<PUSH>")
            direction, length, here, nxt = step_of(node, kid), 0, node, kid
            while True:  # follow the straight run while it neither turns nor branches
                seen.add(nxt)
                length += 1
                here = nxt
                onward = children(here)
                if len(onward) != 1 or step_of(here, onward[0]) != direction:
                    break
                nxt = onward[0]
            tokens.extend(_moves(direction, length, max_step))
            walk(here)
            if not last:
                tokens.append("<POP>")

    walk(root)
    if len(seen) != len(neighbours) and edges:
        raise ValueError("the edges are not one tree: some are not reachable from the root")
    return tokens


@dataclass
class Replay:
    """What a token string builds: edges, leaves, every token's position, and the first error."""

    edges: set[Edge]
    leaves: set[Node]
    coords: list[Node]  # position after each token
    error: str = ""


def replay(root: Node, tokens: list[str], shape: tuple[int, int, int] | None = None) -> Replay:
    """Replay moves from ``root``; stops at ``<EOS>``. Leaving the grid ``shape`` or a ``<POP>``
    without ``<PUSH>`` is an error (recorded, the replay stops there)."""
    position, stack = root, []
    edges: set[Edge] = set()
    leaves: set[Node] = set()
    coords: list[Node] = []
    moved = False  # has this branch moved since it started (a leaf needs a move)
    for token in tokens:
        if token == "<EOS>":
            break
        if token == "<PUSH>":
            stack.append(position)
            moved = False
        elif token == "<POP>":
            if not stack:
                return Replay(edges, leaves, coords, "<POP> without <PUSH>")
            if moved:
                leaves.add(position)
            position, moved = stack.pop(), True
        elif token[:1] in DIRECTIONS and token[1:].isdigit():
            dx, dy, dm = DIRECTIONS[token[0]]
            for _ in range(int(token[1:])):
                nxt = (position[0] + dx, position[1] + dy, position[2] + dm)
                if shape and not all(0 <= v < s for v, s in zip(nxt, shape, strict=True)):
                    return Replay(edges, leaves, coords, f"{token} leaves the grid at {nxt}")
                edges.add(edge(position, nxt))
                position = nxt
            moved = True
        elif token != "<BOS>":
            return Replay(edges, leaves, coords, f"unexpected token {token}")
        coords.append(position)
    if moved:
        leaves.add(position)
    if stack:
        return Replay(edges, leaves, coords, "<PUSH> without <POP>")
    return Replay(edges, leaves, coords)


def tokens_to_tree(root: Node, tokens: list[str]) -> set[Edge]:
    result = replay(root, tokens)
    if result.error:
        raise ValueError(result.error)
    return result.edges


def source_tokens(driver: Node, loads: list[Node]) -> tuple[list[str], list[Node]]:
    """(tokens, coordinate per token) of the source side; loads sorted by distance."""
    tokens, coords = ["<DRIVER>", f"X{driver[0]}", f"Y{driver[1]}", f"M{driver[2]}"], [driver] * 4
    for load in sorted(loads, key=lambda n: (manhattan(driver, n), n)):
        dx, dy, dm = (load[i] - driver[i] for i in range(3))
        tokens += ["<LOAD>", f"{'R' if dx >= 0 else 'L'}{abs(dx)}",
                   f"{'U' if dy >= 0 else 'D'}{abs(dy)}", f"{'T' if dm >= 0 else 'B'}{abs(dm)}"]
        coords += [load] * 4
    return tokens + ["<SRC_END>"], coords + [driver]


def manhattan(a: Node, b: Node) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1]) + abs(a[2] - b[2])


def tree_leaves(root: Node, edges: set[Edge]) -> set[Node]:
    """Nodes of degree 1 other than the root (what a replay reports as leaves)."""
    degree: dict[Node, int] = {}
    for a, b in edges:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    return {n for n, d in degree.items() if d == 1 and n != root}


def route_metrics(root: Node, loads: list[Node], predicted: list[str], reference: set[Edge],
                  shape: tuple[int, int, int] | None = None) -> dict[str, float]:
    """The spec's metrics for one net: wirelength and vias of the prediction, leaf IoU against
    the reference tree, connectivity (valid tree reaching every load), parse failure."""
    result = replay(root, predicted, shape)
    nodes = {n for e in result.edges for n in e} | {root}
    connected = not result.error and all(load in nodes for load in loads)
    true_leaves = tree_leaves(root, reference)
    union = result.leaves | true_leaves
    iou = len(result.leaves & true_leaves) / len(union) if union else 1.0
    return {"wirelength": float(sum(a[2] == b[2] for a, b in result.edges)),
            "vias": float(sum(a[2] != b[2] for a, b in result.edges)),
            "leaf_iou": iou, "connected": float(connected),
            "parse_failure": float(bool(result.error))}
