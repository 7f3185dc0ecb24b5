"""Verdicts that decide: the criterion schema and the statistics every reproduction shares.

A v2 reproduction decides each criterion from an interval: PASS when the interval lies wholly
on the claim's side of the threshold, FAIL when wholly on the other side, INCONCLUSIVE
otherwise (with ``decides_with``: what would decide it). A paper is PASS when every criterion
passes, FAIL when any fails, INCONCLUSIVE otherwise; sanity checks are kept apart and never
count. The statistics live here once, so that no reproduction carries its own (numpy and scipy
only: no torch, so the CLI and the GUI can import it).

How the specs' "Reproduce (v2: decisive)" forms map onto the schema:

- "estimate > threshold" / "< threshold" (pita, kcgm 1-2, markovization_gap, scicl 1):
  ``Rule.above(t)`` / ``Rule.below(t)``; an interval touching the threshold is INCONCLUSIVE.
- Non-inferiority, "difference below the margin delta" (bitdance 2, 3a): ``Rule.below(delta)``.
- Equivalence, "every interval inside the band" (iqp_qcbm 1, concept_frustration 1,
  causal_fairness 1, discriminative_factorization 2, hybrid_tokens 4b):
  ``Rule.inside([lo, hi])``; FAIL only when the interval is disjoint from the band.
- Separation, "interval entirely outside [-0.5, 0.5]" (bottleneck 1-2): ``Rule.outside(...)``;
  FAIL when the interval lies inside the band.
- "PASS if all parts pass, FAIL if any fails" (eos 1-2, kcgm 3, scicl 1, hybrid_tokens 1, 3):
  ``combine(..., aggregate="all")``.
- Existential, "in at least one" / "some (task, geometry)" (eos 3-4, bottleneck 1):
  ``combine(..., aggregate="any")``: PASS when any part passes, FAIL only when every part
  fails. Parts nest, so "(a) and (b) in at least one" is ``any`` over ``all`` pairs.
- Censored values (bottleneck: a breakpoint at the length cap): ``Rule(..., censored=True)``
  can support PASS, never FAIL (what would be a FAIL is INCONCLUSIVE).
- Gates and positive controls (chipstar 3, kcgm 4, hybrid_tokens 2-4, pita's "not learned",
  bottleneck 3, causal_fairness 2, bitdance's power controls): ``gate(criterion, ok, reason)``
  withholds the verdict (INCONCLUSIVE) when the precondition fails; it never invents one.
- Exact values with no interval (chipstar 3): ``Interval.exact(value)``, a zero-width interval.
- Bonferroni-adjusted levels (bottleneck, discriminative_factorization 1): compute the
  interval at ``bonferroni(0.95, m)`` and record that level in the criterion.

Interval methods: ``t_interval`` (seeds), ``bootstrap`` (percentile or BCa, seeded),
``paired_bootstrap`` (over seeds), ``hierarchical_bootstrap`` (seeds, then samples within
each), ``clopper_pearson`` (rates), ``mcnemar`` (paired binary
outcomes, exact), and ``mmd2_unbiased`` with ``mmd2_permutation_band`` (two-sample distances).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)
RULE_KINDS = ("above", "below", "inside_band", "outside_band")
AGGREGATES = ("all", "any")

# The exit status of `studio-engine reproduce` for each paper verdict (smoke runs always 0).
EXIT_CODES = {PASS: 0, FAIL: 3, INCONCLUSIVE: 4}

# Fewer resampling units (seeds, groups) than this give an unbounded interval, as t_interval
# does for one seed: two values resampled give only [min, max] of themselves.
MIN_BOOTSTRAP_UNITS = 3
_NARROWER = "a narrower interval: more seeds or samples (e.g. the gpu profile)"


# --- intervals ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval, the interval's level, and how it was computed."""

    estimate: float
    lo: float
    hi: float
    level: float
    method: str

    @classmethod
    def exact(cls, value: float, method: str = "exact") -> Interval:
        """A number computed exactly (no sampling error): a zero-width interval."""
        return cls(float(value), float(value), float(value), 1.0, method)


def bonferroni(level: float, comparisons: int) -> float:
    """The per-comparison level that keeps ``level`` over ``comparisons`` intervals."""
    if comparisons < 1:
        raise ValueError(f"comparisons must be at least 1, got {comparisons}")
    return 1.0 - (1.0 - level) / comparisons


def t_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> Interval:
    """Student-t interval of the mean over seeds; unbounded with fewer than two seeds."""
    x = np.asarray(values, dtype=float)
    mean = float(x.mean()) if x.size else math.nan
    if x.size < 2:
        return Interval(mean, -math.inf, math.inf, level, f"t-interval over {x.size} seeds")
    from scipy import stats  # here, not at import: engine.api (every CLI start) imports us

    half = stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return Interval(mean, float(mean - half), float(mean + half), level,
                    f"t-interval over {x.size} seeds")


def bootstrap(
    data: np.ndarray | Sequence[float] | tuple[np.ndarray, ...],
    statistic: Callable[..., Any],
    *,
    level: float = 0.95,
    n_resamples: int = 2000,
    method: str = "bca",
    seed: int = 0,
    vectorized: bool = False,
) -> Interval:
    """Bootstrap interval (``percentile`` or ``bca``), reproducible from ``seed``.

    ``data`` is one array (or list of values), or a tuple of arrays of equal length along axis
    0 whose rows are resampled together, so paired arrays stay paired. ``statistic(*arrays)``
    returns a float; with ``vectorized`` it receives arrays with a leading resample axis
    (shape ``(B, n, ...)``) and returns ``B`` values, much faster for numpy statistics.
    """
    if method not in ("percentile", "bca"):
        raise ValueError(f"unknown bootstrap method {method!r} (percentile or bca)")
    arrays = _as_arrays(data)
    n = arrays[0].shape[0]
    estimate = float(_apply(statistic, arrays, None, vectorized))
    if n < MIN_BOOTSTRAP_UNITS:  # resampling one or two values only restates them
        return Interval(estimate, -math.inf, math.inf, level,
                        f"{method} bootstrap of {n} value(s): undecided")
    rng = np.random.default_rng(seed)
    draws = _apply(statistic, arrays, rng.integers(0, n, size=(n_resamples, n)), vectorized)
    alpha = (1 - level) / 2
    if method == "bca":
        probabilities = _bca_probabilities(statistic, arrays, estimate, draws, alpha, vectorized)
    else:
        probabilities = np.array([alpha, 1 - alpha])
    decided = np.all(np.isfinite(probabilities))
    lo, hi = np.quantile(draws, probabilities) if decided else (math.nan, math.nan)
    label = f"{method} bootstrap ({n_resamples} resamples of {n}, seed {seed})"
    return Interval(estimate, float(lo), float(hi), level, label)


def paired_bootstrap(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], float] | None = None,
    **options: Any,
) -> Interval:
    """Bootstrap over seeds of a paired comparison: seed ``i`` of ``a`` stays with seed ``i`` of
    ``b``. The default statistic is the mean paired difference ``mean(a - b)``."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired arrays differ in shape: {x.shape} and {y.shape}")
    if statistic is None:
        options["vectorized"] = True
        return bootstrap((x, y), lambda u, v: np.mean(u - v, axis=-1), **options)
    return bootstrap((x, y), statistic, **options)


def hierarchical_bootstrap(
    groups: Sequence[np.ndarray],
    statistic: Callable[[list[np.ndarray]], float],
    *,
    level: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Two-level percentile bootstrap: draw the groups (seeds) with replacement, then the rows
    (samples, nets, documents) within each drawn group. ``statistic`` receives the list of
    resampled groups. Both levels of variation reach the interval, which a bootstrap of the
    pooled rows would hide when seeds differ."""
    arrays = [np.asarray(g) for g in groups]
    if not arrays or any(g.ndim == 0 or g.shape[0] == 0 for g in arrays):
        raise ValueError("hierarchical bootstrap needs at least one group, each with rows")
    if len(arrays) < MIN_BOOTSTRAP_UNITS:  # one seed's spread is not the seeds' spread
        return Interval(float(statistic(arrays)), -math.inf, math.inf, level,
                        f"hierarchical bootstrap of {len(arrays)} group(s): undecided")
    rng = np.random.default_rng(seed)
    draws = np.empty(n_resamples)
    for b in range(n_resamples):
        chosen = rng.integers(0, len(arrays), size=len(arrays))
        draws[b] = statistic([arrays[g][rng.integers(0, arrays[g].shape[0],
                                                      size=arrays[g].shape[0])] for g in chosen])
    alpha = (1 - level) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha])
    label = (f"hierarchical bootstrap ({n_resamples} resamples of {len(arrays)} groups, "
             f"then rows; seed {seed})")
    return Interval(float(statistic(arrays)), float(lo), float(hi), level, label)


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> Interval:
    """Exact (Clopper-Pearson) interval of a rate: never below the nominal coverage."""
    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    alpha = 1 - level
    from scipy import stats

    lo = stats.beta.ppf(alpha / 2, successes, trials - successes + 1) if successes else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes)
    hi = hi if successes < trials else 1.0
    rate = successes / trials if trials else math.nan
    return Interval(rate, float(lo), float(hi), level, f"Clopper-Pearson ({successes}/{trials})")


def mcnemar(a: Sequence[bool] | np.ndarray, b: Sequence[bool] | np.ndarray,
            level: float = 0.95) -> tuple[Interval, float]:
    """Paired binary outcomes (the same items under ``a`` and ``b``): the difference of the two
    success rates with its exact conditional interval, and the exact McNemar p-value.

    Only discordant items carry information: given d of them, the number where ``a`` succeeds
    and ``b`` fails is Binomial(d, theta), and rate(a) - rate(b) = (d / n)(2 theta - 1). The
    interval maps the Clopper-Pearson interval of theta; the p-value tests theta = 1/2.
    """
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired outcomes must be 1-D arrays of one length: {x.shape}, {y.shape}")
    only_a, only_b = int(np.sum(x & ~y)), int(np.sum(~x & y))
    discordant, n = only_a + only_b, x.size
    share = clopper_pearson(only_a, discordant, level)
    scale = discordant / n if n else math.nan
    estimate = (only_a - only_b) / n if n else math.nan
    interval = Interval(estimate, scale * (2 * share.lo - 1), scale * (2 * share.hi - 1), level,
                        f"exact McNemar ({only_a} vs {only_b} discordant of {n})")
    from scipy import stats

    p_value = stats.binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    return interval, float(p_value)


# --- two-sample distances -------------------------------------------------------------------


def gaussian_kernel(x: np.ndarray, y: np.ndarray, bandwidth: float) -> np.ndarray:
    """exp(-|x - y|^2 / (2 bandwidth^2)) between the rows of ``x`` and ``y``."""
    x, y = np.atleast_2d(x).astype(float), np.atleast_2d(y).astype(float)
    squared = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2 * x @ y.T
    return np.exp(-np.maximum(squared, 0.0) / (2 * bandwidth**2))


def mmd2_unbiased(kxx: np.ndarray, kyy: np.ndarray, kxy: np.ndarray) -> float:
    """Unbiased MMD^2 (the U-statistic) from kernel matrices: 0 in expectation when both
    samples come from one distribution (it can be negative), unlike the biased V-statistic,
    whose floor is positive and shrinks only with sample size."""
    m, n = kxx.shape[0], kyy.shape[0]
    if m < 2 or n < 2:
        raise ValueError(f"unbiased MMD^2 needs at least 2 samples on each side, got {m} and {n}")
    within_x = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    within_y = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(within_x + within_y - 2 * kxy.mean())


@dataclass(frozen=True)
class NullBand:
    """Where MMD^2 falls when both samples come from one distribution (label permutations)."""

    observed: float
    lo: float
    hi: float
    level: float
    p_value: float
    n_permutations: int


def mmd2_permutation_band(
    kernel: np.ndarray, m: int, *, level: float = 0.95, n_permutations: int = 1000, seed: int = 0
) -> NullBand:
    """Permutation band of the unbiased MMD^2 from the pooled kernel matrix of ``[x; y]``
    (the first ``m`` rows are ``x``): the observed value, the central ``level`` range of the
    values under random relabelling, and the one-sided permutation p-value."""
    total = kernel.shape[0]
    if kernel.shape != (total, total) or not 2 <= m <= total - 2:
        raise ValueError(f"need a square pooled kernel and 2 <= m <= N - 2: {kernel.shape}, {m}")
    rng = np.random.default_rng(seed)
    labels = np.zeros((n_permutations + 1, total))
    labels[0, :m] = 1.0
    for row in labels[1:]:
        row[rng.permutation(total)[:m]] = 1.0
    values = _mmd2_of_labellings(kernel, labels, m)
    observed, null = float(values[0]), values[1:]
    alpha = (1 - level) / 2
    lo, hi = np.quantile(null, [alpha, 1 - alpha])
    p_value = (1 + np.sum(null >= observed)) / (1 + n_permutations)
    return NullBand(observed, float(lo), float(hi), level, float(p_value), n_permutations)


def _mmd2_of_labellings(kernel: np.ndarray, labels: np.ndarray, m: int) -> np.ndarray:
    """Unbiased MMD^2 for each 0/1 row of ``labels`` (1 = in x), all at once."""
    n = kernel.shape[0] - m
    diagonal = np.diag(kernel)
    others = 1.0 - labels
    projected = labels @ kernel
    within_x = np.einsum("pi,pi->p", projected, labels) - labels @ diagonal
    across = np.einsum("pi,pi->p", projected, others)
    within_y = np.einsum("pi,pi->p", others @ kernel, others) - others @ diagonal
    return within_x / (m * (m - 1)) + within_y / (n * (n - 1)) - 2 * across / (m * n)


# --- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """Which side of a threshold (or band) the claim says an estimate lies on.

    Thresholds are strict (an interval touching one is INCONCLUSIVE); bands include their ends.
    ``censored``: the estimate involves values stopped at a cap, so it may PASS, never FAIL.
    """

    kind: str
    threshold: float | None = None
    band: tuple[float, float] | None = None
    censored: bool = False

    def __post_init__(self) -> None:
        if self.kind not in RULE_KINDS:
            raise ValueError(f"unknown rule {self.kind!r} (one of {', '.join(RULE_KINDS)})")
        banded = self.kind.endswith("_band")
        if banded and (self.band is None or self.threshold is not None):
            raise ValueError(f"rule {self.kind} needs a band [lo, hi] and no threshold")
        if not banded and (self.threshold is None or self.band is not None):
            raise ValueError(f"rule {self.kind} needs a threshold and no band")
        if banded:
            lo, hi = (float(v) for v in self.band)
            if not lo <= hi:
                raise ValueError(f"band [{lo}, {hi}] is reversed")
            object.__setattr__(self, "band", (lo, hi))
        else:
            object.__setattr__(self, "threshold", float(self.threshold))

    @classmethod
    def above(cls, threshold: float, censored: bool = False) -> Rule:
        return cls("above", threshold=threshold, censored=censored)

    @classmethod
    def below(cls, threshold: float, censored: bool = False) -> Rule:
        return cls("below", threshold=threshold, censored=censored)

    @classmethod
    def inside(cls, band: Sequence[float], censored: bool = False) -> Rule:
        return cls("inside_band", band=tuple(band), censored=censored)

    @classmethod
    def outside(cls, band: Sequence[float], censored: bool = False) -> Rule:
        return cls("outside_band", band=tuple(band), censored=censored)

    def decide(self, lo: float, hi: float) -> str:
        """The verdict for an interval [lo, hi]; NaN bounds decide nothing."""
        if math.isnan(lo) or math.isnan(hi):
            return INCONCLUSIVE
        verdict = self._side(lo, hi)
        return INCONCLUSIVE if self.censored and verdict == FAIL else verdict

    def _side(self, lo: float, hi: float) -> str:
        if self.kind == "above":
            return PASS if lo > self.threshold else FAIL if hi < self.threshold else INCONCLUSIVE
        if self.kind == "below":
            return PASS if hi < self.threshold else FAIL if lo > self.threshold else INCONCLUSIVE
        band_lo, band_hi = self.band
        inside = band_lo <= lo and hi <= band_hi
        disjoint = hi < band_lo or lo > band_hi
        if self.kind == "inside_band":
            return PASS if inside else FAIL if disjoint else INCONCLUSIVE
        return PASS if disjoint else FAIL if inside else INCONCLUSIVE

    def to_dict(self) -> dict:
        """JSON-safe: an unbounded end of a band is written as null."""
        band = None if self.band is None else [_finite_or_none(v) for v in self.band]
        return {"kind": self.kind, "threshold": self.threshold, "band": band,
                "censored": self.censored}

    @classmethod
    def from_dict(cls, data: dict) -> Rule:
        band = data.get("band")
        if band is not None:
            lo, hi = band
            band = (-math.inf if lo is None else lo, math.inf if hi is None else hi)
        return cls(data["kind"], data.get("threshold"), band, bool(data.get("censored", False)))


def aggregate(verdicts: Sequence[str], how: str = "all") -> str:
    """``all``: PASS when every verdict passes, FAIL when any fails. ``any`` (existential):
    PASS when any passes, FAIL only when every one fails. INCONCLUSIVE otherwise; nothing to
    aggregate decides nothing."""
    if how not in AGGREGATES:
        raise ValueError(f"unknown aggregate {how!r} (all or any)")
    if not verdicts:
        return INCONCLUSIVE
    decisive, opposite = (FAIL, PASS) if how == "all" else (PASS, FAIL)
    if decisive in verdicts:
        return decisive
    return opposite if all(v == opposite for v in verdicts) else INCONCLUSIVE


@dataclass(frozen=True)
class Criterion:
    """One criterion of a paper's claim, decided from an interval or from its parts.

    A leaf has ``estimate``, ``interval`` and ``rule``; a combined criterion has ``parts`` and
    ``aggregate`` instead. ``verdict`` is computed when left empty; a stored verdict must be the
    computed one or INCONCLUSIVE (a gate may withhold a decision, never invent one).
    """

    name: str
    quote: str
    estimate: float | None = None
    interval: tuple[float, float] | None = None
    level: float = 0.95
    method: str = ""
    rule: Rule | None = None
    parts: tuple[Criterion, ...] = ()
    aggregate: str = "all"
    verdict: str = ""
    decides_with: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.parts))
        if not 0 < self.level <= 1:
            raise ValueError(f"criterion {self.name!r}: level {self.level} is not in (0, 1]")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"criterion {self.name!r}: unknown aggregate {self.aggregate!r}")
        if (self.rule is None) == (not self.parts):
            raise ValueError(f"criterion {self.name!r} needs either a rule or parts")
        if self.rule is not None:
            if self.interval is None or self.estimate is None:
                raise ValueError(f"criterion {self.name!r}: a rule needs an estimate and interval")
            lo, hi = (float(v) for v in self.interval)
            if lo > hi:
                raise ValueError(f"criterion {self.name!r}: interval [{lo}, {hi}] is reversed")
            object.__setattr__(self, "interval", (lo, hi))
            object.__setattr__(self, "estimate", float(self.estimate))
        computed = self.computed_verdict()
        verdict = self.verdict or computed
        if verdict not in VERDICTS:
            raise ValueError(f"criterion {self.name!r}: unknown verdict {verdict!r}")
        if verdict not in (computed, INCONCLUSIVE):
            raise ValueError(f"criterion {self.name!r}: verdict {verdict!r} contradicts its "
                             f"interval and rule, which give {computed}")
        object.__setattr__(self, "verdict", verdict)
        if verdict != INCONCLUSIVE:
            object.__setattr__(self, "decides_with", "")
        elif not self.decides_with:
            object.__setattr__(self, "decides_with", self._default_decides_with())

    def computed_verdict(self) -> str:
        """What the interval and rule (or the parts and aggregate) say, ignoring any gate."""
        if self.rule is not None:
            return self.rule.decide(*self.interval)
        return aggregate([part.verdict for part in self.parts], self.aggregate)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def _default_decides_with(self) -> str:
        if self.parts:
            open_parts = [p.name for p in self.parts if p.verdict == INCONCLUSIVE]
            return "deciding " + ", ".join(open_parts) if open_parts else "deciding its parts"
        if self.estimate is not None and math.isnan(self.estimate):
            return "a finite estimate (the measurement is NaN)"
        if self.rule is not None and self.rule.censored and self.rule._side(*self.interval) == FAIL:
            return "values no longer censored: a larger cap"
        return _NARROWER

    def to_dict(self) -> dict:
        """JSON-safe: NaN estimates and unbounded interval ends are written as null."""
        return {
            "name": self.name,
            "quote": self.quote,
            "estimate": _finite_or_none(self.estimate),
            "interval": None if self.interval is None else
            [_finite_or_none(v) for v in self.interval],
            "level": self.level,
            "method": self.method,
            "rule": None if self.rule is None else self.rule.to_dict(),
            "parts": [part.to_dict() for part in self.parts],
            "aggregate": self.aggregate,
            "verdict": self.verdict,
            "decides_with": self.decides_with,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Criterion:
        """Read ``to_dict``'s form back; unknown keys are ignored, a bad value names the
        criterion, and a verdict that contradicts its interval is refused."""
        name = data.get("name", "?")
        try:
            interval = data.get("interval")
            if interval is not None:
                lo, hi = interval
                interval = (-math.inf if lo is None else lo, math.inf if hi is None else hi)
            has_rule = data.get("rule") is not None
            estimate = data.get("estimate")
            return cls(
                name=data["name"],
                quote=data["quote"],
                estimate=math.nan if estimate is None and has_rule else estimate,
                interval=interval,
                level=float(data.get("level", 0.95)),
                method=data.get("method", ""),
                rule=Rule.from_dict(data["rule"]) if has_rule else None,
                parts=tuple(cls.from_dict(part) for part in data.get("parts", [])),
                aggregate=data.get("aggregate", "all"),
                verdict=data.get("verdict", ""),
                decides_with=data.get("decides_with", ""),
            )
        except KeyError as missing:
            raise ValueError(f"criterion {name!r}: missing {missing}") from None
        except (TypeError, ValueError) as error:
            if str(error).startswith("criterion "):
                raise
            raise ValueError(f"criterion {name!r}: {error}") from None


def criterion(name: str, quote: str, measured: Interval, rule: Rule,
              decides_with: str = "") -> Criterion:
    """A leaf criterion decided by ``rule`` from ``measured``."""
    return Criterion(name, quote, measured.estimate, (measured.lo, measured.hi), measured.level,
                     measured.method, rule, decides_with=decides_with)


def combine(name: str, quote: str, parts: Sequence[Criterion], aggregate: str = "all",
            decides_with: str = "") -> Criterion:
    """A criterion made of sub-tests (``all`` of them, or ``any``: "in at least one")."""
    return Criterion(name, quote, parts=tuple(parts), aggregate=aggregate,
                     decides_with=decides_with)


def from_v1(name: str, measured: float, op: str, target: float, quote: str = "",
            measured_interval: Interval | None = None) -> Criterion:
    """A v1 criterion (``measured op target``) in this schema, for papers not yet on v2.

    Without seeds it is one value (a zero-width interval). ``>`` and ``<`` become ``above`` and
    ``below``; ``>=``, ``<=`` and ``==`` become bands that include the target, so a value equal
    to it passes as it did in v1.
    """
    rules = {">": Rule.above(target), "<": Rule.below(target),
             ">=": Rule.inside((target, math.inf)), "<=": Rule.inside((-math.inf, target)),
             "==": Rule.inside((target, target))}
    if op not in rules:
        raise ValueError(f"criterion {name!r}: unknown comparison {op!r}")
    measured_interval = measured_interval or Interval.exact(measured, "single run (v1)")
    return criterion(name, quote, measured_interval, rules[op])


def gate(item: Criterion, ok: bool, reason: str) -> Criterion:
    """``item`` when its precondition (a positive control, a training gate, an earlier
    criterion) holds; otherwise the same criterion INCONCLUSIVE, saying what is missing."""
    return item if ok else replace(item, verdict=INCONCLUSIVE, decides_with=reason)


@dataclass(frozen=True)
class SanityCheck:
    """A check of our own code or setup (an identity, a floor, a control): reported, never a
    criterion, and never part of the paper's verdict."""

    name: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict) -> SanityCheck:
        return cls(data["name"], bool(data["passed"]), data.get("detail", ""))


def paper_verdict(criteria: Sequence[Criterion]) -> str:
    """PASS when every criterion passes, FAIL when any fails, INCONCLUSIVE otherwise (or when
    there are none). Sanity checks are not criteria and are not accepted here."""
    for item in criteria:
        if not isinstance(item, Criterion):
            raise TypeError(f"paper_verdict takes criteria only, not {type(item).__name__} "
                            "(sanity checks never count)")
    return aggregate([c.verdict for c in criteria], "all")


def exit_code(verdict: str, smoke: bool = False) -> int:
    """The exit status of `reproduce`: 0 PASS, 3 FAIL, 4 INCONCLUSIVE; smoke runs decide
    nothing, so they exit 0."""
    if verdict not in EXIT_CODES:
        raise ValueError(f"unknown verdict {verdict!r}")
    return 0 if smoke else EXIT_CODES[verdict]


# --- helpers --------------------------------------------------------------------------------


def _as_arrays(data: Any) -> tuple[np.ndarray, ...]:
    """A tuple is several arrays resampled together; anything else is one array."""
    arrays = tuple(np.asarray(a) for a in data) if isinstance(data, tuple) else (
        np.asarray(data),)
    lengths = {a.shape[0] if a.ndim else 0 for a in arrays}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"bootstrap data must be non-empty arrays of one length, got {lengths}")
    return arrays


def _apply(statistic: Callable[..., Any], arrays: tuple[np.ndarray, ...],
           rows: np.ndarray | None, vectorized: bool) -> np.ndarray:
    """``statistic`` of the arrays (``rows`` None) or of each row-index set in ``rows``."""
    if rows is None:
        if vectorized:
            return np.asarray(statistic(*(a[None] for a in arrays)), dtype=float)[0]
        return np.asarray(statistic(*arrays), dtype=float)
    if vectorized:
        return np.asarray(statistic(*(a[rows] for a in arrays)), dtype=float)
    return np.array([statistic(*(a[r] for a in arrays)) for r in rows], dtype=float)


def _bca_probabilities(statistic: Callable[..., Any], arrays: tuple[np.ndarray, ...],
                       estimate: float, draws: np.ndarray, alpha: float,
                       vectorized: bool) -> np.ndarray:
    """Efron's bias-corrected and accelerated quantile levels for the bootstrap draws."""
    from scipy import special

    share_below = (np.sum(draws < estimate) + np.sum(draws <= estimate)) / (2 * draws.size)
    bias = special.ndtri(share_below)
    n = arrays[0].shape[0]
    leave_one_out = np.array([np.delete(np.arange(n), i) for i in range(n)])
    jackknife = _apply(statistic, arrays, leave_one_out, vectorized)
    spread = jackknife.mean() - jackknife
    denominator = 6 * np.sum(spread**2) ** 1.5
    acceleration = np.sum(spread**3) / denominator if denominator > 0 else 0.0
    z = special.ndtri(np.array([alpha, 1 - alpha]))
    # NaN when every draw lies on one side of the estimate: the correction is undefined.
    return special.ndtr(bias + (bias + z) / (1 - acceleration * (bias + z)))


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None

