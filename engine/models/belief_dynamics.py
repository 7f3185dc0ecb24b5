"""Coupled user/assistant beliefs (SC-ICL), simulated for whole grids of dyads at once.

Each dyad holds two beliefs in log-odds, the user's ``b_u`` and the assistant's ``b_a``. One turn:

* the assistant acts ``a = sigmoid(b_a)`` (its approval / agreement);
* the user reads the action and moves: ``b_u' = (1 - rho_u) b_u + g_u sat(b_a) + noise``;
* the user's next utterance carries evidence ``e = sat(b_u) + noise``;
* the assistant updates on that evidence: ``b_a' = (1 - rho_a) b_a + g_a e + noise``,

with ``sat(x) = S tanh(x / S)`` (slope 1 at 0, bounded by the saturation scale ``S``). At the
neutral fixed point the Jacobian is exactly ``M = [[1 - rho_u, g_u], [g_a, 1 - rho_a]]``, whose
largest eigenvalue crosses 1 where ``g_u g_a = rho_u rho_a`` (``det(I - M) = 0``): the
round-trip gain against the two leaks. Above it the neutral state is unstable and the dyad
runs into one of two saturated, committed states (collapse).

Every array argument broadcasts: ``g_u`` of shape (U, 1) and ``g_a`` of shape (1, A) simulate a
U x A grid; ``seeds`` adds a trailing axis. The loop runs over turns only.

Measurements:

* relational posterior: ``sigmoid`` of the accumulated log-likelihood ratio that the user's
  evidence comes from a committed mode (``|e|`` around ``mode_evidence``) rather than the
  neutral one (around 0), floored like a CUSUM so a late collapse is still seen (S-shaped
  over turns when the dyad commits);
* action entropy ``H(a)`` in bits;
* the trajectory-conditioned spectral radius: least squares ``b_{t+1} ~ M b_t`` over a window
  of turns (exponentially weighted online, or exact on a block with a pairs bootstrap);
* collapse: the criterion holds for ``hold_turns`` consecutive turns.

Controllers act on the assistant: ``damping`` lowers its gain so that the loop's spectral
radius stays at ``1 - damping_eps`` (it is told the loop's leaks and the user's gain: the
oracle version); ``adaptive`` does the same with the user's gain and leak read off the online
fit, from turn ``radius_window`` on (before that it runs at its nominal gain); ``barrier``
adds ``-eta grad phi`` with ``phi = -log(B^2 - b_a^2)`` to its update, which keeps
``|b_a| < B``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

Controller = Literal["none", "damping", "adaptive", "barrier"]
CollapseCriterion = Literal["operational", "radius", "either"]
RIDGE = 1e-9  # keeps a least-squares fit defined when a window has no variation
TURNS_PER_CALLBACK = 8  # how often simulate() reports (progress, cancellation)
BARRIER_MARGIN = 1e-3  # a barrier step may not land closer than this fraction to +-B


@dataclass(frozen=True)
class DyadConfig:
    """Everything but the two gains (which vary over grids)."""

    rho_u: float = 0.1            # user's leak back to neutral per turn
    rho_a: float = 0.1            # assistant's leak
    noise: float = 0.1            # std of the belief noise per turn, both sides
    saturation: float = 4.0       # S: the log-odds scale where responses saturate
    mode_evidence: float = 2.0    # |e| expected from a committed user (posterior's alternative)
    evidence_sd: float = 1.0      # spread of evidence assumed by the posterior
    posterior_floor: float = -10.0  # lowest accumulated log-odds (CUSUM floor)
    delta: float = 0.01           # committed: posterior >= 1 - delta ...
    entropy_max_bits: float = 0.5  # ... and action entropy <= this
    hold_turns: int = 10          # T: consecutive turns the criterion must hold
    criterion: CollapseCriterion = "operational"
    radius_window: int = 30       # turns of the online (exponentially weighted) estimator
    controller: Controller = "none"
    damping_eps: float = 0.05
    barrier_bound: float = 2.0    # B (log-odds 2: action <= 0.88, entropy >= 0.53 bits)
    barrier_eta: float = 0.1      # eta


@dataclass
class SimResult:
    """Per dyad (grid shape + seeds): whether and when it collapsed; trajectories if recorded.

    Recorded arrays have turns on the second-to-last axis for beliefs ``(..., T + 1, 2)`` and
    on the last axis otherwise ``(..., T)``."""

    collapsed: np.ndarray
    onset: np.ndarray             # first turn of the qualifying run, -1 if none
    final_posterior: np.ndarray
    beliefs: np.ndarray | None = None
    action: np.ndarray | None = None
    evidence: np.ndarray | None = None
    posterior: np.ndarray | None = None
    entropy: np.ndarray | None = None
    radius: np.ndarray | None = None


# -- the linear theory -------------------------------------------------------------------------

def transition_matrix(g_u, g_a, rho_u, rho_a) -> np.ndarray:
    """``M`` (..., 2, 2) of the local reduction; state order (b_u, b_a)."""
    g_u, g_a, rho_u, rho_a = np.broadcast_arrays(*(np.asarray(v, float)
                                                   for v in (g_u, g_a, rho_u, rho_a)))
    return np.stack([np.stack([1 - rho_u, g_u], -1), np.stack([g_a, 1 - rho_a], -1)], -2)


def spectral_radius(m: np.ndarray) -> np.ndarray:
    """Largest eigenvalue modulus of 2x2 matrices (..., 2, 2), in closed form."""
    return radius_of(m[..., 0, 0], m[..., 0, 1], m[..., 1, 0], m[..., 1, 1])


def radius_of(m00, m01, m10, m11) -> np.ndarray:
    """Largest eigenvalue modulus of [[m00, m01], [m10, m11]] (componentwise arrays)."""
    half_trace = (m00 + m11) / 2
    det = m00 * m11 - m01 * m10
    disc = half_trace**2 - det
    root = np.sqrt(np.abs(disc))
    real = np.maximum(np.abs(half_trace + root), np.abs(half_trace - root))
    return np.where(disc >= 0, real, np.sqrt(np.abs(det)))


def theoretical_radius(g_u, g_a, rho_u, rho_a) -> np.ndarray:
    return spectral_radius(transition_matrix(g_u, g_a, rho_u, rho_a))


def critical_assistant_gain(g_u, rho_u, rho_a, radius: float = 1.0) -> np.ndarray:
    """The assistant gain at which the loop's radius reaches ``radius`` (for g_u > 0).

    ``radius = m + sqrt(d^2 + g_u g_a)`` with ``m = 1 - (rho_u + rho_a) / 2`` and
    ``d = (rho_a - rho_u) / 2``; at ``radius = 1`` this is ``rho_u rho_a / g_u``. Zero where
    even an uncoupled assistant exceeds ``radius``."""
    g_u = np.asarray(g_u, float)
    centre, spread = 1 - (rho_u + rho_a) / 2, (rho_a - rho_u) / 2
    room = radius - centre
    allowed = np.where(room > np.abs(spread), room**2 - spread**2, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(g_u > 0, allowed / np.maximum(g_u, 1e-300), np.inf)


# -- simulation --------------------------------------------------------------------------------

def saturate(x: np.ndarray, scale: float) -> np.ndarray:
    return scale * np.tanh(x / scale)


def action_entropy_bits(b_a: np.ndarray) -> np.ndarray:
    p = 1 / (1 + np.exp(-np.clip(b_a, -50, 50)))
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.nan_to_num(h, nan=0.0)


def belief_at_entropy(bits: float) -> float:
    """The |log-odds| at which an action's entropy falls to ``bits`` (entropy decreases in
    |b|), by bisection."""
    low, high = 0.0, 60.0
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if action_entropy_bits(np.array(middle)) > bits else (
            low, middle)
    return high


def evidence_llr(evidence: np.ndarray, cfg: DyadConfig) -> np.ndarray:
    """log p(e | committed) / p(e | neutral) for Gaussians at +-mode_evidence vs 0 (|e| used)."""
    mu, var = cfg.mode_evidence, cfg.evidence_sd**2
    return (mu * np.abs(evidence) - mu**2 / 2) / var


def effective_assistant_gain(g_u, g_a, cfg: DyadConfig) -> np.ndarray:
    """The assistant's gain after the damping controller (unchanged otherwise)."""
    g_a = np.asarray(g_a, float)
    if cfg.controller != "damping":
        return g_a
    ceiling = critical_assistant_gain(g_u, cfg.rho_u, cfg.rho_a, radius=1 - cfg.damping_eps)
    return np.minimum(g_a, ceiling)


def simulate(g_u, g_a, cfg: DyadConfig, turns: int, seeds: int, rng: np.random.Generator,
             record: bool = False, initial: tuple[float, float] = (0.0, 0.0),
             on_turn: Callable[[int, float], None] | None = None) -> SimResult:
    """Free-running dialogues for every (g_u, g_a) of the broadcast grid and ``seeds`` seeds;
    ``on_turn(turn, fraction collapsed so far)`` is called every few turns."""
    g_u = np.asarray(g_u, float)[..., None]
    g_a = effective_assistant_gain(np.asarray(g_u)[..., 0], g_a, cfg)[..., None]
    shape = np.broadcast_shapes(g_u.shape, g_a.shape)[:-1] + (seeds,)
    b_u = np.full(shape, initial[0])
    b_a = np.full(shape, initial[1])
    tracker = CollapseTracker(shape, cfg, record)
    nominal_g_a = g_a
    trace = _Recorder(shape, turns, b_u, b_a) if record else None
    for t in range(turns):
        if on_turn is not None and t % TURNS_PER_CALLBACK == 0:
            on_turn(t, float(tracker.collapsed.mean()))
        noise = rng.standard_normal((3, *shape)) * cfg.noise
        action_drive = saturate(b_a, cfg.saturation)
        evidence = saturate(b_u, cfg.saturation) + noise[0]
        new_u = (1 - cfg.rho_u) * b_u + g_u * action_drive + noise[1]
        if cfg.controller == "adaptive" and t >= cfg.radius_window:
            g_a = np.minimum(nominal_g_a, tracker.adaptive_ceiling())
        new_a = assistant_update(b_a, evidence, g_a, cfg) + noise[2]
        if cfg.controller == "barrier":
            new_a = np.clip(new_a, *_barrier_limits(cfg))
        tracker.step(t, (b_u, b_a), (new_u, new_a), evidence)
        if trace is not None:
            trace.add(t, new_u, new_a, evidence, tracker)
        b_u, b_a = new_u, new_a
    result = SimResult(collapsed=tracker.collapsed, onset=tracker.onset,
                       final_posterior=tracker.posterior)
    if trace is not None:
        trace.fill(result)
    return result


def assistant_update(b_a: np.ndarray, evidence: np.ndarray, g_a, cfg: DyadConfig) -> np.ndarray:
    """The assistant's belief after one piece of evidence (noise excluded), with its barrier."""
    new_a = (1 - cfg.rho_a) * b_a + g_a * evidence
    if cfg.controller == "barrier":
        bound_sq = cfg.barrier_bound**2
        inside = np.minimum(b_a**2, bound_sq * (1 - BARRIER_MARGIN))
        new_a = new_a - cfg.barrier_eta * 2 * b_a / (bound_sq - inside)
    return new_a


def _barrier_limits(cfg: DyadConfig) -> tuple[float, float]:
    edge = cfg.barrier_bound * (1 - BARRIER_MARGIN)
    return -edge, edge


def measure_recorded(beliefs: np.ndarray, cfg: DyadConfig) -> SimResult:
    """The simulator's measurements on beliefs read from a real dialogue ``(T + 1, 2)``
    (e.g. scored turns of language models): the user's belief stands in for its evidence."""
    beliefs = np.asarray(beliefs, float)
    shape = (1,)
    tracker = CollapseTracker(shape, cfg, record=True)
    trace = _Recorder(shape, beliefs.shape[0] - 1, beliefs[:1, 0], beliefs[:1, 1])
    for t in range(beliefs.shape[0] - 1):
        before, after = beliefs[t][:, None], beliefs[t + 1][:, None]
        evidence = before[0]
        tracker.step(t, (before[0], before[1]), (after[0], after[1]), evidence)
        trace.add(t, after[0], after[1], evidence, tracker)
    result = SimResult(collapsed=tracker.collapsed, onset=tracker.onset,
                       final_posterior=tracker.posterior)
    trace.fill(result)
    return result


def replay(evidence: np.ndarray, g_a, cfg: DyadConfig, rng: np.random.Generator) -> np.ndarray:
    """Open-loop replay: a recorded user side (evidence ``(..., T)``) drives a new assistant
    whose actions no longer reach the user. Returns its beliefs ``(..., T + 1)``."""
    g_a = np.asarray(g_a, float)[..., None]
    shape = np.broadcast_shapes(evidence.shape[:-1], g_a.shape[:-1])
    beliefs = np.zeros((*shape, evidence.shape[-1] + 1))
    for t in range(evidence.shape[-1]):
        update = assistant_update(beliefs[..., t], evidence[..., t], g_a[..., 0], cfg)
        if cfg.controller == "barrier":
            update = np.clip(update, *_barrier_limits(cfg))
        beliefs[..., t + 1] = update + rng.standard_normal(shape) * cfg.noise
    return beliefs


def gain_assay(g_u, g_a, cfg: DyadConfig, rng: np.random.Generator, samples: int = 256,
               kick: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """One-step gain assays from the neutral state: nudge one side by ``kick``, measure the
    other side one turn later against an un-nudged turn (independent noise), average over
    ``samples``. Returns (g_u_hat, g_a_hat), the slopes the loop matrix uses."""
    g_u = np.asarray(g_u, float)[..., None]
    g_a = effective_assistant_gain(g_u[..., 0], g_a, cfg)[..., None]
    shape = np.broadcast_shapes(g_u.shape, g_a.shape)[:-1] + (samples,)
    noise = rng.standard_normal((4, *shape)) * cfg.noise
    zero, kicked = np.zeros(shape), np.full(shape, kick)
    user_kicked = g_u * saturate(kicked, cfg.saturation) + noise[0]
    user_plain = g_u * saturate(zero, cfg.saturation) + noise[1]
    assistant_kicked = assistant_update(zero, saturate(kicked, cfg.saturation) + noise[2], g_a,
                                        cfg)
    assistant_plain = assistant_update(zero, saturate(zero, cfg.saturation) + noise[3], g_a, cfg)
    return ((user_kicked - user_plain).mean(-1) / kick,
            (assistant_kicked - assistant_plain).mean(-1) / kick)


# -- measurements ------------------------------------------------------------------------------

class CollapseTracker:
    """Online posterior, entropy, exponentially weighted radius and the consecutive-turn rule.

    The weighted least-squares statistics are kept as separate 2x2 components (NumPy is slow
    on stacks of tiny matrices); the radius is computed only when the criterion or a recording
    needs it."""

    def __init__(self, shape: tuple[int, ...], cfg: DyadConfig, record: bool) -> None:
        self.cfg = cfg
        self.record = record
        self.track_radius = record or cfg.criterion != "operational" \
            or cfg.controller == "adaptive"
        self.fit: tuple[np.ndarray, ...] = ()
        # both tests are monotone in a log-odds, so the loop compares instead of taking logs
        self.committed_log_odds = np.log((1 - cfg.delta) / cfg.delta)
        self.low_entropy_belief = belief_at_entropy(cfg.entropy_max_bits)
        self.log_odds = np.zeros(shape)
        self.xx = [np.zeros(shape) for _ in range(3)]   # sum x x^T: uu, ua, aa
        self.yx = [np.zeros(shape) for _ in range(4)]   # sum y x^T: row-major
        self.forget = 1 - 1 / max(cfg.radius_window, 1)
        self.run = np.zeros(shape, dtype=np.int64)
        self.collapsed = np.zeros(shape, dtype=bool)
        self.onset = np.full(shape, -1, dtype=np.int64)
        self.entropy = np.ones(shape)
        self.radius = np.full(shape, np.nan)

    @property
    def posterior(self) -> np.ndarray:
        return 1 / (1 + np.exp(-self.log_odds))

    def step(self, t: int, before: tuple[np.ndarray, np.ndarray],
             after: tuple[np.ndarray, np.ndarray], evidence: np.ndarray) -> None:
        cfg = self.cfg
        self.log_odds = np.maximum(self.log_odds + evidence_llr(evidence, cfg),
                                   cfg.posterior_floor)
        holds = ((self.log_odds >= self.committed_log_odds)
                 & (np.abs(after[1]) >= self.low_entropy_belief))
        if self.record:
            self.entropy = action_entropy_bits(after[1])
        if self.track_radius:
            self._update_radius(before, after)
            unstable = (self.radius >= 1) & (t + 1 >= cfg.radius_window)
            holds = {"operational": holds, "radius": unstable,
                     "either": holds | unstable}[cfg.criterion]
        self.run = np.where(holds, self.run + 1, 0)
        fresh = (self.run >= cfg.hold_turns) & ~self.collapsed
        self.onset = np.where(fresh, t + 2 - cfg.hold_turns, self.onset)
        self.collapsed |= fresh

    def _update_radius(self, before: tuple[np.ndarray, np.ndarray],
                       after: tuple[np.ndarray, np.ndarray]) -> None:
        (u, a), (next_u, next_a), keep = before, after, self.forget
        uu, ua, aa = (keep * s + v for s, v in zip(self.xx, (u * u, u * a, a * a), strict=True))
        yx = [keep * s + v for s, v in zip(self.yx, (next_u * u, next_u * a, next_a * u,
                                                      next_a * a), strict=True)]
        self.xx, self.yx = [uu, ua, aa], yx
        uu, aa = uu + RIDGE, aa + RIDGE
        det = uu * aa - ua * ua
        m00 = (yx[0] * aa - yx[1] * ua) / det
        m01 = (yx[1] * uu - yx[0] * ua) / det
        m10 = (yx[2] * aa - yx[3] * ua) / det
        m11 = (yx[3] * uu - yx[2] * ua) / det
        self.fit = (m00, m01, m10, m11)
        self.radius = radius_of(m00, m01, m10, m11)

    def adaptive_ceiling(self) -> np.ndarray:
        """The damping ceiling from what the assistant can see: the user's gain and leak read
        off the online fit (its own leak it knows)."""
        m00, m01 = self.fit[0], self.fit[1]
        user_gain = np.maximum(np.abs(m01), 1e-6)
        user_leak = np.clip(1 - m00, 1e-3, 1.0)
        return critical_assistant_gain(user_gain, user_leak, self.cfg.rho_a,
                                       radius=1 - self.cfg.damping_eps)


class _Recorder:
    def __init__(self, shape: tuple[int, ...], turns: int, b_u: np.ndarray, b_a: np.ndarray
                 ) -> None:
        self.beliefs = np.zeros((*shape, turns + 1, 2))
        self.beliefs[..., 0, 0], self.beliefs[..., 0, 1] = b_u, b_a
        self.per_turn = {name: np.zeros((*shape, turns))
                         for name in ("action", "evidence", "posterior", "entropy", "radius")}

    def add(self, t: int, b_u: np.ndarray, b_a: np.ndarray, evidence: np.ndarray,
            tracker: CollapseTracker) -> None:
        self.beliefs[..., t + 1, 0], self.beliefs[..., t + 1, 1] = b_u, b_a
        values = {"action": 1 / (1 + np.exp(-b_a)), "evidence": evidence,
                  "posterior": tracker.posterior, "entropy": tracker.entropy,
                  "radius": tracker.radius}
        for name, value in values.items():
            self.per_turn[name][..., t] = value

    def fill(self, result: SimResult) -> None:
        result.beliefs = self.beliefs
        for name, value in self.per_turn.items():
            setattr(result, name, value)


def solve_transition(sxx: np.ndarray, syx: np.ndarray) -> np.ndarray:
    """``M = Syx Sxx^-1`` for stacks of 2x2 sufficient statistics (ridge-regularised)."""
    a = sxx[..., 0, 0] + RIDGE
    d = sxx[..., 1, 1] + RIDGE
    b, c = sxx[..., 0, 1], sxx[..., 1, 0]
    det = a * d - b * c
    inverse = np.stack([np.stack([d, -b], -1), np.stack([-c, a], -1)], -2) / det[..., None, None]
    return syx @ inverse


def fit_transition(beliefs: np.ndarray) -> np.ndarray:
    """Least-squares ``M`` from one block of turns ``(..., T + 1, 2)`` (pairs b_t -> b_{t+1})."""
    x, y = beliefs[..., :-1, :], beliefs[..., 1:, :]
    return solve_transition(np.einsum("...ti,...tj->...ij", x, x),
                            np.einsum("...ti,...tj->...ij", y, x))


def estimate_radius(beliefs: np.ndarray) -> np.ndarray:
    return spectral_radius(fit_transition(beliefs))


def bootstrap_radius(beliefs: np.ndarray, rng: np.random.Generator, resamples: int = 200
                     ) -> np.ndarray:
    """Radius estimates from ``resamples`` pair-bootstraps of one block ``(T + 1, 2)``."""
    x, y = beliefs[:-1], beliefs[1:]
    picks = rng.integers(0, len(x), size=(resamples, len(x)))
    xs, ys = x[picks], y[picks]
    m = solve_transition(np.einsum("bti,btj->bij", xs, xs), np.einsum("bti,btj->bij", ys, xs))
    return spectral_radius(m)


def rolling_radius(beliefs: np.ndarray, window: int, rng: np.random.Generator,
                   resamples: int = 200, level: float = 0.9
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The radius over turns of one dialogue ``(T + 1, 2)``: for each turn t >= window, the fit
    on turns t - window .. t with a bootstrap band. Returns (turns, estimate, low, high)."""
    ends = np.arange(window, beliefs.shape[0])
    estimate, low, high = (np.empty(len(ends)) for _ in range(3))
    tail = (1 - level) / 2
    for i, end in enumerate(ends):
        block = beliefs[end - window:end + 1]
        estimate[i] = estimate_radius(block)
        low[i], high[i] = np.quantile(bootstrap_radius(block, rng, resamples), [tail, 1 - tail])
    return ends, estimate, low, high
