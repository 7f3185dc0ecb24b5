"""iqp_qcbm: Monte-Carlo IQP expectations and MMD against exact simulation, PennyLane and closed
forms; the methods' artifacts, cancellation and parameters."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pennylane  # noqa: F401  (the cross-check below must not skip under CI)
import pytest
from pydantic import ValidationError

from engine import verdicts
from engine.context import Cancelled, JobContext
from engine.methods import iqp_qcbm
from engine.models import iqp_circuit as iqp

SPECS = {spec.id: spec for spec in iqp_qcbm.SPECS}
EXPECTATIONS = SPECS["iqp_qcbm.expectations"]
TRAIN = SPECS["iqp_qcbm.train"]
VARIANCE = SPECS["iqp_qcbm.variance_study"]
REPRODUCE = SPECS["iqp_qcbm.reproduce"]


def circuit(family: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    G = iqp.generator_set(family, n, edge_prob=0.5, seed=seed)
    theta = np.random.default_rng(seed).uniform(0, 2 * math.pi, G.shape[0])
    return G, theta


# -- expectations --------------------------------------------------------------------------------

@pytest.mark.parametrize("family", iqp.FAMILIES)
def test_monte_carlo_matches_the_state_vector_within_its_standard_error(family):
    G, theta = circuit(family, 5)
    ops = iqp.all_bitstrings(5)[1:]  # every non-zero a, weights 1..5
    z = iqp.random_bits(np.random.default_rng(1), 40_000, 5)
    phases = iqp.phase_matrix(G, theta, ops, z)
    mc, stderr = np.cos(phases).mean(0), np.cos(phases).std(0) / math.sqrt(len(z))
    exact = iqp.exact_expectations(G, theta, ops)
    assert np.all(np.abs(mc - exact) <= 4.5 * stderr + 1e-12)


def test_monte_carlo_over_every_z_is_exact():
    G, theta = circuit("all_to_all", 4)
    ops = iqp.all_bitstrings(4)
    every_z = iqp.all_bitstrings(4)
    assert np.allclose(iqp.expectations(G, theta, ops, every_z),
                       iqp.exact_expectations(G, theta, ops), atol=1e-12)


@pytest.mark.parametrize("family", iqp.FAMILIES)
def test_low_order_path_equals_the_generic_estimator_on_the_same_samples(family):
    G, theta = circuit(family, 7)
    z = iqp.random_bits(np.random.default_rng(2), 300, 7)
    generic = iqp.expectations(G, theta, iqp.low_order_ops(7), z)
    assert np.allclose(iqp.low_order_expectations(G, theta, z), generic, atol=1e-10)


def test_low_order_path_falls_back_for_generators_of_weight_three():
    G = np.vstack([iqp.generator_set("nearest_neighbour", 5), [[1, 1, 1, 0, 0]]]).astype(np.uint8)
    theta = np.random.default_rng(0).uniform(0, 6, G.shape[0])
    z = iqp.random_bits(np.random.default_rng(3), 200, 5)
    assert np.allclose(iqp.low_order_expectations(G, theta, z),
                       iqp.expectations(G, theta, iqp.low_order_ops(5), z), atol=1e-12)


@pytest.mark.parametrize("family", iqp.FAMILIES)
def test_state_vector_matches_pennylane_lightning(family):
    G, theta = circuit(family, 4, seed=3)
    ops = iqp.all_bitstrings(4)[1:]
    assert np.allclose(iqp.pennylane_expectations(G, theta, ops),
                       iqp.exact_expectations(G, theta, ops), atol=1e-10)


def test_product_circuit_closed_form():
    """Single-qubit generators only: <Z_a> = prod_{i in a} cos(2 theta_i)."""
    G = np.eye(4, dtype=np.uint8)
    theta = np.array([0.1, 0.7, 1.3, 2.9])
    for a in iqp.all_bitstrings(4):
        expected = np.prod(np.cos(2 * theta)[a.astype(bool)])
        assert iqp.exact_expectations(G, theta, a[None])[0] == pytest.approx(expected, abs=1e-12)


def test_walsh_hadamard_is_its_own_inverse_up_to_scale():
    values = np.random.default_rng(0).normal(size=16)
    assert np.allclose(iqp.walsh_hadamard(iqp.walsh_hadamard(values)) / 16, values)
    signs = 1 - 2 * iqp.parity(iqp.all_bitstrings(4), iqp.all_bitstrings(4)).astype(float)
    assert np.allclose(iqp.walsh_hadamard(values), signs @ values)


# -- closed forms under uniform angles -----------------------------------------------------------

def test_gf2_rank():
    assert iqp.gf2_rank(np.eye(5, dtype=np.uint8)) == 5
    assert iqp.gf2_rank(np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]])) == 2  # rows sum to 0
    assert iqp.gf2_rank(np.zeros((3, 3), dtype=np.uint8)) == 0
    rng = np.random.default_rng(0)
    for _ in range(20):
        M = (rng.random((6, 5)) < 0.5).astype(np.uint8)
        brute = max(size for size in range(7) for rows in itertools.combinations(range(6), size)
                    if _independent(M[list(rows)]))
        assert iqp.gf2_rank(M) == brute


def _independent(rows: np.ndarray) -> bool:
    """No non-empty subset of the rows sums to zero mod 2."""
    for size in range(1, len(rows) + 1):
        for subset in itertools.combinations(range(len(rows)), size):
            if not rows[list(subset)].sum(axis=0).astype(int).__mod__(2).any():
                return False
    return True


def test_variance_of_z_a_is_two_to_the_minus_rank():
    G = iqp.generator_set("all_to_all", 4)
    thetas = np.random.default_rng(5).uniform(0, 2 * math.pi, (G.shape[0], 6000))
    values = iqp.exact_expectations(G, thetas)  # (16, draws)
    for index, a in enumerate(iqp.all_bitstrings(4)[1:], start=1):
        closed = iqp.variance_closed_form(G, a)
        centred = values[index] - values[index].mean()
        stderr = math.sqrt(((centred**2 - centred.var()) ** 2).mean() / values.shape[1])
        assert abs(values[index].var() - closed) <= 4 * stderr, (a, closed)
    assert iqp.variance_closed_form(np.eye(3, dtype=np.uint8), np.array([1, 1, 0])) == 0.25


def test_collision_probability_matches_its_closed_form():
    G = iqp.generator_set("nearest_neighbour", 4)
    thetas = np.random.default_rng(6).uniform(0, 2 * math.pi, (G.shape[0], 4000))
    collision = 16 * (iqp.probabilities(G, thetas) ** 2).sum(axis=0)
    closed = iqp.collision_closed_form(G)
    assert collision.mean() == pytest.approx(closed, abs=4 * collision.std() / math.sqrt(4000))


# -- MMD -----------------------------------------------------------------------------------------

def test_exact_mmd_equals_the_kernel_definition():
    """sum_a P_sigma(a) (<Z_a>_p - <Z_a>_q)^2 = E k(x,x') + E k(y,y') - 2 E k(x,y)."""
    n, sigma = 3, 0.8
    G, theta = circuit("all_to_all", n)
    p = iqp.probabilities(G, theta)
    q = np.random.default_rng(0).dirichlet(np.ones(2**n))
    bits = iqp.all_bitstrings(n)
    distance = (bits[:, None, :] != bits[None, :, :]).sum(-1)
    kernel = np.exp(-distance / (2 * sigma**2))
    direct = p @ kernel @ p + q @ kernel @ q - 2 * p @ kernel @ q
    assert iqp.exact_mmd(G, theta, q, sigma) == pytest.approx(direct, rel=1e-10)
    assert iqp.kernel_weights(n, sigma).sum() == pytest.approx(1.0)


def test_monte_carlo_mmd_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    G, theta = circuit("erdos_renyi", 5)
    ops = iqp.random_bits(rng, 200, 5, iqp.spectral_p(1.0))
    target = iqp.data_expectations(iqp.random_bits(rng, 50, 5, 0.3), ops)
    z = iqp.random_bits(rng, 300, 5)
    _, grad = iqp.mmd_and_gradient(G, theta, ops, target, z)
    step = 1e-6
    for j in range(G.shape[0]):
        shift = step * np.eye(G.shape[0])[j]
        numeric = (iqp.mmd_and_gradient(G, theta + shift, ops, target, z)[0]
                   - iqp.mmd_and_gradient(G, theta - shift, ops, target, z)[0]) / (2 * step)
        assert grad[j] == pytest.approx(numeric, abs=1e-8)


def test_exact_mmd_gradient_matches_finite_differences_and_monte_carlo():
    rng = np.random.default_rng(1)
    G, theta = circuit("nearest_neighbour", 4)
    data = iqp.random_bits(rng, 40, 4, 0.3)
    target = iqp.empirical_distribution(data)
    grad = iqp.exact_mmd_gradients(G, theta, target, 1.0)
    step = 1e-6
    numeric = [(iqp.exact_mmd(G, theta + step * e, target, 1.0)
                - iqp.exact_mmd(G, theta - step * e, target, 1.0)) / (2 * step)
               for e in np.eye(G.shape[0])]
    assert np.allclose(grad, numeric, atol=1e-8)

    ops = iqp.random_bits(rng, 100_000, 4, iqp.spectral_p(1.0))
    loss, mc_grad = iqp.mmd_and_gradient(G, theta, ops, iqp.data_expectations(data, ops),
                                         iqp.all_bitstrings(4))  # every z: only a is sampled
    assert loss == pytest.approx(iqp.exact_mmd(G, theta, target, 1.0), rel=0.03)
    assert np.allclose(mc_grad, grad, atol=0.02)


def test_batched_gradients_match_the_single_circuit_path():
    G, _ = circuit("all_to_all", 4)
    thetas = np.random.default_rng(2).uniform(0, 6, (G.shape[0], 3))
    target = (1 - 2 * 0.25) ** iqp.all_bitstrings(4).sum(axis=1)
    distribution = iqp.walsh_hadamard(target) / 16  # the product distribution itself
    values, grads, _ = iqp.exact_expectations_and_gradients(
        iqp.state_signs(G), thetas, target, [iqp.kernel_weights(4, 0.7)])
    assert np.allclose(values, iqp.exact_expectations(G, thetas))
    assert np.allclose(grads[0], iqp.exact_mmd_gradients(G, thetas, distribution, 0.7))


# -- methods -------------------------------------------------------------------------------------

def run(spec, tmp_path: Path, **params) -> tuple[dict, list[dict]]:
    events: list[dict] = []
    ctx = JobContext("job1", tmp_path, emit=events.append, seed=0)
    return spec.run(ctx, spec.params(**params), {}), events


def test_expectations_method_checks_exact_and_pennylane(tmp_path):
    outputs, events = run(EXPECTATIONS, tmp_path, n=5, samples=4000, batch=1000,
                          pennylane_check=True)
    summary = outputs["summary"]
    assert summary["ops"] == 15 and summary["fraction_within_3_stderr"] >= 0.9
    assert summary["max_abs_exact_vs_pennylane"] < 1e-10
    table = json.loads((tmp_path / outputs["table"]).read_text())
    assert table["columns"][-2:] == ["exact", "pennylane"] and len(table["rows"]) == 15
    steps = [e["step"] for e in events if e["type"] == "job_progress"]
    assert steps[-1] == 4000


def test_train_lowers_the_exact_mmd_and_saves_samples_vs_data(tmp_path):
    outputs, events = run(TRAIN, tmp_path, rows=2, cols=2, steps=60, eval_every=20,
                          samples=300, frequencies=300, learning_rate=0.1, model_samples=200)
    final = outputs["final"]
    assert final["exact_mmd2_final"] < 0.5 * final["exact_mmd2_initial"]
    for name in ("loss_plot", "marginals_plot", "correlations_plot"):
        assert json.loads((tmp_path / outputs[name]).read_text())["kind"] == "plot"
    assert np.load(tmp_path / outputs["samples"]).shape == (200, 4)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert "mc_mmd2" in metrics[0] and "exact_mmd2" in metrics[0]


def test_bars_and_stripes_has_every_pattern_once():
    data = iqp_qcbm.bitstring_dataset("bars_and_stripes", 0, 3, 2, 0.0, 0)
    assert len(data) == 2**3 + 2**2 - 2 and data.shape[1] == 6
    assert len({tuple(row) for row in data}) == len(data)


def test_variance_study_saves_the_log_scale_plot(tmp_path):
    outputs, _ = run(VARIANCE, tmp_path, families=["nearest_neighbour"], n_min=3, n_max=4,
                     draws=100, batch=50)
    spec = json.loads((tmp_path / outputs["variance_plot"]).read_text())
    assert spec["logy"] and len(spec["series"]) == 2  # two kernels
    assert outputs["summary"]["z_checks"] > 0


def test_cancel_stops_the_variance_study(tmp_path):
    ctx = JobContext("job1", tmp_path, emit=lambda event: None, seed=0)
    ctx.request_cancel()
    with pytest.raises(Cancelled):
        VARIANCE.run(ctx, VARIANCE.params(n_min=3, n_max=3, draws=20), {})
    with pytest.raises(Cancelled):
        TRAIN.run(ctx, TRAIN.params(rows=2, cols=2, steps=5), {})


@pytest.mark.parametrize("spec,bad", [
    (EXPECTATIONS, {"n": 1}), (EXPECTATIONS, {"family": "ring"}),
    (EXPECTATIONS, {"n": 40, "pennylane_check": True}), (EXPECTATIONS, {"samples": 0}),
    (TRAIN, {"sigma": 0}), (TRAIN, {"dataset": "mnist"}), (TRAIN, {"learnig_rate": 0.1}),
    (VARIANCE, {"n_min": 8, "n_max": 6}), (VARIANCE, {"n_max": 20}),
    (REPRODUCE, {"draws": 10}), (REPRODUCE, {"exact_n": [6, 20]}),
    (REPRODUCE, {"exact_draws": 5}),
])
def test_invalid_params_are_rejected(spec, bad):
    with pytest.raises(ValidationError):
        spec.params(**bad)



def test_reproduce_smoke_returns_the_v2_schema(tmp_path):
    outputs, _ = run(REPRODUCE, tmp_path, profile="smoke")
    claim = outputs["claim"]
    assert claim["paper"] == "iqp_qcbm" and claim["spec"] == "v2" and claim["smoke"] is True
    assert [c["name"][:4] for c in claim["criteria"]] == ["(1) ", "(2a)", "(2b)"]
    for item in claim["criteria"]:
        assert item["quote"] and item["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE")
        assert item["parts"] and all(p["method"] for p in item["parts"] if p["rule"])
    names = [check["name"] for check in claim["sanity"]]
    assert any("enumerated" in name for name in names)
    assert any("PennyLane" in name for name in names)
    assert next(c for c in claim["sanity"] if "enumerated" in c["name"])["passed"]
    assert json.loads((tmp_path / outputs["variance_plot"]).read_text())["kind"] == "plot"
    json.dumps(claim)


def test_profiles_hold_the_spec_numbers():
    cpu = iqp_qcbm.ReproduceIqpParams(profile="cpu")
    assert cpu.exact_n == [6, 7, 8, 9, 10, 11, 12] and cpu.exact_draws == 2000
    assert cpu.mc_n == [6, 8, 10, 12, 14, 16, 18, 20] and cpu.mc_draws == 1000
    assert cpu.frequencies == 128
    gpu = iqp_qcbm.ReproduceIqpParams(profile="gpu")
    assert gpu.exact_n == [6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16] and gpu.exact_draws == 4000
    assert gpu.mc_n == [6, 8, 10, 12, 14, 16, 18, 20, 22, 24] and gpu.mc_draws == 4000
    assert gpu.frequencies == 512
    smoke = iqp_qcbm.ReproduceIqpParams(profile="smoke")
    assert smoke.exact_n == [4, 5, 6] and smoke.mc_n == [4, 5, 6]
    assert smoke.exact_draws == 100 and smoke.mc_draws == 100


def test_power_law_threshold_matches_the_spec():
    rho, c = iqp_qcbm.power_law_threshold(list(range(6, 13)))
    assert rho == pytest.approx(0.71, abs=0.01) and c == pytest.approx(0.84, abs=0.01)
    assert iqp_qcbm.halves([6, 7, 8, 9, 10]) == ([6, 7, 8], [8, 9, 10])
    assert iqp_qcbm.halves([6, 8, 10, 12]) == ([6, 8], [10, 12])


@pytest.mark.parametrize("family", iqp.FAMILIES)
def test_reverse_mode_gradients_equal_the_parameter_shift_ones(family):
    G, _ = circuit(family, 5)
    theta = np.random.default_rng(1).uniform(0, 2 * math.pi, (G.shape[0], 4))
    signs = iqp.state_signs(G)
    target = 0.5 ** iqp.all_bitstrings(5).sum(axis=1)
    weights = [iqp.kernel_weights(5, 0.5), iqp.kernel_weights(5, math.sqrt(5))]
    values, grads, collision = iqp.exact_expectations_and_gradients(signs, theta, target, weights)
    values2, grads2, collision2 = iqp.exact_mmd_gradients_adjoint(signs, theta, target, weights)
    np.testing.assert_allclose(values2, values, atol=1e-12)
    for slow, fast in zip(grads, grads2, strict=True):
        np.testing.assert_allclose(fast, slow, atol=1e-12)
    np.testing.assert_allclose(collision2, collision, rtol=1e-12)


@pytest.mark.parametrize("family", iqp.FAMILIES)
def test_enumerated_expectations_and_derivatives_equal_the_state_vector(family):
    G, _ = circuit(family, 6)
    theta = np.random.default_rng(2).uniform(0, 2 * math.pi, (3, G.shape[0]))
    signs = iqp.state_signs(G)
    exact = iqp.walsh_hadamard(iqp.probabilities(G, theta.T, signs))
    for a in iqp.low_order_ops(6)[::3]:
        values, derivatives, J = iqp.expectation_and_derivatives(G, a, theta)
        index = iqp.bit_index(a[None])[0]
        np.testing.assert_allclose(values, exact[index], atol=1e-12)
        assert iqp.image_patterns(G[J]).shape[0] == 2 ** iqp.gf2_rank(G[J])
        for column, j in enumerate(J):
            shifted = iqp.shifted_expectations(signs, theta.T, int(j))[index]
            np.testing.assert_allclose(derivatives[:, column], 2 * shifted, atol=1e-12)


def test_monte_carlo_gradient_variance_agrees_with_the_exact_one():
    item = {"family": "nearest_neighbour", "n": 5, "draws": 600, "seed": 3}
    exact = iqp_qcbm.exact_unit({**item, "kind": "exact"})
    mc = iqp_qcbm.monte_carlo_unit({**item, "kind": "monte_carlo", "frequencies": 64})
    a, b = np.array(mc["grad_sq"]), np.array(exact["grad_sq"]["low-weight"])
    z = (a.mean() - b.mean()) / math.sqrt(a.var() / a.size + b.var() / b.size)
    assert abs(z) < 4 and mc["enumeration_error"] < 1e-9


def _strata(ns: list[int], variance: Callable, draws: int = 400, seed: int = 0
            ) -> list[np.ndarray]:
    """Per-draw values with mean ``variance(n)`` (exponentially distributed, like squares)."""
    rng = np.random.default_rng(seed)
    return [rng.exponential(variance(n), size=draws) for n in ns]


EXACT_N = [6, 7, 8, 9, 10, 11, 12]
MC_N = [6, 8, 10, 12, 14, 16, 18, 20]


def test_exponential_suppression_fails_for_a_power_law_and_passes_for_an_exponential():
    resampler = iqp_qcbm.StratifiedResampler([2000] * len(EXACT_N))  # the cpu profile's draws
    _, c = iqp_qcbm.power_law_threshold(EXACT_N)
    power = iqp_qcbm.decay_criterion_parts(
        "power", EXACT_N, _strata(EXACT_N, lambda n: n**-8.0, 2000), resampler)
    assert iqp_qcbm.criterion_exponential(power, c).verdict == "FAIL"
    exponential = iqp_qcbm.decay_criterion_parts(
        "exp", EXACT_N, _strata(EXACT_N, lambda n: 2.0**-n, 2000), resampler)
    assert iqp_qcbm.criterion_exponential(exponential, c).verdict == "PASS"


def test_avoided_suppression_fails_when_both_families_decay_exponentially():
    resampler = iqp_qcbm.StratifiedResampler([400] * len(MC_N))
    _, c = iqp_qcbm.power_law_threshold(MC_N)
    exponential = iqp_qcbm.decay_criterion_parts("exp", MC_N,
                                                 _strata(MC_N, lambda n: 2.0**-n), resampler)
    power = iqp_qcbm.decay_criterion_parts("power", MC_N,
                                           _strata(MC_N, lambda n: n**-4.0), resampler)
    flat = iqp_qcbm.decay_criterion_parts("flat", MC_N, _strata(MC_N, lambda n: 0.01,
                                                                  draws=400), resampler)
    both = {"nearest_neighbour": exponential, "sparse": exponential}
    assert iqp_qcbm.criterion_avoided(both, c).verdict == "FAIL"
    assert iqp_qcbm.criterion_avoided({"nearest_neighbour": exponential, "sparse": power},
                                      c).verdict == "FAIL"
    assert iqp_qcbm.criterion_avoided({"nearest_neighbour": power, "sparse": power},
                                      c).verdict == "PASS"
    assert flat["upper"].estimate == pytest.approx(0.0, abs=0.1)


def test_closed_forms_fail_outside_the_band_and_pass_inside():
    inside = verdicts.Interval(1.0, 0.95, 1.05, 0.95, "bootstrap")
    outside = verdicts.Interval(0.7, 0.65, 0.75, 0.95, "bootstrap")
    key = ("all_to_all", "<Z_a>", 3)
    assert iqp_qcbm.criterion_closed_forms({key: inside}).verdict == "PASS"
    assert iqp_qcbm.criterion_closed_forms({key: inside, ("sparse", "<Z_a>", 2): outside}
                                           ).verdict == "FAIL"


def test_closed_form_ratio_is_near_one_on_real_circuits():
    ns = [4, 5]
    exact = {("all_to_all", n): iqp_qcbm.exact_unit({"kind": "exact", "family": "all_to_all",
                                                     "n": n, "draws": 400, "seed": 0})
             for n in ns}
    exact |= {(f, n): exact["all_to_all", n] for f in ("nearest_neighbour", "sparse")
              for n in ns}
    intervals = iqp_qcbm.closed_form_intervals(exact, ns, iqp_qcbm.StratifiedResampler([400] * 2))
    for interval in intervals.values():
        assert interval.lo < 1.0 < interval.hi or abs(interval.estimate - 1) < 0.2
