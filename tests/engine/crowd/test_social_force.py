"""Social force: agents reach goals without overlapping, walls push them out, and parameters
fitted to a real ETH/UCY recording bring a replay's speeds closer to the recording's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from engine.crowd import social_force as sf
from engine.crowd import stats
from engine.io.crowd import Scene, read_tracks

CROWD_DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "crowd"


def crossing_routes(count: int, seed: int = 0) -> np.ndarray:
    """Two groups on jittered 1.3 m grids walking through each other along x."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(np.arange(3), np.arange(count // 3)), -1).reshape(-1, 2)
    left = np.array([-12.0, -4.0]) + 1.3 * grid + rng.uniform(-0.3, 0.3, grid.shape)
    right = np.array([9.4, -4.0]) + 1.3 * grid + rng.uniform(-0.3, 0.3, grid.shape)
    starts, goals = np.r_[left, right], np.r_[right, left]
    return np.stack([starts, goals], axis=1)


def min_pair_distance(positions: np.ndarray, alive: np.ndarray) -> float:
    best = np.inf
    for xy, here in zip(positions, alive, strict=True):
        xy = xy[here]
        dist = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
        np.fill_diagonal(dist, np.inf)
        best = min(best, dist.min())
    return float(best)


def test_counterflow_reaches_goals_and_keeps_people_apart():
    routes = crossing_routes(12)
    params = sf.SocialForceParams()
    sim = sf.simulate(routes, np.full(len(routes), 1.3), params, dt_s=0.1, steps=500)
    assert sim.arrived.all()
    assert np.linalg.norm(sim.positions[-1] - routes[:, -1], axis=1).max() < sf.ARRIVE_M + 0.05
    assert min_pair_distance(sim.positions, sim.alive) > params.radius_m  # bodies barely touch
    without = sf.simulate(routes, np.full(len(routes), 1.3),
                          sf.SocialForceParams(agent_strength=0.0), dt_s=0.1, steps=500)
    assert min_pair_distance(without.positions, without.alive) < 0.2  # repulsion is what helps


def test_obstacles_repel_and_waypoints_are_followed():
    routes = np.array([[[-6.0, 0.05], [6.0, 0.0]]])
    box = np.array([[-1.0, -1.0, 1.0, 1.0]])
    sim = sf.simulate(routes, np.array([1.3]), sf.SocialForceParams(), 0.1, 200, boxes=box)
    inside = (np.abs(sim.positions[:, 0, 0]) < 1.0) & (np.abs(sim.positions[:, 0, 1]) < 1.0)
    assert not inside.any() and sim.arrived.all()
    scene = Scene.model_validate({
        "ground": {"size": [20, 20]},
        "groups": [{"count": 3, "spawn_center": [-6, -6], "spawn_size": [1, 1],
                    "waypoints": [[-6, 6]], "goal": [6, 6]}],
        "camera": [{"t_s": 0, "position": [0, -15, 8], "look_at": [0, 0, 0]}],
        "duration_s": 25, "fps": 10})
    sim, groups = sf.simulate_scene(scene, sf.SocialForceParams(), seed=1)
    assert sim.arrived.all() and (groups == 0).all()
    assert (sim.positions[:, :, 1] > 4).any(0).all()  # they went north ...
    first_north = (sim.positions[:, :, 1] > 4).argmax(0)
    assert (sim.positions[first_north, np.arange(3), 0] < -3).all()  # ... before going east


def test_entries_are_delayed_and_arrivals_leave():
    routes = np.array([[[0.0, 0.0], [2.0, 0.0]], [[0.0, 5.0], [2.0, 5.0]]])
    sim = sf.simulate(routes, np.array([1.0, 1.0]), sf.SocialForceParams(), 0.5, 20,
                      start_steps=np.array([0, 6]), remove_on_arrival=True)
    assert not sim.alive[:6, 1].any() and sim.alive[6, 1]
    assert not sim.alive[-1].any() and sim.arrived.all()


def zara1() -> Path:
    """The real recording the fits use (skipped without ../shared, failed on CI)."""
    path = CROWD_DATA / "zara1_crowds_zara01.txt"
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing")
        pytest.skip("../shared/data/crowd is not here")
    return path


def test_fitted_parameters_lower_the_speed_gap_to_real_tracks():
    tracks = read_tracks(zara1())
    fit = sf.fit_to_tracks([tracks], max_samples=1200, iterations=40)
    assert fit.loss_fitted < fit.loss_default
    real = stats.track_speeds(tracks)
    gaps = {name: stats.speed_gap(real, stats.simulation_speeds(sf.replay(tracks, params, 3)))
            for name, params in (("default", sf.SocialForceParams()), ("fitted", fit.params))}
    assert gaps["fitted"] < 0.7 * gaps["default"], gaps
    summary = stats.tracks_stats(tracks)
    assert 0.8 < summary.speed_mean_mps < 1.4 and summary.people_per_frame > 1


def test_a_scene_carries_its_parameters():
    """``Scene.social_force`` (the file's schema) holds exactly the model's parameters, and
    ``scene_params`` reads them back; a scene without them walks with the defaults."""
    from engine.io.crowd import SocialForce

    assert set(SocialForce.model_fields) - {"fitted_to"} == set(sf.SocialForceParams().to_dict())
    data = {"ground": {"size": [20, 20]}, "camera": [{"t_s": 0, "position": [0, -15, 8],
                                                      "look_at": [0, 0, 0]}]}
    assert sf.scene_params(Scene.model_validate(data)) == sf.SocialForceParams()
    mine = sf.SocialForceParams(relaxation_s=2.0, agent_strength=0.5)
    scene = Scene.model_validate({**data, "social_force": {**mine.to_dict(), "fitted_to": "x"}})
    assert sf.scene_params(scene) == mine
    with pytest.raises(ValueError, match="relaxation_s"):
        Scene.model_validate({**data, "social_force": {**mine.to_dict(), "relaxation_s": 0}})


def test_a_recording_is_fitted_once_and_a_fit_can_be_cancelled():
    path = zara1()

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        sf.fit_to_file(path, seed=7, check_cancelled=stop)
    fit = sf.fit_to_file(path, seed=7)  # the cancelled fit left nothing behind
    assert fit.loss_fitted < fit.loss_default
    assert sf.fit_to_file(path, seed=7) is fit
    assert path.name in [p.name for p in sf.shared_recordings()]
