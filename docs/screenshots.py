"""Regenerate the README's screenshots from the real application (``make screenshots``).

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python docs/screenshots.py [--out DIR]

Builds the real ``MainWindow`` (dark theme, 1400x900) on a fresh temporary workspace, with
its settings and logs in the same temporary folder (nothing of the user's is read or written),
starts its engine, drives it as a user would, and saves into ``docs/images/``:

- ``welcome.png``       the welcome page and its nineteen papers;
- ``lab-eos.png``       the lab after ``eos.train`` (eta = 10/L, 100 steps): live curves, and
                        the run in the runs dock;
- ``lab-claim.png``     the lab's Claim tab after "Reproduce claim" in smoke mode;
- ``runs-compare.png``  the runs dock overlaying the loss of two ``eos.train`` runs with
                        different step sizes;
- ``lab-ccfm.png``      the lab's Artifacts tab after ``ccfm.sample``: the chance-constrained
                        sample cloud against the ground truth and the constraint;
- ``dialogue-map.png``  the dialogue panel after ``scicl.gain_map``: the collapse map over
                        (user gain x assistant gain) with the theoretical boundary;
- ``routing-gcd.png``   the route canvas on the gcd design with ``chipstar.route``'s maze
                        routes of five nets overlaid, differences marked;
- ``fmri-brainworld.png`` the fMRI viewer on nitime's run with a BrainWorld generation (a
                        short ``brainworld.train`` then ``.generate``) in a second row;
- ``molecules-grid.png`` the molecule panel on the GNEprop antibiotics, beta-lactams found by
                        SMARTS, sorted by molecular weight;
- ``crowd-previewer.png`` the crowd previewer after ``c2r.simulate`` on the demo scene;
- ``sae-features.png``  the SAE browser after a small ``sae_pc1.train`` on MiniLM layer 3;
- ``edit-history.png``  the molecules tab's edit history dock, its steps grouped by file;
- ``claims-dock.png``   the paper claims dock beside the dialogue panel, holding the claim of
                        a smoke ``scicl.reproduce`` run through ``claims.reproduce``;
- ``report-page.png``   ``studio-engine report scicl``'s PDF (pdftoppm): the summary's
                        lines over the paper's page;
- ``command-log.png``   the command log dock after a few routing commands (select a net, hide
                        and show a layer, move a wire, route a net), each as its Python line;
- ``palette.png``       the command palette (Ctrl+Shift+P) with "route net" typed;
- ``lineage.png``       the lineage dock after the route: the DEF, the edit, the run it fed;
- ``console.png``       the console dock (``install_scripting``) after lines run against
                        ``studio``;
- ``session-restored.png`` the window after File > Open session on a session saved from it;
- ``exports/<panel>.png`` and ``.txt``: one figure export of each panel and what
                        ``studio-engine inspect`` prints of its provenance.

Every wait is bounded; the script exits 1 when a step fails, times out or the window shows an
error, and always closes the window and stops the engine. About one CPU-minute: 2 min 56 s
of wall time on two cores shared with other work (brainworld.train and sae_pc1.train take
half of it; the claims, report, commands, session and console steps about 25 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DEFAULT = ROOT / "docs" / "images"
WINDOW_SIZE = (1400, 900)
THEME = "dark"
TOTAL_TIMEOUT_S = 300
ENGINE_TIMEOUT_S = 90
JOB_TIMEOUT_S = 90
SETTLE_S = 0.6  # pyqtgraph redraws at most 30 times a second; let the last frame land
# eos.train as the README shows it: eta = 10/L is above 2/L, so the loss rises early on
# within its first ten steps, which 100 steps leave wide enough to see
EOS_PARAMS = {"eta_times_inv_L": 10.0, "steps": 100, "record_every": 1}
COMPARE_ETA = 1.0  # the second run of the comparison: a stable step size
COMPARE_DOCK_HEIGHT = 470
SCICL_MAP_PARAMS = {"grid": 25, "seeds": 10, "turns": 200}

sys.path.insert(0, str(ROOT))  # run as a file: import the checkout's packages


class StepFailed(Exception):
    """A step did not do what the screenshot needs; the message says which and why."""


async def wait_until(what: str, condition: Callable[[], bool], timeout_s: float) -> None:
    """Poll ``condition`` while the Qt/asyncio loop runs; StepFailed after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.05)


async def settle(window) -> None:
    from PySide6.QtWidgets import QApplication

    await asyncio.sleep(SETTLE_S)
    for plot in _plots(window):
        plot.flush()
    QApplication.processEvents()
    await asyncio.sleep(0.1)


def _plots(window) -> list:
    from studio.widgets.plot_view import PlotSpecView

    return window.findChildren(PlotSpecView)


def save(window, out: Path, name: str) -> None:
    if window.errors:
        raise StepFailed(f"the window showed an error before {name}: {window.errors}")
    path = out / name
    if not window.grab().save(str(path)):
        raise StepFailed(f"could not write {path}")
    print(f"  wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}",
          flush=True)


def check_job(job, method: str) -> None:
    if job is None or job.method != method:
        raise StepFailed(f"the lab's current job is {job and job.method}, not {method}")
    if job.state != "succeeded":
        raise StepFailed(f"{method} ended {job.state}: {job.reason}")


async def run_in_lab(lab, start: Callable[[], None], method: str):
    """Start a job from the lab (Run or Reproduce claim) and wait for it to finish."""
    before = lab.model.current
    start()
    await wait_until(f"{method} to be accepted",
                     lambda: lab.model.current is not None and lab.model.current is not before,
                     JOB_TIMEOUT_S)
    await wait_until(f"{method} to finish", lambda: lab.model.current.finished, JOB_TIMEOUT_S)
    check_job(lab.model.current, method)
    return lab.model.current


async def drive(window, out: Path) -> None:
    from PySide6.QtCore import Qt

    from panels.lab.view import TAB_ARTIFACTS, TAB_CLAIM, TAB_LIVE
    from studio.runs_dock import TAB_METRICS

    t0 = time.monotonic()
    dock = window.runs_dock

    def step(text: str) -> None:
        print(f"[{time.monotonic() - t0:5.1f} s] {text}", flush=True)

    step("waiting for the engine")
    await wait_until("the engine to be ready", lambda: window.bridge.is_ready, ENGINE_TIMEOUT_S)
    await wait_until("the runs dock's plot to be built (prewarm)", lambda: dock.plot is not None,
                     ENGINE_TIMEOUT_S)
    cards = len(window.welcome.cards)
    if cards != 19:
        raise StepFailed(f"the welcome page lists {cards} papers, not nineteen")
    window.tabs.setCurrentWidget(window.welcome)
    window.runs_dock_widget.hide()  # View > Runs (Ctrl+Shift+R): more of the papers show
    await settle(window)
    save(window, out, "welcome.png")
    window.runs_dock_widget.show()

    step("eos.train in the lab")
    window.open_paper("eos")
    lab = window.panel_widgets.get("lab")
    if lab is None:
        raise StepFailed(f"the eos paper did not open the lab panel: {window.errors}")
    await wait_until("the lab to list eos.train", lambda: "eos.train" in lab.model.methods,
                     ENGINE_TIMEOUT_S)
    lab.select_paper("eos")
    if lab.model.selected != "eos.train":
        raise StepFailed(f"the lab selected {lab.model.selected}, not eos.train")
    lab.form.set_values(EOS_PARAMS)
    if lab.form.validate():
        raise StepFailed(f"the form refused {EOS_PARAMS}: {lab.form.validate()}")
    first = await run_in_lab(lab, lab.run, "eos.train")
    loss = lab.live_plots.get("loss")
    if loss is None or loss.point_count("loss") != EOS_PARAMS["steps"] + 1:
        raise StepFailed("the live loss curve does not hold every step: "
                         f"{loss and loss.point_count('loss')}")
    ys = loss.spec()["series"][0]["y"][:200]
    if not any(b > a for a, b in zip(ys, ys[1:], strict=False)):
        raise StepFailed("the loss never rises in the first 200 steps (no edge of stability)")
    lab.tabs.setCurrentIndex(TAB_LIVE)
    dock.tabs.setCurrentIndex(TAB_METRICS)
    dock.select(first.id)
    await wait_until("the runs dock to draw the run's curve",
                     lambda: dock.curve_point_count() == EOS_PARAMS["steps"] + 1, JOB_TIMEOUT_S)
    await settle(window)
    save(window, out, "lab-eos.png")

    step("eos.reproduce (smoke) in the lab")
    lab.profile_box.setCurrentText("smoke")
    claim_job = await run_in_lab(lab, lab.reproduce, "eos.reproduce")
    await wait_until("the claim to show", lambda: lab.claim_view.claim is not None, 10)
    if lab.claim_view.verdict() not in ("PASS", "FAIL", "INCONCLUSIVE") \
            or not lab.claim_view.row_verdicts():
        raise StepFailed(f"the claim view shows no verdict table ({lab.claim_view.verdict()!r})")
    lab.tabs.setCurrentIndex(TAB_CLAIM)
    dock.select(claim_job.id)
    await settle(window)
    save(window, out, "lab-claim.png")

    step(f"a second eos.train (eta = {COMPARE_ETA}/L) and the comparison")
    lab.select_method("eos.train")
    lab.form.set_values({**EOS_PARAMS, "eta_times_inv_L": COMPARE_ETA})
    second = await run_in_lab(lab, lab.run, "eos.train")
    lab.tabs.setCurrentIndex(TAB_LIVE)  # the lab shows the new run's artifacts when it ends
    window.resizeDocks([window.runs_dock_widget], [COMPARE_DOCK_HEIGHT], Qt.Orientation.Vertical)
    dock.select(first.id, second.id)
    await wait_until("the runs dock to overlay both runs",
                     lambda: dock.plot is not None and len(dock.plot.series_names()) == 2,
                     JOB_TIMEOUT_S)
    dock.metric_combo.setCurrentText("loss")
    await wait_until("both loss curves on the plot",
                     lambda: dock.curve_point_count() == 2 * (EOS_PARAMS["steps"] + 1),
                     JOB_TIMEOUT_S)
    if "comparing 2 runs" not in dock.compare_note.text():
        raise StepFailed(f"the dock does not say it compares two runs: "
                         f"{dock.compare_note.text()!r}")
    await settle(window)
    save(window, out, "runs-compare.png")

    step("ccfm.sample in the lab")
    lab.select_method("ccfm.sample")
    if lab.model.selected != "ccfm.sample":
        raise StepFailed(f"the lab selected {lab.model.selected}, not ccfm.sample")
    await run_in_lab(lab, lab.run, "ccfm.sample")
    rows = [lab.artifact_list.item(i) for i in range(lab.artifact_list.count())]
    cloud = next((item for item in rows if item.text().startswith("cloud_ccfm ")), None)
    if cloud is None:
        raise StepFailed(f"no cloud_ccfm artifact among {[item.text() for item in rows]}")
    lab.artifact_list.setCurrentItem(cloud)
    lab.tabs.setCurrentIndex(TAB_ARTIFACTS)
    await settle(window)
    save(window, out, "lab-ccfm.png")

    step("scicl.gain_map in the dialogue panel")
    window.open_paper("scicl")
    dialogue = window.panel_widgets.get("dialogue")
    if dialogue is None:
        raise StepFailed(f"the scicl paper did not open the dialogue panel: {window.errors}")
    await wait_until("the dialogue panel to list scicl.gain_map",
                     lambda: dialogue.method_box.findText("scicl.gain_map") >= 0,
                     ENGINE_TIMEOUT_S)
    dialogue.select_method("scicl.gain_map")
    dialogue.form.set_values(SCICL_MAP_PARAMS)
    dialogue.run()
    await wait_until("the collapse map to arrive",
                     lambda: any("/ collapse_map " in label
                                 for label in dialogue.state.figures), JOB_TIMEOUT_S)
    label = next(label for label in dialogue.state.figures if "/ collapse_map " in label)
    dialogue.show_figure(label)
    window.runs_dock_widget.hide()  # the map needs the height
    await settle(window)
    save(window, out, "dialogue-map.png")
    window.runs_dock_widget.show()

    step("a smoke scicl.reproduce from the paper claims dock; its report's first page")
    await screenshot_claims(window, out)

    step("chipstar.route on gcd in the route canvas")
    await screenshot_routing(window, out)

    step("routing commands in the command log, the palette, the lineage of a route")
    await screenshot_commands(window, out)

    step("brainworld.train and .generate on nitime's run, opened beside it")
    await screenshot_fmri(window, out)

    step("the molecule panel on the GNEprop antibiotics")
    await screenshot_molecules(window, out)

    step("AdK's MD trajectory playing in the molecule panel")
    await screenshot_molecules_md(window, out)

    step("c2r.simulate on the demo scene in the crowd previewer")
    await screenshot_crowd(window, out)

    step("the crowd panel's scene editor and camera path on the demo scene")
    await screenshot_crowd_scene(window, out)

    step("sae_pc1.train on MiniLM layer 3 in the SAE browser")
    await screenshot_sae(window, out)

    step("the molecules tab's edit history, grouped by document")
    await screenshot_edit_history(window, out)

    step("one export of each panel, its provenance printed by studio-engine inspect")
    await export_each_panel(window, out)

    step("a session saved and opened again")
    await screenshot_session(window, out)

    # last: the console's in-process kernel stays in the process once started
    step("the console dock, a line run against studio")
    await screenshot_console(window, out)
    step("done")


HISTORY_DOCK_WIDTH = 300
ANTIBIOTICS = ROOT.parent / "shared" / "data" / "molecules" / "GNEprop_known_abx.tsv"
EXPORTED_PANELS = ("routing", "fmri", "molecules", "crowd", "sae", "dialogue")
EXPORT_DPI = 96  # the README shows them small; exports default to 192 dpi


async def screenshot_edit_history(window, out: Path) -> None:
    """Triage marks on the antibiotics set, one undone: the dock lists them by file."""
    from PySide6.QtCore import Qt

    panel = window.open_panel("molecules")
    if panel.open_file(ANTIBIOTICS) is False:
        raise StepFailed(f"{ANTIBIOTICS} did not open: {window.errors}")
    model, history = panel.model, window.history
    for row, flag in ((0, "accepted"), (1, "rejected"), (2, "flagged")):
        history.push(model.document, model.flagging(row, flag), model)
    history.stack.undo()
    window.history_dock_widget.show()
    window.runs_dock_widget.hide()
    panel.tabs.setCurrentIndex(0)  # the table, where the marks show
    window.resizeDocks([window.history_dock_widget], [HISTORY_DOCK_WIDTH],
                       Qt.Orientation.Horizontal)
    await settle(window)
    save(window, out, "edit-history.png")
    window.history_dock_widget.hide()
    window.runs_dock_widget.show()


async def export_each_panel(window, out: Path) -> None:
    """``exports/<panel>.png`` through each panel's own figure export (what Ctrl+E writes),
    and ``exports/<panel>.txt``: what ``studio-engine inspect`` prints of it."""
    import inspect as signature_of

    from engine.cli import main as engine_cli

    folder = out / "exports"
    folder.mkdir(exist_ok=True)
    for panel_id in EXPORTED_PANELS:
        panel = window.panel_widgets.get(panel_id)
        export = getattr(panel, "export_figure", None)
        if export is None:
            raise StepFailed(f"the {panel_id} panel has no figure export")
        target = folder / f"{panel_id}.png"
        options = {"dpi": EXPORT_DPI} if "dpi" in signature_of.signature(export).parameters \
            else {}
        export(target, **options)
        with open(folder / f"{panel_id}.txt", "w", encoding="utf-8") as printed:
            from contextlib import redirect_stdout

            with redirect_stdout(printed):
                print(f"$ studio-engine inspect docs/images/exports/{panel_id}.png")
                code = engine_cli(["inspect", str(target)])
        if code != 0:
            raise StepFailed(f"studio-engine inspect {target} exited {code}")


SAE_PARAMS = {"max_tokens": 3000, "max_length": 64, "layers": [3], "d_sae": 256, "k": 8,
              "seeds": 2, "bypass": "both", "steps": 150, "batch_size": 256, "aux_k": 32,
              "importance_sequences": 2, "importance_length": 16}
SAE_TIMEOUT_S = 300  # MiniLM loads and runs over 3000 tokens before the SAEs train


async def screenshot_sae(window, out: Path) -> None:
    """The SAE browser after a small sae_pc1.train on MiniLM layer 3 (news): features sorted by
    importance and the most important one's page."""
    panel = window.open_panel("sae")
    if panel is None:
        raise StepFailed(f"the sae panel did not open: {window.errors}")
    await wait_until("the SAE panel to list sae_pc1.train", panel.run_button.isEnabled,
                     ENGINE_TIMEOUT_S)
    panel.form.set_values(SAE_PARAMS)
    panel.run()
    await wait_until("sae_pc1.train to finish and open", lambda: panel.table.rowCount() > 0,
                     SAE_TIMEOUT_S)
    panel.sort_by("importance")
    panel.table.selectRow(0)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "sae-features.png")
    window.runs_dock_widget.show()


async def screenshot_crowd(window, out: Path) -> None:
    """The crowd previewer after c2r.simulate on the demo scene: coarse clip and track map."""
    panel = window.open_panel("crowd")
    if panel is None:
        raise StepFailed(f"the crowd panel did not open: {window.errors}")
    panel.run_method("c2r.simulate", {"max_frames": 30})
    await wait_until("c2r.simulate's coarse clip", lambda: "coarse" in panel.model.clips,
                     JOB_TIMEOUT_S)
    panel.model.set_frame(20)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "crowd-previewer.png")
    window.runs_dock_widget.show()


async def screenshot_crowd_scene(window, out: Path) -> None:
    """The crowd panel's scene editor on the demo scene, simulated, a building selected; then
    the camera path in 3D where OpenGL draws."""
    import json

    from engine.methods.c2r import DEMO_SCENE

    panel = window.open_panel("crowd")
    if panel is None:
        raise StepFailed(f"the crowd panel did not open: {window.errors}")
    scene = Path(tempfile.mkdtemp()) / "demo-scene.json"
    scene.write_text(json.dumps(DEMO_SCENE))
    panel.open_file(scene)  # opens the Scene editor tab
    panel.scene_editor.simulate()
    await wait_until("the scene's simulation", lambda: panel.scene_editor.tracks is not None,
                     JOB_TIMEOUT_S)
    panel.model.set_frame(40)
    panel.scene_editor.select_at(-9, 7)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "crowd-scene-editor.png")
    if panel.show_camera_view():  # only where OpenGL draws
        await settle(window)
        save(window, out, "crowd-camera-path.png")
    window.runs_dock_widget.show()


async def screenshot_molecules(window, out: Path) -> None:
    """The known antibiotics in the molecule grid, beta-lactams highlighted, sorted by mass."""
    from PySide6.QtCore import Qt

    from panels.molecules.view import TAB_TABLE

    window.open_paper("kcgm")
    molecules = window.panel_widgets.get("molecules")
    if molecules is None:
        raise StepFailed(f"the kcgm paper did not open the molecules panel: {window.errors}")
    source = ANTIBIOTICS
    if not molecules.open_file(source):
        raise StepFailed(f"could not open {source}: {window.errors}")
    if molecules.search("O=C1CCN1") < 10:  # beta-lactams, their atoms highlighted
        raise StepFailed("the beta-lactam search found too few antibiotics")
    molecules.table.sortByColumn(molecules.table_model.columns.index("MolWt"),
                                 Qt.SortOrder.AscendingOrder)
    molecules.tabs.setCurrentIndex(TAB_TABLE)
    molecules.grid.scrollToTop()  # the search scrolled to its first hit
    molecules.table.scrollToTop()
    await wait_until("the depictions to be drawn", lambda: not molecules.grid_model.pending,
                     JOB_TIMEOUT_S)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "molecules-grid.png")
    window.runs_dock_widget.show()


async def screenshot_molecules_md(window, out: Path) -> None:
    """AdK (MDAnalysisTests PSF/DCD) playing in the molecule panel: cartoon coloured by
    secondary structure at frame 60, the CA RMSD to frame 0 below."""
    from MDAnalysisTests.datafiles import DCD, PSF

    molecules = window.panel_widgets.get("molecules")
    if molecules is None:
        raise StepFailed(f"the molecules panel is not open: {window.errors}")
    molecules.open_dropped([PSF, DCD])
    await wait_until("the AdK trajectory to be read",
                     lambda: molecules.player.trajectory is not None, JOB_TIMEOUT_S)
    molecules.colour_box.setCurrentText("secondary structure")
    molecules.style_box.setCurrentText("cartoon")
    molecules.player.set_frame(60)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "molecules-md.png")
    window.runs_dock_widget.show()


async def screenshot_fmri(window, out: Path) -> None:
    """nitime's run with a BrainWorld generation beside it (one cursor, one clock)."""
    import nitime

    fmri = str(Path(nitime.__file__).parent / "data" / "fmri1.nii.gz")
    results: dict[str, dict] = {}

    def on_event(envelope: dict) -> None:
        if envelope.get("type") == "job_result":
            results[envelope["job"]] = envelope["content"]

    unsubscribe = window.host.subscribe(on_event)
    jobs: list[str] = []
    window.host.submit_job("brainworld.train", {"ae_steps": 100, "steps": 200},
                           {"fmri": fmri}, on_accepted=jobs.append)
    await wait_until("brainworld.train", lambda: bool(jobs) and jobs[0] in results,
                     JOB_TIMEOUT_S)
    checkpoint = str(Path(window.host.run_dir(jobs[0])) / "checkpoints" / "brainworld")
    window.host.submit_job("brainworld.generate",
                           {"start_frame": 4, "frames": 28, "sampling_steps": 50},
                           {"checkpoint": checkpoint, "fmri": fmri}, on_accepted=jobs.append)
    await wait_until("brainworld.generate", lambda: len(jobs) > 1 and jobs[1] in results,
                     JOB_TIMEOUT_S)
    unsubscribe()
    panel = window.open_panel("fmri")
    if panel is None or not panel.open_file(fmri):
        raise StepFailed(f"the fMRI panel did not open {fmri}: {window.errors}")
    generated = Path(window.host.run_dir(jobs[1])) / results[jobs[1]]["outputs"]["generated"]
    if not panel.open_file(generated):
        raise StepFailed(f"the fMRI panel did not open {generated}: {window.errors}")
    panel.set_cursor((4, 5, 9))
    panel.set_time(20)
    panel.qc_box.setCurrentText("power_spectra")
    await wait_until("both rows drawn", lambda: panel.last_result is not None
                     and panel.last_result["state"].t == 20 and panel.last_result["compare"],
                     JOB_TIMEOUT_S)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "fmri-brainworld.png")
    window.runs_dock_widget.show()


ROUTING_NETS = ["_100_", "_101_", "_102_", "_103_", "_104_"]


async def screenshot_routing(window, out: Path) -> None:
    """The route canvas on the shared gcd design, net _100_ selected (tree, vias, GCell
    snapping) and the maze router's routes of five nets (a real chipstar.route job) overlaid."""
    from engine.vlsi import shared_design_paths

    found = shared_design_paths()
    if found is None:
        raise StepFailed("../shared/data/vlsi (the gcd design) is absent")
    lef, def_ = found
    panel = window.open_panel("routing")
    if panel is None or not panel.open_design(def_, lef):
        raise StepFailed(f"the routing panel did not open gcd: {window.errors}")
    panel.select_net(ROUTING_NETS[0])
    if not panel.route("maze", ROUTING_NETS):
        raise StepFailed(f"chipstar.route was not submitted: {window.errors}")
    await wait_until("chipstar.route's DEF to be overlaid",
                     lambda: panel.model.prediction is not None, JOB_TIMEOUT_S)
    panel.select_net(ROUTING_NETS[0])
    panel.canvas.box.scaleBy((3.0, 3.0))  # some context around the net
    panel.tabs.setCurrentIndex(2)  # the Route tab: which nets differ
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "routing-gcd.png")
    window.runs_dock_widget.show()


# -- commands, palette, console, claims, lineage, sessions --------------------------------------

CLAIMS_PAPER = "scicl"          # owned by the dialogue panel; its smoke reproduction takes ~1 s
REPORT_DPI = 70                 # the report's pages as the README shows them
REPORT_MARGIN_PX = 16
PALETTE_QUERY = "route net"
MOVED_WIRE_DY_UM = 0.28         # two metal1 pitches on Nangate45's manufacturing grid
LINEAGE_DOCK_WIDTH = 520
CONSOLE_LINES = ('studio.command("routing.select_net", net="_101_")',
                 'studio.panel("routing")["view_state"]["net"]',
                 '[c["id"] for c in studio.commands() if c["id"].startswith("routing.m")]')


async def screenshot_claims(window, out: Path) -> None:
    """claims.reproduce (smoke) on scicl from the dock beside the dialogue panel, the claim it
    shows; then the report of that run written by the CLI, its first PDF page as a PNG."""
    dialogue = window.panel_widgets.get("dialogue")
    if dialogue is None:
        raise StepFailed(f"the dialogue panel is not open: {window.errors}")
    window.tabs.setCurrentWidget(dialogue)
    window.command("view.paper_claims", on=True)
    dock = window.claim_dock
    await wait_until("the claims dock to list scicl",
                     lambda: CLAIMS_PAPER in dock.claims, ENGINE_TIMEOUT_S)
    window.command("claims.reproduce", paper=CLAIMS_PAPER, profile="smoke")
    await wait_until("the smoke reproduction's claim in the dock",
                     lambda: (claim := dock.claims.get(CLAIMS_PAPER)) is not None
                     and claim.claim is not None, JOB_TIMEOUT_S)
    window.runs_dock_widget.hide()
    await settle(window)
    save(window, out, "claims-dock.png")
    window.command("view.paper_claims", on=False)
    window.runs_dock_widget.show()
    await write_report_page(window, out)


async def write_report_page(window, out: Path) -> None:
    """``studio-engine report scicl`` on the screenshot workspace (as a user types it), then
    its PDF's first two pages through pdftoppm: the summary's lines (the rest of a one-paper
    summary page is blank, so it is cut) over the paper's page."""
    import subprocess

    if shutil.which("pdftoppm") is None:
        raise StepFailed("pdftoppm (poppler-utils) is not installed: the report page needs it")
    folder = Path(tempfile.mkdtemp(prefix="studio-report-"))
    command = [sys.executable, "-m", "engine", "report", CLAIMS_PAPER, "--out",
               str(folder / "report"), "--workspace", str(window.workspace.root)]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True,
                                   timeout=JOB_TIMEOUT_S)
    pdf = folder / "report" / "report.pdf"
    if done.returncode != 0 or not pdf.is_file():
        raise StepFailed(f"studio-engine report exited {done.returncode}: {done.stderr[-500:]}")
    pages = await asyncio.to_thread(
        subprocess.run, ["pdftoppm", "-f", "1", "-l", "2", "-r", str(REPORT_DPI), "-png",
                         str(pdf), str(folder / "page")], capture_output=True, text=True,
        timeout=60)
    images = sorted(folder.glob("page-*.png"))
    if pages.returncode != 0 or len(images) != 2:
        raise StepFailed(f"pdftoppm exited {pages.returncode}: {pages.stderr[-300:]}")
    stack_report_pages(images[0], images[1], out / "report-page.png")
    shutil.rmtree(folder, ignore_errors=True)


def stack_report_pages(summary: Path, paper: Path, target: Path) -> None:
    """The summary page's inked top over the paper's page, as one PNG."""
    from PySide6.QtGui import QColor, QImage, QPainter

    top, page = QImage(str(summary)), QImage(str(paper))
    if top.isNull() or page.isNull():
        raise StepFailed(f"pdftoppm's pages are not images: {summary}, {paper}")
    inked = _last_inked_row(top) + REPORT_MARGIN_PX
    picture = QImage(page.width(), inked + page.height(), QImage.Format.Format_RGB32)
    picture.fill(QColor("white"))
    painter = QPainter(picture)
    painter.drawImage(0, 0, top.copy(0, 0, top.width(), inked))
    painter.setPen(QColor("#b0b0b0"))
    painter.drawLine(0, inked - 1, page.width(), inked - 1)  # where the first page ends
    painter.drawImage(0, inked, page)
    painter.end()
    if not picture.save(str(target)):
        raise StepFailed(f"could not write {target}")
    print(f"  wrote {target}", flush=True)


def _last_inked_row(image) -> int:
    """The lowest row of ``image`` holding a pixel that is not white."""
    white = 0xFFFFFFFF
    for row in range(image.height() - 1, -1, -1):
        if any(image.pixel(column, row) != white for column in range(0, image.width(), 2)):
            return row
    return 0


def _first_wire(panel, net: str) -> dict:
    """The arguments naming ``net``'s first wire, as a click on it would give them."""
    from panels.routing.commands import wire_args

    design = panel.model.design
    index = [each.name for each in design.nets].index(net)
    segments, _vias = design.net_wiring(index)
    if len(segments) == 0:
        raise StepFailed(f"net {net} has no wires in {design.path}")
    return wire_args(panel, net, panel.model.segment_row(segments[0]))  # .model, as the state


async def screenshot_commands(window, out: Path) -> None:
    """A few routing commands as a user runs them (each logged as its Python line), the
    command log; the palette with a query; then the lineage of the route that followed."""
    panel = window.panel_widgets.get("routing")
    if panel is None:
        raise StepFailed(f"the routing panel is not open: {window.errors}")
    window.tabs.setCurrentWidget(panel)
    window.command_log.clear()
    window.command("routing.select_net", net=ROUTING_NETS[1])
    window.command("routing.show_layer", layer="metal1", visible=False)
    window.command("routing.show_layer", layer="metal1", visible=True)
    window.command("routing.move_wire", **_first_wire(panel, ROUTING_NETS[1]),
                   dy_um=MOVED_WIRE_DY_UM)
    lab = window.panel_widgets.get("lab")
    if lab is not None:
        # the engine lists chipstar.route under the lab, and the lineage recorder takes the
        # edits of a method's listed panel when it is open: without the lab, the tab in front
        window.close_tab(window.tabs.indexOf(lab))
    before = panel.model.prediction
    window.command("routing.route", nets=[ROUTING_NETS[1]])
    await wait_until("the route of the edited net", lambda: panel.model.prediction is not None
                     and panel.model.prediction is not before, JOB_TIMEOUT_S)
    window.command("routing.select_net", net=ROUTING_NETS[1])
    window.command("view.command_log", on=True)
    window.command_log_dock_widget.raise_()
    await settle(window)
    save(window, out, "command-log.png")

    window.command("view.palette")
    palette = window._palette
    palette.search.setText(PALETTE_QUERY)
    await settle(window)
    if palette.model.rowCount() < 3:
        raise StepFailed(f"the palette lists {palette.model.rowCount()} entries for "
                         f"{PALETTE_QUERY!r}")
    save_composite(window, palette, out / "palette.png")
    palette.hide()
    window.command("view.command_log", on=False)

    size = window.size()  # the wide dock makes the window wider; the next steps want it back
    window.command("view.lineage", on=True)
    lineage = window.lineage_dock
    await wait_until("the lineage dock to show the route's run",
                     lambda: lineage.tree.topLevelItemCount() > 0, JOB_TIMEOUT_S)
    await settle(window)  # the dock redraws once more when shown
    from PySide6.QtCore import Qt

    window.resizeDocks([window.lineage_dock_widget], [LINEAGE_DOCK_WIDTH],
                       Qt.Orientation.Horizontal)
    window.runs_dock_widget.hide()
    focus_on_run(lineage.tree, "chipstar.route")
    await settle(window)
    chosen = lineage.tree.currentItem()
    if chosen is None or not chosen.text(0).startswith("\u25b6 chipstar.route"):
        raise StepFailed("the lineage dock was redrawn after the route was chosen")
    save(window, out, "lineage.png")
    window.command("view.lineage", on=False)
    window.runs_dock_widget.show()
    window.resize(size)


def focus_on_run(tree, method: str) -> None:
    """Collapse the tree, then open the branch down to the newest ``method`` run drawn in full
    (its ancestors and its outputs) and select it, as a user would look at one run."""
    from PySide6.QtWidgets import QAbstractItemView, QTreeWidgetItemIterator

    drawn = []
    iterator = QTreeWidgetItemIterator(tree)
    while iterator.value() is not None:
        item = iterator.value()
        text = item.text(0)
        if text.startswith(f"\u25b6 {method}") and "(under" not in text and "(above)" not in text:
            drawn.append(item)
        iterator += 1
    if not drawn:
        raise StepFailed(f"the lineage dock draws no {method} run")
    found = max(drawn, key=lambda item: item.text(1))  # "<run id> · ...": ids sort by time
    tree.collapseAll()
    parent = found.parent()
    while parent is not None:
        parent.setExpanded(True)
        parent = parent.parent()
    found.setExpanded(True)
    tree.setCurrentItem(found)
    tree.scrollToItem(found, QAbstractItemView.ScrollHint.PositionAtTop)


def save_composite(window, dialog, path: Path) -> None:
    """The window with a top-level dialog over it where the screen shows it (``grab`` draws
    one widget, and the palette is a window of its own)."""
    from PySide6.QtGui import QPainter

    if window.errors:
        raise StepFailed(f"the window showed an error before {path.name}: {window.errors}")
    picture = window.grab()
    painter = QPainter(picture)
    painter.drawPixmap(window.mapFromGlobal(dialog.mapToGlobal(dialog.rect().topLeft())),
                       dialog.grab())
    painter.end()
    if not picture.save(str(path)):
        raise StepFailed(f"could not write {path}")
    print(f"  wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}",
          flush=True)


async def screenshot_console(window, out: Path) -> None:
    """The console dock with lines run against ``studio`` (install_scripting, as the tests
    do: the window built by ``studio`` does not add the console yet)."""
    from PySide6.QtCore import QTimer

    from studio.console import install_scripting

    install_scripting(window)
    console = window.command("console.show")
    await wait_until("the console's prompt", lambda: "In [" in console._control.toPlainText(),
                     ENGINE_TIMEOUT_S)
    for number, line in enumerate(CONSOLE_LINES, start=1):
        # from the Qt loop, not this coroutine: studio refuses to wait inside a coroutine
        QTimer.singleShot(0, lambda line=line: console.execute_source(line))
        await wait_until(f"console line {number} to run",
                         lambda n=number: f"In [{n + 1}]" in console._control.toPlainText(),
                         JOB_TIMEOUT_S)
    text = console._control.toPlainText()
    if "Error" in text or "Traceback" in text:
        raise StepFailed(f"a console line failed: {text[-600:]}")
    await settle(window)
    save(window, out, "console.png")
    window.console_dock.hide()
    window.runs_dock_widget.show()


async def screenshot_session(window, out: Path) -> None:
    """Save the session (File > Save session's command), open it again: the window after."""
    for panel_id in ("sae", "fmri", "crowd", "lab", "dialogue"):
        widget = window.panel_widgets.get(panel_id)
        if widget is not None:
            window.close_tab(window.tabs.indexOf(widget))
    routing = window.panel_widgets.get("routing")
    if routing is None:
        raise StepFailed("the routing panel is not open for the session")
    window.tabs.setCurrentWidget(routing)
    path = Path(window.workspace.root) / "sessions" / "routing-and-molecules.studio"
    path.parent.mkdir(parents=True, exist_ok=True)
    window.command("app.save_session", path=str(path))
    if not path.is_file():
        raise StepFailed(f"app.save_session wrote no {path}")
    report = window.sessions.open_from(path)
    await wait_until("the session to be opened", lambda: report.done, JOB_TIMEOUT_S)
    if not report.complete:
        raise StepFailed(f"the session did not come back whole: {report.lines()}")
    await wait_until("the routing panel to be back",
                     lambda: window.panel_widgets.get("routing") is not None, JOB_TIMEOUT_S)
    await settle(window)
    save(window, out, "session-restored.png")


async def _engine_reaped(window, timeout_s: float = 3.0) -> None:
    """Let the loop see the engine process exit (its child watcher reports to the loop)."""
    process = getattr(window.bridge, "_process", None)
    deadline = time.monotonic() + timeout_s
    while (process is not None and process.returncode is None
           and time.monotonic() < deadline):
        await asyncio.sleep(0.05)


def _cancel_tasks(loop) -> None:
    """As studio.app does at exit: cancel what is left and let it finish."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT, help="where the PNGs go")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary workspace, settings and logs")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    home = Path(tempfile.mkdtemp(prefix="studio-screenshots-"))
    # Nothing of the user's: workspace, logs and settings live in the temporary folder.
    os.environ["STUDIO_WORKSPACE"] = str(home / "workspace")
    os.environ["STUDIO_LOG_DIR"] = str(home / "logs")
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")
    os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
    if not os.environ.get("DISPLAY") and not os.environ.get("QT_QPA_PLATFORM"):
        print("screenshots: no X display; run under xvfb-run (see the docstring)",
              file=sys.stderr)
        return 2

    import qasync
    from PySide6.QtCore import QCoreApplication, QEvent, QSettings
    from PySide6.QtWidgets import QApplication

    from studio import main_thread_gc

    app = QApplication.instance() or QApplication(sys.argv[:1])
    main_thread_gc.install(app)  # as the app does: no collection on worker threads
    app.setApplicationName("Studio")
    app.setOrganizationName("Studio")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)

    from studio.main_window import MainWindow
    from studio.theme import apply_theme

    apply_theme(app, THEME)  # before any widget exists, as studio.app does
    settings = QSettings(str(home / "studio.ini"), QSettings.Format.IniFormat)
    settings.setValue("appearance/theme", THEME)
    window = MainWindow(settings=settings, workspace=home / "workspace", log_dir=home / "logs")
    window.set_theme(THEME, store=False)
    window.resize(*WINDOW_SIZE)
    window.show()
    window.start()

    started = time.monotonic()
    code = 0
    try:
        with loop:
            try:
                loop.run_until_complete(asyncio.wait_for(drive(window, out), TOTAL_TIMEOUT_S))
            except StepFailed as exc:
                print(f"screenshots: FAILED: {exc}", file=sys.stderr)
                code = 1
            except (TimeoutError, asyncio.TimeoutError):
                print(f"screenshots: FAILED: not done within {TOTAL_TIMEOUT_S} s",
                      file=sys.stderr)
                code = 1
            except Exception:
                traceback.print_exc()
                code = 1
            finally:
                # stop the engine while the loop runs, so asyncio reaps its process
                window.shutdown()
                loop.run_until_complete(_engine_reaped(window))
                _cancel_tasks(loop)
    finally:
        # see "Pitfalls already known" in ARCHITECTURE.md: close + deleteLater + processEvents
        window.shutdown()
        for widget in app.topLevelWidgets():
            if widget.isVisible() or widget is window:
                widget.close()
                widget.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        app.processEvents()
        if args.keep:
            print(f"screenshots: kept {home}")
        elif code:
            print(f"screenshots: the logs are in {home / 'logs'} (kept)", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    print(f"screenshots: {'failed' if code else 'done'} in {time.monotonic() - started:.0f} s")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
