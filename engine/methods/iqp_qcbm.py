"""IQP-QCBM trainability: Monte-Carlo <Z_a> and MMD for IQP circuits, gradient variance vs n.

An IQP quantum circuit Born machine applies commuting gates exp(i theta_j X_{g_j}) to |0^n> and
samples bitstrings. Its Gaussian-kernel MMD loss is a weighted sum of (<Z_a>_theta -
<Z_a>_data)^2 over frequencies a, and each <Z_a> is a classical expectation over uniform
bitstrings z, so the loss and its gradient are estimated classically for hundreds of qubits
(``engine.models.iqp_circuit`` has the formulas). The methods here:

* ``iqp_qcbm.expectations``   all 1- and 2-body <Z_a> of a circuit by Monte Carlo, checked
                              against the exact state vector (and PennyLane) for small n;
* ``iqp_qcbm.train``          trains a circuit on a bitstring data set (binarised 4x4 digits,
                              bars and stripes, a product distribution) by Adam on the MC
                              gradient, then compares exact samples with the data;
* ``iqp_qcbm.variance_study`` exact gradient variances over uniform random angles vs n, per
                              generator family and kernel, with Var <Z_a> = 2^{-rank} and the
                              anti-concentration sum beside their closed forms;
* ``iqp_qcbm.reproduce``      the spec's claim.

Kernels: "high-weight" is sigma = ``sigma_high_weight`` (fixed: p -> 1/2 as sigma shrinks,
weighting frequencies of weight ~ n/2); "low-weight" is sigma = ``low_weight_sigma_per_sqrt_n`` x
sqrt(n) (p ~ 1/(8 c^2 n): the expected frequency weight stays below one as n grows). The data
of the variance study is a product distribution with P(x_i = 1) = ``data_bias``, whose <Z_a> is
(1 - 2 q)^{|a|} exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

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
from engine.threads import limit_threads

if TYPE_CHECKING:
    from engine.context import JobContext

PAPER = "iqp_qcbm"
Family = Literal["nearest_neighbour", "all_to_all", "erdos_renyi"]
EXACT_MAX_QUBITS = 16  # state vectors of 2^16 amplitudes are cheap; beyond, Monte Carlo only
PENNYLANE_MAX_QUBITS = 12
TABLE_ROWS = 5000  # rows of the expectations table; the array artifact holds all of them




def make_generators(family: str, n: int, edge_prob: float, seed: int) -> np.ndarray:
    from engine.models import iqp_circuit as iqp

    return iqp.generator_set(family, n, edge_prob=edge_prob, seed=seed)


# -- iqp_qcbm.expectations ---------------------------------------------------------------------

class ExpectationsParams(MethodParams):
    """All 1- (and 2-) body <Z_a> of one random IQP circuit."""

    family: Family = Field("all_to_all", description="generator set (single-qubit X_i always)")
    n: int = Field(16, ge=2, le=1000, description="qubits")
    edge_prob: float = Field(0.3, gt=0, le=1, description="pair probability (erdos_renyi)")
    angles: Literal["uniform", "normal"] = Field(
        "uniform", description="theta ~ U[0, 2 pi) or N(0, angle_std^2)")
    angle_std: float = Field(0.3, gt=0, le=10, description="std of normal angles")
    samples: int = Field(1000, ge=10, le=1_000_000, description="Monte-Carlo samples z")
    batch: int = Field(1000, ge=10, le=100_000, description="samples per progress update")
    max_weight: Literal[1, 2] = Field(2, description="1: single-qubit Z_i only; 2: also Z_i Z_k")
    exact_check: bool = Field(True, description=f"compare with the state vector (n <= "
                                                f"{EXACT_MAX_QUBITS})")
    pennylane_check: bool = Field(False, description=f"compare with PennyLane lightning.qubit "
                                                     f"(n <= {PENNYLANE_MAX_QUBITS})")

    @model_validator(mode="after")
    def _check_sizes(self) -> ExpectationsParams:
        if self.pennylane_check and self.n > PENNYLANE_MAX_QUBITS:
            raise ValueError(f"pennylane_check needs n <= {PENNYLANE_MAX_QUBITS}")
        return self


def random_angles(m: int, kind: str, std: float, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return rng.uniform(0, 2 * math.pi, size=m)
    return rng.normal(0, std, size=m)


def run_expectations(ctx: JobContext, params: ExpectationsParams, inputs: dict) -> dict:
    """Monte Carlo in batches (running mean and standard error), then the optional checks."""
    from engine.models import iqp_circuit as iqp

    rng = np.random.default_rng(ctx.seed)
    G = make_generators(params.family, params.n, params.edge_prob, ctx.seed)
    theta = random_angles(G.shape[0], params.angles, params.angle_std, rng)
    ops = iqp.low_order_ops(params.n, params.max_weight)
    sums, squares, done = np.zeros(len(ops)), np.zeros(len(ops)), 0
    started = time.perf_counter()
    with limit_threads(1):
        while done < params.samples:
            ctx.check_cancelled()
            count = min(params.batch, params.samples - done)
            z = iqp.random_bits(rng, count, params.n)
            values = _batch_values(G, theta, ops, z, params.max_weight)
            sums += values * count
            squares += _batch_squares(G, theta, ops, z, params.max_weight, values) * count
            done += count
            mean = sums / done
            stderr = np.sqrt(np.maximum(squares / done - mean**2, 0) / max(done - 1, 1))
            ctx.progress(done, params.samples, mean_abs_z=float(np.mean(np.abs(mean))),
                         mean_stderr=float(stderr.mean()))
    elapsed_s = time.perf_counter() - started
    ctx.log(f"{len(ops)} expectations of a {params.family} circuit on {params.n} qubits "
            f"({G.shape[0]} generators), {params.samples} samples: {elapsed_s * 1e3:.1f} ms")

    outputs: dict = {"generators": ctx.save_artifact("generators", G),
                     "theta": ctx.save_artifact("theta", theta),
                     "expectations_array": ctx.save_artifact("expectations", mean)}
    columns = ["a", "monte_carlo", "stderr"]
    exact = pennylane = None
    if params.exact_check and params.n <= EXACT_MAX_QUBITS:
        exact = iqp.exact_expectations(G, theta, ops)
        columns.append("exact")
    if params.pennylane_check:
        pennylane = iqp.pennylane_expectations(G, theta, ops)
        columns.append("pennylane")
    rows = []
    for k, a in enumerate(ops[:TABLE_ROWS]):  # every value is in the array artifact
        row = [_support(a), float(mean[k]), float(stderr[k])]
        row += [float(exact[k])] if exact is not None else []
        row += [float(pennylane[k])] if pennylane is not None else []
        rows.append(row)
    outputs["table"] = ctx.save_artifact("expectations_table", {"columns": columns, "rows": rows})
    summary = {"ops": len(ops), "generators": int(G.shape[0]), "elapsed_s": elapsed_s}
    if exact is not None:
        z_scores = np.abs(mean - exact) / np.maximum(stderr, 1e-12)
        summary.update(max_abs_error=float(np.max(np.abs(mean - exact))),
                       fraction_within_3_stderr=float(np.mean(z_scores <= 3)))
        outputs["mc_vs_exact_plot"] = ctx.save_artifact("mc_vs_exact_plot", plot(
            "Monte Carlo vs exact <Z_a>", [series("ops", exact, mean, "scatter"),
                                           series("y = x", [-1, 1], [-1, 1])],
            "exact <Z_a>", "Monte-Carlo <Z_a>"))
    if pennylane is not None and exact is not None:
        summary["max_abs_exact_vs_pennylane"] = float(np.max(np.abs(exact - pennylane)))
    outputs["summary"] = summary
    return outputs


def _batch_values(G, theta, ops, z, max_weight) -> np.ndarray:
    from engine.models import iqp_circuit as iqp

    if max_weight == 2:
        return iqp.low_order_expectations(G, theta, z)
    return iqp.expectations(G, theta, ops, z)


def _batch_squares(G, theta, ops, z, max_weight, values) -> np.ndarray:
    """Mean of cos^2 over the batch: (1 + E cos(2 phase)) / 2, i.e. the estimator at 2 theta."""
    doubled = _batch_values(G, 2 * np.asarray(theta), ops, z, max_weight)
    return (1.0 + doubled) / 2.0


def _support(a: np.ndarray) -> str:
    return "Z" + ",".join(str(i) for i in np.flatnonzero(a))


# -- data sets -----------------------------------------------------------------------------------

def bitstring_dataset(name: str, n: int, rows: int, cols: int, bias: float, seed: int
                      ) -> np.ndarray:
    """(N, n) uint8 training bitstrings.

    digits_4x4: scikit-learn's 1797 8x8 digits, 2x2 average-pooled to 4x4 and thresholded at
    half the maximum intensity (n = 16). bars_and_stripes: every rows x cols image whose rows
    (or columns) are constant, each pattern once (n = rows * cols). product: 2000 draws of
    independent Bernoulli(bias) bits.
    """
    if name == "digits_4x4":
        from sklearn.datasets import load_digits

        images = load_digits().images.reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4))
        return (images.reshape(len(images), 16) > 8.0).astype(np.uint8)
    if name == "bars_and_stripes":
        patterns = set()
        for bits in range(2**rows):
            row_values = [(bits >> r) & 1 for r in range(rows)]
            patterns.add(tuple(np.repeat(row_values, cols)))
        for bits in range(2**cols):
            col_values = [(bits >> c) & 1 for c in range(cols)]
            patterns.add(tuple(np.tile(col_values, rows)))
        return np.array(sorted(patterns), dtype=np.uint8)
    rng = np.random.default_rng(seed)
    return (rng.random((2000, n)) < bias).astype(np.uint8)


# -- iqp_qcbm.train ------------------------------------------------------------------------------

class TrainParams(MethodParams):
    """Adam on the Monte-Carlo MMD gradient of an IQP circuit, on a bitstring data set."""

    dataset: Literal["digits_4x4", "bars_and_stripes", "product"] = Field(
        "bars_and_stripes", description="training bitstrings (see the method's description)")
    rows: int = Field(3, ge=2, le=4, description="bars_and_stripes: image rows")
    cols: int = Field(3, ge=2, le=4, description="bars_and_stripes: image columns")
    n: int = Field(10, ge=2, le=200, description="product: number of bits")
    data_bias: float = Field(0.25, ge=0, le=1, description="product: P(bit = 1)")
    family: Family = Field("all_to_all", description="generator set")
    edge_prob: float = Field(0.3, gt=0, le=1, description="pair probability (erdos_renyi)")
    sigma: float = Field(1.0, gt=0, le=100, description="Gaussian kernel bandwidth")
    steps: int = Field(300, ge=1, le=100_000, description="Adam steps")
    learning_rate: float = Field(0.05, gt=0, le=10, description="Adam step size")
    samples: int = Field(1000, ge=10, le=100_000, description="Monte-Carlo samples z per step")
    frequencies: int = Field(1000, ge=10, le=100_000, description="frequencies a ~ P_sigma per "
                                                                  "step")
    init_std: float = Field(0.1, ge=0, le=10, description="initial angles ~ N(0, init_std^2)")
    eval_every: int = Field(25, ge=1, le=100_000, description="exact MMD every k steps "
                                                              f"(n <= {EXACT_MAX_QUBITS})")
    model_samples: int = Field(1000, ge=1, le=100_000, description="exact samples drawn at "
                                                                   "the end")


@dataclass
class TrainResult:
    theta: np.ndarray
    mc_loss: np.ndarray
    eval_steps: list[int] = field(default_factory=list)
    exact_mmd: list[float] = field(default_factory=list)


def train_circuit(G: np.ndarray, data: np.ndarray, p: TrainParams, rng: np.random.Generator,
                  check_cancelled: Callable[[], None],
                  report: Callable[[int, dict], None] | None = None) -> TrainResult:
    """Adam (beta 0.9 / 0.999) on fresh z and a samples each step; exact MMD when n is small."""
    from engine.models import iqp_circuit as iqp

    n = G.shape[1]
    exact = n <= EXACT_MAX_QUBITS
    signs = iqp.state_signs(G) if exact else None
    target_distribution = iqp.empirical_distribution(data) if exact else None
    theta = rng.normal(0, p.init_std, size=G.shape[0])
    first, second = np.zeros_like(theta), np.zeros_like(theta)
    bit_p = iqp.spectral_p(p.sigma)
    result = TrainResult(theta=theta, mc_loss=np.empty(p.steps))
    for step in range(p.steps + 1):
        check_cancelled()
        metrics: dict = {}
        if exact and (step % p.eval_every == 0 or step == p.steps):
            value = float(_exact_mmd(G, theta, target_distribution, p.sigma, signs))
            result.eval_steps.append(step)
            result.exact_mmd.append(value)
            metrics["exact_mmd2"] = value
        if step == p.steps:
            if report:
                report(step, metrics)
            break
        ops = iqp.random_bits(rng, p.frequencies, n, bit_p)
        z = iqp.random_bits(rng, p.samples, n)
        loss, grad = iqp.mmd_and_gradient(G, theta, ops, iqp.data_expectations(data, ops), z)
        first = 0.9 * first + 0.1 * grad
        second = 0.999 * second + 0.001 * grad**2
        theta = theta - p.learning_rate * (first / (1 - 0.9 ** (step + 1))) / (
            np.sqrt(second / (1 - 0.999 ** (step + 1))) + 1e-8)
        result.mc_loss[step] = loss
        if report:
            report(step, {"mc_mmd2": loss, **metrics})
    result.theta = theta
    return result


def _exact_mmd(G, theta, target_distribution, sigma, signs) -> float:
    from engine.models import iqp_circuit as iqp

    model = iqp.walsh_hadamard(iqp.probabilities(G, theta, signs))
    data = iqp.walsh_hadamard(target_distribution)
    return float(iqp.kernel_weights(G.shape[1], sigma) @ (model - data) ** 2)


def run_train(ctx: JobContext, params: TrainParams, inputs: dict) -> dict:
    from engine.models import iqp_circuit as iqp

    rng = np.random.default_rng(ctx.seed)
    data = bitstring_dataset(params.dataset, params.n, params.rows, params.cols,
                             params.data_bias, ctx.seed)
    n = data.shape[1]
    G = make_generators(params.family, n, params.edge_prob, ctx.seed)
    ctx.log(f"{params.dataset}: {len(data)} bitstrings of {n} bits; {params.family} circuit with "
            f"{G.shape[0]} generators; kernel sigma {params.sigma:g} (p = "
            f"{iqp.spectral_p(params.sigma):.3g})")
    with limit_threads(1):
        result = train_circuit(G, data, params, rng, ctx.check_cancelled,
                               lambda step, metrics: ctx.progress(step, params.steps, **metrics))
    outputs = {"theta": ctx.save_artifact("theta", result.theta),
               "generators": ctx.save_artifact("generators", G),
               "data": ctx.save_artifact("data", data)}
    curves = [series("Monte-Carlo MMD^2 (per step)", np.arange(params.steps), result.mc_loss)]
    if result.eval_steps:
        curves.append(series("exact MMD^2", result.eval_steps, result.exact_mmd))
    outputs["loss_plot"] = ctx.save_artifact("loss_plot", plot(
        "IQP-QCBM training loss", curves, "step", "MMD^2", logy=True))
    final = {"mc_mmd2_last": float(result.mc_loss[-1]) if params.steps else math.nan}
    if n <= EXACT_MAX_QUBITS:
        outputs.update(save_samples_vs_data(ctx, G, result.theta, data, params, rng))
        final.update(exact_mmd2_initial=result.exact_mmd[0], exact_mmd2_final=result.exact_mmd[-1])
    outputs["final"] = final
    return outputs


def save_samples_vs_data(ctx: JobContext, G: np.ndarray, theta: np.ndarray, data: np.ndarray,
                         params: TrainParams, rng: np.random.Generator) -> dict:
    """Exact samples of the trained circuit beside the data: marginals, correlations, top
    bitstrings."""
    from engine.models import iqp_circuit as iqp

    n = G.shape[1]
    distribution = iqp.probabilities(G, theta)
    samples = iqp.sample_bitstrings(distribution, params.model_samples, rng)
    ops = iqp.low_order_ops(n)
    model_z = iqp.exact_expectations(G, theta, ops)
    data_z = iqp.data_expectations(data, ops)
    bits = np.arange(n)
    outputs = {
        "samples": ctx.save_artifact("samples", samples),
        "marginals_plot": ctx.save_artifact("marginals_plot", plot(
            "P(bit = 1): trained circuit vs data",
            [series("data", bits, data.mean(axis=0), "scatter"),
             series("circuit (exact)", bits, (1 - model_z[:n]) / 2, "scatter")],
            "bit", "P(bit = 1)")),
        "correlations_plot": ctx.save_artifact("correlations_plot", plot(
            "<Z_a> for |a| <= 2: circuit vs data",
            [series("a", data_z, model_z, "scatter"), series("y = x", [-1, 1], [-1, 1])],
            "data <Z_a>", "circuit <Z_a> (exact)")),
    }
    if params.dataset in ("digits_4x4", "bars_and_stripes"):
        shape = (4, 4) if params.dataset == "digits_4x4" else (params.rows, params.cols)
        outputs["sample_images"] = ctx.save_artifact(
            "sample_images", samples[:64].reshape(-1, *shape).astype(np.float32))
    data_distribution = iqp.empirical_distribution(data)
    top = np.argsort(-np.maximum(distribution, data_distribution))[:20]
    rows = [["".join(map(str, (index >> np.arange(n)) & 1)), float(data_distribution[index]),
             float(distribution[index])] for index in top]
    outputs["top_bitstrings"] = ctx.save_artifact(
        "top_bitstrings", {"columns": ["bitstring (bit 0 first)", "data frequency",
                                       "circuit probability"], "rows": rows})
    support = data_distribution > 0
    outputs["mass_on_data_support"] = float(distribution[support].sum())
    return outputs


# -- iqp_qcbm.variance_study ---------------------------------------------------------------------

class VarianceParams(MethodParams):
    """Exact variances over uniform random angles, per generator family, kernel and n."""

    families: list[Family] = Field(["nearest_neighbour", "all_to_all", "erdos_renyi"],
                                   min_length=1, description="generator families")
    n_min: int = Field(4, ge=2, le=14, description="smallest number of qubits")
    n_max: int = Field(8, ge=2, le=14, description="largest number of qubits (exact, <= 14)")
    draws: int = Field(500, ge=10, le=100_000, description="random angle vectors per point")
    batch: int = Field(250, ge=1, le=10_000, description="angle vectors per exact batch")
    edge_prob: float = Field(0.3, gt=0, le=1, description="pair probability (erdos_renyi)")
    sigma_high_weight: float = Field(0.5, gt=0, le=100, description=(
        "high-weight kernel: fixed sigma (small sigma weights frequencies of weight ~ n/2)"))
    low_weight_sigma_per_sqrt_n: float = Field(1.0, gt=0, le=100, description=(
        "low-weight kernel: sigma = this x sqrt(n)"))
    data_bias: float = Field(0.25, ge=0, le=1, description=(
        "data: independent bits with P(1) = data_bias, so <Z_a>_data = (1 - 2 q)^|a|"))
    max_weight_checked: int = Field(3, ge=1, le=4, description=(
        "compare Var <Z_a> with 2^-rank for every a up to this weight"))

    @model_validator(mode="after")
    def _check_range(self) -> VarianceParams:
        if self.n_min > self.n_max:
            raise ValueError(f"n_min ({self.n_min}) must not exceed n_max ({self.n_max})")
        return self


@dataclass
class VariancePoint:
    """One (family, n): gradient variances per kernel and the Var <Z_a> / collision checks."""

    family: str
    n: int
    generators: int
    grad_variance: dict[str, float]  # kernel -> mean over j of Var_theta[d MMD^2 / d theta_j]
    grad_variance_stderr: dict[str, float]
    z_checks: list[tuple[str, float, float, float]]  # (a, empirical, stderr, closed form)
    collision: float
    collision_stderr: float
    collision_closed: float


def kernel_sigmas(p: VarianceParams, n: int) -> dict[str, float]:
    return {"high-weight": p.sigma_high_weight,
            "low-weight": p.low_weight_sigma_per_sqrt_n * math.sqrt(n)}


def variance_point(family: str, n: int, p: VarianceParams, seed: int,
                   check_cancelled: Callable[[], None]) -> VariancePoint:
    """Exact <Z_a>, MMD gradients and collision sums for ``draws`` uniform angle vectors."""
    from engine.models import iqp_circuit as iqp

    rng = np.random.default_rng([seed, n, iqp.FAMILIES.index(family)])
    G = iqp.generator_set(family, n, edge_prob=p.edge_prob, seed=seed + n)
    signs = iqp.state_signs(G)
    weight = iqp.all_bitstrings(n).sum(axis=1)
    target_z = (1.0 - 2.0 * p.data_bias) ** weight
    sigmas = kernel_sigmas(p, n)
    weights = [iqp.kernel_weights(n, s) for s in sigmas.values()]
    checked = np.flatnonzero((weight >= 1) & (weight <= p.max_weight_checked))
    values, grads, collisions = [], [[] for _ in sigmas], []
    for start in range(0, p.draws, p.batch):
        check_cancelled()
        theta = rng.uniform(0, 2 * math.pi, size=(G.shape[0], min(p.batch, p.draws - start)))
        z_all, grad_list, collision = iqp.exact_expectations_and_gradients(
            signs, theta, target_z, weights)
        values.append(z_all[checked])
        for store, grad in zip(grads, grad_list, strict=True):
            store.append(grad)
        collisions.append(collision)
    values = np.concatenate(values, axis=1)
    collisions = np.concatenate(collisions)
    grad_variance, grad_stderr = {}, {}
    for name, store in zip(sigmas, grads, strict=True):
        per_param = np.concatenate(store, axis=1)  # (m, draws)
        variances = per_param.var(axis=1, ddof=1)
        grad_variance[name] = float(variances.mean())
        grad_stderr[name] = float(_variance_stderr(per_param).mean())
    z_checks = []
    all_bits = iqp.all_bitstrings(n)
    for row, index in enumerate(checked):
        a = all_bits[index]
        z_checks.append((_support(a), float(values[row].var(ddof=1)),
                         float(_variance_stderr(values[row][None, :])[0]),
                         iqp.variance_closed_form(G, a)))
    return VariancePoint(
        family=family, n=n, generators=int(G.shape[0]), grad_variance=grad_variance,
        grad_variance_stderr=grad_stderr, z_checks=z_checks, collision=float(collisions.mean()),
        collision_stderr=float(collisions.std(ddof=1) / math.sqrt(len(collisions))),
        collision_closed=iqp.collision_closed_form(G))


def _variance_stderr(samples: np.ndarray) -> np.ndarray:
    """Standard error of the sample variance per row: sqrt((m4 - var^2) / N)."""
    centred = samples - samples.mean(axis=1, keepdims=True)
    var = (centred**2).mean(axis=1)
    m4 = (centred**4).mean(axis=1)
    return np.sqrt(np.maximum(m4 - var**2, 0) / samples.shape[1])


def decay_fit(ns: list[int], variances: list[float]) -> tuple[float, float]:
    """(bits lost per qubit = -slope of log2 Var vs n, power-law exponent = slope of log Var vs
    log n), by least squares."""
    ns_arr, var_arr = np.asarray(ns, dtype=float), np.asarray(variances, dtype=float)
    if len(ns_arr) < 2 or np.any(var_arr <= 0):
        return math.nan, math.nan
    rate = -np.polyfit(ns_arr, np.log2(var_arr), 1)[0]
    power = np.polyfit(np.log(ns_arr), np.log(var_arr), 1)[0]
    return float(rate), float(power)


def run_variance_points(ctx: JobContext, p: VarianceParams, progress_offset: int = 0,
                        progress_total: int | None = None) -> list[VariancePoint]:
    points = []
    ns = range(p.n_min, p.n_max + 1)
    total = progress_total or len(p.families) * len(ns)
    with limit_threads(1):
        for family in p.families:
            for n in ns:
                point = variance_point(family, n, p, ctx.seed, ctx.check_cancelled)
                points.append(point)
                ctx.progress(progress_offset + len(points), total,
                             **{f"grad_var_{k}": v for k, v in point.grad_variance.items()},
                             collision=point.collision)
                ctx.log(f"{family}, n={n}: gradient variance " + ", ".join(
                    f"{k} {v:.3g}" for k, v in point.grad_variance.items()))
    return points


def variance_figures(points: list[VariancePoint]) -> dict[str, dict]:
    """Variance vs n (log scale) per family and kernel; Var <Z_a> vs 2^-rank; tables."""
    curves = []
    for family in dict.fromkeys(pt.family for pt in points):
        mine = [pt for pt in points if pt.family == family]
        for kernel in mine[0].grad_variance:
            curves.append(series(f"{family}, {kernel} kernel", [pt.n for pt in mine],
                                 [pt.grad_variance[kernel] for pt in mine]))
    empirical = [c[1] for pt in points for c in pt.z_checks]
    closed = [c[3] for pt in points for c in pt.z_checks]
    fits = []
    for family in dict.fromkeys(pt.family for pt in points):
        mine = [pt for pt in points if pt.family == family]
        for kernel in mine[0].grad_variance:
            rate, power = decay_fit([pt.n for pt in mine],
                                    [pt.grad_variance[kernel] for pt in mine])
            fits.append([family, kernel, rate, power])
    return {
        "variance_plot": plot("MMD gradient variance vs n (mean over parameters)", curves,
                              "qubits n", "Var_theta[d MMD^2 / d theta_j]", logy=True),
        "z_variance_plot": plot(
            "Var <Z_a> over uniform angles vs 2^-rank(G_Ja)",
            [series("a (|a| small)", closed, empirical, "scatter"),
             series("y = x", [min(closed, default=0), max(closed, default=1)],
                    [min(closed, default=0), max(closed, default=1)])],
            "closed form 2^-rank", "empirical Var <Z_a>", logx=True, logy=True),
        "variance_table": {
            "columns": ["family", "n", "generators", "kernel", "gradient variance", "stderr",
                        "collision 2^n sum p^2", "collision closed form"],
            "rows": [[pt.family, pt.n, pt.generators, kernel, value,
                      pt.grad_variance_stderr[kernel], pt.collision, pt.collision_closed]
                     for pt in points for kernel, value in pt.grad_variance.items()]},
        "decay_table": {"columns": ["family", "kernel", "bits lost per qubit (-d log2 Var/dn)",
                                    "power-law exponent (d log Var / d log n)"], "rows": fits},
    }


def run_variance_study(ctx: JobContext, params: VarianceParams, inputs: dict) -> dict:
    points = run_variance_points(ctx, params)
    outputs = {name: ctx.save_artifact(name, value)
               for name, value in variance_figures(points).items()}
    z_scores = [abs(c[1] - c[3]) / max(c[2], 1e-15) for pt in points for c in pt.z_checks]
    outputs["summary"] = {"z_checks": len(z_scores),
                          "fraction_within_3_stderr": float(np.mean(np.array(z_scores) <= 3))}
    return outputs


# -- iqp_qcbm.reproduce --------------------------------------------------------------------------

class ReproduceIqpParams(ReproduceParams):
    """The spec's experiment: n = 6..10, three families, 2000 random angle vectors."""

    draws: int = Field(2000, ge=100, le=20_000, description="random angle vectors per point")


def run_reproduce(ctx: JobContext, params: ReproduceIqpParams, inputs: dict) -> dict:
    from engine.models import iqp_circuit as iqp

    started = time.monotonic()
    n_min, n_max = (4, 6) if params.smoke else (6, 10)
    draws = 200 if params.smoke else params.draws
    study = VarianceParams(n_min=n_min, n_max=n_max, draws=draws, batch=min(250, draws))
    families = list(study.families)
    check_n = 4 if params.smoke else 8
    total = len(families) * (n_max - n_min + 1) + len(families)
    points = run_variance_points(ctx, study, progress_total=total)
    outputs = {name: ctx.save_artifact(name, value)
               for name, value in variance_figures(points).items()}

    # Monte Carlo vs the state vector vs PennyLane, all 1- and 2-body ops.
    rng = np.random.default_rng(ctx.seed)
    mc_rows, pl_diffs, z_fracs = [], [], []
    samples = 2000 if params.smoke else 20_000
    with limit_threads(1):
        for offset, family in enumerate(families):
            ctx.check_cancelled()
            G = iqp.generator_set(family, check_n, edge_prob=study.edge_prob, seed=ctx.seed)
            theta = rng.uniform(0, 2 * math.pi, size=G.shape[0])
            ops = iqp.low_order_ops(check_n)
            z = iqp.random_bits(rng, samples, check_n)
            mean = iqp.low_order_expectations(G, theta, z)
            second = (1 + iqp.low_order_expectations(G, 2 * theta, z)) / 2
            stderr = np.sqrt(np.maximum(second - mean**2, 0) / (samples - 1))
            exact = iqp.exact_expectations(G, theta, ops)
            pennylane = iqp.pennylane_expectations(G, theta, ops)
            within = np.abs(mean - exact) <= 3 * stderr
            z_fracs.append(within.mean())
            pl_diffs.append(float(np.max(np.abs(exact - pennylane))))
            mc_rows.append([family, check_n, len(ops), float(within.mean()),
                            float(np.max(np.abs(mean - exact))), pl_diffs[-1]])
            ctx.progress(len(points) + offset + 1, total)
    outputs["mc_check_table"] = ctx.save_artifact("mc_check_table", {
        "columns": ["family", "n", "ops", f"MC within 3 SE ({samples} samples)",
                    "max |MC - exact|", "max |exact - PennyLane|"], "rows": mc_rows})

    criteria = reproduce_criteria(points, z_fracs, pl_diffs, study)
    claim = Claim(
        paper=PAPER,
        statement=("For IQP circuits, Var <Z_a> over uniform angles is 2^-rank(G_Ja); the MMD "
                   "gradient variance decays exponentially in n for all-to-all generators with "
                   "a high-weight (small sigma) kernel and only polynomially for nearest-"
                   "neighbour generators with a low-weight kernel; the classical Monte-Carlo "
                   "estimates agree with exact simulation."),
        criteria=criteria, seeds=[ctx.seed], wall_s=time.monotonic() - started,
        smoke=params.smoke, notes=reproduce_notes(points, study, criteria))
    return {"claim": claim.to_dict(), **outputs}


def reproduce_criteria(points: list[VariancePoint], z_fracs: list[float], pl_diffs: list[float],
                       study: VarianceParams) -> list[Criterion]:
    z_scores = np.array([abs(c[1] - c[3]) / max(c[2], 1e-15)
                         for pt in points for c in pt.z_checks])
    worst = float(z_scores.max()) if z_scores.size else math.nan
    ratio = np.array([c[1] / c[3] for pt in points for c in pt.z_checks if c[3] > 0])
    below = sum(c[1] < c[3] for pt in points for c in pt.z_checks
                if abs(c[1] - c[3]) > 3 * c[2])

    def fit(family: str, kernel: str) -> tuple[float, float, str]:
        mine = [pt for pt in points if pt.family == family]
        ns = [pt.n for pt in mine]
        values = [pt.grad_variance[kernel] for pt in mine]
        rate, power = decay_fit(ns, values)
        text = ", ".join(f"n={n}: {v:.3g}" for n, v in zip(ns, values, strict=True))
        return rate, power, text

    a2a_rate, a2a_power, a2a_text = fit("all_to_all", "high-weight")
    nn_rate, nn_power, nn_text = fit("nearest_neighbour", "low-weight")
    return [
        Criterion(
            f"(1) fraction of Var <Z_a> (1 <= |a| <= {study.max_weight_checked}, all families "
            "and n) within 3 standard errors of 2^-rank(G_Ja)",
            float(np.mean(z_scores <= 3)) if z_scores.size else math.nan, 0.99, ">=",
            paper="Var <Z_a> = 2^-rank_GF(2)(G_Ja) under uniform theta (derivable)",
            note=f"{z_scores.size} comparisons over {study.draws} angle vectors each; largest "
                 f"|z| = {worst:.2f}; mean empirical / closed form {ratio.mean():.4f}; "
                 f"{below} of the misses are underestimates (a variance estimate of a "
                 "heavy-tailed quantity is right-skewed, and its standard error estimated "
                 "from the same draws is too small when it falls short). Under exact agreement "
                 "~99.7% fall within 3 SE, so the aggregate threshold 0.99 allows for the "
                 "number of comparisons (ours)."),
        Criterion(
            "(2a) all-to-all generators, high-weight kernel (sigma = "
            f"{study.sigma_high_weight:g}): bits of gradient variance lost per qubit",
            a2a_rate, 1.0, ">=",
            paper="exponentially vanishing gradients (barren plateau) for all-to-all "
                  "generators with a small-sigma kernel",
            note=f"Var by n: {a2a_text}; power-law exponent {a2a_power:.2f}. The spec gives no "
                 "number; ours: Var ~ 2^-n or faster. Over a range as short as n = 6..10 "
                 "2^-n/2 and n^-3 look alike, so (2a) and (2b) keep their thresholds apart."),
        Criterion(
            "(2b) nearest-neighbour generators, low-weight kernel (sigma = "
            f"{study.low_weight_sigma_per_sqrt_n:g} sqrt(n)): power-law exponent of the "
            "gradient variance (d log Var / d log n)", nn_power, -3.0, ">=",
            paper="only polynomial decay for nearest-neighbour generators with a low-weight "
                  "kernel (trainable)",
            note=f"Var by n: {nn_text}; {nn_rate:.2f} bits per qubit. Threshold ours: no "
                 "faster than n^-3 (a low-weight kernel's weight on a single frequency is "
                 "~1/n, so ~n^-2 is expected)."),
        Criterion(
            "(3a) smallest fraction of 1- and 2-body Monte-Carlo <Z_a> within 3 SE of the "
            "exact state vector (per family)", min(z_fracs), 0.99, ">=",
            paper="the classical estimator is unbiased (iqpopt, arXiv 2503.02934)",
            note="fractions per family: " + ", ".join(f"{f:.3f}" for f in z_fracs)),
        Criterion(
            "(3b) largest |exact state vector - PennyLane lightning.qubit| over all 1- and "
            "2-body <Z_a>", max(pl_diffs), 1e-6, "<=",
            paper="estimates agree with the exact simulator and with PennyLane",
            note="per family: " + ", ".join(f"{d:.2g}" for d in pl_diffs)),
    ]


def reproduce_notes(points: list[VariancePoint], study: VarianceParams,
                    criteria: list[Criterion]) -> str:
    lines = [f"n = {study.n_min}..{study.n_max}, {study.draws} uniform angle vectors per "
             f"(family, n), exact state vectors; gradient variance = mean over all parameters "
             f"of Var_theta[d MMD^2/d theta_j] (parameter shift), data = independent bits with "
             f"P(1) = {study.data_bias}. Erdos-Renyi edge probability {study.edge_prob}."]
    for family in dict.fromkeys(pt.family for pt in points):
        mine = [pt for pt in points if pt.family == family]
        for kernel in mine[0].grad_variance:
            rate, power = decay_fit([pt.n for pt in mine],
                                    [pt.grad_variance[kernel] for pt in mine])
            lines.append(f"{family}, {kernel}: {rate:.2f} bits/qubit, exponent {power:.2f}.")
    lines.append("Anti-concentration: 2^n E sum_x p(x)^2 vs its closed form sum_a 2^-rank "
                 "(largest n): " + "; ".join(
                     f"{pt.family} {pt.collision:.3f} +- {pt.collision_stderr:.3f} vs "
                     f"{pt.collision_closed:.3f}" for pt in points if pt.n == study.n_max)
                 + ".")
    lines.append("The paper's closed forms for the gradient variances themselves are not "
                 "implemented (paper text unavailable); the verdict compares decay rates.")
    failed = [c.name.split(")")[0] + ")" for c in criteria if not c.passed]
    if failed:
        lines.append("Not reproduced: " + ", ".join(failed) + ".")
    return " ".join(lines)


SPECS: list[MethodSpec] = [
    MethodSpec(
        id="iqp_qcbm.expectations", title="IQP circuit: Monte-Carlo <Z_a>", paper=PAPER,
        params=ExpectationsParams, run=run_expectations,
        outputs={"table": "table", "mc_vs_exact_plot": "plot", "summary": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("All 1- and 2-body Pauli-Z expectations of a random IQP circuit by the "
                     "classical Monte-Carlo formula, checked against the exact state vector "
                     "(and PennyLane lightning.qubit) for small n.")),
    MethodSpec(
        id="iqp_qcbm.train", title="Train an IQP-QCBM on bitstrings (MMD)", paper=PAPER,
        params=TrainParams, run=run_train,
        outputs={"loss_plot": "plot", "marginals_plot": "plot", "correlations_plot": "plot",
                 "top_bitstrings": "table", "final": "json"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Adam on the Monte-Carlo Gaussian-kernel MMD gradient; then exact samples "
                     "of the trained circuit beside the data (n <= 16).")),
    MethodSpec(
        id="iqp_qcbm.variance_study", title="IQP-QCBM gradient variance vs n", paper=PAPER,
        params=VarianceParams, run=run_variance_study,
        outputs={"variance_plot": "plot", "z_variance_plot": "plot", "variance_table": "table",
                 "decay_table": "table"},
        resources=Resources(cpus=1, memory_gb=2),
        description=("Exact MMD gradient variances over uniform random angles vs n, per "
                     "generator family and kernel, with Var <Z_a> = 2^-rank and the "
                     "anti-concentration sum beside their closed forms.")),
    reproduce_spec(PAPER, "IQP-QCBM trainability (MMD gradient variance)", run_reproduce,
                   params=ReproduceIqpParams, resources=Resources(cpus=1, memory_gb=2)),
]
