"""IQP circuits: all 1- and 2-body <Z_a> by Monte Carlo at n = 16 and 100 vs PennyLane lightning.

The circuit has every single-qubit generator X_i and every pair X_i X_k (the issue's "all-pairs
ZZ + single-qubit" circuit, in the X basis), with uniform random angles; 1000 samples z per
estimate. Times are medians over repeats, with BLAS on one thread (the products are small).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

SAMPLES = 1000
# iqpopt cannot be installed here (it is not on PyPI), so its times stay the numbers measured
# once on the machine; the table says so beside each.
IQPOPT_CONSTANT = "(a constant: iqpopt is not on PyPI, not measured here)"


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run() -> list[dict]:
    from threadpoolctl import threadpool_limits

    from engine.models import iqp_circuit as iqp

    rng = np.random.default_rng(0)
    rows = []
    with threadpool_limits(limits=1):
        for n, reference in ((16, f"iqpopt ~4 ms {IQPOPT_CONSTANT}; PennyLane measured below"),
                             (100, f"iqpopt ~720 ms {IQPOPT_CONSTANT}")):
            G = iqp.generator_set("all_to_all", n)
            theta = rng.uniform(0, 2 * np.pi, size=G.shape[0])
            ops = iqp.low_order_ops(n)
            estimate = lambda n=n, G=G, theta=theta: iqp.low_order_expectations(
                G, theta, iqp.random_bits(rng, SAMPLES, n))
            estimate()  # warm-up
            target_ms = 4.0 if n == 16 else 720.0
            rows.append({"name": f"all {len(ops)} 1- and 2-body <Z_a>, n={n}, {G.shape[0]} "
                                 f"generators, {SAMPLES} samples (Studio, Monte Carlo)",
                         "value": _median_s(estimate, 20 if n == 16 else 7) * 1e3, "unit": "ms",
                         "target": f"<= {target_ms:g} ms (iqpopt)", "reference": reference})
            if n == 16:
                z = iqp.random_bits(rng, SAMPLES, n)
                generic = lambda G=G, theta=theta, ops=ops, z=z: iqp.expectations(
                    G, theta, ops, z)
                rows.append({"name": "same, generic (samples x generators) @ (generators x "
                                     "ops) path", "value": _median_s(generic, 5) * 1e3,
                             "unit": "ms", "reference": "any op weight"})
                small = (G, theta, ops)
    # PennyLane keeps its own threads (lightning uses OpenMP): timed outside the limit
    rows.extend(_accuracy_and_pennylane(*small, rng))
    return rows


def _accuracy_and_pennylane(G, theta, ops, rng) -> list[dict]:
    from engine.models import iqp_circuit as iqp

    exact_s = _median_s(lambda: iqp.exact_expectations(G, theta, ops), 5)
    exact = iqp.exact_expectations(G, theta, ops)
    z = iqp.random_bits(rng, SAMPLES, G.shape[1])
    mc = iqp.low_order_expectations(G, theta, z)
    second = (1 + iqp.low_order_expectations(G, 2 * theta, z)) / 2
    stderr = np.sqrt(np.maximum(second - mc**2, 0) / (SAMPLES - 1))
    rows = [
        {"name": "n=16 exact state vector (Walsh-Hadamard), all 1- and 2-body <Z_a>",
         "value": exact_s * 1e3, "unit": "ms"},
        {"name": "n=16 Monte Carlo within 3 standard errors of exact", "value":
         float(np.mean(np.abs(mc - exact) <= 3 * stderr)) * 100, "unit": "%",
         "reference": f"max |MC - exact| = {np.max(np.abs(mc - exact)):.3f} at {SAMPLES} samples"},
    ]
    try:
        import pennylane as qml  # noqa: F401
    except ImportError:  # the benchmark still reports our own numbers
        return rows + [{"name": "PennyLane lightning.qubit, n=16", "value": float("nan"),
                        "unit": "ms", "reference": "pennylane not installed"}]
    start = time.perf_counter()
    circuit = iqp.pennylane_circuit(G, theta, ops)
    pennylane = np.asarray(circuit(), dtype=np.float64)  # first call: device and tape set-up
    first_s = time.perf_counter() - start
    pl_s = _median_s(circuit, 5)
    rows += [
        {"name": "n=16 PennyLane lightning.qubit (exact), all 1- and 2-body <Z_a>, built QNode",
         "value": pl_s * 1e3, "unit": "ms", "reference": "~22 ms on the issue's machine"},
        {"name": "n=16 PennyLane lightning.qubit, first call (device + QNode set-up)",
         "value": first_s * 1e3, "unit": "ms"},
        {"name": "n=16 max |exact state vector - PennyLane|",
         "value": float(np.max(np.abs(exact - pennylane))), "unit": "", "target": "< 1e-9"},
    ]
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
