"""Lineage: runs, their inputs and outputs and the edits behind a regeneration form one tree;
the dock compares, reopens, reruns and exports nodes with their provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import provenance
from studio.lineage import EDITS, FILE, RUN, build_lineage, export_node, install_lineage_dock
from studio.panel_registry import PanelEntry
from tests.studio.test_sessions_panel import MANIFEST, PANEL_ID, add_sketch_panel, write_points


def _run(workspace, method: str, params: dict, inputs: dict, outputs: dict[str, str],
         seed: int = 0) -> str:
    """A finished run in the workspace, as the engine leaves one (params.json, result.json
    and its output files)."""
    run_id = workspace.create_run(method, params, seed, provenance={"inputs": inputs})
    run_dir = workspace.run_dir(run_id)
    for relative, text in outputs.items():
        target = run_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    workspace.write_result(run_id, {"run_id": run_id, "method": method, "state": "succeeded",
                                    "outputs": {Path(r).stem: r for r in outputs}})
    workspace.set_state(run_id, "succeeded")
    return run_id


@pytest.fixture
def story(main_window, tmp_path):
    """Generate from a user's file, edit what was generated, regenerate from the edit."""
    window = main_window
    add_sketch_panel(window)
    workspace = window.workspace
    source = write_points(tmp_path / "data" / "points.txt", [(1, 1), (4, 2), (6, 6)])
    first = _run(workspace, "sketch.generate", {"steps": 10, "scale": 2.0},
                 {"source": str(source.resolve())},
                 {"artifacts/generated.txt": "2 2\n8 4\n12 12\n",
                  "checkpoints/model/cfg.json": "{}"}, seed=7)
    generated = workspace.run_dir(first) / "artifacts" / "generated.txt"
    panel = window.open_panel(PANEL_ID)
    assert panel.open_file(str(generated))
    panel.move_point(1, 1, 1)                   # the user drags a point of the generation
    edited_copy = write_points(workspace.root / "sketch" / "generated-edited.txt",
                               panel.model.points)
    checkpoint = workspace.run_dir(first) / "checkpoints" / "model"
    second = _run(workspace, "sketch.refine", {"steps": 5},
                  {"source": str(edited_copy.resolve()), "checkpoint": str(checkpoint)},
                  {"artifacts/refined.txt": "2 2\n9 5\n12 12\n"}, seed=3)
    dock = install_lineage_dock(window).widget()
    # the job is submitted from this window: the recorder notes the edits behind it
    window.bridge.jobs.register(second, "sketch.refine", {"steps": 5}, {}, 3)
    return dict(window=window, dock=dock, source=source.resolve(), first=first,
                second=second, generated=generated.resolve(), edited=edited_copy.resolve(),
                refined=(workspace.run_dir(second) / "artifacts" / "refined.txt").resolve(),
                checkpoint=checkpoint.resolve(), panel=panel)


def test_the_graph_joins_runs_inputs_outputs_and_edits(story):
    graph = build_lineage(story["window"].workspace)
    first, second = f"run:{story['first']}", f"run:{story['second']}"
    source, generated = graph.file_key(story["source"]), graph.file_key(story["generated"])
    refined = graph.file_key(story["refined"])
    assert graph.nodes[first].detail["seed"] == 7
    assert graph.nodes[first].detail["params"] == {"steps": 10, "scale": 2.0}
    assert source in graph.nodes[first].parents
    assert generated in graph.nodes[first].children
    [copy] = [key for key in graph.nodes[second].parents if key.endswith("edited.txt")]
    [edits] = graph.nodes[copy].parents
    assert graph.nodes[edits].parents == [generated]          # the edits were of the generation
    assert graph.nodes[edits].detail["labels"] == ["Move point 1"]
    assert graph.file_key(story["edited"]) in graph.nodes[edits].children
    assert graph.file_key(story["checkpoint"]) in graph.nodes[second].parents
    assert graph.nodes[second].detail["checkpoint"]            # a checkpoint input, by name
    assert graph.nodes[refined].parents == [second]
    chain = [node.key for node in graph.ancestors(refined)]
    assert chain[0] == second and chain[-1] == source       # nearest first
    assert {edits, generated, first} <= set(chain)
    assert [node.key for node in graph.roots()][0] == source   # files first


def test_a_run_folder_that_cannot_be_read_is_a_node_saying_so(main_window):
    workspace = main_window.workspace
    run_id = _run(workspace, "x.y", {}, {}, {})
    (workspace.run_dir(run_id) / "params.json").write_text("{ not json")
    graph = build_lineage(workspace)
    assert "not JSON" in graph.nodes[f"run:{run_id}"].detail["problem"]


def test_export_with_provenance_names_the_runs_and_edits(story, tmp_path):
    graph = build_lineage(story["window"].workspace)
    target = export_node(graph, graph.file_key(story["refined"]), tmp_path / "out" / "r.txt")
    assert target.read_text() == story["refined"].read_text()
    record = provenance.read(target)
    assert [run["run_id"] for run in record["runs"]] == [story["second"], story["first"]]
    assert record["runs"][1]["seed"] == 7
    kinds = [entry["kind"] for entry in record["lineage"]]
    assert kinds[0] == FILE and RUN in kinds and EDITS in kinds
    assert record["sources"][0]["path"] == str(story["refined"])
    written = export_node(graph, f"run:{story['first']}", tmp_path / "run.json")
    assert json.loads(written.read_text())["lineage"][0]["method"] == "sketch.generate"


def test_the_dock_draws_the_session_tree_and_acts_on_nodes(story, qtbot, monkeypatch, tmp_path):
    window, dock = story["window"], story["dock"]
    dock.refresh()
    qtbot.waitUntil(lambda: dock.tree.topLevelItemCount() > 0, timeout=10_000)
    assert (Path(window.workspace.root) / "lineage" / f"{story['second']}.json").is_file()
    graph = dock.graph
    refined, generated = graph.file_key(story["refined"]), graph.file_key(story["generated"])
    assert dock._find_item(refined) is not None
    top = [dock.tree.topLevelItem(i).text(0) for i in range(dock.tree.topLevelItemCount())]
    assert top[0] == "points.txt"

    # compare: the sketch panel's own hook gets both files
    entry = PanelEntry(PANEL_ID, MANIFEST.factory, MANIFEST)
    monkeypatch.setattr(window, "panel_for_file", lambda path: entry)
    dock.select(generated, refined)
    assert dock.buttons["Compare"].isEnabled() and not dock.buttons["Rerun"].isEnabled()
    dock.buttons["Compare"].click()
    assert story["panel"].compared == [(str(story["generated"]), str(story["refined"]))]

    # rerun: the same method, parameters, inputs and seed through the engine
    submitted = []
    monkeypatch.setattr(window, "submit", lambda *args, **kw: submitted.append(args))
    dock.select(f"run:{story['first']}")
    assert dock.buttons["Rerun"].isEnabled()
    dock.buttons["Rerun"].click()
    assert submitted == [("sketch.generate", {"steps": 10, "scale": 2.0},
                          {"source": str(story["source"])}, 7)]

    # reopen: the node's file goes through File > Open's rule
    opened = []
    monkeypatch.setattr(window, "open_paths", lambda paths: opened.append(paths))
    dock.select(f"run:{story['second']}")
    dock.buttons["Reopen"].click()
    assert opened == [[str(story["refined"])]]
    written = window.command("lineage.export", node=refined, path=str(tmp_path / "out.txt"))
    assert provenance.read(written)["runs"][0]["run_id"] == story["second"]


def test_the_session_tree_leaves_out_unrelated_runs(story, qtbot):
    window, dock = story["window"], story["dock"]
    other = _run(window.workspace, "other.method", {}, {}, {"artifacts/x.txt": "1 1\n"})
    dock.refresh()
    qtbot.waitUntil(lambda: dock.tree.topLevelItemCount() > 0, timeout=10_000)
    assert dock._find_item(f"run:{other}") is None
    dock.whole.setChecked(True)
    qtbot.waitUntil(lambda: dock._find_item(f"run:{other}") is not None, timeout=10_000)


def test_the_edits_are_recorded_once_when_the_job_is_known(story):
    window = story["window"]
    jobs, workspace = window.bridge.jobs, window.workspace
    run_id = "20261202-170000-a1b2c3"
    target = Path(workspace.root) / "lineage" / f"{run_id}.json"
    # the engine's first event can come before the reply that names the method
    jobs.apply({"type": "job_state", "job": run_id, "seq": 1, "content": {"state": "queued"}})
    assert not target.exists()
    jobs.register(run_id, "sketch.refine", {"steps": 5}, {}, 0)
    record = json.loads(target.read_text())
    assert record["panel"] == PANEL_ID and record["method"] == "sketch.refine"
    [document] = record["documents"]
    assert document["labels"] == ["Move point 1"]
    assert document["path"] == str(story["generated"])
    story["panel"].move_point(0, 5, 5)                     # later edits change nothing
    jobs.register(run_id, "sketch.refine", {"steps": 5}, {}, 0)
    assert json.loads(target.read_text())["documents"][0]["labels"] == ["Move point 1"]


def test_a_rerun_never_resends_a_masked_secret(story, qtbot, monkeypatch):
    from engine.scrub import MASK

    window, dock = story["window"], story["dock"]
    run_id = _run(window.workspace, "sketch.refine", {"steps": 2, "api_key": MASK},
                  {"source": str(story["generated"])}, {"artifacts/out.txt": "1 1\n"}, seed=5)
    dock.whole.setChecked(True)
    qtbot.waitUntil(lambda: dock._find_item(f"run:{run_id}") is not None, timeout=10_000)
    submitted = []
    monkeypatch.setattr(window, "submit", lambda *args, **kw: submitted.append(args))
    dock.select(f"run:{run_id}")
    assert window.command("lineage.rerun") == [run_id]      # the node chosen in the dock
    assert submitted == [("sketch.refine", {"steps": 2}, {"source": str(story["generated"])}, 5)]
    assert "api_key" in window.statusBar().currentMessage()


def test_a_run_is_drawn_under_the_edits_behind_it(story, qtbot):
    dock = story["dock"]
    graph = build_lineage(story["window"].workspace)
    second = f"run:{story['second']}"
    assert graph.primary_parent(second) == graph.file_key(story["edited"])
    copy = graph.file_key(story["edited"])
    assert graph.nodes[graph.primary_parent(copy)].kind == EDITS
    dock.refresh()
    qtbot.waitUntil(lambda: dock.tree.topLevelItemCount() > 0, timeout=10_000)
    rows, stack = [], [dock.tree.topLevelItem(i) for i in range(dock.tree.topLevelItemCount())]
    while stack:
        item = stack.pop()
        rows.append(item)
        stack.extend(item.child(i) for i in range(item.childCount()))
    drawn = [row for row in rows if row.data(0, 256) == second]   # 256: Qt.UserRole
    [full] = [row for row in drawn if "(under" not in row.text(0)]
    assert full.childCount() == 1 and full.parent().data(0, 256) == copy
    assert all(row.childCount() == 0 for row in drawn if row is not full)
    assert not any("(above)" in row.text(0) for row in rows)   # each node in full once


def test_two_designs_compare_as_an_overlay_in_the_route_canvas(main_window, tmp_path, qtbot):
    from tests.panels.routing.conftest import SMALL_DEF

    window = main_window
    design = tmp_path / "small.def"
    design.write_text(SMALL_DEF)
    run_id = _run(window.workspace, "chipstar.route", {"router": "maze", "nets": "a"},
                  {"def": str(design)}, {"artifacts/routed.def": SMALL_DEF.replace(
                      "( 8000 6000 )", "( 8000 7000 )")})
    routed = (window.workspace.run_dir(run_id) / "artifacts" / "routed.def").resolve()
    dock = install_lineage_dock(window).widget()
    dock.whole.setChecked(True)
    qtbot.waitUntil(lambda: dock._find_item(f"file:{routed}") is not None, timeout=10_000)
    assert window.command("lineage.compare", nodes=[f"file:{design.resolve()}",
                                                    f"file:{routed}"]) == "routing"
    routing = window.panel_widgets["routing"]
    assert routing.model.design.path == str(design) or \
        Path(routing.model.design.path).resolve() == design.resolve()
    assert Path(routing.model.prediction.path).resolve() == routed


def test_the_dock_is_driven_by_commands_that_refuse_clearly(story, qtbot):
    from studio.commands import CommandRefused
    from tests.studio.test_commands_map import unmapped, window_actions

    window, dock = story["window"], story["dock"]
    assert unmapped(window_actions(window), window.commands) == []   # View > Lineage too
    controls = [(b.text(), b) for b in dock.buttons.values()] + [("whole", dock.whole)]
    assert unmapped(controls, window.commands) == []
    window.command("view.lineage", on=True)
    assert dock.parentWidget().isVisible() and dock.toggle.isChecked()
    qtbot.waitUntil(lambda: dock.tree.topLevelItemCount() > 0, timeout=10_000)
    source = dock.graph.file_key(story["source"])
    with pytest.raises(CommandRefused, match="choose two nodes"):
        window.command("lineage.compare", nodes=[source])
    with pytest.raises(CommandRefused, match="no node 'run:nope'"):
        window.command("lineage.reopen", nodes=["run:nope"])
    with pytest.raises(CommandRefused, match="not a run"):
        window.command("lineage.rerun", nodes=[source])
    with pytest.raises(CommandRefused, match="choose a node"):
        window.command("lineage.reopen")
    with pytest.raises(CommandRefused):
        window.command("lineage.compare", nodes="not a list")
    window.command("view.lineage", on=False)
    assert not dock.parentWidget().isVisible()


def test_the_edits_come_from_the_panel_whose_document_the_run_reads(story):
    """chipstar.route is listed under the lab, but a user routes the DEF edited in the route
    canvas: the lineage holds the edits of the panel showing the run's input, not the lab's."""
    window = story["window"]
    window.open_panel("lab")  # the panel the engine's listing would name
    monkey_methods = [{"id": "sketch.refine", "panel": "lab"}]
    window.bridge.methods = monkey_methods
    run_id = "20261202-170001-d4e5f6"
    window.bridge.jobs.register(run_id, "sketch.refine", {"steps": 5},
                                {"source": str(story["generated"])}, 0)
    record = json.loads((Path(window.workspace.root) / "lineage" / f"{run_id}.json")
                        .read_text())
    assert record["panel"] == PANEL_ID
    assert record["documents"][0]["labels"] == ["Move point 1"]


def test_an_older_read_finishing_last_never_replaces_the_newer_graph(story, qtbot, monkeypatch):
    """Two refreshes read on the I/O pool's two threads: the first, slower, finishes last and
    used to draw the workspace as it was before the newer run."""
    import threading

    import studio.lineage as lineage

    dock, real = story["dock"], lineage.build_lineage
    first_may_finish = threading.Event()
    calls: list[int] = []

    def build(workspace):
        calls.append(1)
        if len(calls) == 1:
            first_may_finish.wait(5)
            return lineage.Lineage()  # the old, empty graph
        return real(workspace)

    monkeypatch.setattr(lineage, "build_lineage", build)
    dock.refresh()
    dock.refresh()
    dock.whole.setChecked(True)  # whole workspace: the newer graph shows every run
    qtbot.waitUntil(lambda: dock._find_item(f"run:{story['second']}") is not None,
                    timeout=10_000)
    first_may_finish.set()
    qtbot.wait(300)
    assert dock._find_item(f"run:{story['second']}") is not None
