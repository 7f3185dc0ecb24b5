"""CCFM: chance-constrained flow matching, against projection-based constrained samplers.

A pretrained flow-matching model (here the exact velocity of a Gaussian mixture, or a small MLP
trained on 1-D heat-equation fields) is sampled under a hard constraint on the clean sample.
CCFM projects each intermediate state onto the deterministic equivalent of a chance constraint
on the noisy state (``engine.models.constrained_sampler`` has the derivation); the baselines
project the noisy state, project the estimated clean sample, or project only at the end. Every
method but ``unconstrained`` ends with an exact projection, so all are feasible; the question is
fidelity to the constrained ground truth (the distribution restricted to the feasible set:
rejection sampling for a half-space, exact Gaussian conditioning for a hyperplane).

Methods: ``ccfm.sample`` (2-D / 10-D mixtures: clouds over the feasible set, feasibility and
fidelity table, trajectories), ``ccfm.train_heat`` (a trained model and a conservation law) and
``ccfm.reproduce``.

The paper's own treatment of xi given x_t and its eps were not available to us: we model
xi = ((1 - t) / t) x0 as N(0, ((1 - t) / t)^2 I) independent of x_t and keep eps a parameter
(kappa = Phi^{-1}(1 - eps)). eps = 0.5 (kappa = 0: the clean estimate x_t / t with xi at its
median must be feasible) is the default; the reproduction reports a sweep over eps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from engine.api import (
    Claim,
    Criterion,
    MethodParams,
    MethodSpec,
    ReproduceParams,
    Resources,
    reproduce_spec,
)
from engine.plots import plot, series

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "ccfm"
METHODS = ("unconstrained", "final_projection", "projection_each_step",
           "clean_estimate_projection", "ccfm")
Method = Literal["unconstrained", "final_projection", "projection_each_step",
                 "clean_estimate_projection", "ccfm"]
Problem = Literal["mixture_2d_halfspace", "mixture_2d_equality", "mixture_10d_halfspace",
                  "mixture_10d_equality", "mixture_2d_disk"]
DEFAULT_EPS = 0.5
EPS_SWEEP = (0.05, 0.2, 0.5, 0.8, 0.95)



# -- problems ------------------------------------------------------------------------------------

@dataclass
class ConstrainedProblem:
    """A velocity field, a constraint and samples of the constrained ground truth."""

    name: str
    velocity: Callable[[np.ndarray, float], np.ndarray]
    constraint: object
    dim: int
    ground_truth: Callable[[int, np.random.Generator], np.ndarray]


def mixture_problem(name: str) -> ConstrainedProblem:
    """The fixed test problems: a 2-D three-mode mixture and a 10-D four-mode mixture (means
    drawn once with seed 0), each with a half-space cutting one mode or a hyperplane."""
    from engine.models import constrained_sampler as cs
    from engine.models import gaussian_mixture_flow as gmf

    mix = gmf.ring_mixture_2d() if "2d" in name else gmf.random_mixture(10, 4, seed=0)
    d = mix.dim
    if name == "mixture_2d_halfspace":  # through the right mode, 1.7 std left of its centre
        constraint = cs.LinearConstraint(np.array([1.0, 0.0]), 1.5)
    elif name == "mixture_2d_equality":
        constraint = cs.LinearConstraint(np.array([1.0, 1.0]) / math.sqrt(2), 1.0, equality=True)
    elif name == "mixture_10d_halfspace":  # through the centre of the outermost mode along e_0
        a = np.eye(d)[0]
        constraint = cs.LinearConstraint(a, float(np.max(mix.means @ a)))
    elif name == "mixture_10d_equality":  # the plane through the mixture's centre along 1
        a = np.ones(d) / math.sqrt(d)
        constraint = cs.LinearConstraint(a, float(np.mean(mix.means @ a)), equality=True)
    elif name == "mixture_2d_disk":  # the disk around the top mode, radius 1.5
        constraint = cs.BallConstraint(mix.means[2].copy(), 1.5)
    else:
        raise ValueError(f"unknown problem {name!r}")

    def ground_truth(count: int, rng: np.random.Generator) -> np.ndarray:
        if constraint.equality:
            return mix.condition_on_hyperplane(constraint.a, constraint.b, count, rng)
        return rejection_sample(mix.sample, constraint, count, rng)

    return ConstrainedProblem(name, mix.velocity, constraint, d, ground_truth)


def rejection_sample(draw: Callable[[int, np.random.Generator], np.ndarray], constraint,
                     count: int, rng: np.random.Generator) -> np.ndarray:
    kept, total = [], 0
    while total < count:
        batch = draw(4 * count, rng)
        batch = batch[constraint.violation(batch) <= 0]
        if len(kept) > 1000 and total == 0:
            raise RuntimeError("the feasible set has almost no mass: rejection sampling failed")
        kept.append(batch)
        total += len(batch)
    return np.concatenate(kept)[:count]


# -- running the samplers ------------------------------------------------------------------------

@dataclass
class MethodRun:
    method: str
    eps: float
    samples: np.ndarray
    feasible: float  # fraction of final samples within tolerance
    max_violation: float
    mmd: float
    energy: float
    times: np.ndarray
    trajectories: np.ndarray
    feasible_over_time: np.ndarray


def run_methods(problem: ConstrainedProblem, methods: list[str], eps: float, count: int,
                steps: int, rng: np.random.Generator, truth: np.ndarray,
                check_cancelled: Callable[[], None], keep: int = 0, tol: float = 1e-6,
                scenarios: int = 256) -> list[MethodRun]:
    """Every method from the same initial noise; fidelity against ``truth``."""
    from engine.models import constrained_sampler as cs

    x0 = rng.standard_normal((count, problem.dim))
    xi = rng.standard_normal((scenarios, problem.dim))
    bandwidth = cs.median_bandwidth(truth)
    bandwidths = [bandwidth / 2, bandwidth, 2 * bandwidth]
    runs = []
    for method in methods:
        result = cs.sample(problem.velocity, x0, steps, method, problem.constraint, eps=eps,
                           keep=keep, scenarios=xi, tol=tol, check_cancelled=check_cancelled)
        violation = problem.constraint.violation(result.samples)
        runs.append(MethodRun(
            method=method, eps=eps, samples=result.samples,
            feasible=float(np.mean(violation <= tol)), max_violation=float(violation.max()),
            mmd=cs.mmd(result.samples, truth, bandwidths),
            energy=cs.energy_distance(result.samples, truth), times=result.times,
            trajectories=result.trajectories, feasible_over_time=result.feasible_over_time))
    return runs


def metrics_table(runs: list[MethodRun], extra: dict[str, str] | None = None) -> dict:
    columns = [*(extra or {}), "method", "eps", "feasible %", "max violation", "MMD^2",
               "energy distance"]
    rows = [[*(extra or {}).values(), r.method, r.eps if r.method == "ccfm" else None,
             100 * r.feasible, r.max_violation, r.mmd, r.energy] for r in runs]
    return {"columns": columns, "rows": rows}


def cloud_plots(problem: ConstrainedProblem, runs: list[MethodRun], truth: np.ndarray,
                limit: int = 1500) -> dict[str, dict]:
    """One 2-D cloud per method over the feasible set (first two coordinates in 10-D)."""
    boundary = boundary_curve(problem.constraint, truth) if problem.dim == 2 else None
    figures = {}
    for r in runs:
        curves = [series("ground truth", truth[:limit, 0], truth[:limit, 1], "scatter"),
                  series(r.method, r.samples[:limit, 0], r.samples[:limit, 1], "scatter")]
        if boundary is not None:
            curves.append(series("constraint boundary", *boundary))
        label = f"{r.method} (eps {r.eps:g})" if r.method == "ccfm" else r.method
        figures[f"cloud_{r.method}"] = plot(
            f"{problem.name}: {label}, MMD^2 {r.mmd:.4f}", curves, "x1", "x2")
    return figures


def boundary_curve(constraint, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The boundary within the points' box: a segment for a line, a polygon for a circle."""
    if hasattr(constraint, "radius"):
        angle = np.linspace(0, 2 * math.pi, 200)
        return (constraint.centre[0] + constraint.radius * np.cos(angle),
                constraint.centre[1] + constraint.radius * np.sin(angle))
    a, b = constraint.a, constraint.b
    low, high = points.min(axis=0) - 1, points.max(axis=0) + 1
    if abs(a[1]) > abs(a[0]):
        x = np.array([low[0], high[0]])
        return x, (b - a[0] * x) / a[1]
    y = np.array([low[1], high[1]])
    return (b - a[1] * y) / a[0], y


def trajectory_plots(problem: ConstrainedProblem, runs: list[MethodRun]) -> dict[str, dict]:
    figures = {"feasibility_over_time_plot": plot(
        f"{problem.name}: fraction of states satisfying the clean constraint",
        [series(r.method, r.times, r.feasible_over_time, "step") for r in runs],
        "t", "feasible fraction")}
    for r in runs:
        if r.trajectories.shape[1] == 0:
            continue
        curves = [series(f"path {i}", r.trajectories[:, i, 0], r.trajectories[:, i, 1])
                  for i in range(r.trajectories.shape[1])]
        figures[f"trajectories_{r.method}"] = plot(
            f"{problem.name}: {r.method} trajectories (first two coordinates)", curves,
            "x1", "x2")
    return figures


# -- ccfm.sample ---------------------------------------------------------------------------------

class SampleParams(MethodParams):
    """Constrained sampling of a Gaussian mixture's exact flow."""

    problem: Problem = Field("mixture_2d_halfspace", description=(
        "mixture and constraint: half-space cutting a mode, hyperplane (equality), or a disk "
        "(nonlinear: CCFM by sample-average approximation)"))
    methods: list[Method] = Field(list(METHODS), min_length=1, description="samplers to run")
    eps: float = Field(DEFAULT_EPS, gt=0, lt=1, description=(
        "CCFM risk level: P[constraint on the clean sample] >= 1 - eps; kappa = "
        "Phi^-1(1 - eps)"))
    samples: int = Field(2000, ge=10, le=100_000, description="samples per method")
    steps: int = Field(100, ge=1, le=10_000, description="Euler steps")
    trajectories: int = Field(20, ge=0, le=200, description="paths kept per method")
    scenarios: int = Field(256, ge=8, le=100_000, description="SAA scenarios (disk)")


def run_sample(ctx: JobContext, params: SampleParams, inputs: dict) -> dict:
    rng = np.random.default_rng(ctx.seed)
    problem = mixture_problem(params.problem)
    truth = problem.ground_truth(params.samples, rng)
    runs = []
    for index, method in enumerate(params.methods):
        ctx.check_cancelled()
        runs += run_methods(problem, [method], params.eps, params.samples, params.steps,
                            np.random.default_rng(ctx.seed), truth, ctx.check_cancelled,
                            keep=params.trajectories, scenarios=params.scenarios)
        ctx.progress(index + 1, len(params.methods), feasible=runs[-1].feasible,
                     mmd=runs[-1].mmd, energy=runs[-1].energy)
        ctx.log(f"{method}: feasible {100 * runs[-1].feasible:.1f}%, MMD^2 {runs[-1].mmd:.4g}")
    figures = {**cloud_plots(problem, runs, truth), **trajectory_plots(problem, runs)}
    outputs = {name: ctx.save_artifact(name, spec) for name, spec in figures.items()}
    outputs["table"] = ctx.save_artifact("metrics_table", metrics_table(runs))
    outputs["ground_truth"] = ctx.save_artifact("ground_truth", truth)
    for r in runs:
        outputs[f"samples_{r.method}"] = ctx.save_artifact(f"samples_{r.method}", r.samples)
    outputs["summary"] = {r.method: {"feasible": r.feasible, "mmd2": r.mmd,
                                     "energy_distance": r.energy} for r in runs}
    return outputs


# -- ccfm.train_heat -----------------------------------------------------------------------------

class HeatParams(MethodParams):
    """A small flow model of heat-equation fields, sampled under total-heat conservation."""

    points: int = Field(32, ge=8, le=256, description="grid points per field")
    train_fields: int = Field(20_000, ge=100, le=1_000_000, description="training fields")
    steps: int = Field(2000, ge=1, le=200_000, description="Adam steps")
    batch: int = Field(256, ge=8, le=4096, description="fields per step")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam step size")
    hidden: int = Field(256, ge=8, le=2048, description="hidden width of the MLP flow")
    layers: int = Field(3, ge=1, le=8, description="hidden layers")
    target_mass: float = Field(1.3, gt=0, le=10, description=(
        "the conserved mean temperature the samples must have (training masses ~ U[0.5, 1.5])"))
    methods: list[Method] = Field(list(METHODS), min_length=1, description="samplers to run")
    eps: float = Field(DEFAULT_EPS, gt=0, lt=1, description="CCFM risk level")
    samples: int = Field(1000, ge=10, le=100_000, description="samples per method")
    sample_steps: int = Field(100, ge=1, le=10_000, description="Euler steps")


def train_heat_model(p: HeatParams, seed: int, check_cancelled: Callable[[], None],
                     on_step: Callable[[int, float], None] | None = None):
    """(model, losses): straight-path flow matching, independent coupling."""
    import torch

    from engine.models import bridges
    from engine.models import heat_equation as heat
    from engine.models import mlp_flow as mf

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    fields = heat.heat_fields(p.train_fields, rng, points=p.points)
    model = mf.MLPFlow(mf.MLPFlowConfig(dim=p.points, hidden=p.hidden, layers=p.layers))

    def draw_batch(step: int) -> mf.Batch:
        x1 = fields[rng.integers(0, len(fields), size=p.batch)]
        x0 = rng.standard_normal(x1.shape)
        t = rng.uniform(0, 1, size=p.batch)
        return (t, *bridges.bridge_sample(x0, x1, t, "straight", 0.0))

    return model, mf.fit(model, draw_batch, p.steps, p.learning_rate, check_cancelled, on_step)


def heat_problem(p: HeatParams, model) -> ConstrainedProblem:
    from engine.models import constrained_sampler as cs
    from engine.models import heat_equation as heat
    from engine.models import mlp_flow as mf

    constraint = cs.LinearConstraint(np.full(p.points, 1.0 / p.points), p.target_mass,
                                     equality=True)
    return ConstrainedProblem(
        name=f"heat fields, mean temperature {p.target_mass:g}",
        velocity=mf.velocity_function(model), constraint=constraint, dim=p.points,
        ground_truth=lambda count, rng: heat.heat_fields(count, rng, points=p.points,
                                                         mass=p.target_mass))


def run_train_heat(ctx: JobContext, params: HeatParams, inputs: dict) -> dict:
    from engine.models import heat_equation as heat

    model, losses = train_heat_model(
        params, ctx.seed, ctx.check_cancelled,
        lambda step, loss: ctx.progress(step + 1, params.steps, loss=loss))
    problem = heat_problem(params, model)
    rng = np.random.default_rng(ctx.seed + 1)
    truth = problem.ground_truth(params.samples, rng)
    runs = run_methods(problem, list(params.methods), params.eps, params.samples,
                       params.sample_steps, rng, truth, ctx.check_cancelled, keep=0, tol=1e-6)
    for r in runs:
        ctx.log(f"{r.method}: feasible {100 * r.feasible:.1f}%, MMD^2 {r.mmd:.4g}")
    x = heat.grid(params.points)
    outputs = {
        "loss_plot": ctx.save_artifact("loss_plot", plot(
            "heat fields: flow-matching loss", [series("loss", np.arange(1, len(losses) + 1),
                                                       losses)], "step", "loss", logy=True)),
        "table": ctx.save_artifact("metrics_table", metrics_table(runs)),
        "checkpoint": ctx.save_checkpoint("heat_flow", model,
                                          cfg={**params.model_dump(), "seed": ctx.seed}),
    }
    for r in runs:
        curves = [series(f"truth {i}", x, truth[i]) for i in range(3)]
        curves += [series(f"{r.method} {i}", x, r.samples[i]) for i in range(3)]
        outputs[f"fields_{r.method}"] = ctx.save_artifact(f"fields_{r.method}", plot(
            f"heat fields with mean {params.target_mass:g}: {r.method} vs ground truth",
            curves, "x", "u(x, T)", hlines=[{"y": params.target_mass, "name": "mean"}]))
    outputs["summary"] = {r.method: {"feasible": r.feasible, "mmd2": r.mmd,
                                     "energy_distance": r.energy} for r in runs}
    return outputs


# -- ccfm.reproduce ------------------------------------------------------------------------------

CASES = ("mixture_2d_halfspace", "mixture_2d_equality", "mixture_10d_halfspace",
         "mixture_10d_equality")
BASELINES = ("final_projection", "projection_each_step", "clean_estimate_projection")


class ReproduceCcfmParams(ReproduceParams):
    """The spec's cases over seeds; eps is the CCFM risk level of the verdict."""

    seeds: int = Field(5, ge=1, le=20, description="sampling seeds (seed, seed + 1, ...)")
    eps: float = Field(DEFAULT_EPS, gt=0, lt=1, description="CCFM risk level of the verdict")


def run_reproduce(ctx: JobContext, params: ReproduceCcfmParams, inputs: dict) -> dict:
    started = time.monotonic()
    seeds = [ctx.seed + s for s in range(1 if params.smoke else params.seeds)]
    count, steps = (200, 10) if params.smoke else (2000, 100)
    sweep = tuple(e for e in EPS_SWEEP if e != params.eps)
    heat_params = HeatParams(steps=20, samples=100, sample_steps=10, hidden=32,
                             train_fields=1000) if params.smoke else HeatParams()
    total = len(CASES) * len(seeds) + heat_params.steps + len(seeds)
    done = 0
    results: dict[tuple[str, int], list[MethodRun]] = {}
    sweep_runs: dict[tuple[str, int], list[MethodRun]] = {}
    outputs: dict = {}
    for case in CASES:
        problem = mixture_problem(case)
        for seed in seeds:
            rng = np.random.default_rng([seed, CASES.index(case)])
            truth = problem.ground_truth(count, rng)
            keep = 20 if seed == seeds[0] else 0
            state = rng.bit_generator.state
            runs = run_methods(problem, list(METHODS), params.eps, count, steps, rng, truth,
                               ctx.check_cancelled, keep=keep)
            results[case, seed] = runs
            sweep_runs[case, seed] = []
            for e in sweep:  # every eps from the same initial noise as the methods above
                rng.bit_generator.state = state
                sweep_runs[case, seed] += run_methods(problem, ["ccfm"], e, count, steps, rng,
                                                      truth, ctx.check_cancelled)
            done += 1
            ctx.progress(done, total, **{f"mmd_{r.method}": r.mmd for r in runs})
            if seed == seeds[0]:
                figures = {**cloud_plots(problem, runs, truth), **trajectory_plots(problem, runs)}
                for name, spec in figures.items():
                    outputs[f"{case}_{name}"] = ctx.save_artifact(f"{case}_{name}", spec)
        ctx.log(f"{case}: mean MMD^2 " + ", ".join(
            f"{m} {np.mean([_by_method(results[case, s])[m].mmd for s in seeds]):.4g}"
            for m in METHODS))

    model, losses = train_heat_model(
        heat_params, ctx.seed, ctx.check_cancelled,
        lambda step, loss: ctx.progress(done + step + 1, total, heat_loss=loss))
    done += heat_params.steps
    heat = heat_problem(heat_params, model)
    heat_results: dict[int, list[MethodRun]] = {}
    for seed in seeds:
        rng = np.random.default_rng([seed, 99])
        truth = heat.ground_truth(heat_params.samples, rng)
        heat_results[seed] = run_methods(heat, list(METHODS), params.eps, heat_params.samples,
                                         heat_params.sample_steps, rng, truth,
                                         ctx.check_cancelled)
        done += 1
        ctx.progress(done, total, **{f"heat_mmd_{r.method}": r.mmd for r in heat_results[seed]})
    ctx.log(f"heat: final training loss {losses[-50:].mean():.4g}")

    outputs.update(save_tables(ctx, results, sweep_runs, heat_results, seeds))
    criteria = reproduce_criteria(results, heat_results, seeds, params.eps)
    claim = Claim(
        paper=PAPER,
        statement=("CCFM enforces hard constraints during flow-matching sampling with the "
                   "feasibility of projection, and higher fidelity to the constrained "
                   "distribution than projecting the noisy state at every step."),
        criteria=criteria, seeds=seeds, wall_s=time.monotonic() - started, smoke=params.smoke,
        notes=reproduce_notes(results, sweep_runs, heat_results, seeds, params.eps, criteria,
                              count, steps, heat_params, float(losses[-50:].mean())))
    return {"claim": claim.to_dict(), **outputs}


def _by_method(runs: list[MethodRun]) -> dict[str, MethodRun]:
    return {r.method: r for r in runs}


def reproduce_criteria(results: dict, heat_results: dict, seeds: list[int], eps: float
                       ) -> list[Criterion]:
    constrained = [(case, seed, r) for (case, seed), runs in results.items() for r in runs
                   if r.method != "unconstrained"]
    constrained += [("heat", seed, r) for seed, runs in heat_results.items() for r in runs
                    if r.method != "unconstrained"]
    worst = min(constrained, key=lambda item: item[2].feasible)
    wins, lines = 0, []
    for case in CASES:
        pairs = [(_by_method(results[case, s])["ccfm"].mmd,
                  _by_method(results[case, s])["projection_each_step"].mmd) for s in seeds]
        wins += sum(c < p for c, p in pairs)
        lines.append(f"{case}: CCFM " + "/".join(f"{c:.4f}" for c, _ in pairs)
                     + " vs per-step projection " + "/".join(f"{p:.4f}" for _, p in pairs))
    heat_pairs = [(_by_method(heat_results[s])["ccfm"].mmd,
                   _by_method(heat_results[s])["projection_each_step"].mmd) for s in seeds]
    heat_wins = sum(c < p for c, p in heat_pairs)
    return [
        Criterion("(1) smallest fraction of final samples within 1e-6 of feasibility, over "
                  "every constrained method, case and seed (heat case included)",
                  worst[2].feasible, 1.0, ">=",
                  paper="all methods 100% feasible (CCFM keeps projection's hard guarantee)",
                  note=f"lowest: {worst[2].method} on {worst[0]}, seed {worst[1]} (max "
                       f"violation {max(r.max_violation for _, _, r in constrained):.2g})"),
        Criterion(f"(2) fraction of (mixture case, seed) where CCFM (eps {eps:g}) has lower "
                  "MMD^2 to the constrained ground truth than projection at every step",
                  wins / (len(CASES) * len(seeds)), 1.0, ">=",
                  paper="CCFM has lower MMD (or energy distance) to the ground truth than "
                        "per-step projection, over 5 seeds",
                  note="; ".join(lines)),
        Criterion(f"(3) heat fields with a conservation constraint (trained model): fraction "
                  f"of seeds where CCFM (eps {eps:g}) has lower MMD^2 than per-step projection",
                  heat_wins / len(seeds), 1.0, ">=",
                  paper="CCFM outperforms projection-based samplers on PDE-governed systems",
                  note="CCFM " + "/".join(f"{c:.4g}" for c, _ in heat_pairs)
                       + " vs per-step projection " + "/".join(f"{p:.4g}" for _, p in heat_pairs)),
    ]


def save_tables(ctx: JobContext, results: dict, sweep_runs: dict, heat_results: dict,
                seeds: list[int]) -> dict[str, str]:
    rows = []
    for case in [*CASES, "heat"]:
        for method in METHODS:
            if case == "heat":
                picked = [_by_method(heat_results[s])[method] for s in seeds]
            else:
                picked = [_by_method(results[case, s])[method] for s in seeds]
            rows.append([case, method, picked[0].eps if method == "ccfm" else None,
                         100 * min(r.feasible for r in picked),
                         float(np.mean([r.mmd for r in picked])),
                         float(np.std([r.mmd for r in picked])),
                         float(np.mean([r.energy for r in picked]))])
    sweep_rows = []
    for case in CASES:
        by_eps: dict[float, list[float]] = {}
        for s in seeds:
            for r in [_by_method(results[case, s])["ccfm"], *sweep_runs[case, s]]:
                by_eps.setdefault(r.eps, []).append(r.mmd)
        projection = np.mean([_by_method(results[case, s])["projection_each_step"].mmd
                              for s in seeds])
        for e in sorted(by_eps):
            sweep_rows.append([case, e, float(np.mean(by_eps[e])), float(projection),
                               int(sum(m < p for m, p in zip(
                                   by_eps[e], [_by_method(results[case, s])[
                                       "projection_each_step"].mmd for s in seeds],
                                   strict=True)))])
    return {
        "fidelity_table": ctx.save_artifact("fidelity_table", {
            "columns": ["case", "method", "eps", "min feasible % over seeds", "MMD^2 (mean)",
                        "MMD^2 (sd)", "energy distance (mean)"], "rows": rows}),
        "eps_sweep_table": ctx.save_artifact("eps_sweep_table", {
            "columns": ["case", "eps", "CCFM MMD^2 (mean)", "per-step projection MMD^2",
                        "seeds where CCFM is lower"], "rows": sweep_rows}),
    }


def reproduce_notes(results, sweep_runs, heat_results, seeds, eps, criteria, count, steps,
                    heat_params: HeatParams, heat_loss: float) -> str:
    notes = [f"{len(seeds)} seed(s), {count} samples and {steps} Euler steps per method; MMD^2 "
             "unbiased with Gaussian kernels at 1/2, 1 and 2 x the ground truth's median "
             "distance. Ground truth: rejection sampling (half-spaces), exact Gaussian "
             "conditioning (hyperplanes). Exact mixture velocities; xi modelled as "
             f"N(0, ((1-t)/t)^2 I) independent of x_t; verdict at eps = {eps:g} "
             "(kappa = Phi^-1(1 - eps))."]
    for case in CASES:
        means = {m: np.mean([_by_method(results[case, s])[m].mmd for s in seeds])
                 for m in METHODS}
        best = min(means, key=means.get)
        sweep: dict[float, list[float]] = {}
        for s in seeds:
            for r in [_by_method(results[case, s])["ccfm"], *sweep_runs[case, s]]:
                sweep.setdefault(r.eps, []).append(r.mmd)
        notes.append(f"{case}: best {best}; CCFM by eps " + ", ".join(
            f"{e:g}: {np.mean(v):.4f}" for e, v in sorted(sweep.items()))
            + f" (per-step projection {means['projection_each_step']:.4f}).")
    heat_means = {m: np.mean([_by_method(heat_results[s])[m].mmd for s in seeds])
                  for m in METHODS}
    notes.append(f"Heat: {heat_params.points}-point fields, mean temperature fixed at "
                 f"{heat_params.target_mass:g}, MLP {heat_params.layers}x{heat_params.hidden} "
                 f"trained {heat_params.steps} steps (final loss {heat_loss:.4g}); MMD^2 "
                 + ", ".join(f"{m} {v:.4g}" for m, v in heat_means.items()) + ".")
    notes.append("eps = 0.05, the textbook risk level, pushes early states far inside the "
                 "half-space (kappa = 1.64) and is much worse than per-step projection there; "
                 "see eps_sweep_table. The paper's eps and its treatment of xi given x_t "
                 "were not available.")
    failed = [c.name.split(")")[0] + ")" for c in criteria if not c.passed]
    if failed:
        notes.append("Not reproduced: " + ", ".join(failed) + "; see each criterion's note.")
    return " ".join(notes)


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="ccfm.sample", title="Constrained sampling of a Gaussian-mixture flow", paper=PAPER,
        params=SampleParams, run=run_sample,
        outputs={"table": "table", "feasibility_over_time_plot": "plot", "summary": "json"},
        resources=Resources(cpus=1, memory_gb=1),
        description=("CCFM and the projection baselines on the exact flow of a 2-D or 10-D "
                     "Gaussian mixture: sample clouds over the feasible set, feasibility, MMD "
                     "and energy distance to the constrained ground truth, trajectories.")),
    MethodSpec(
        id="ccfm.train_heat", title="Heat-equation fields under conservation (trained flow)",
        paper=PAPER, params=HeatParams, run=run_train_heat,
        outputs={"loss_plot": "plot", "table": "table", "checkpoint": "checkpoint",
                 "summary": "json"},
        resources=Resources(cpus=1, memory_gb=1),
        description=("Trains a small MLP flow on 1-D heat-equation solutions and samples it "
                     "with the mean temperature (total heat) fixed, by each method.")),
    reproduce_spec(PAPER, "Chance-constrained flow matching vs projection", run_reproduce,
                   params=ReproduceCcfmParams, resources=Resources(cpus=1, memory_gb=2)),
]
