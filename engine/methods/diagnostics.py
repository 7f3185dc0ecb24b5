"""Diagnostic methods: exercise the engine itself (tests, benchmarks, "is my engine alive?").

``diag.echo`` returns its input; ``diag.count`` counts with progress; ``diag.chatty`` floods
events; ``diag.crash`` kills its worker; ``diag.hang`` ignores cancel; ``diag.reproduce``
returns a claim whose verdict the seed picks, so the CLI's exit codes can be tested in seconds.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
from pydantic import Field

from engine import verdicts
from engine.api import (
    Claim,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    Secret,
    reproduce_spec,
)
from engine.context import JobContext
from engine.plots import plot, series


class EchoParams(MethodParams):
    message: str = Field("hello", description="text returned unchanged")


def echo(ctx: JobContext, params: EchoParams, inputs: dict) -> dict:
    ctx.log(params.message)
    return {"message": params.message, "seed": ctx.seed, "device": ctx.device}


class CountParams(MethodParams):
    steps: int = Field(20, ge=1, le=10_000_000, description="steps to count")
    delay_s: float = Field(0.05, ge=0, le=60, description="pause per step")


def count(ctx: JobContext, params: CountParams, inputs: dict) -> dict:
    """A slow, well-behaved job: progress with a metric, cancellable, with a plot at the end."""
    values = []
    for step in range(1, params.steps + 1):
        ctx.check_cancelled()
        time.sleep(params.delay_s)
        value = float(np.sin(step / 5.0))
        values.append(value)
        ctx.progress(step, params.steps, value=value)
    spec = plot("count", [series("value", np.arange(1, params.steps + 1), values)], "step")
    return {"plot": ctx.save_artifact("count_plot", spec),
            "values": ctx.save_artifact("values", np.asarray(values))}


class ChattyParams(MethodParams):
    events: int = Field(100_000, ge=1, le=100_000_000, description="progress calls to make")
    log_every: int = Field(10, ge=1, description="also log one line every this many steps")


def chatty(ctx: JobContext, params: ChattyParams, inputs: dict) -> dict:
    """Calls progress and log as fast as it can: the event pipeline's worst case."""
    start = time.perf_counter()
    for step in range(1, params.events + 1):
        ctx.progress(step, params.events)
        if step % params.log_every == 0:
            ctx.log(f"step {step}")
        if step % 1024 == 0:
            ctx.check_cancelled()
    elapsed = time.perf_counter() - start
    return {"events": params.events, "offered_per_s": params.events / max(elapsed, 1e-9)}


class CrashParams(MethodParams):
    after_s: float = Field(0.2, ge=0, description="run this long, then kill the worker")


def crash(ctx: JobContext, params: CrashParams, inputs: dict) -> dict:
    ctx.progress(0, 1)
    time.sleep(params.after_s)
    os._exit(13)  # simulates a segfault or an out-of-memory kill


class HangParams(MethodParams):
    seconds: float = Field(600, ge=0, description="sleep this long, never checking cancel")


def hang(ctx: JobContext, params: HangParams, inputs: dict) -> dict:
    ctx.progress(0, 1)
    time.sleep(params.seconds)
    return {}


class FailParams(MethodParams):
    message: str = Field("deliberate failure", description="the error raised")


def fail(ctx: JobContext, params: FailParams, inputs: dict) -> dict:
    raise RuntimeError(params.message)


class SecretParams(MethodParams):
    api_key: Secret = Field(description="a key the job uses but never writes down")
    echo: bool = Field(False, description="act as an endpoint that echoes the key back: log "
                                          "it, save it and fail with it in the message")


def use_secret(ctx: JobContext, params: SecretParams, inputs: dict) -> dict:
    """Proves a secret reaches the method in clear and nowhere else, even when the method
    (like a chat endpoint's error body) repeats it."""
    key = params.api_key.get_secret_value()
    if params.echo:
        ctx.log(f"endpoint said: bad key {key}")
        ctx.save_artifact("reply", {"error": f"invalid api key {key}"})
        raise RuntimeError(f"401 from endpoint: {{'error': 'invalid api key {key}'}}")
    return {"key_length": len(key)}


class ReproduceDiagParams(ReproduceParams):
    margin: float = Field(1.0, gt=0, description="how far the interval lies from the threshold")


def reproduce_diag(ctx: JobContext, params: ReproduceDiagParams, inputs: dict) -> dict:
    """Seed 0 (mod 3) gives PASS, 1 FAIL, 2 INCONCLUSIVE: one criterion above 0 whose interval
    lies ``margin`` above it, below it, or across it."""
    centre = (params.margin + 0.5, -params.margin - 0.5, 0.0)[ctx.seed % 3]
    measured = verdicts.Interval(centre, centre - 0.5, centre + 0.5, 0.95, "diagnostic")
    row = verdicts.criterion("diagnostic estimate above 0", "the estimate is positive",
                             measured, verdicts.Rule.above(0.0))
    sanity = [verdicts.SanityCheck("never counted", False, "a failing sanity check")]
    return {"claim": Claim("diag", "A diagnostic claim (seed 0 PASS, 1 FAIL, 2 INCONCLUSIVE).",
                           [row], [ctx.seed], 0.0, smoke=params.smoke, spec="v2",
                           sanity=sanity).to_dict()}


def _spec(id_: str, title: str, params: type[MethodParams], run, **extra) -> MethodSpec:
    return MethodSpec(id=id_, title=title, paper="diagnostics", params=params, run=run,
                      resources=Resources(cpus=1, memory_gb=0.2), **extra)


def _echo_request(args: dict) -> dict:
    """An interactive round trip (``request`` -> ``reply``)."""
    return {"echo": args, "pid": os.getpid()}


REQUESTS = {"diag.echo": _echo_request}

SPECS = [
    _spec("diag.echo", "Echo a message", EchoParams, echo),
    _spec("diag.count", "Count slowly with progress", CountParams, count),
    _spec("diag.chatty", "Flood the event pipeline", ChattyParams, chatty),
    _spec("diag.crash", "Crash the worker process", CrashParams, crash),
    _spec("diag.hang", "Ignore cancel", HangParams, hang),
    _spec("diag.fail", "Raise an error", FailParams, fail),
    _spec("diag.secret", "Use a secret parameter", SecretParams, use_secret),
    _spec("diag.inputs", "Report the sizes of input files", MethodParams,
          lambda ctx, params, inputs: {k: os.path.getsize(v) for k, v in inputs.items()},
          inputs={"data": "any"}),
    dataclasses.replace(reproduce_spec("diag", "A claim whose verdict the seed picks",
                                       reproduce_diag, ReproduceDiagParams,
                                       resources=Resources(cpus=1, memory_gb=0.2)),
                        paper="diagnostics"),
]
