"""Crowd formats: ETH/UCY tracks (the shared files), CSV, MOT, videos, frame folders, scenes;
bad input names the file and the line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from engine.io import FormatError, crowd, detect, inspect_file

CROWD_DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "crowd"
SCENE = {
    "ground": {"size": [30, 20]},
    "buildings": [{"center": [-10, 5], "size": [6, 6], "height": 8}],
    "obstacles": [{"center": [0, 0], "size": [1, 1], "height": 1}],
    "groups": [{"count": 5, "spawn_center": [-12, -6], "goal": [12, 6]}],
    "camera": [{"t_s": 0, "position": [0, -25, 12], "look_at": [0, 0, 0]},
               {"t_s": 4, "position": [5, -25, 12], "look_at": [0, 0, 0]}],
    "prompt": "a busy plaza at noon",
    "duration_s": 4,
    "fps": 5,
}


def shared_file(name: str) -> Path:
    path = CROWD_DATA / name
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing")
        pytest.skip("../shared/data/crowd is not here")
    return path


# -- trajectories ------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "peds", "frames", "rows"), [
    ("eth_biwi_eth.txt", 360, 876, 5492), ("hotel_biwi_hotel.txt", 389, 1168, 6543),
    ("zara1_crowds_zara01.txt", 148, 872, 5153)])
def test_the_shared_eth_ucy_files(name, peds, frames, rows):
    path = shared_file(name)
    tracks = crowd.read_tracks(path)
    assert (len(tracks.ids), len(tracks.frames), len(tracks.frame)) == (peds, frames, rows)
    assert tracks.layout == "eth-ucy" and tracks.frame_step == 10
    assert tracks.sample_dt_s == pytest.approx(0.4)
    speeds = np.linalg.norm(tracks.step_velocities(), axis=1)
    assert 0.3 < np.median(speeds) < 3.0  # people walk
    report = inspect_file(path)
    assert report["format"] == "trajectories" and report["panel"] == "crowd"
    assert report["summary"]["tracks"] == peds and report["summary"]["frames"] == frames


def test_csv_round_trip_keeps_rate_and_positions(tmp_path):
    positions = np.cumsum(np.random.default_rng(0).normal(size=(6, 3, 2)), axis=0)
    tracks = crowd.tracks_from_array(positions, frame_rate_hz=5.0)
    path = tmp_path / "sim.csv"
    path.write_text(tracks.to_csv())
    back = crowd.read_tracks(path)
    assert detect(path).name == "trajectories"
    assert back.frame_rate_hz == pytest.approx(5.0)
    np.testing.assert_allclose(back.xy, tracks.xy, atol=1e-4)
    assert back.per_pedestrian()[2][1].shape == (6, 2)


def test_csv_with_times_only_and_aliases(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("time_s,agent_id,pos_x,pos_y\n0.0,1,0,0\n0.5,1,1,0\n1.0,1,2,0\n")
    tracks = crowd.read_tracks(path)
    assert tracks.frame_rate_hz == pytest.approx(2.0)
    assert np.linalg.norm(tracks.step_velocities(), axis=1) == pytest.approx([2.0, 2.0])


def test_mot_boxes_become_foot_points(tmp_path):
    path = tmp_path / "gt.txt"
    path.write_text("1,1,10,20,4,30,1,-1,-1,-1\n2,1,12,20,4,30,1,-1,-1,-1\n")
    tracks = crowd.read_tracks(path)
    assert tracks.layout == "mot" and tracks.units == "px"
    np.testing.assert_allclose(tracks.xy, [[12, 50], [14, 50]])


@pytest.mark.parametrize(("name", "text", "message"), [
    ("a.csv", "frame,id,x\n0,1,2\n", "line 1: missing column(s) y"),
    ("b.csv", "frame,id,x,y\n0,1,2,3\n1,1,oops,3\n", "line 3: x 'oops' is not a number"),
    ("c.txt", "0 1 2.0 3.0\n10 1 2.5\n", "line 2: expected 4 columns"),
    ("d.txt", "0 1 2.0 3.0\n10 1 nan 3.0\n", "line 2: x 'nan' is not finite"),
    ("e.txt", "0 1 2.0 3.0\n0.5 1 2.0 3.0\n", "line 2: frame '0.5' is not a whole number"),
    ("f.txt", "0 1 2 3\n0 1 4 5\n", "pedestrian 1 appears twice in frame 0"),
])
def test_bad_trajectories_name_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(FormatError) as error:
        crowd.read_tracks(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


# -- videos and frame folders ------------------------------------------------------------------

def test_video_round_trip_and_inspect(tmp_path):
    frames = np.zeros((6, 32, 48, 3), np.uint8)
    for t in range(6):
        frames[t, 8:24, 4 + 6 * t:14 + 6 * t] = (220, 40, 40)
    path = crowd.write_video(tmp_path / "clip.mp4", frames, fps=5)
    back, info = crowd.read_video(path)
    assert back.shape == frames.shape and (info.width, info.height) == (48, 32)
    assert np.abs(back.astype(int) - frames).mean() < 12  # lossy but faithful
    report = inspect_file(path)
    assert report["format"] == "video"
    assert report["summary"] == {"frames": 6, "resolution": "48x32", "duration_s": 1.2}
    assert crowd.encode_mp4(frames, 5)[4:8] == b"ftyp"


def test_corrupt_videos_are_format_errors(tmp_path):
    garbage = tmp_path / "bad.mp4"
    garbage.write_bytes(os.urandom(2000))
    truncated = tmp_path / "cut.mp4"
    whole = crowd.encode_mp4(np.zeros((4, 16, 16, 3), np.uint8), 4)
    truncated.write_bytes(whole[:200])
    for path in (garbage, truncated):
        with pytest.raises(FormatError, match="not a readable video") as error:
            inspect_file(path)
        assert str(error.value).startswith(str(path))


def test_frame_folder(tmp_path):
    from PIL import Image

    folder = tmp_path / "frames"
    folder.mkdir()
    for t in range(3):
        Image.fromarray(np.full((10, 12, 3), 40 * t, np.uint8)).save(folder / f"{t:04d}.png")
    report = inspect_file(folder)
    assert report["format"] == "frames" and report["summary"]["frames"] == 3
    assert report["summary"]["resolution"] == "12x10"
    Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(folder / "0009.png")
    with pytest.raises(FormatError, match="0009.png: 5x5 differs"):
        crowd.read_frame_folder(folder)


# -- scenes ------------------------------------------------------------------------------------

def test_scene_reads_and_inspects(tmp_path):
    path = tmp_path / "plaza.json"
    path.write_text(json.dumps(SCENE, indent=2))
    scene = crowd.read_scene(path)
    assert scene.frames == 20 and scene.agents == 5 and scene.prompt.startswith("a busy")
    report = inspect_file(path)
    assert report["format"] == "crowd-scene"
    assert report["summary"]["buildings"] == 1 and report["summary"]["agents"] == 5
    assert crowd.Scene.model_validate_json(crowd.scene_to_json(scene)) == scene


def test_inspect_reports_the_scenes_social_force(tmp_path, capsys):
    from engine.cli import main
    from engine.crowd.social_force import SocialForceParams

    path = tmp_path / "plaza.json"
    path.write_text(json.dumps(SCENE))
    summary = inspect_file(path)["summary"]
    assert summary["social_force"] == "model defaults"
    assert summary["desired_speed_mps"] == SocialForceParams().desired_speed_mps
    fitted = {**SocialForceParams().to_dict(), "desired_speed_mps": 1.05,
              "fitted_to": "crowds_zara01.txt"}
    path.write_text(json.dumps({**SCENE, "social_force": fitted}))
    report = inspect_file(path)
    assert report["summary"]["social_force"] == "fitted to crowds_zara01.txt"
    assert report["summary"]["desired_speed_mps"] == 1.05
    assert report["metadata"]["social_force"]["relaxation_s"] == fitted["relaxation_s"]
    path.write_text(json.dumps({**SCENE, "social_force": {**fitted, "fitted_to": "",
                                                          "desired_speed_mps": 0.8}}))
    summary = inspect_file(path)["summary"]
    assert summary["social_force"] == "set by hand" and summary["desired_speed_mps"] == 0.8
    assert main(["inspect", str(path)]) == 0  # what `studio-engine inspect` prints
    printed = capsys.readouterr().out
    assert "social_force: set by hand" in printed and "desired_speed_mps: 0.8" in printed


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s["buildings"][0].update(size=[6, -1]), "buildings.0: box size [6.0, -1.0]"),
    (lambda s: s["buildings"][0].update(center=[14, 5]), "reaches outside"),
    (lambda s: s["camera"][1].update(t_s=0), "must increase strictly"),
    (lambda s: s["camera"][0].update(position=[0, 0, 0]), "camera.0: camera position"),
    (lambda s: s["groups"][0].update(goal=[-10, 5]), "goal (-10, 5) is inside a building"),
    (lambda s: s["groups"][0].update(count="many"), "groups.0.count"),
])
def test_invalid_scene_geometry_names_the_line(tmp_path, change, message):
    scene = json.loads(json.dumps(SCENE))
    change(scene)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(scene, indent=2))
    with pytest.raises(FormatError) as error:
        crowd.read_scene(path)
    text = str(error.value)
    assert text.startswith(str(path)) and message in text
    line = int(text.split("line ")[1].split(":")[0])
    assert 1 <= line <= len(path.read_text().splitlines())


def test_scene_error_line_points_at_the_object(tmp_path):
    scene = json.loads(json.dumps(SCENE))
    scene["buildings"][0]["height"] = -3
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(scene, indent=2))
    with pytest.raises(FormatError) as error:
        crowd.read_scene(path)
    line = int(str(error.value).split("line ")[1].split(":")[0])
    lines = path.read_text().splitlines()
    assert lines[line - 1].strip() == "{" and '"center"' in lines[line]
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "ground": {\n  "camera": [}\n')
    with pytest.raises(FormatError, match="line 3: not JSON"):
        crowd.read_scene(broken)


def test_the_crowd_reader_imports_no_simulation(tmp_path):
    """Review of issue 22 (issue 37): ``engine.io.crowd`` imported the social-force
    simulation to report a scene's parameters, and the simulation imported the reader back.
    Reading and inspecting a scene now loads neither the simulation nor SciPy."""
    import subprocess
    import sys

    scene = tmp_path / "scene.json"
    scene.write_text('{"camera": [{"t_s": 0, "position": [0, -10, 5], "look_at": [0, 0, 0]}],'
                     ' "groups": []}')
    code = ("import sys; from engine.io import inspect_file; "
            f"report = inspect_file({str(scene)!r}); "
            "assert report['summary']['social_force'] == 'model defaults', report; "
            "print(sorted(m for m in sys.modules if m.startswith(('engine.crowd', 'scipy'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "['engine.crowd', 'engine.crowd.params']", done.stdout
