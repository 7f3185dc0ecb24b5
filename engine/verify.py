"""``studio-engine verify DIR``: rerun every reproduction of a report and name each number that
moved, so a report is something anyone can check rather than take on trust.

Each reported run is run again through the same path as ``studio-engine reproduce`` (a
subprocess of this engine, recorded in the workspace as an ordinary run) at its recorded
profile, settings, seed and thread count. A deterministic run (one thread, local) must give
every estimate and interval end to 1e-9 relative and the same verdicts; a nondeterministic
one (threads, a cluster) must put each estimate inside the recorded interval.
"""

from __future__ import annotations

import collections
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.report import NOT_RUN, ReportError, flatten, read_report
from engine.workspace import Workspace

RELATIVE_TOLERANCE = 1e-9
RERUN_EXIT_CODES = (0, 3, 4)  # PASS, FAIL, INCONCLUSIVE: the rerun gave a claim
STDERR_LINES_KEPT = 40


def verify_report(workspace: Workspace, folder: str | Path, only: Sequence[str] = ()) -> dict:
    """Rerun the report's runs (``only``: these papers); ``ok`` is False when any number moved
    or a rerun failed, and ``moved`` says which, one line each."""
    report = read_report(folder)
    reported = {p["slug"]: p for p in report["papers"] if p.get("status") != NOT_RUN}
    unknown = [slug for slug in only if slug not in reported]
    if unknown:
        listed = ", ".join(sorted(reported)) or "none"
        raise ReportError(f"{Path(folder) / 'report.json'}: no reported run of "
                          f"{', '.join(unknown)} (reported: {listed})")
    chosen = [reported[slug] for slug in (only or reported)]
    runs, moved = [], []
    for entry in chosen:
        print(f"verify: rerunning {entry['slug']} (run {entry['run_id']}, profile "
              f"{entry['profile']}, seed {entry['seed']})", file=sys.stderr, flush=True)
        rerun = rerun_reproduction(workspace, entry)
        changes = compare(entry, rerun["claim"]) if rerun["claim"] else [rerun["error"]]
        label = f"{entry['slug']} (run {entry['run_id']}, rerun {rerun['run_id'] or '-'})"
        moved += [f"{label}: {change}" for change in changes]
        runs.append({"slug": entry["slug"], "run_id": entry["run_id"],
                     "rerun_id": rerun["run_id"], "deterministic": entry["deterministic"],
                     "moved": changes})
    ok = not moved
    summary = (f"all {len(runs)} runs match" if ok else
               f"{sum(1 for r in runs if r['moved'])} of {len(runs)} runs moved")
    return {"ok": ok, "summary": summary, "moved": moved, "runs": runs}


def rerun_reproduction(workspace: Workspace, entry: dict) -> dict:
    """``studio-engine reproduce`` at the entry's profile, settings, seed and threads; the
    rerun's claim and run id, or an error line. Its messages pass through to stderr as they
    come (a full reproduction runs for minutes)."""
    with tempfile.TemporaryDirectory(prefix="studio-verify-") as scratch:
        settings = Path(scratch) / "settings.json"
        settings.write_text(json.dumps(entry.get("settings") or {}), encoding="utf-8")
        command = [sys.executable, "-m", "engine", "reproduce", entry["slug"],
                   "--profile", entry["profile"], "--params", str(settings),
                   "--seed", str(entry["seed"]), "--json", "--workspace", str(workspace.root)]
        if entry.get("threads"):
            command += ["--threads", str(entry["threads"])]
        claim_file = Path(scratch) / "claim.json"
        last_lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES_KEPT)
        with claim_file.open("w", encoding="utf-8") as stdout:
            process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE,
                                       text=True, env=os.environ.copy())
            for line in process.stderr:
                sys.stderr.write(line)
                last_lines.append(line.rstrip())
            code = process.wait()
        printed = claim_file.read_text(encoding="utf-8")
    if code not in RERUN_EXIT_CODES:
        return {"claim": None, "run_id": None,
                "error": f"the rerun exited {code}: {_what_it_said(list(last_lines))}"}
    try:
        claim = json.loads(printed)
    except ValueError:
        return {"claim": None, "run_id": None, "error": "the rerun printed no claim"}
    return {"claim": claim, "run_id": claim.get("run_id"), "error": ""}


def _what_it_said(lines: list[str]) -> str:
    """The CLI's own message (``studio-engine: ...`` and its indented lines), else the last
    line: why a rerun could not run, e.g. settings the method no longer accepts."""
    starts = [i for i, line in enumerate(lines) if line.startswith("studio-engine:")]
    chosen = lines[starts[-1]:] if starts else lines[-1:]
    return " ".join(line.strip() for line in chosen) or "no message"


def compare(entry: dict, claim: dict) -> list[str]:
    """Each number (and verdict) of ``claim`` that differs from the report's ``entry``, by the
    entry's rule: equal to ``RELATIVE_TOLERANCE`` when deterministic, else each estimate
    inside its recorded interval."""
    recorded, rerun = _by_path(entry["criteria"]), _by_path(claim.get("criteria") or [])
    changes = [f"criterion {path!r} is missing from the rerun" for path in recorded
               if path not in rerun]
    changes += [f"criterion {path!r} is new in the rerun" for path in rerun
                if path not in recorded]
    deterministic = bool(entry.get("deterministic"))
    for path, old in recorded.items():
        new = rerun.get(path)
        if new is None:
            continue
        if deterministic:
            changes += _exact_changes(path, old, new)
        elif not old.get("parts"):
            changes += _outside_interval(path, old, new)
    verdict = claim.get("verdict") or ("PASS" if claim.get("passed") else "FAIL")
    if verdict != entry.get("verdict"):
        changes.append(f"paper verdict {entry.get('verdict')} -> {verdict}")
    return changes


def _by_path(criteria: list[dict]) -> dict[str, dict]:
    """Criteria keyed by their names, a part under its parent's (``parent › part``)."""
    keyed: dict[str, dict] = {}
    stack: list[str] = []
    for depth, item in flatten(criteria):
        del stack[depth:]
        stack.append(str(item.get("name", "?")))
        keyed[" › ".join(stack)] = item
    return keyed


def _exact_changes(path: str, old: dict, new: dict) -> list[str]:
    changes = []
    old_interval = old.get("interval") or [None, None]
    new_interval = new.get("interval") or [None, None]
    for label, before, after in (("estimate", old.get("estimate"), new.get("estimate")),
                                 ("interval low end", old_interval[0], new_interval[0]),
                                 ("interval high end", old_interval[1], new_interval[1])):
        if not _same(before, after):
            changes.append(f"{path!r}: {label} {_show(before)} -> {_show(after)} (a "
                           f"deterministic run must match to {RELATIVE_TOLERANCE:g} relative)")
    if old.get("verdict") != new.get("verdict"):
        changes.append(f"{path!r}: verdict {old.get('verdict')} -> {new.get('verdict')}")
    return changes


def _outside_interval(path: str, old: dict, new: dict) -> list[str]:
    estimate = new.get("estimate")
    lo, hi = old.get("interval") or [None, None]
    if estimate is None or old.get("estimate") is None:
        same = estimate is None and old.get("estimate") is None
        return [] if same else [f"{path!r}: estimate {_show(old.get('estimate'))} -> "
                                f"{_show(estimate)}"]
    low = -math.inf if lo is None else lo - _slack(lo, estimate)
    high = math.inf if hi is None else hi + _slack(hi, estimate)
    if low <= estimate <= high:
        return []
    return [f"{path!r}: estimate {_show(estimate)} is outside the recorded interval "
            f"[{_show(lo)}, {_show(hi)}] (recorded estimate {_show(old.get('estimate'))}; "
            "nondeterministic run)"]


def _slack(end: float, value: float) -> float:
    """Rounding room at an interval's end (a zero-width interval of a single run)."""
    return RELATIVE_TOLERANCE * max(abs(end), abs(value))


def _same(before: Any, after: Any) -> bool:
    if before is None or after is None:
        return before is None and after is None
    return math.isclose(float(before), float(after), rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0)


def _show(value: Any) -> str:
    return "null" if value is None else f"{float(value):.12g}"
