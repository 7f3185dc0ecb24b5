"""engine.verdicts: each interval method against scipy.stats or a direct computation, coverage on
simulated data, unbiased MMD^2 and its permutation band, and every decision rule."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from engine import verdicts as v
from engine.verdicts import FAIL, INCONCLUSIVE, PASS, Criterion, Interval, Rule

# --- intervals against references ------------------------------------------------------------


@pytest.mark.parametrize("level", [0.9, 0.95, v.bonferroni(0.95, 9)])
@pytest.mark.parametrize("n", [2, 3, 5, 20])
def test_t_interval_matches_scipy(level, n):
    values = np.random.default_rng(n).normal(3.0, 2.0, size=n)
    got = v.t_interval(values, level)
    lo, hi = stats.t.interval(level, n - 1, loc=values.mean(), scale=stats.sem(values))
    assert got.estimate == pytest.approx(values.mean())
    assert (got.lo, got.hi) == pytest.approx((lo, hi), rel=1e-12)
    assert got.level == level


def test_bonferroni_level():
    assert v.bonferroni(0.95, 9) == pytest.approx(0.99444, abs=1e-5)
    assert v.bonferroni(0.95, 1) == 0.95
    with pytest.raises(ValueError):
        v.bonferroni(0.95, 0)


def test_t_interval_of_one_seed_is_unbounded_and_decides_nothing():
    one = v.t_interval([0.7])
    assert (one.lo, one.hi) == (-math.inf, math.inf)
    item = v.criterion("gap", "RT generalizes", one, Rule.above(0))
    assert item.verdict == INCONCLUSIVE
    assert "more seeds" in item.decides_with


@pytest.mark.parametrize("method, scipy_method", [("percentile", "percentile"), ("bca", "BCa")])
def test_bootstrap_matches_scipy_with_the_same_generator(method, scipy_method):
    """Both draw rng.integers(0, n, (B, n)) from default_rng(seed): the intervals coincide."""
    data = np.random.default_rng(7).exponential(size=25)
    got = v.bootstrap(data, np.mean, method=method, n_resamples=4000, seed=3)
    ref = stats.bootstrap((data,), np.mean, method=scipy_method, n_resamples=4000,
                          rng=np.random.default_rng(3)).confidence_interval
    assert (got.lo, got.hi) == pytest.approx((ref.low, ref.high), rel=1e-9)
    assert got.estimate == pytest.approx(data.mean())


def test_bootstrap_is_reproducible_and_vectorized_agrees():
    data = np.random.default_rng(1).normal(size=30)
    assert v.bootstrap(data, np.mean, seed=5) == v.bootstrap(data, np.mean, seed=5)
    assert v.bootstrap(list(data), np.mean, seed=5) == v.bootstrap(data, np.mean, seed=5)
    assert v.bootstrap(data, np.mean, seed=5).lo != v.bootstrap(data, np.mean, seed=6).lo
    first = v.bootstrap(data, np.median, seed=5)
    fast = v.bootstrap(data, lambda x: np.median(x, axis=-1), seed=5, vectorized=True)
    assert (fast.estimate, fast.lo, fast.hi) == pytest.approx((first.estimate, first.lo, first.hi))


def test_bootstrap_refuses_unknown_method_and_ragged_data():
    with pytest.raises(ValueError, match="unknown bootstrap method"):
        v.bootstrap(np.ones(5), np.mean, method="studentized")
    with pytest.raises(ValueError, match="one length"):
        v.bootstrap((np.ones(5), np.ones(4)), lambda a, b: 0.0)


def test_paired_bootstrap_keeps_seeds_paired():
    """A seed effect shared by both arms cancels in the paired difference only."""
    rng = np.random.default_rng(0)
    seed_effect = rng.normal(0, 5.0, size=8)
    a = seed_effect + 1.0 + rng.normal(0, 0.1, size=8)
    b = seed_effect + rng.normal(0, 0.1, size=8)
    paired = v.paired_bootstrap(a, b, method="percentile", seed=2)
    ref = stats.bootstrap((a - b,), np.mean, method="percentile", n_resamples=2000,
                          rng=np.random.default_rng(2)).confidence_interval
    assert (paired.lo, paired.hi) == pytest.approx((ref.low, ref.high), rel=1e-9)
    assert paired.lo > 0.5
    unpaired_a, unpaired_b = v.t_interval(a), v.t_interval(b)
    assert unpaired_a.lo < unpaired_b.hi  # without pairing the arms overlap
    ratio = v.paired_bootstrap(a, b, lambda x, y: np.mean(x) - np.mean(y), seed=2)
    assert ratio.estimate == pytest.approx(np.mean(a - b))
    with pytest.raises(ValueError, match="differ in shape"):
        v.paired_bootstrap(a, b[:-1])


@pytest.mark.parametrize("trials", [0, 1, 7, 40, 400])
@pytest.mark.parametrize("level", [0.95, 0.99])
def test_clopper_pearson_matches_scipy_exact(trials, level):
    for successes in sorted({0, 1, trials // 3, trials - 1, trials} - {-1}):
        if not 0 <= successes <= trials:
            continue
        got = v.clopper_pearson(successes, trials, level)
        if trials == 0:
            assert (got.lo, got.hi) == (0.0, 1.0) and math.isnan(got.estimate)
            continue
        ref = stats.binomtest(successes, trials).proportion_ci(level, method="exact")
        assert (got.lo, got.hi) == pytest.approx((ref.low, ref.high), abs=1e-10)
        assert got.estimate == successes / trials
    with pytest.raises(ValueError):
        v.clopper_pearson(5, 4)


def test_mcnemar_p_value_is_the_exact_binomial_test_of_discordant_pairs():
    rng = np.random.default_rng(11)
    for _ in range(20):
        a = rng.random(150) < rng.uniform(0.3, 0.8)
        b = rng.random(150) < rng.uniform(0.3, 0.8)
        only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
        interval, p_value = v.mcnemar(a, b)
        assert p_value == pytest.approx(stats.binomtest(only_a, only_a + only_b).pvalue)
        assert interval.estimate == pytest.approx(a.mean() - b.mean())
        # The interval excludes 0 on a's side exactly when the one-sided exact test rejects.
        greater = stats.binomtest(only_a, only_a + only_b, alternative="greater").pvalue
        assert (interval.lo > 0) == (greater < 0.025)
        assert interval.lo <= interval.estimate <= interval.hi


def test_mcnemar_without_discordant_pairs_is_zero():
    same = np.array([True, False, True])
    interval, p_value = v.mcnemar(same, same)
    assert (interval.estimate, interval.lo, interval.hi, p_value) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="paired outcomes"):
        v.mcnemar(same, same[:2])


# --- coverage on simulated data -----------------------------------------------------------


def _coverage_band(level: float, datasets: int) -> tuple[float, float]:
    """Nominal coverage +- 3.5 binomial standard errors of a simulation of ``datasets``."""
    half = 3.5 * math.sqrt(level * (1 - level) / datasets)
    return level - half, level + half


def test_t_interval_covers_the_mean_at_its_level():
    rng = np.random.default_rng(100)
    samples = rng.normal(1.5, 2.0, size=(2000, 5))
    covered = [(i := v.t_interval(row)).lo <= 1.5 <= i.hi for row in samples]
    lo, hi = _coverage_band(0.95, 2000)
    assert lo <= np.mean(covered) <= hi


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_bootstrap_covers_the_mean_near_its_level(method):
    """Bootstrap intervals of a mean at n = 40 run slightly short of 95%; a wrong quantile or
    bias correction would be far off."""
    rng = np.random.default_rng(200)
    samples = rng.normal(0.0, 1.0, size=(1500, 40))
    mean = lambda x: np.mean(x, axis=-1)
    covered = [(i := v.bootstrap(row, mean, method=method, n_resamples=999, seed=k,
                                 vectorized=True)).lo <= 0.0 <= i.hi
               for k, row in enumerate(samples)]
    assert 0.925 <= np.mean(covered) <= 0.97


def test_clopper_pearson_never_covers_below_its_level():
    """Exact coverage (summed over the binomial distribution) for rates across [0, 1]."""
    trials = 60
    intervals = [v.clopper_pearson(k, trials) for k in range(trials + 1)]
    for rate in np.linspace(0.01, 0.99, 99):
        pmf = stats.binom.pmf(np.arange(trials + 1), trials, rate)
        coverage = sum(p for p, i in zip(pmf, intervals, strict=True) if i.lo <= rate <= i.hi)
        assert 0.95 - 1e-9 <= coverage < 0.995


def test_mcnemar_interval_covers_the_difference_of_paired_rates():
    rng = np.random.default_rng(300)
    covered = []
    for _ in range(2000):
        latent = rng.random(120)
        a, b = latent < 0.6, latent < 0.5 + 0.3 * (rng.random(120) < 0.2)
        # P(a) = 0.6; P(b) = 0.5 + 0.2 * 0.3 = 0.56
        interval, _ = v.mcnemar(a, b)
        covered.append(interval.lo <= 0.04 <= interval.hi)
    assert np.mean(covered) >= _coverage_band(0.95, 2000)[0]


def test_hierarchical_bootstrap_carries_the_spread_between_seeds():
    """Seeds that differ widely: resampling seeds then rows covers the mean; a bootstrap of the
    pooled rows, blind to seeds, does not."""
    rng = np.random.default_rng(400)
    hierarchical, pooled = [], []
    mean_of_means = lambda groups: float(np.mean([g.mean() for g in groups]))
    for k in range(100):
        groups = [rng.normal(rng.normal(0, 1.0), 0.3, size=6) for _ in range(12)]
        h = v.hierarchical_bootstrap(groups, mean_of_means, n_resamples=250, seed=k)
        hierarchical.append(h.lo <= 0.0 <= h.hi)
        flat = v.bootstrap(np.concatenate(groups), lambda x: np.mean(x, axis=-1),
                           method="percentile", n_resamples=250, seed=k, vectorized=True)
        pooled.append(flat.lo <= 0.0 <= flat.hi)
    assert np.mean(hierarchical) >= 0.88
    assert np.mean(pooled) <= 0.7
    groups = [np.arange(4.0), np.arange(3.0)]
    assert v.hierarchical_bootstrap(groups, mean_of_means, seed=1) == \
        v.hierarchical_bootstrap(groups, mean_of_means, seed=1)


# --- unbiased MMD^2 and its permutation band -----------------------------------------------


def _naive_mmd2(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    """The U-statistic written as its definition, pair by pair."""
    k = lambda p, q: math.exp(-float(np.sum((p - q) ** 2)) / (2 * bandwidth**2))
    m, n = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    xy = sum(k(p, q) for p in x for q in y) / (m * n)
    return xx + yy - 2 * xy


def _pooled(x: np.ndarray, y: np.ndarray, bandwidth: float = 1.0) -> np.ndarray:
    z = np.vstack([x, y])
    return v.gaussian_kernel(z, z, bandwidth)


def test_mmd2_unbiased_matches_its_definition():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(9, 3)), rng.normal(0.5, 1.0, size=(7, 3))
    kernel = _pooled(x, y, 1.3)
    got = v.mmd2_unbiased(kernel[:9, :9], kernel[9:, 9:], kernel[:9, 9:])
    assert got == pytest.approx(_naive_mmd2(x, y, 1.3), rel=1e-10)
    with pytest.raises(ValueError, match="at least 2"):
        v.mmd2_unbiased(kernel[:1, :1], kernel[9:, 9:], kernel[:1, 9:])


def test_mmd2_unbiased_averages_zero_for_one_distribution():
    """Unbiased: the mean over many same-distribution draws is 0 within its standard error,
    while the biased (V-statistic) estimate sits clearly above 0."""
    rng = np.random.default_rng(6)
    unbiased, biased = [], []
    for _ in range(400):
        x, y = rng.normal(size=(30, 2)), rng.normal(size=(40, 2))
        kernel = _pooled(x, y)
        kxx, kyy, kxy = kernel[:30, :30], kernel[30:, 30:], kernel[:30, 30:]
        unbiased.append(v.mmd2_unbiased(kxx, kyy, kxy))
        biased.append(kxx.mean() + kyy.mean() - 2 * kxy.mean())
    standard_error = np.std(unbiased) / math.sqrt(len(unbiased))
    assert abs(np.mean(unbiased)) < 3 * standard_error
    assert np.mean(biased) > 10 * standard_error


def test_permutation_band_holds_same_distribution_samples_and_not_shifted_ones():
    rng = np.random.default_rng(8)
    inside = []
    for k in range(200):
        x, y = rng.normal(size=(25, 2)), rng.normal(size=(30, 2))
        band = v.mmd2_permutation_band(_pooled(x, y), 25, n_permutations=400, seed=k)
        kernel = _pooled(x, y)
        assert band.observed == pytest.approx(
            v.mmd2_unbiased(kernel[:25, :25], kernel[25:, 25:], kernel[:25, 25:]))
        inside.append(band.lo <= band.observed <= band.hi)
    assert _coverage_band(0.95, 200)[0] <= np.mean(inside) <= 0.995
    x, y = rng.normal(size=(25, 2)), rng.normal(1.5, 1.0, size=(30, 2))
    shifted = v.mmd2_permutation_band(_pooled(x, y), 25, n_permutations=400)
    assert shifted.observed > shifted.hi and shifted.p_value < 0.01
    assert shifted == v.mmd2_permutation_band(_pooled(x, y), 25, n_permutations=400)


# --- decisions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule, interval, verdict",
    [
        (Rule.above(0), (0.1, 0.5), PASS),
        (Rule.above(0), (-0.5, -0.1), FAIL),
        (Rule.above(0), (-0.1, 0.5), INCONCLUSIVE),
        (Rule.above(0), (0.0, 0.5), INCONCLUSIVE),  # touching the threshold decides nothing
        (Rule.below(1), (0.2, 0.9), PASS),
        (Rule.below(1), (1.1, 2.0), FAIL),
        (Rule.below(1), (0.9, 1.1), INCONCLUSIVE),
        (Rule.inside((0.9, 1.1)), (0.95, 1.05), PASS),  # equivalence
        (Rule.inside((0.9, 1.1)), (0.9, 1.1), PASS),  # bands include their ends
        (Rule.inside((0.9, 1.1)), (1.2, 1.4), FAIL),
        (Rule.inside((0.9, 1.1)), (1.0, 1.3), INCONCLUSIVE),
        (Rule.outside((-0.5, 0.5)), (0.6, 1.2), PASS),  # separation
        (Rule.outside((-0.5, 0.5)), (-1.2, -0.7), PASS),
        (Rule.outside((-0.5, 0.5)), (-0.2, 0.3), FAIL),
        (Rule.outside((-0.5, 0.5)), (0.3, 0.9), INCONCLUSIVE),
        (Rule.above(0), (math.nan, math.nan), INCONCLUSIVE),
        (Rule.above(0), (-math.inf, math.inf), INCONCLUSIVE),
    ],
)
def test_rule_decides_from_the_interval(rule, interval, verdict):
    assert rule.decide(*interval) == verdict


def test_non_inferiority_is_below_the_margin():
    """bitdance 2: MMD^2(diffusion) - MMD^2(softmax) below delta, even if above 0."""
    delta = 0.02
    assert Rule.below(delta).decide(0.004, 0.015) == PASS
    assert Rule.below(delta).decide(0.025, 0.04) == FAIL


def test_censored_values_never_support_a_fail():
    assert Rule.above(0, censored=True).decide(0.2, 0.9) == PASS
    assert Rule.above(0, censored=True).decide(-0.9, -0.2) == INCONCLUSIVE
    assert Rule.outside((-0.5, 0.5), censored=True).decide(-0.1, 0.1) == INCONCLUSIVE
    item = v.criterion("L* gap", "length", Interval(0.0, -0.1, 0.1, 0.99, "t"),
                       Rule.outside((-0.5, 0.5), censored=True))
    assert item.verdict == INCONCLUSIVE and "cap" in item.decides_with


def test_rule_refuses_malformed_shapes():
    with pytest.raises(ValueError, match="unknown rule"):
        Rule("greater", threshold=0)
    with pytest.raises(ValueError, match="needs a band"):
        Rule("inside_band", threshold=0)
    with pytest.raises(ValueError, match="needs a threshold"):
        Rule("above", band=(0, 1))
    with pytest.raises(ValueError, match="reversed"):
        Rule.inside((1, 0))


@pytest.mark.parametrize(
    "verdicts, all_, any_",
    [
        ([PASS, PASS], PASS, PASS),
        ([PASS, FAIL], FAIL, PASS),
        ([FAIL, FAIL], FAIL, FAIL),
        ([PASS, INCONCLUSIVE], INCONCLUSIVE, PASS),
        ([FAIL, INCONCLUSIVE], FAIL, INCONCLUSIVE),
        ([INCONCLUSIVE], INCONCLUSIVE, INCONCLUSIVE),
        ([], INCONCLUSIVE, INCONCLUSIVE),
    ],
)
def test_aggregates(verdicts, all_, any_):
    assert v.aggregate(verdicts, "all") == all_
    assert v.aggregate(verdicts, "any") == any_


def _leaf(name: str, lo: float, hi: float, rule: Rule = Rule.above(0)) -> Criterion:
    return v.criterion(name, "quote", Interval((lo + hi) / 2, lo, hi, 0.95, "t-interval"), rule)


def test_existential_of_conjunctions_eos_criterion_3():
    """PASS if (a) and (b) both pass in at least one (task, geometry); FAIL if (a) or (b)
    fails in every one; else INCONCLUSIVE."""
    def setting(a: tuple, b: tuple) -> Criterion:
        return v.combine("setting", "", [_leaf("a", *a, Rule.above(0.301)),
                                         _leaf("b", *b, Rule.below(0.01))])

    good, bad, open_ = ((0.5, 0.9), (0.0, 0.005)), ((0.0, 0.2), (0.0, 0.005)), \
        ((0.2, 0.5), (0.0, 0.005))
    claim = "large steps can leave persistent orthogonal residuals"
    assert v.combine("3", claim, [setting(*bad), setting(*good)], "any").verdict == PASS
    assert v.combine("3", claim, [setting(*bad), setting(*bad)], "any").verdict == FAIL
    pending = v.combine("3", claim, [setting(*bad), setting(*open_)], "any")
    assert pending.verdict == INCONCLUSIVE and pending.decides_with == "deciding setting"


def test_gate_withholds_a_verdict_but_never_invents_one():
    decided = _leaf("slope", 0.2, 0.4)
    assert v.gate(decided, True, "positive control") is decided
    withheld = v.gate(decided, False, "the dense bias must show slope >= 1.8")
    assert withheld.verdict == INCONCLUSIVE
    assert withheld.decides_with == "the dense bias must show slope >= 1.8"
    assert withheld.computed_verdict() == PASS
    with pytest.raises(ValueError, match="contradicts"):
        Criterion.from_dict({**_leaf("x", -0.4, -0.2).to_dict(), "verdict": PASS})


def test_criterion_refuses_malformed_shapes():
    with pytest.raises(ValueError, match="either a rule or parts"):
        Criterion("x", "q")
    with pytest.raises(ValueError, match="reversed"):
        Criterion("x", "q", 0.0, (1.0, -1.0), rule=Rule.above(0))
    with pytest.raises(ValueError, match="level"):
        Criterion("x", "q", 0.0, (0.0, 1.0), level=95, rule=Rule.above(0))
    with pytest.raises(ValueError, match="unknown verdict"):
        Criterion("x", "q", 0.0, (0.0, 1.0), rule=Rule.above(0), verdict="MAYBE")
    with pytest.raises(ValueError, match="aggregate"):
        v.combine("x", "q", [_leaf("a", 0, 1)], "most")


def test_criterion_round_trips_through_strict_json():
    nested = v.combine("3", "can leave residuals", [
        v.combine("binary/aniso", "", [_leaf("a", 0.4, 0.9), _leaf("b", -0.3, 0.2)]),
        v.criterion("one seed", "", v.t_interval([0.3]), Rule.above(0)),
        v.criterion("nan", "", Interval(math.nan, math.nan, math.nan, 0.95, "t"), Rule.below(1)),
        v.from_v1("v1 rate", 0.0, "<=", 0.0, "no collapse"),
    ], "any")
    text = json.dumps(nested.to_dict(), allow_nan=False)
    back = Criterion.from_dict(json.loads(text))
    assert back.to_dict() == nested.to_dict()
    assert back.parts[1].interval == (-math.inf, math.inf)
    assert back.parts[3].rule.band == (-math.inf, 0.0)
    assert math.isnan(back.parts[2].estimate)
    assert set(nested.to_dict()) == {"name", "quote", "estimate", "interval", "level", "method",
                                     "rule", "parts", "aggregate", "verdict", "decides_with"}


def test_from_dict_names_the_criterion_it_cannot_read():
    good = _leaf("slope", 0.2, 0.4).to_dict()
    with pytest.raises(ValueError, match="'slope'.*missing 'quote'"):
        Criterion.from_dict({k: val for k, val in good.items() if k != "quote"})
    with pytest.raises(ValueError, match="'slope'.*unknown rule"):
        Criterion.from_dict({**good, "rule": {"kind": "sideways", "threshold": 0}})
    assert Criterion.from_dict({**good, "added_later": 1}).verdict == PASS


def test_v1_criteria_keep_their_comparison():
    assert v.from_v1("ratio", 0.9, ">=", 0.9).verdict == PASS  # v1's >= passed at equality
    assert v.from_v1("ratio", 0.9, ">", 0.9).verdict == INCONCLUSIVE
    assert v.from_v1("ratio", 0.8, ">=", 0.9).verdict == FAIL
    assert v.from_v1("bias", 0.02, "<", 0.01).verdict == FAIL
    assert v.from_v1("count", 3, "==", 3).verdict == PASS
    assert v.from_v1("loss", math.nan, "<", 1.0).verdict == INCONCLUSIVE
    seeded = v.from_v1("gap", 0.1, ">", 0, measured_interval=v.t_interval([0.09, 0.1, 0.11]))
    assert seeded.verdict == PASS and seeded.method == "t-interval over 3 seeds"
    with pytest.raises(ValueError, match="unknown comparison"):
        v.from_v1("x", 1, "!=", 0)


def test_paper_verdict_and_sanity_checks_apart():
    passing, failing, open_ = _leaf("p", 0.1, 0.2), _leaf("f", -0.2, -0.1), _leaf("i", -1, 1)
    assert v.paper_verdict([passing, passing]) == PASS
    assert v.paper_verdict([passing, open_]) == INCONCLUSIVE
    assert v.paper_verdict([failing, open_, passing]) == FAIL
    assert v.paper_verdict([]) == INCONCLUSIVE
    broken = v.SanityCheck("floor", False, "loss below the exact floor")
    with pytest.raises(TypeError, match="sanity checks never count"):
        v.paper_verdict([passing, broken])
    assert v.SanityCheck.from_dict(broken.to_dict()) == broken
    assert passing.passed and not open_.passed


def test_exit_codes():
    assert [v.exit_code(x) for x in (PASS, FAIL, INCONCLUSIVE)] == [0, 3, 4]
    assert [v.exit_code(x, smoke=True) for x in (PASS, FAIL, INCONCLUSIVE)] == [0, 0, 0]
    with pytest.raises(ValueError):
        v.exit_code("MAYBE")


def test_imports_no_torch():
    """The CLI and the GUI read verdicts; importing them must not pull in torch."""
    code = "import sys, engine.verdicts; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_bootstrap_over_one_or_two_seeds_decides_nothing():
    """paired_bootstrap([0.9], [0.1]) gave the zero-width [0.8, 0.8]: a one-seed verdict."""
    from engine import verdicts

    for a, b in (([0.9], [0.1]), ([0.9, 0.7], [0.1, 0.2])):
        found = verdicts.paired_bootstrap(a, b)
        assert (found.lo, found.hi) == (-math.inf, math.inf)
    one = verdicts.hierarchical_bootstrap([np.array([0.9, 1.1, 1.0])],
                                          lambda groups: float(np.mean(np.concatenate(groups))))
    assert (one.lo, one.hi) == (-math.inf, math.inf)
    three = verdicts.paired_bootstrap([0.9, 0.8, 0.95], [0.1, 0.2, 0.15])
    assert math.isfinite(three.lo) and three.lo > 0
