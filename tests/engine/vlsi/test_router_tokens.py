"""The maze router, the route tokenizer and GCell snapping of the real gcd nets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.vlsi.grid import extract_grid_nets, orient_point
from engine.vlsi.router import GridSpec, random_net, route_net
from engine.vlsi.tokens import (
    Vocab,
    edge,
    replay,
    route_metrics,
    source_tokens,
    tree_leaves,
    tree_to_tokens,
)

SPEC = GridSpec(16, 16, 4)


def _nodes(edges):
    return {n for e in edges for n in e}


def _is_tree(root, edges):
    nodes = _nodes(edges) | {root}
    return len(edges) == len(nodes) - 1 and not replay(root, tree_to_tokens(root, edges)).error


# -- router ----------------------------------------------------------------------------------------

def test_two_pin_route_is_a_shortest_path_with_preferred_directions():
    edges = route_net(SPEC, (2, 3, 0), [(9, 3, 0)])
    assert len(edges) == 7 and all(a[2] == b[2] == 0 for a, b in edges)  # straight on m0 (H)
    up = route_net(SPEC, (2, 3, 0), [(2, 9, 0)])  # vertical: via up to m1 (V) and back
    assert sum(a[2] != b[2] for a, b in up) == 2 and sum(a[2] == b[2] for a, b in up) == 6
    for a, b in up:  # every planar step runs along its layer's direction
        if a[2] == b[2]:
            assert (a[1] == b[1]) == (SPEC.direction(a[2]) == "H")


def test_steiner_tree_shares_wire_and_beats_separate_paths():
    driver, loads = (1, 1, 0), [(12, 1, 0), (12, 2, 0), (12, 3, 0)]
    tree = route_net(SPEC, driver, loads)
    separate = set().union(*(route_net(SPEC, driver, [load]) for load in loads))
    assert _is_tree(driver, tree) and set(loads) <= _nodes(tree)
    planar = sum(a[2] == b[2] for a, b in tree)
    assert planar < sum(len(route_net(SPEC, driver, [x])) for x in loads)
    assert planar <= sum(a[2] == b[2] for a, b in separate)


def test_blockages_are_avoided_and_unreachable_loads_are_errors():
    blocked = np.zeros(SPEC.shape, dtype=bool)
    blocked[5, :, 0] = True  # a wall on m0: the route must hop over on m2
    edges = route_net(SPEC, (2, 3, 0), [(9, 3, 0)], blocked)
    assert all(not blocked[n] for n in _nodes(edges))
    assert any(n[2] == 2 for n in _nodes(edges))
    blocked[5, :, :] = True
    with pytest.raises(ValueError, match="cannot be reached"):
        route_net(SPEC, (2, 3, 0), [(9, 3, 0)], blocked)
    with pytest.raises(ValueError, match="outside"):
        route_net(SPEC, (2, 3, 0), [(99, 3, 0)])


# -- tokens ----------------------------------------------------------------------------------------

def test_hand_tree_tokens():
    root = (0, 0, 0)
    path = [(0, 0, 0), (1, 0, 0), (2, 0, 0), (2, 0, 1), (2, 1, 1), (2, 2, 1)]
    edges = {edge(a, b) for a, b in itertools.pairwise(path)}
    edges.add(edge((2, 0, 0), (3, 0, 0)))  # a branch at (2, 0, 0)
    tokens = tree_to_tokens(root, edges)
    assert tokens == ["R2", "<PUSH>", "R1", "<POP>", "T1", "U2"]
    result = replay(root, tokens)
    assert result.edges == edges and result.leaves == {(3, 0, 0), (2, 2, 1)}
    assert result.leaves == tree_leaves(root, edges)
    assert tree_to_tokens(root, edges, max_step=1)[:2] == ["R1", "R1"]


def test_replay_errors_and_grid_bounds():
    assert replay((0, 0, 0), ["<POP>"]).error == "<POP> without <PUSH>"
    assert "leaves the grid" in replay((0, 0, 0), ["L1"], (4, 4, 2)).error
    assert replay((0, 0, 0), ["<PUSH>", "R1"]).error == "<PUSH> without <POP>"
    assert replay((0, 0, 0), ["R1", "<EOS>", "R5"]).edges == {((0, 0, 0), (1, 0, 0))}
    with pytest.raises(ValueError, match="cycle|not one tree"):
        square = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 0)]
        tree_to_tokens((0, 0, 0), {edge(a, b) for a, b in itertools.pairwise(square)})


def test_synthetic_nets_round_trip_through_tokens_and_vocab():
    rng = np.random.default_rng(0)
    vocab = Vocab(max_step=15, max_coord=15, layers=4)
    for _ in range(60):
        driver, loads = random_net(rng, SPEC, 2, 6)
        tree = route_net(SPEC, driver, loads)
        tokens = tree_to_tokens(driver, tree, max_step=15)
        assert vocab.decode(vocab.encode(tokens)) == tokens
        again = replay(driver, tokens, SPEC.shape)
        assert again.edges == tree and not again.error
        assert tree_leaves(driver, tree) <= set(loads)
        metrics = route_metrics(driver, loads, tokens, tree, SPEC.shape)
        assert metrics["connected"] == 1 and metrics["leaf_iou"] == 1
        source, coords = source_tokens(driver, loads)
        assert len(source) == 4 + 4 * len(loads) + 1 == len(coords)
        vocab.encode(source)


def test_metrics_of_a_wrong_route():
    driver, loads = (0, 0, 0), [(3, 0, 0), (0, 0, 2)]
    tree = route_net(GridSpec(4, 4, 3), driver, loads)
    half = route_metrics(driver, loads, ["R3"], tree)
    assert half["connected"] == 0 and 0 < half["leaf_iou"] < 1 and half["wirelength"] == 3
    broken = route_metrics(driver, loads, ["<POP>"], tree)
    assert broken["parse_failure"] == 1 and broken["connected"] == 0


# -- GCell snapping of the real design ----------------------------------------------------------

def test_orientations_keep_the_macro_box():
    for orient in ("N", "S", "E", "W", "FN", "FS", "FE", "FW"):
        corners = {orient_point(x, y, 2, 1, orient) for x in (0, 2) for y in (0, 1)}
        wide = orient in ("N", "S", "FN", "FS")
        assert corners == ({(0, 0), (2, 0), (0, 1), (2, 1)} if wide
                           else {(0, 0), (1, 0), (0, 2), (1, 2)})
    assert orient_point(0.5, 0.2, 2, 1, "FS") == (0.5, 0.8)


def test_gcd_nets_snap_to_trees_that_round_trip(gcd_design, gcd_lef):
    nets = extract_grid_nets(gcd_design, gcd_lef)
    assert 350 <= len(nets) <= 404
    multi = 0
    for net in nets:
        assert all(0 <= v < s for node in net.loads + [net.driver]
                   for v, s in zip(node, (47, 49, 10), strict=True))
        tokens = tree_to_tokens(net.driver, net.edges)
        assert replay(net.driver, tokens).edges == net.edges
        assert tree_leaves(net.driver, net.edges) <= set(net.loads)
        assert set(net.loads) <= _nodes(net.edges)
        multi += len(net.loads) > 1
    assert multi > 100
    named = extract_grid_nets(gcd_design, gcd_lef, names=["_003_"])
    assert [n.name for n in named] == ["_003_"] and len(named[0].loads) == 4
