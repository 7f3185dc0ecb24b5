"""``studio-engine``: the headless command line (same entry as ``python -m engine``).

Exit codes: 0 success (a reproduction: PASS, or any smoke run); 1 the job failed; 2 usage,
invalid parameters or an unreadable file; 3 a reproduction's verdict is FAIL, 4 INCONCLUSIVE
(``engine.verdicts.exit_code``); 130 cancelled. With ``--json`` stdout carries
JSON only and human text goes to stderr. See CONTRACT.md, "The command line".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130  # 3, 4: verdicts.EXIT_CODES
ABANDON_AFTER_KILL_S = 10.0


class UsageError(Exception):
    """Exit code 2: the message names the parameter or file."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"studio-engine: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_CANCELLED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="studio-engine", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    listing = sub.add_parser("list", help="the methods this engine can run")
    _common(listing)
    listing.set_defaults(handler=cmd_list)

    run = sub.add_parser("run", help="run one method as a job in the workspace")
    run.add_argument("method", help="method id, e.g. eos.train")
    _job_options(run)
    run.set_defaults(handler=cmd_run)

    reproduce = sub.add_parser("reproduce", help="measure a paper's claim (<slug>.reproduce)")
    reproduce.add_argument("slug", help="paper slug, e.g. eos")
    reproduce.add_argument("--profile", choices=("smoke", "cpu", "gpu"),
                           help="the spec's settings to run (default cpu); any other setting "
                                "(--set, --params) makes the run exploratory")
    reproduce.add_argument("--smoke", action="store_true",
                           help="the same as --profile smoke: tiny sizes (seconds), no verdict")
    _job_options(reproduce)
    reproduce.set_defaults(handler=cmd_reproduce)

    runs = sub.add_parser("runs", help="list the workspace's runs")
    _common(runs)
    runs.add_argument("--method", help="only this method id or paper slug")
    runs.add_argument("--state", help="only runs in this state")
    runs.add_argument("--limit", type=int, help="at most this many (newest first)")
    runs.set_defaults(handler=cmd_runs)

    inspect = sub.add_parser("inspect", help="what a data file holds")
    inspect.add_argument("file")
    inspect.add_argument("--lef", help="a DEF or route guide file's LEF: its layer and via "
                                       "names are checked against it")
    _common(inspect)
    inspect.set_defaults(handler=cmd_inspect)

    export = sub.add_parser("export", help="render a run's plot artifact to PNG, SVG or PDF")
    export.add_argument("ref", help="run:<id>/<artifact> or a plot-spec .json file")
    export.add_argument("output", help="file to write; its suffix picks the format")
    _common(export)
    export.set_defaults(handler=cmd_export)

    report = sub.add_parser("report", help="HTML, PDF and JSON report of each paper's latest "
                                           "reproduction")
    report.add_argument("slugs", nargs="*", metavar="SLUG", help="papers (default: all)")
    report.add_argument("--out", required=True, help="folder for index.html, report.pdf, "
                                                     "report.json and the pictures")
    report.add_argument("--markdown", help="also write the report as Markdown to this file")
    report.add_argument("--max-figures", type=int, default=None,
                        help="figures of each run in the report (default 12)")
    _common(report)
    report.set_defaults(handler=cmd_report)

    verify = sub.add_parser("verify", help="rerun every run of a report and name each number "
                                           "that moved")
    verify.add_argument("folder", help="a report folder (with report.json)")
    verify.add_argument("--only", action="append", default=[], metavar="SLUG",
                        help="verify only this paper (repeatable)")
    _common(verify)
    verify.set_defaults(handler=cmd_verify)

    serve = sub.add_parser("serve", help="serve the GUI over a private local socket")
    _common(serve)
    serve.add_argument("--socket", help="socket path (default: a fresh private directory)")
    serve.add_argument("--token-fd", type=int, help="read the token from this inherited fd")
    serve.add_argument("--workers", type=int, help="worker processes (default: cores - 1)")
    serve.add_argument("--threads", type=int, help="torch threads per worker")
    serve.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    serve.add_argument("--cancel-grace", type=float, default=5.0,
                       help="seconds a cancelled job gets before its worker is killed")
    serve.add_argument("--watch-parent", nargs="?", type=int, const=0, metavar="PID",
                       help="exit when the parent process (or process PID) dies")
    serve.set_defaults(handler=cmd_serve)
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    parser.add_argument("--workspace", help="workspace folder (default: $STUDIO_WORKSPACE or "
                        "the user data folder)")


def _job_options(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a parameter; VALUE is JSON-decoded when it parses, else a string")
    parser.add_argument("--params", help="a JSON file of parameters (--set overrides it)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=REF",
                        help="an input: a path, run:<id>/<artifact> or dataset:<id>")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cluster", default="local", help="local, auto, HOST:PORT or "
                        "ray://HOST:PORT")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")


# -- list, runs, inspect, export ----------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from engine.developer import listed
    from engine.registry import describe_all

    methods = [method for method in describe_all() if listed(method)]
    if args.json:
        _print_json(methods)
    else:
        for method in methods:
            print(f"{method['id']:<28} {method['title']}")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    workspace = _workspace(args)
    workspace.finish_orphans("engine died")  # a killed `run` or engine left them running
    records = workspace.runs(args.method, args.state, args.limit)
    if args.json:
        _print_json(records)
    else:
        for run in records:
            reason = f"  ({run['reason']})" if run["reason"] else ""
            print(f"{run['id']}  {run['method']:<24} {run['state']:<10}{reason}")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from engine.io import FormatError, inspect_file

    try:
        if args.lef:
            from engine.io.vlsi import inspect_with_lef

            report = inspect_with_lef(args.file, args.lef)
        else:
            report = inspect_file(args.file)
    except FormatError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json(report)
    else:
        print(f"{report['path']}: {report['format']}")
        for key, value in report["summary"].items():
            print(f"  {key}: {value}")
        problems = report["metadata"].get("problems") or []
        if problems:
            print("  problems (skipped, the rest is used):")
            for problem in problems:
                print(f"    {problem}")
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from engine.plots import PLOT_KINDS, export_figure

    ref = args.ref
    provenance: dict[str, Any] = {}
    if ref.startswith("run:"):
        workspace = _workspace(args)
        try:
            path = workspace.resolve_ref(ref)
            run = workspace.run(ref[4:].partition("/")[0])
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
        provenance = {"run_id": run["id"], "method": run["method"], "params": run["params"],
                      "seed": run["seed"], "code_version": _code_version()}
    else:
        path = Path(ref)
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable plot spec ({exc})") from None
    if not isinstance(spec, dict) or spec.get("kind") not in PLOT_KINDS:
        raise UsageError(f"{path}: not a plot spec (no \"kind\": \"plot\" or \"heatmap\")")
    try:
        written = export_figure(spec, args.output, provenance)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json({"path": str(written)})
    else:
        print(written)
    return EXIT_OK


# -- report and verify -------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from engine.report import MAX_FIGURES, ReportError, build_report

    try:
        paths = build_report(_workspace(args), args.out, args.slugs, markdown=args.markdown,
                             max_figures=MAX_FIGURES if args.max_figures is None
                             else max(args.max_figures, 0))
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json(paths)
    else:
        for path in paths.values():
            print(path)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from engine.report import ReportError
    from engine.verify import verify_report

    try:
        outcome = verify_report(_workspace(args), args.folder, args.only)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json(outcome)
    else:
        for line in outcome["moved"]:
            print(f"moved: {line}")
        print(outcome["summary"])
    return EXIT_OK if outcome["ok"] else EXIT_FAILED


# -- run and reproduce ------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    params = _collect_params(args)
    outcome = _run_job(args, args.method, params)
    return outcome["exit"]


def cmd_reproduce(args: argparse.Namespace) -> int:
    from engine.verdicts import exit_code

    params = _collect_params(args)
    if args.smoke and args.profile not in (None, "smoke"):
        raise UsageError(f"--smoke is --profile smoke; it contradicts --profile {args.profile}")
    profile = "smoke" if args.smoke else args.profile
    if profile is not None:
        params["profile"] = profile
        params.pop("smoke", None)  # the flag decides; a --set smoke=... must not contradict it
    outcome = _run_job(args, f"{args.slug}.reproduce", params, quiet_result=True)
    claim = (outcome.get("outputs") or {}).get("claim")
    if outcome["state"] != "succeeded" or claim is None:
        return outcome["exit"]
    if args.json:
        _print_json({**claim, "run_id": outcome["run_id"], "run_dir": outcome["run_dir"]})
    else:
        print(format_claim(claim))
    return exit_code(claim_verdict(claim), smoke=bool(claim.get("smoke")))


def claim_verdict(claim: dict) -> str:
    """The claim's verdict; a claim written before the schema has only ``passed``."""
    return claim.get("verdict") or ("PASS" if claim.get("passed") else "FAIL")


_RULE_SYMBOLS = {"above": ">", "below": "<", "inside_band": "in", "outside_band": "not in"}


def format_claim(claim: dict) -> str:
    """The claim as a table: each criterion (a combined one's parts indented under it) with
    its estimate, interval, rule and verdict, then the verdict line with the spec, profile and
    the EXPLORATORY or smoke mark, what would decide open criteria, and the sanity checks."""
    rows = [(depth, c) for top in claim["criteria"] for depth, c in _flatten(top)]
    width = max([len("criterion")] + [2 * d + len(c["name"]) for d, c in rows])  # never cut
    lines = [f"{claim['paper']}: {claim['statement']}",
             f"{'criterion':<{width}} {'measured':>12} {'interval':>21} {'rule':>14}  "
             f"{'verdict':<12}  paper"]
    for depth, c in rows:
        name = "  " * depth + c["name"]
        quote = c.get("quote") or c.get("paper", "")
        lines.append(f"{name:<{width}} {_fmt(c.get('estimate', c.get('measured'))):>12} "
                     f"{_interval(c):>21} {_rule(c):>14}  {_row_verdict(c):<12}  {quote}")
    marks = []
    if claim.get("exploratory"):
        changed = ", ".join(f"{k}={v}" for k, v in (claim.get("overrides") or {}).items())
        marks.append("EXPLORATORY (not the paper's verdict: settings other than the "
                     f"profile's{': ' + changed if changed else ''})")
    if claim.get("smoke"):
        marks.append("(smoke: sizes too small for a verdict)")
    where = f"spec {claim.get('spec', 'v1')}, profile {claim.get('profile') or '?'}; "
    lines.append(f"claim {claim_verdict(claim)} {' '.join(marks)}".rstrip()
                 + f"; {where}seeds {claim['seeds']}; {claim['wall_s']:.1f} s")
    lines += [f"  {c['name']} would be decided by: {c['decides_with']}" for _, c in rows
              if c.get("verdict") == "INCONCLUSIVE" and c.get("decides_with")]
    for check in claim.get("sanity") or []:
        state = "ok" if check.get("passed") else "FAILED"
        detail = f": {check['detail']}" if check.get("detail") else ""
        lines.append(f"sanity (never counted) {state}: {check['name']}{detail}")
    if claim.get("notes"):
        lines.append(claim["notes"])
    return "\n".join(lines)


def _flatten(criterion: dict, depth: int = 0) -> list[tuple[int, dict]]:
    rows = [(depth, criterion)]
    for part in criterion.get("parts") or []:
        rows += _flatten(part, depth + 1)
    return rows


def _row_verdict(c: dict) -> str:
    verdict = c.get("verdict") or ("PASS" if c.get("passed") else "FAIL")
    return f"{verdict} ({c['aggregate']})" if c.get("parts") else verdict


def _interval(c: dict) -> str:
    interval = c.get("interval")
    if not interval:
        return ""
    lo, hi = (("-inf" if i == 0 else "inf") if v is None else _fmt(v)
              for i, v in enumerate(interval))
    return f"[{lo}, {hi}]"


def _rule(c: dict) -> str:
    rule = c.get("rule")
    if "op" in c:  # a v1 line reads as it did: measured op target
        return f"{c['op']} {_fmt(c['target'])}"
    if not rule:
        return ""
    if rule.get("band") is None:
        return f"{_RULE_SYMBOLS[rule['kind']]} {_fmt(rule['threshold'])}"
    lo, hi = (("-inf" if i == 0 else "inf") if v is None else _fmt(v)
              for i, v in enumerate(rule["band"]))
    return f"{_RULE_SYMBOLS[rule['kind']]} [{lo}, {hi}]"


def _fmt(value: Any) -> str:
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def _collect_params(args: argparse.Namespace) -> dict:
    params: dict[str, Any] = {}
    if args.params:
        from engine.io import FormatError
        from engine.io.limits import read_json

        try:
            params = read_json(args.params)
        except FormatError as exc:
            raise UsageError(str(exc)) from None
        if not isinstance(params, dict):
            raise UsageError(f"{args.params}: parameters must be a JSON object")
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def _parse_inputs(items: list[str]) -> dict[str, str]:
    inputs = {}
    for item in items:
        name, sep, ref = item.partition("=")
        if not sep or not name or not ref:
            raise UsageError(f"--input {item!r}: expected NAME=REF")
        inputs[name] = ref
    return inputs


def _run_job(args: argparse.Namespace, method: str, params: dict,
             quiet_result: bool = False) -> dict:
    from engine.executors import ClusterUnavailable, make_executor
    from engine.jobs import InvalidSubmission, JobManager
    from engine.registry import UnknownMethod

    workspace = _workspace(args)
    workspace.finish_orphans("engine died")  # temp files are swept when an engine starts
    try:
        executor = make_executor(args.cluster, workers=1,
                                 threads_per_worker=args.threads or os.cpu_count() or 1)
    except ClusterUnavailable as exc:
        raise UsageError(str(exc)) from None
    printer = _EventPrinter(json_mode=args.json and not quiet_result, quiet_result=quiet_result)

    async def go() -> dict:
        done = asyncio.Event()
        outcome: dict[str, Any] = {}

        def publish(message: dict) -> None:
            printer.show(message)
            if message["type"] == "job_result":
                outcome["outputs"] = message["content"]["outputs"]
            if message["type"] == "job_state" and message["content"]["state"] in (
                    "succeeded", "failed", "cancelled"):
                outcome["state"] = message["content"]["state"]
                outcome["reason"] = message["content"].get("reason", "")
                done.set()

        manager = JobManager(workspace, executor, publish, device=args.device)
        remote = executor.cluster != "local"
        if remote:  # an unreachable cluster is a usage error, before any run is recorded
            try:
                await executor.start()
            except ConnectionError as exc:
                raise UsageError(str(exc)) from None
        try:
            job_id = manager.submit(method, params, _parse_inputs(args.input), args.seed)
        except (UnknownMethod, InvalidSubmission) as exc:
            raise UsageError(str(exc).strip("'\"")) from None
        if not remote:
            await executor.start()
        interrupts = 0

        def on_interrupt() -> None:
            """First signal: soft cancel (the worker is killed after the cancel grace);
            second: kill the worker now. If the executor has not confirmed
            ``ABANDON_AFTER_KILL_S`` after the kill (or on a third signal), the run is ended
            as cancelled here, so a single SIGTERM always ends the command."""
            nonlocal interrupts
            interrupts += 1
            hard = interrupts > 1
            print("\ncancelling" + (" (hard)" if hard else "; Ctrl-C again to kill"),
                  file=sys.stderr)
            if interrupts > 2:
                manager.abandon(job_id, "cancelled", "cancelled: the worker did not confirm")
                return
            manager.cancel(job_id, hard=hard)
            grace_s = 0.0 if hard else getattr(executor, "cancel_grace_s", 0.0)
            loop.call_later(grace_s + ABANDON_AFTER_KILL_S, manager.abandon, job_id,
                            "cancelled", "cancelled: the worker did not confirm the kill")

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, on_interrupt)
        loop.add_signal_handler(signal.SIGTERM, on_interrupt)
        try:
            await done.wait()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
            await executor.stop()
        outcome["run_id"] = job_id
        outcome["run_dir"] = str(workspace.run_dir(job_id))
        return outcome

    outcome = asyncio.run(go())
    printer.finish(outcome)
    outcome["exit"] = {"succeeded": EXIT_OK, "cancelled": EXIT_CANCELLED}.get(
        outcome["state"], EXIT_FAILED)
    return outcome


class _EventPrinter:
    """JSON lines on stdout with --json; a progress bar and log lines on a terminal otherwise."""

    def __init__(self, json_mode: bool, quiet_result: bool) -> None:
        self.json_mode = json_mode
        self.quiet_result = quiet_result
        self.tty = sys.stderr.isatty()
        self.bar_shown = False

    def show(self, message: dict) -> None:
        kind, content = message["type"], message["content"]
        if self.json_mode:
            _print_json({"type": kind, "job": message["job"], "seq": message["seq"], **content},
                        compact=True)
            return
        if kind == "job_progress":
            self._bar(content)
        elif kind == "job_log":
            self._clear_bar()
            for line in content.get("lines", []):
                print(line, file=sys.stderr)
        elif kind == "job_state":
            self._clear_bar()
            reason = f": {content['reason']}" if content.get("reason") else ""
            print(f"[{message['job']}] {content['state']}{reason}", file=sys.stderr)
        elif kind == "job_artifact":
            self._clear_bar()
            print(f"  artifact {content['name']} ({content['kind']}): {content['path']}",
                  file=sys.stderr)

    def _bar(self, content: dict) -> None:
        if not self.tty:
            return
        step, total = content.get("step", 0), content.get("total") or 0
        metrics = " ".join(f"{k}={_fmt(v)}" for k, v in list(content["metrics"].items())[:4])
        if total:
            filled = int(30 * min(step, total) / total)
            line = f"[{'#' * filled}{'.' * (30 - filled)}] {step}/{total} {metrics}"
        else:
            line = f"step {step} {metrics}"
        sys.stderr.write("\r" + line[:120].ljust(120))
        sys.stderr.flush()
        self.bar_shown = True

    def _clear_bar(self) -> None:
        if self.bar_shown:
            sys.stderr.write("\r" + " " * 120 + "\r")
            self.bar_shown = False

    def finish(self, outcome: dict) -> None:
        self._clear_bar()
        result = {"type": "result", "run_id": outcome["run_id"], "run_dir": outcome["run_dir"],
                  "state": outcome["state"], "reason": outcome.get("reason", ""),
                  "outputs": outcome.get("outputs", {})}
        if self.json_mode:
            if not self.quiet_result:
                _print_json(result, compact=True)
        else:
            print(f"run {outcome['run_id']}: {outcome['state']}  ({outcome['run_dir']})",
                  file=sys.stderr)
            if outcome.get("outputs") and not self.quiet_result:
                print(json.dumps(outcome["outputs"], indent=2))


# -- serve ---------------------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from engine.executors import LocalExecutor
    from engine.protocol import private_socket_path
    from engine.server import EngineServer

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s engine %(levelname)s %(message)s")
    if args.watch_parent and os.getppid() != args.watch_parent:
        raise UsageError(f"parent process {args.watch_parent} is already gone")
    token = _read_token(args.token_fd)
    socket_path = args.socket or private_socket_path()
    executor = LocalExecutor(workers=args.workers, threads_per_worker=args.threads,
                             cancel_grace_s=args.cancel_grace, warm=True)
    server = EngineServer(_workspace(args), executor, token, socket_path, device=args.device,
                          watch_parent=args.watch_parent)

    def announce(path: str) -> None:
        sys.stdout.write(json.dumps({"type": "listening", "socket": path,
                                     "pid": os.getpid()}) + "\n")
        sys.stdout.flush()

    asyncio.run(server.serve(on_listening=announce))
    return EXIT_OK


def _read_token(fd: int | None) -> str:
    if fd is not None:
        with os.fdopen(fd, "rb") as pipe:
            token = pipe.read().decode().strip()
    else:
        token = os.environ.pop("STUDIO_ENGINE_TOKEN", "")
    if len(token) < 16:
        raise UsageError("serve needs a token of at least 16 characters, from --token-fd or "
                         "$STUDIO_ENGINE_TOKEN")
    return token


# -- helpers -------------------------------------------------------------------------------------
def _workspace(args: argparse.Namespace):
    from engine.workspace import Workspace

    try:
        return Workspace(args.workspace)
    except OSError as exc:
        raise UsageError(f"workspace {args.workspace}: {exc.strerror}") from None


def _code_version() -> str:
    from engine import __version__

    return __version__


def _print_json(obj: Any, compact: bool = False) -> None:
    """Strict JSON: NaN and infinities print as null."""
    from engine.atomic import strict_jsonable

    text = json.dumps(strict_jsonable(obj), separators=(",", ":") if compact else None,
                      indent=None if compact else 2, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
