"""SC-ICL simulator: a 100 x 100 (user gain x assistant gain) grid x 20 seeds x 200 turns.

200,000 dialogues advance together, one NumPy step per turn (beliefs, posterior, online
spectral estimate, collapse rule); BLAS and NumPy on one thread. Reported: the wall time and
the per-dialogue-turn cost, plus the same grid with trajectories recorded at 10 x 10.
"""

from __future__ import annotations

import time

import numpy as np

GRID, SEEDS, TURNS = 100, 20, 200


def run() -> list[dict]:
    from threadpoolctl import threadpool_limits

    from engine.models import belief_dynamics as bd

    gains = np.linspace(0, 0.3, GRID)
    cfg = bd.DyadConfig()
    with threadpool_limits(limits=1):
        started = time.perf_counter()
        result = bd.simulate(gains[:, None], gains[None, :], cfg, TURNS, SEEDS,
                             np.random.default_rng(0))
        wall_s = time.perf_counter() - started
        small = np.linspace(0, 0.3, 10)
        started = time.perf_counter()
        bd.simulate(small[:, None], small[None, :], cfg, TURNS, SEEDS, np.random.default_rng(0),
                    record=True)
        recorded_s = time.perf_counter() - started
    dialogue_turns = GRID * GRID * SEEDS * TURNS
    return [
        {"name": f"{GRID}x{GRID} gains x {SEEDS} seeds x {TURNS} turns (collapse only)",
         "value": wall_s, "unit": "s", "target": "<= 30 s",
         "reference": f"{result.collapsed.mean():.2f} of dialogues collapse"},
        {"name": "same, per dialogue-turn", "value": wall_s / dialogue_turns * 1e9, "unit": "ns"},
        {"name": f"10x10 gains x {SEEDS} seeds x {TURNS} turns, trajectories recorded",
         "value": recorded_s * 1e3, "unit": "ms"},
    ]
