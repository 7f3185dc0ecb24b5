"""IQP circuits as generative models: Monte-Carlo <Z_a>, the Gaussian-kernel MMD and its gradient.

A circuit on n qubits is a binary generator matrix G (m x n) and angles theta (m,): starting from
|0^n>, it applies the commuting gates exp(i theta_j X_{g_j}), X_g = prod_{i in g} X_i, and
measures every qubit in the Z basis. Two independent ways to get <Z_a> = <prod_{i: a_i=1} Z_i>:

* Monte Carlo (any n; the formula of Recio et al., arXiv 2503.02934):

      <Z_a> = E_{z ~ U{0,1}^n} cos( sum_j theta_j (-1)^{g_j.z} (1 - (-1)^{g_j.a}) )
            = E_z cos( 2 sum_{j in J_a} theta_j s_j(z) ),   J_a = {j : g_j.a odd},
                                                            s_j(z) = (-1)^{g_j.z}.

  ``expectations`` evaluates it for many a at once as a (samples x generators) @ (generators x
  ops) product; ``low_order_expectations`` does all 1- and 2-body a from per-qubit sums, since
  J_{e_i + e_k} is the symmetric difference of J_{e_i} and J_{e_k}.

* State vector (n up to ~16): exp(i theta X_g) = H^n exp(i theta Z_g) H^n and the Z_g commute, so
  psi = H^n diag(exp(i phi(x))) H^n |0>, phi(x) = sum_j theta_j (-1)^{g_j.x}, with H^n a
  Walsh-Hadamard transform. Then p(y) = |psi_y|^2 and <Z_a> = sum_y p(y) (-1)^{a.y} = WHT(p)[a].

MMD with the Gaussian kernel k(x, y) = exp(-|x - y|^2 / (2 sigma^2)) on bitstrings:

      MMD^2 = sum_a P_sigma(a) (<Z_a>_theta - <Z_a>_data)^2,
      P_sigma(a) = (1 - p)^{n - |a|} p^{|a|},   p = (1 - exp(-1 / (2 sigma^2))) / 2,

a product of Bernoulli(p) bits, so Monte Carlo samples a from it. Small sigma (p -> 1/2) weights
high-weight a; large sigma (p -> 0) low-weight a.

Trainability facts used in the tests and the reproduction: under uniform theta in [0, 2 pi)^m,
E <Z_a> = 0 and Var <Z_a> = 2^{-rank_GF(2)(G_{J_a})} for J_a non-empty; the expected normalised
collision probability 2^n E sum_x p(x)^2 = sum_a 2^{-rank(G_{J_a})} (anti-concentration when O(1)).

Bit conventions: a bitstring x (or a, z) is an array of 0/1 of length n; in state vectors the
index of x is sum_i x_i 2^i.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

FAMILIES = ("nearest_neighbour", "all_to_all", "erdos_renyi")


# -- generator sets ------------------------------------------------------------------------------

def generator_set(family: str, n: int, edge_prob: float = 0.3, seed: int = 0) -> np.ndarray:
    """(m, n) uint8: every single-qubit generator X_i, then the two-qubit ones of ``family``.

    nearest_neighbour: X_i X_{i+1} on an open chain; all_to_all: every pair; erdos_renyi: each
    pair independently with probability ``edge_prob`` (seeded).
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown generator family {family!r}; choose one of {FAMILIES}")
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    if family == "nearest_neighbour":
        pairs = [(i, i + 1) for i in range(n - 1)]
    elif family == "all_to_all":
        pairs = list(itertools.combinations(range(n), 2))
    else:
        rng = np.random.default_rng(seed)
        pairs = [pair for pair in itertools.combinations(range(n), 2)
                 if rng.random() < edge_prob]
    G = np.zeros((n + len(pairs), n), dtype=np.uint8)
    G[np.arange(n), np.arange(n)] = 1
    for row, (i, k) in enumerate(pairs, start=n):
        G[row, [i, k]] = 1
    return G


def low_order_ops(n: int, max_weight: int = 2) -> np.ndarray:
    """(K, n) uint8: every a of weight 1, then (if max_weight >= 2) every pair, in lexicographic
    order."""
    ops = [np.eye(n, dtype=np.uint8)]
    if max_weight >= 2 and n >= 2:
        pairs = np.array(list(itertools.combinations(range(n), 2)))
        two = np.zeros((len(pairs), n), dtype=np.uint8)
        two[np.arange(len(pairs)), pairs[:, 0]] = 1
        two[np.arange(len(pairs)), pairs[:, 1]] = 1
        ops.append(two)
    return np.concatenate(ops)


def parity(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(A @ B.T) mod 2 for 0/1 matrices, as uint8 (float32 matmul: exact below 2^24 terms)."""
    product = np.asarray(A, dtype=np.float32) @ np.asarray(B, dtype=np.float32).T
    return (product.astype(np.int64) & 1).astype(np.uint8)


def gf2_rank(M: np.ndarray) -> int:
    """Rank over GF(2) of a 0/1 matrix (Gaussian elimination on packed rows)."""
    rows = [int("".join(map(str, row[::-1])), 2) for row in np.asarray(M, dtype=np.uint8)]
    rank = 0
    while rows:
        pivot = max(rows)
        rows.remove(pivot)
        if pivot == 0:
            break
        rank += 1
        top = pivot.bit_length() - 1
        rows = [r ^ pivot if (r >> top) & 1 else r for r in rows]
    return rank


def variance_closed_form(G: np.ndarray, a: np.ndarray) -> float:
    """Var_theta <Z_a> under uniform theta: 2^{-rank(G_{J_a})}, 0 when J_a is empty."""
    J = parity(G, np.asarray(a)[None, :])[:, 0].astype(bool)
    return 0.0 if not J.any() else 2.0 ** -gf2_rank(G[J])


# -- Monte Carlo ---------------------------------------------------------------------------------

def random_bits(rng: np.random.Generator, count: int, n: int, p: float = 0.5) -> np.ndarray:
    """(count, n) uint8 of independent Bernoulli(p) bits."""
    return (rng.random((count, n)) < p).astype(np.uint8)


def weighted_signs(z: np.ndarray, G: np.ndarray, theta: np.ndarray, dtype=np.float64
                   ) -> np.ndarray:
    """(S, m): theta_j s_j(z) = theta_j (-1)^{g_j.z} for each sample z."""
    signs = 1.0 - 2.0 * parity(z, G).astype(dtype)
    return signs * np.asarray(theta, dtype=dtype)


def expectations(G: np.ndarray, theta: np.ndarray, ops: np.ndarray, z: np.ndarray,
                 dtype=np.float64, chunk: int = 2048) -> np.ndarray:
    """Monte-Carlo <Z_a> (K,) for every row a of ``ops`` with the samples z (S, n)."""
    phases = phase_matrix(G, theta, ops, z, dtype, chunk)
    return np.cos(phases).mean(axis=0)


def phase_matrix(G: np.ndarray, theta: np.ndarray, ops: np.ndarray, z: np.ndarray,
                 dtype=np.float64, chunk: int = 2048) -> np.ndarray:
    """(S, K): 2 sum_{j in J_a} theta_j s_j(z) for each sample and op (chunked over ops)."""
    ts = weighted_signs(z, G, theta, dtype)
    out = np.empty((z.shape[0], ops.shape[0]), dtype=dtype)
    for start in range(0, ops.shape[0], chunk):
        mask = parity(ops[start:start + chunk], G).astype(dtype)  # (k, m): j in J_a
        out[:, start:start + chunk] = 2.0 * (ts @ mask.T)
    return out


def low_order_expectations(G: np.ndarray, theta: np.ndarray, z: np.ndarray,
                           dtype=np.float64) -> np.ndarray:
    """All 1- and 2-body <Z_a> in ``low_order_ops(n)`` order: the same estimator and samples
    as ``expectations``, rearranged for generators of weight <= 2 (otherwise it calls it).

    With spins sigma = 1 - 2 z, single angles t_i and pair angles T_ik (summed over repeated
    generators), the generators holding qubit i give Phi_i = sigma_i (t_i + sum_k T_ik sigma_k),
    and J_{e_i + e_k} = J_{e_i} xor J_{e_k} gives the phases 2 Phi_i and
    2 Phi_i + 2 Phi_k - 4 T_ik sigma_i sigma_k. As sigma_i sigma_k = +-1,

        cos(x - 4 T s) = cos x cos 4T + s sin x sin 4T,

    and expanding cos / sin of 2 Phi_i + 2 Phi_k turns every 2-body mean over z into a few
    (n x S) @ (S x n) products: O(S n^2) instead of O(S m K).
    """
    n = G.shape[1]
    if G.sum(axis=1).max(initial=0) > 2:
        return expectations(G, theta, low_order_ops(n), z, dtype)
    singles, pairs = two_local_angles(G, theta)
    spins = (1.0 - 2.0 * np.asarray(z, dtype=dtype))
    phi = 2.0 * spins * (singles.astype(dtype) + spins @ pairs.astype(dtype))  # 2 Phi, (S, n)
    cos, sin = np.cos(phi), np.sin(phi)
    samples = z.shape[0]
    cos_sum = (cos.T @ cos - sin.T @ sin) / samples  # E cos(2 Phi_i + 2 Phi_k)
    spin_cos, spin_sin = spins * cos, spins * sin
    sin_sum = (spin_sin.T @ spin_cos + spin_cos.T @ spin_sin) / samples  # E s sin(...)
    first, second = np.triu_indices(n, k=1)
    angle = 4.0 * pairs[first, second]
    two = cos_sum[first, second] * np.cos(angle) + sin_sum[first, second] * np.sin(angle)
    return np.concatenate([cos.mean(axis=0), two]).astype(np.float64)


def two_local_angles(G: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Angles of generators of weight <= 2 as single (n,) and symmetric pair (n, n) arrays."""
    n = G.shape[1]
    theta = np.asarray(theta, dtype=np.float64)
    weight = G.sum(axis=1)
    if weight.max(initial=0) > 2:
        raise ValueError("two_local_angles needs generators of weight <= 2")
    singles = np.zeros(n)
    pairs = np.zeros((n, n))
    one = np.flatnonzero(weight == 1)
    np.add.at(singles, G[one].argmax(axis=1), theta[one])
    two = np.flatnonzero(weight == 2)
    if two.size:
        support = np.nonzero(G[two])[1].reshape(-1, 2)
        np.add.at(pairs, (support[:, 0], support[:, 1]), theta[two])
        pairs = pairs + pairs.T
    return singles, pairs


def spectral_p(sigma: float) -> float:
    """Bit-flip probability of the kernel's spectrum: (1 - exp(-1 / (2 sigma^2))) / 2."""
    return (1.0 - math.exp(-1.0 / (2.0 * sigma**2))) / 2.0


def data_expectations(data: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """<Z_a>_data = mean over the data x of (-1)^{a.x}, (K,)."""
    return (1.0 - 2.0 * parity(data, ops).astype(np.float64)).mean(axis=0)


def mmd_and_gradient(G: np.ndarray, theta: np.ndarray, ops: np.ndarray, target: np.ndarray,
                     z: np.ndarray, dtype=np.float64) -> tuple[float, np.ndarray]:
    """Monte-Carlo MMD^2 = mean_a (<Z_a> - target_a)^2 over ops a ~ P_sigma, and its gradient.

    d<Z_a>/d theta_j = E_z[-sin(phase_a(z)) 2 s_j(z)] [j in J_a], so the gradient is
    -(4 / (S K)) sum_a (<Z_a> - target_a) [j in J_a] sum_s sin(phase_sa) s_j(z_s).
    """
    signs = 1.0 - 2.0 * parity(z, G).astype(dtype)  # (S, m)
    mask = parity(ops, G).astype(dtype)  # (K, m)
    phases = 2.0 * (signs * np.asarray(theta, dtype=dtype)) @ mask.T  # (S, K)
    model = np.cos(phases).mean(axis=0)
    residual = model - target
    loss = float(np.mean(residual**2))
    weight = np.sin(phases).T @ signs  # (K, m)
    grad = -(4.0 / (z.shape[0] * ops.shape[0])) * ((residual[:, None] * mask) * weight).sum(0)
    return loss, grad


# -- exact state vector --------------------------------------------------------------------------

def all_bitstrings(n: int) -> np.ndarray:
    """(2^n, n) uint8, row y holds the bits of the integer y (bit i = qubit i)."""
    index = np.arange(2**n)
    return ((index[:, None] >> np.arange(n)) & 1).astype(np.uint8)


def walsh_hadamard(values: np.ndarray) -> np.ndarray:
    """Unnormalised Walsh-Hadamard transform along axis 0 (length 2^n): out[a] = sum_y
    (-1)^{a.y} values[y]."""
    out = np.array(values, copy=True)
    size = out.shape[0]
    rest = out.shape[1:]
    h = 1
    while h < size:
        blocks = out.reshape(size // (2 * h), 2, h, *rest)
        out = np.stack([blocks[:, 0] + blocks[:, 1], blocks[:, 0] - blocks[:, 1]], axis=1)
        out = out.reshape(size, *rest)
        h *= 2
    return out


def statevector(G: np.ndarray, theta: np.ndarray, signs: np.ndarray | None = None) -> np.ndarray:
    """Amplitudes (2^n,) of prod_j exp(i theta_j X_{g_j}) |0>; ``theta`` may be (m, B) for a
    batch of B circuits, giving (2^n, B). ``signs`` = ``state_signs(G)`` when reused."""
    signs = state_signs(G) if signs is None else signs
    phases = signs @ np.asarray(theta, dtype=np.float64)
    return walsh_hadamard(np.exp(1j * phases)) / 2 ** G.shape[1]


def state_signs(G: np.ndarray) -> np.ndarray:
    """(2^n, m) float64: (-1)^{g_j.x} for every basis state x (the diagonal of each Z_g)."""
    n = G.shape[1]
    if n > 22:
        raise ValueError(f"the state vector of {n} qubits is too large; use Monte Carlo")
    return 1.0 - 2.0 * parity(all_bitstrings(n), G).astype(np.float64)


def probabilities(G: np.ndarray, theta: np.ndarray, signs: np.ndarray | None = None
                  ) -> np.ndarray:
    """Exact output distribution p(y) (2^n,) (or (2^n, B) for a batch of angles)."""
    return np.abs(statevector(G, theta, signs)) ** 2


def exact_expectations(G: np.ndarray, theta: np.ndarray, ops: np.ndarray | None = None
                       ) -> np.ndarray:
    """Exact <Z_a>: for every a in index order (2^n,), or for the rows of ``ops``."""
    all_z = walsh_hadamard(probabilities(G, theta))
    if ops is None:
        return all_z
    return all_z[bit_index(ops)]


def bit_index(bits: np.ndarray) -> np.ndarray:
    """Integer index sum_i bits_i 2^i of each row."""
    bits = np.asarray(bits, dtype=np.int64)
    return bits @ (1 << np.arange(bits.shape[-1], dtype=np.int64))


def kernel_weights(n: int, sigma: float) -> np.ndarray:
    """P_sigma(a) for every a in index order (2^n,)."""
    p = spectral_p(sigma)
    weight = all_bitstrings(n).sum(axis=1)
    return (1 - p) ** (n - weight) * p**weight


def empirical_distribution(data: np.ndarray) -> np.ndarray:
    """Histogram of bitstrings (2^n,), summing to 1."""
    n = data.shape[1]
    return np.bincount(bit_index(data), minlength=2**n) / data.shape[0]


def exact_mmd(G: np.ndarray, theta: np.ndarray, target_distribution: np.ndarray, sigma: float
              ) -> np.ndarray:
    """Exact MMD^2 between the circuit (theta (m,) or (m, B)) and a distribution over 2^n
    bitstrings, through all 2^n frequencies."""
    n = G.shape[1]
    model = walsh_hadamard(probabilities(G, theta))
    data = walsh_hadamard(target_distribution)
    weights = kernel_weights(n, sigma)
    residual = model - (data[:, None] if model.ndim == 2 else data)
    return np.tensordot(weights, residual**2, axes=(0, 0))


def exact_mmd_gradients(G: np.ndarray, theta: np.ndarray, target_distribution: np.ndarray,
                        sigma: float, params: np.ndarray | None = None) -> np.ndarray:
    """d MMD^2 / d theta_j exactly: sum_a P_sigma(a) 2 (<Z_a> - <Z_a>_data) d<Z_a>/d theta_j,
    with d<Z_a>/d theta_j from the parameter-shift rule for exp(i theta X_g):
    f'(theta) = f(theta + pi/4) - f(theta - pi/4) (each <Z_a> is a + b cos 2 theta + c sin 2
    theta in one angle). ``theta`` is (m,) or (m, B); returns (len(params),) or (len(params), B).
    """
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim == 1:
        return exact_mmd_gradients(G, theta[:, None], target_distribution, sigma, params)[:, 0]
    params = np.arange(G.shape[0]) if params is None else np.asarray(params)
    weights = kernel_weights(G.shape[1], sigma)
    residual = exact_expectations(G, theta) - walsh_hadamard(target_distribution)[:, None]
    grads = np.empty((params.size, theta.shape[1]))
    for row, j in enumerate(params):
        plus, minus = theta.copy(), theta.copy()
        plus[j] += math.pi / 4
        minus[j] -= math.pi / 4
        slope = exact_expectations(G, plus) - exact_expectations(G, minus)
        grads[row] = 2.0 * np.tensordot(weights, residual * slope, axes=(0, 0))
    return grads


def sample_bitstrings(distribution: np.ndarray, count: int, rng: np.random.Generator
                      ) -> np.ndarray:
    """(count, n) bitstrings drawn from an exact distribution over 2^n outcomes."""
    n = int(round(math.log2(distribution.size)))
    index = rng.choice(distribution.size, size=count, p=distribution / distribution.sum())
    return ((index[:, None] >> np.arange(n)) & 1).astype(np.uint8)


def collision_closed_form(G: np.ndarray) -> float:
    """E_theta[2^n sum_x p(x)^2] = sum_a 2^{-rank(G_{J_a})} (the a with empty J_a count 1)."""
    n = G.shape[1]
    total = 0.0
    for a in all_bitstrings(n):
        J = parity(G, a[None, :])[:, 0].astype(bool)
        total += 1.0 if not J.any() else 2.0 ** -gf2_rank(G[J])
    return total


# -- PennyLane cross-check -----------------------------------------------------------------------

def pennylane_expectations(G: np.ndarray, theta: np.ndarray, ops: np.ndarray,
                           device: str = "lightning.qubit") -> np.ndarray:
    """<Z_a> from PennyLane's simulator (an independent cross-check of ``exact_expectations``)."""
    return np.asarray(pennylane_circuit(G, theta, ops, device)(), dtype=np.float64)


def pennylane_circuit(G: np.ndarray, theta: np.ndarray, ops: np.ndarray,
                      device: str = "lightning.qubit"):
    """A PennyLane QNode returning every <Z_a>; exp(i theta X_g) = PauliRot(-2 theta, "X"*|g|)."""
    import pennylane as qml

    n = G.shape[1]
    dev = qml.device(device, wires=n)
    observables = [qml.prod(*[qml.PauliZ(int(i)) for i in np.flatnonzero(a)]) for a in ops]

    @qml.qnode(dev)
    def circuit():
        for g, angle in zip(G, theta, strict=True):
            support = [int(i) for i in np.flatnonzero(g)]
            qml.PauliRot(-2.0 * float(angle), "X" * len(support), wires=support)
        return [qml.expval(obs) for obs in observables]

    return circuit


# -- batched exact quantities for variance studies -----------------------------------------------

def exact_expectations_and_gradients(signs: np.ndarray, theta: np.ndarray,
                                     target_z: np.ndarray, kernel_weights_list: list[np.ndarray]
                                     ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """For a batch of angles theta (m, B): every exact <Z_a> (2^n, B), d MMD^2 / d theta_j for
    every j and each kernel ((m, B) per kernel), and 2^n sum_x p(x)^2 (B,).

    Shifting theta_j by +-pi/4 adds +-pi/4 (-1)^{g_j.x} to the phases, so the parameter-shift
    rule needs no new matrix product. ``target_z`` is the data's <Z_a> in index order (2^n,).
    """
    size, m = signs.shape
    phases = signs @ theta

    def all_expectations(ph: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        probs = np.abs(walsh_hadamard(np.exp(1j * ph))) ** 2 / size**2
        return walsh_hadamard(probs), probs

    values, probs = all_expectations(phases)
    residual = values - target_z[:, None]
    grads = [np.empty((m, theta.shape[1])) for _ in kernel_weights_list]
    for j in range(m):
        shift = (math.pi / 4) * signs[:, j:j + 1]
        slope = all_expectations(phases + shift)[0] - all_expectations(phases - shift)[0]
        weighted = residual * slope
        for grad, weights in zip(grads, kernel_weights_list, strict=True):
            grad[j] = 2.0 * weights @ weighted
    return values, grads, size * (probs**2).sum(axis=0)


# -- trainability at scale (spec v2): adjoint gradients and enumerated expectations ----------

def exact_mmd_gradients_adjoint(signs: np.ndarray, theta: np.ndarray, target_z: np.ndarray,
                                kernel_weights_list: list[np.ndarray]
                                ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The same as ``exact_expectations_and_gradients`` at the cost of a few transforms instead
    of two per parameter (reverse-mode differentiation of the state vector).

    With psi = H e^{i phi} / 2^n, p = |psi|^2, Z = H p and c = 2 w (Z - t) per kernel, the
    gradient is g_j = sum_x (H c)_x dp_x / dtheta_j; moving H onto the other side gives
    g = -(2 / 2^n) Im(S^T (q o e^{i phi})), q = H((H c) o conj(psi)), S = ``signs``.
    Returns (Z (2^n, B), [g (m, B) per kernel], 2^n sum_x p^2 (B,)).
    """
    size = signs.shape[0]
    phases = np.exp(1j * (signs @ np.asarray(theta, dtype=np.float64)))
    psi = walsh_hadamard(phases) / size
    probs = np.abs(psi) ** 2
    values = walsh_hadamard(probs)
    residual = values - target_z[:, None]
    grads = []
    for weights in kernel_weights_list:
        adjoint = walsh_hadamard(walsh_hadamard(2.0 * weights[:, None] * residual)
                                 * np.conj(psi))
        grads.append(-(2.0 / size) * np.imag(signs.T @ (adjoint * phases)))
    return values, grads, size * (probs**2).sum(axis=0)


def shifted_expectations(signs: np.ndarray, theta: np.ndarray, column: int) -> np.ndarray:
    """Every exact <Z_a> (2^n, B) with theta_column shifted by pi/4: for a with ``column`` in
    J_a, d<Z_a>/d theta_column = 2 <Z_a>(theta_column + pi/4) (one angle enters as
    A cos 2 theta + B sin 2 theta)."""
    size = signs.shape[0]
    phases = signs @ np.asarray(theta, dtype=np.float64) + (math.pi / 4) * signs[:, column:column
                                                                                 + 1]
    return walsh_hadamard(np.abs(walsh_hadamard(np.exp(1j * phases)) / size) ** 2)


def image_patterns(G_J: np.ndarray, max_rank: int = 16) -> np.ndarray | None:
    """Every value of the map z -> G_J z over GF(2) (each taken equally often by uniform z), as
    a (2^r, |J|) array of signs (-1)^{(G_J z)_j}; None when r = rank(G_J) exceeds ``max_rank``.

    <Z_a> = E_z cos(2 sum_{j in J_a} theta_j s_j(z)) depends on z only through G_{J_a} z, so
    averaging over these 2^r patterns gives <Z_a> exactly."""
    columns = [int("".join(map(str, col[::-1])), 2) for col in np.asarray(G_J, dtype=np.uint8).T]
    basis: list[int] = []
    for value in columns:  # a basis of the column space by XOR elimination
        for b in basis:
            value = min(value, value ^ b)
        if value:
            basis.append(value)
    if len(basis) > max_rank:
        return None
    rows = G_J.shape[0]
    basis_bits = ((np.array(basis, dtype=np.int64)[:, None] >> np.arange(rows)) & 1
                  if basis else np.zeros((0, rows), dtype=np.int64))
    combos = ((np.arange(2 ** len(basis))[:, None] >> np.arange(len(basis))) & 1)
    image = (combos @ basis_bits) & 1
    return 1.0 - 2.0 * image


def expectation_and_derivatives(G: np.ndarray, a: np.ndarray, theta: np.ndarray,
                                rng: np.random.Generator | None = None, max_rank: int = 16,
                                samples: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """<Z_a> (B,) and d<Z_a>/d theta_j (B, |J_a|) for angle rows theta (B, m), with J_a's
    indices: exact by enumerating the 2^r sign patterns of G_{J_a} when r <= ``max_rank``,
    otherwise averaged over ``samples`` uniform z (needs ``rng``)."""
    J = np.flatnonzero(parity(G, np.asarray(a)[None, :])[:, 0])
    theta = np.atleast_2d(np.asarray(theta, dtype=np.float64))
    if J.size == 0:
        return np.ones(theta.shape[0]), np.zeros((theta.shape[0], 0)), J
    patterns = image_patterns(G[J], max_rank)
    if patterns is None:
        if rng is None:
            raise ValueError(f"rank of G_J above {max_rank}: sampling z needs an rng")
        patterns = 1.0 - 2.0 * parity(random_bits(rng, samples, G.shape[1]), G[J])
    phases = 2.0 * theta[:, J] @ patterns.T  # (B, P)
    values = np.cos(phases).mean(axis=1)
    derivatives = -2.0 * np.sin(phases) @ patterns / patterns.shape[0]
    return values, derivatives, J
