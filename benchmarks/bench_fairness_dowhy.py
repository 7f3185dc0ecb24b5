"""Causal fairness vs DoWhy: natural direct and indirect effects on a synthetic SCM.

Where the estimands coincide. X is randomised (no X <-> Z confounding), so with one binary
mediator W, a binary covariate Z (independent of X; Z -> W, Z -> Y) and a binary outcome Y our
x-specific effects are the natural effects:

    x-DE = T(1,0,0) - T(0,0,0) = E[Y(x1, W(x0))] - E[Y(x0)]            = NDE (DoWhy)
    x-IE = T(1,0,0) - T(1,1,0) = E[Y(x1, W(x0))] - E[Y(x1, W(x1))]    = -NIE (DoWhy)
    x-SE = 0 (no confounding)

The mechanisms are additive (linear probabilities without interactions), so DoWhy's only
mediation estimator, ``mediation.two_stage_regression`` (linear first and second stages, a
single mediator), is consistent too; the truth comes from exact sums over the SCM's tables.

DoWhy pins an old scipy, so it never enters the app's environment: it lives in a venv of its
own, created once under ``.benchmarks/dowhy-venv`` (``python3 -m venv`` + ``pip install dowhy``)
and run in a subprocess that reads the data and writes its estimates as JSON (nothing pickled).
If that venv cannot be made, the benchmark reports one row saying why (value NaN), never a
made-up number.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

try:
    from benchmarks import anchor_venv
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import anchor_venv

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".benchmarks" / "dowhy-venv"
READY = VENV / ".dowhy-installed"  # written after a successful install: its version
ROWS = 20_000
REPLICATES = 5
INSTALL_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 600

# Runs inside the DoWhy venv: JSON {"x", "z", "w", "y"} on stdin -> JSON estimates on stdout.
DOWHY_SCRIPT = r"""
import json, sys, time, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import pandas as pd
import dowhy
from dowhy import CausalModel
data = json.load(sys.stdin)
frame = pd.DataFrame({k: data[k] for k in ("x", "z", "w", "y")}).astype(float)
frame["x"] = frame["x"].astype(bool)
graph = ('graph [directed 1 node [id "x" label "x"] node [id "z" label "z"] '
         'node [id "w" label "w"] node [id "y" label "y"] '
         'edge [source "x" target "w"] edge [source "x" target "y"] '
         'edge [source "z" target "w"] edge [source "z" target "y"] '
         'edge [source "w" target "y"]]')
started = time.perf_counter()
model = CausalModel(data=frame, treatment="x", outcome="y", graph=graph)
out = {"version": dowhy.__version__}
for kind in ("nde", "nie"):
    estimand = model.identify_effect(estimand_type="nonparametric-" + kind,
                                     proceed_when_unidentifiable=True)
    estimate = model.estimate_effect(estimand, method_name="mediation.two_stage_regression",
                                     confidence_intervals=False, test_significance=False)
    out[kind] = float(estimate.value)
out["seconds"] = time.perf_counter() - started
print(json.dumps(out))
"""


def world_model():
    """X ~ Bern(0.5) randomised; Z ~ Bern(0.4) independent of X; W and Y additive."""
    from engine.models import fairness_scm as fs

    p_z = lambda x: 0.4 + 0.0 * x  # noqa: E731
    p_w = lambda x, z: 0.25 + 0.30 * x + 0.20 * z  # noqa: E731
    p_y = lambda x, z, w: 0.15 + 0.15 * x + 0.10 * z + 0.35 * w  # noqa: E731
    cpts = [fs.bernoulli_cpt(0.5),
            fs.bernoulli_cpt([p_z(x) for x in (0, 1)]).reshape(2, 2),
            fs.bernoulli_cpt([[p_w(x, z) for z in (0, 1)] for x in (0, 1)]),
            fs.bernoulli_cpt([[[p_y(x, z, w) for w in (0, 1)] for z in (0, 1)]
                              for x in (0, 1)])]
    return fs.DiscreteModel(["x", "z", "w", "y"], ["x", "z", "w", "y"], [2] * 4, cpts)


def ensure_venv() -> tuple[Path | None, str]:
    """(the venv's python, "") once dowhy is installed; (None, why) when it cannot be."""
    return anchor_venv.ensure_venv(VENV, "dowhy", "dowhy", READY, INSTALL_TIMEOUT_S)


def run_dowhy(python: Path, codes: np.ndarray) -> dict:
    payload = json.dumps({name: codes[:, j].tolist() for j, name in enumerate("xzwy")})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([str(python), "-c", DOWHY_SCRIPT], input=payload,
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    if result.returncode != 0:
        raise RuntimeError("DoWhy run failed: " + result.stderr.strip()[-600:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def run() -> list[dict]:
    from engine.models import fairness_scm as fs

    model = world_model()
    truth = fs.exact_effects({"world": model}, stages=("world",))
    nde, nie = truth["DE"]["world"], -truth["IE"]["world"]
    rows = [{"name": "truth: NDE = x-DE", "value": nde, "unit": "",
             "reference": "exact sums over the SCM"},
            {"name": "truth: NIE = -x-IE", "value": nie, "unit": "",
             "reference": "exact sums over the SCM"}]
    python, why = ensure_venv()
    rng = np.random.default_rng(0)
    ours = {"nde": [], "nie": [], "nde_se": [], "covered": [], "seconds": []}
    theirs = {"nde": [], "nie": [], "seconds": []}
    failure = why
    for _ in range(REPLICATES):
        codes = model.sample(ROWS, rng)
        started = time.perf_counter()
        result = fs.decompose({"world": fs.sample_from_codes(model, codes)}, "saturated", 5,
                              rng, stages=("world",))
        ours["seconds"].append(time.perf_counter() - started)
        de, ie = result.debiased["DE"]["world"], result.debiased["IE"]["world"]
        ours["nde"].append(de.value)
        ours["nie"].append(-ie.value)
        ours["nde_se"].append(de.se)
        ours["covered"].append(de.ci[0] <= nde <= de.ci[1] and ie.ci[0] <= -nie <= ie.ci[1])
        if python is not None and not failure:
            try:
                answer = run_dowhy(python, codes)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
                failure = str(exc)
                continue
            theirs["nde"].append(answer["nde"])
            theirs["nie"].append(answer["nie"])
            theirs["seconds"].append(answer["seconds"])
            theirs["version"] = answer["version"]
    setting = f"mean of {REPLICATES} samples of {ROWS} rows"
    rows += [
        {"name": "ours (one-step debiased): NDE", "value": float(np.mean(ours["nde"])),
         "unit": "", "reference": f"truth {nde:.4f}; {setting}"},
        {"name": "ours (one-step debiased): NIE", "value": float(np.mean(ours["nie"])),
         "unit": "", "reference": f"truth {nie:.4f}; {setting}"},
        {"name": "ours: max |NDE - truth|, |NIE - truth|",
         "value": float(max(np.max(np.abs(np.array(ours["nde"]) - nde)),
                            np.max(np.abs(np.array(ours["nie"]) - nie)))),
         "unit": "", "reference": f"mean SE {np.mean(ours['nde_se']):.4f}"},
        {"name": "ours: both 95% CIs cover the truth", "value": float(np.mean(ours["covered"])),
         "unit": "share"},
        {"name": "ours: decomposition time (world, 5-fold)",
         "value": float(np.median(ours["seconds"]) * 1e3), "unit": "ms",
         "reference": "median"},
    ]
    if failure or not theirs["nde"]:
        rows.append({"name": "DoWhy: NOT RUN", "value": float("nan"), "unit": "",
                     "reference": failure or "no DoWhy estimates"})
        return rows
    rows += [
        {"name": "DoWhy two_stage_regression: NDE", "value": float(np.mean(theirs["nde"])),
         "unit": "", "reference": f"truth {nde:.4f}; dowhy {theirs['version']}; {setting}"},
        {"name": "DoWhy two_stage_regression: NIE", "value": float(np.mean(theirs["nie"])),
         "unit": "", "reference": f"truth {nie:.4f}"},
        {"name": "DoWhy: max |NDE - truth|, |NIE - truth|",
         "value": float(max(np.max(np.abs(np.array(theirs["nde"]) - nde)),
                            np.max(np.abs(np.array(theirs["nie"]) - nie)))), "unit": ""},
        {"name": "max |ours - DoWhy| (NDE, NIE, per sample)",
         "value": float(max(np.max(np.abs(np.array(ours["nde"]) - theirs["nde"])),
                            np.max(np.abs(np.array(ours["nie"]) - theirs["nie"])))),
         "unit": "", "reference": "same rows"},
        {"name": "DoWhy: NDE + NIE estimation time", "value": float(
            np.median(theirs["seconds"]) * 1e3), "unit": "ms",
         "reference": "median, inside its venv (excludes start-up)"},
    ]
    return rows


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
