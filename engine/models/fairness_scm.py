"""Causal fairness numerics: the standard fairness model, x-specific effects, the four-stage
decomposition, and plug-in and one-step debiased (doubly robust) estimators. NumPy only.

Standard fairness model (SFM): protected attribute X (binary: x0, x1), confounders Z (X <-> Z),
mediators W (X -> W, Z -> W), outcome Y (binary). Every effect here is built from

    T(a, b, c) = sum_{z,w} P(y | x_a, z, w) P(w | x_b, z) P(z | x_c)
               = E[ E[ mu(x_a, Z, W) | X = x_b, Z ] | X = x_c ],   mu(x, z, w) = P(Y = 1 | x, z, w)

    x-DE = T(1,0,0) - T(0,0,0)    x-IE = T(1,0,0) - T(1,1,0)    x-SE = T(1,1,0) - T(1,1,1)
    TV   = T(1,1,1) - T(0,0,0) = P(y | x1) - P(y | x0) = DE - IE - SE   (exactly, by telescoping)

Four stages (the generative-AI decomposition): each mechanism is taken from the real world or
from the model, f_Y first, then f_W, then f_Z:

    stage     f_Y (mu)   f_W (w | x, z)   f_Z (z | x)
    world     world      world            world
    f_Y       model      world            world        <- the standard ML setting
    f_W       model      model            world
    model     model      model            model

so every effect E has a waterfall E(world) + dE(f_Y) + dE(f_W) + dE(f_Z) = E(model).

Estimation from a world sample and a model sample (independent). Nuisances are fitted either
*saturated* (cell frequencies of discrete Z and W configurations; continuous columns discretised
first) or by *regression* (logistic regressions on one-hot/standardised features). Density ratios
between (source, x) groups come from cell counts, or from logistic classifiers between the two
groups (Bayes: p_g1(z)/p_g2(z) = odds(g1 vs g2 | z) n_g2/n_g1). The plug-in estimate of T is the
mean over the z-source rows with X = x_c of nu(Z) = E[mu(x_a, Z, W) | X = x_b, Z] (an exact sum
over w cells, or a regression of mu on Z). The one-step estimator adds the mean of the efficient
influence function, whose three parts sit on the sample that supplies each mechanism:

    Z part (on the f_Z sample):  1{X=c}/P(c) (nu(Z) - T)
    W part (on the f_W sample):  1{X=b}/P(b) [p_Z(Z|c)/p_W(Z|b)] (mu(a,Z,W) - nu(Z))
    Y part (on the f_Y sample):  1{X=a}/P(a) [p_Z(Z|c) p_W(W|b,Z) / (p_Y(Z|a) p_Y(W|a,Z))]
                                 (Y - mu(a,Z,W))

with nuisances cross-fitted over K folds. Standard errors: sqrt(sum over samples of
Var(influence) / n); 95% intervals are estimate +- 1.96 SE (the plug-in interval uses the same
influence function with full-sample nuisances).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

STAGES = ("world", "f_Y", "f_W", "model")
STAGE_SOURCES = {  # stage -> source of (f_Y, f_W, f_Z)
    "world": ("world", "world", "world"),
    "f_Y": ("model", "world", "world"),
    "f_W": ("model", "model", "world"),
    "model": ("model", "model", "model"),
}
EFFECTS = ("TV", "DE", "IE", "SE")
EFFECT_TERMS = {  # effect -> [(sign, (a, b, c))]
    "TV": [(1, (1, 1, 1)), (-1, (0, 0, 0))],
    "DE": [(1, (1, 0, 0)), (-1, (0, 0, 0))],
    "IE": [(1, (1, 0, 0)), (-1, (1, 1, 0))],
    "SE": [(1, (1, 1, 0)), (-1, (1, 1, 1))],
}
Z95 = 1.959963984540054


def effects_from_terms(T: Callable[[int, int, int], float]) -> dict[str, float]:
    return {name: sum(sign * T(*abc) for sign, abc in terms)
            for name, terms in EFFECT_TERMS.items()}


def waterfall(values: dict[str, float]) -> list[tuple[str, float, float]]:
    """(label, change, level after it) from the world through each mechanism to the model."""
    steps = [("world", values["world"], values["world"])]
    for previous, stage, label in (("world", "f_Y", "f_Y replaced"), ("f_Y", "f_W", "f_W replaced"),
                                   ("f_W", "model", "f_Z replaced")):
        steps.append((label, values[stage] - values[previous], values[stage]))
    steps.append(("model", values["model"], values["model"]))
    return steps


def telescoping_error(values: dict[str, float]) -> float:
    steps = waterfall(values)
    return abs(steps[0][1] + sum(change for _, change, _ in steps[1:-1]) - steps[-1][1])


# -- discrete models: exact effects and sampling --------------------------------------------------

@dataclass
class DiscreteModel:
    """A chain-factorised distribution over X, Z_1..Z_p, W_1..W_q, Y in that (SFM) order.

    ``cpts[j]`` has shape ``cards[:j] + (cards[j],)``: the distribution of variable j given
    every earlier variable. X is variable 0 (codes 0 = x0, 1 = x1) and Y the last (1 = positive).
    """

    names: list[str]
    roles: list[str]  # "x", "z", "w", "y"
    cards: list[int]
    cpts: list[np.ndarray]

    def __post_init__(self) -> None:
        for j, cpt in enumerate(self.cpts):
            expected = tuple(self.cards[: j + 1])
            if cpt.shape != expected:
                raise ValueError(f"{self.names[j]}: table shape {cpt.shape}, expected {expected}")
            if not np.allclose(cpt.sum(axis=-1), 1.0) or (cpt < 0).any():
                raise ValueError(f"{self.names[j]}: rows must be probability distributions")

    def index(self, role: str) -> list[int]:
        return [j for j, r in enumerate(self.roles) if r == role]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, variables) integer codes by ancestral sampling."""
        codes = np.zeros((n, len(self.cards)), dtype=np.int64)
        for j, cpt in enumerate(self.cpts):
            probs = cpt[tuple(codes[:, k] for k in range(j))] if j else np.broadcast_to(
                cpt, (n, self.cards[0]))
            cumulative = np.cumsum(probs, axis=1)
            u = rng.random(n)[:, None] * cumulative[:, -1:]
            codes[:, j] = np.minimum((u >= cumulative).sum(axis=1), self.cards[j] - 1)
        return codes

    def joint(self) -> np.ndarray:
        """The full joint probability table, shape ``cards``."""
        table = np.ones(())
        for cpt in self.cpts:
            table = table[..., None] * cpt
        return table

    def conditionals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """P(z|x) (2, Kz), P(w|x,z) (2, Kz, Kw), P(y=1|x,z,w) (2, Kz, Kw) over joint cells."""
        joint = self.joint()
        kz = int(np.prod([self.cards[j] for j in self.index("z")], dtype=np.int64))
        kw = int(np.prod([self.cards[j] for j in self.index("w")], dtype=np.int64))
        flat = joint.reshape(2, kz, kw, self.cards[-1])
        p_xzw = flat.sum(axis=3)
        p_xz = p_xzw.sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            p_z = p_xz / p_xz.sum(axis=1, keepdims=True)
            p_w = p_xzw / p_xz[:, :, None]
            mu = flat[..., 1] / p_xzw
        return p_z, np.nan_to_num(p_w), np.nan_to_num(mu)


def exact_T(mechanisms: dict[str, DiscreteModel], sources: tuple[str, str, str],
            a: int, b: int, c: int) -> float:
    """T(a, b, c) with f_Y, f_W, f_Z taken from the named models (exact sums over cells)."""
    _, _, mu = mechanisms[sources[0]].conditionals()
    _, p_w, _ = mechanisms[sources[1]].conditionals()
    p_z, _, _ = mechanisms[sources[2]].conditionals()
    return float(np.einsum("zw,zw,z->", mu[a], p_w[b], p_z[c]))


def exact_effects(mechanisms: dict[str, DiscreteModel], stages: tuple[str, ...] = STAGES
                  ) -> dict[str, dict[str, float]]:
    """effect -> stage -> value, from the models' tables."""
    out: dict[str, dict[str, float]] = {effect: {} for effect in EFFECTS}
    for stage in stages:
        values = effects_from_terms(
            lambda a, b, c, stage=stage: exact_T(mechanisms, STAGE_SOURCES[stage], a, b, c))
        for effect, value in values.items():
            out[effect][stage] = value
    return out


# -- samples and nuisances ------------------------------------------------------------------------

@dataclass
class Sample:
    """One data set in estimation form. Saturated nuisances use the cell codes; regression
    nuisances the feature matrices."""

    x: np.ndarray  # (n,) 0/1
    y: np.ndarray  # (n,) 0/1 float
    z_cell: np.ndarray | None = None  # (n,) joint Z cell
    w_cell: np.ndarray | None = None  # (n,) joint W cell
    z_feat: np.ndarray | None = None  # (n, p)
    w_feat: np.ndarray | None = None  # (n, q)
    kz: int = 1
    kw: int = 1

    def __len__(self) -> int:
        return len(self.x)

    def take(self, rows: np.ndarray) -> Sample:
        pick = lambda a: None if a is None else a[rows]
        return Sample(self.x[rows], self.y[rows], pick(self.z_cell), pick(self.w_cell),
                      pick(self.z_feat), pick(self.w_feat), self.kz, self.kw)


def sample_from_codes(model: DiscreteModel, codes: np.ndarray) -> Sample:
    """Codes of a DiscreteModel (n, variables) -> a saturated Sample (mixed-radix cells)."""
    z_cell = _cells(codes, model.cards, model.index("z"))
    w_cell = _cells(codes, model.cards, model.index("w"))
    kz = int(np.prod([model.cards[j] for j in model.index("z")], dtype=np.int64))
    kw = int(np.prod([model.cards[j] for j in model.index("w")], dtype=np.int64))
    return Sample(x=codes[:, 0], y=codes[:, -1].astype(float), z_cell=z_cell, w_cell=w_cell,
                  kz=kz, kw=kw)


def _cells(codes: np.ndarray, cards: list[int], columns: list[int]) -> np.ndarray:
    cell = np.zeros(len(codes), dtype=np.int64)
    for j in columns:
        cell = cell * cards[j] + codes[:, j]
    return cell


Group = tuple[str, int]  # (source, x)


class SaturatedNuisances:
    """Cell frequencies: mu, P(w | x, z), P(z | x) per source, exact nested sums over w.

    Empty cells: mu falls back to the (x, z) mean, then the x mean; a density in an empty
    denominator cell gives weight 0 (counted in ``empty_cells``).
    """

    kind = "saturated"

    def __init__(self, samples: dict[str, Sample]) -> None:
        self.tables = {}
        self.empty_cells = 0
        for source, s in samples.items():
            n_xzw = np.zeros((2, s.kz, s.kw))
            y_xzw = np.zeros((2, s.kz, s.kw))
            np.add.at(n_xzw, (s.x, s.z_cell, s.w_cell), 1.0)
            np.add.at(y_xzw, (s.x, s.z_cell, s.w_cell), s.y)
            n_xz = n_xzw.sum(axis=2)
            n_x = n_xz.sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                mu = y_xzw / n_xzw
                mu_xz = y_xzw.sum(axis=2) / n_xz
                mu_x = y_xzw.sum(axis=(1, 2)) / n_x
                mu = np.where(n_xzw > 0, mu, np.where(n_xz[:, :, None] > 0, mu_xz[:, :, None],
                                                      mu_x[:, None, None]))
                p_w = np.nan_to_num(n_xzw / n_xz[:, :, None])
                p_z = np.nan_to_num(n_xz / n_x[:, None])
            self.empty_cells += int((n_xzw == 0).sum())
            self.tables[source] = {"mu": np.nan_to_num(mu), "p_w": p_w, "p_z": p_z}

    def mu(self, source: str, a: int, s: Sample) -> np.ndarray:
        return self.tables[source]["mu"][a, s.z_cell, s.w_cell]

    def nu(self, sy: str, sw: str, a: int, b: int, s: Sample) -> np.ndarray:
        table = (self.tables[sy]["mu"][a] * self.tables[sw]["p_w"][b]).sum(axis=1)
        return table[s.z_cell]

    def z_ratio(self, g1: Group, g2: Group, s: Sample) -> np.ndarray:
        num = self.tables[g1[0]]["p_z"][g1[1], s.z_cell]
        den = self.tables[g2[0]]["p_z"][g2[1], s.z_cell]
        return _safe_ratio(num, den)

    def w_ratio(self, g1: Group, g2: Group, s: Sample) -> np.ndarray:
        num = self.tables[g1[0]]["p_w"][g1[1], s.z_cell, s.w_cell]
        den = self.tables[g2[0]]["p_w"][g2[1], s.z_cell, s.w_cell]
        return _safe_ratio(num, den)


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


class RegressionNuisances:
    """Logistic regressions: mu per (source, x) on [Z, W] features; nu by a fractional logistic
    regression of mu(x_a, Z, W) on Z among the f_W sample's X = x_b rows; density ratios from
    logistic classifiers between the two (source, x) groups. Fitted lazily and cached."""

    kind = "regression"

    def __init__(self, samples: dict[str, Sample], ridge: float = 1e-3) -> None:
        self.samples = samples
        self.ridge = ridge
        self._cache: dict[tuple, np.ndarray] = {}

    def _fit(self, key: tuple, features: np.ndarray, target: np.ndarray) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = fit_logistic(features, target, self.ridge)
        return self._cache[key]

    def _zw(self, s: Sample) -> np.ndarray:
        return np.hstack([s.z_feat, s.w_feat])

    def _mu_coef(self, source: str, a: int) -> np.ndarray:
        s = self.samples[source]
        rows = s.x == a
        return self._fit(("mu", source, a), self._zw(s)[rows], s.y[rows])

    def mu(self, source: str, a: int, s: Sample) -> np.ndarray:
        return predict_logistic(self._mu_coef(source, a), self._zw(s))

    def nu(self, sy: str, sw: str, a: int, b: int, s: Sample) -> np.ndarray:
        key = ("nu", sy, sw, a, b)
        if key not in self._cache:
            source = self.samples[sw]
            rows = source.x == b
            target = self.mu(sy, a, source.take(rows))
            self._fit(key, source.z_feat[rows], target)
        return predict_logistic(self._cache[key], s.z_feat)

    def _odds(self, kind: str, g1: Group, g2: Group, s: Sample) -> tuple[np.ndarray, float]:
        """odds(g1 vs g2 | features) and n_g2 / n_g1 in the classifier's training rows."""
        picks = [self.samples[g[0]].take(self.samples[g[0]].x == g[1]) for g in (g1, g2)]
        feats = [p.z_feat if kind == "z" else self._zw(p) for p in picks]
        coef = self._fit(("odds", kind, g1, g2), np.vstack(feats),
                         np.r_[np.ones(len(feats[0])), np.zeros(len(feats[1]))])
        logit = _design(s.z_feat if kind == "z" else self._zw(s)) @ coef
        return np.exp(np.clip(logit, -30, 30)), len(feats[1]) / max(len(feats[0]), 1)

    def z_ratio(self, g1: Group, g2: Group, s: Sample) -> np.ndarray:
        if g1 == g2:
            return np.ones(len(s))
        odds, prior = self._odds("z", g1, g2, s)
        return odds * prior

    def w_ratio(self, g1: Group, g2: Group, s: Sample) -> np.ndarray:
        if g1 == g2:
            return np.ones(len(s))
        odds_zw, _ = self._odds("zw", g1, g2, s)
        odds_z, _ = self._odds("z", g1, g2, s)
        return odds_zw / odds_z


def _design(features: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((len(features), 1)), features])


def fit_logistic(features: np.ndarray, target: np.ndarray, ridge: float = 1e-3,
                 max_iter: int = 50, tol: float = 1e-9) -> np.ndarray:
    """Logistic regression (targets in [0, 1], fractional allowed) by Newton's method with a
    small ridge on the slopes; returns [intercept, slopes]."""
    X = _design(np.asarray(features, dtype=np.float64))
    y = np.asarray(target, dtype=np.float64)
    penalty = np.full(X.shape[1], ridge * len(y))
    penalty[0] = 0.0
    mean = np.clip(y.mean(), 1e-6, 1 - 1e-6)
    coef = np.zeros(X.shape[1])
    coef[0] = math.log(mean / (1 - mean))
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(X @ coef, -30, 30)))
        gradient = X.T @ (y - p) - penalty * coef
        hessian = (X * (p * (1 - p))[:, None]).T @ X + np.diag(penalty) + 1e-10 * np.eye(len(coef))
        step = np.linalg.solve(hessian, gradient)
        coef = coef + step
        if np.abs(step).max() < tol:
            break
    return coef


def predict_logistic(coef: np.ndarray, features: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(_design(features) @ coef, -30, 30)))


# -- estimators ----------------------------------------------------------------------------------

@dataclass
class Estimate:
    value: float
    se: float

    @property
    def ci(self) -> tuple[float, float]:
        return self.value - Z95 * self.se, self.value + Z95 * self.se


@dataclass
class Decomposition:
    """effect -> stage -> Estimate, for the plug-in and the one-step (debiased) estimator."""

    plugin: dict[str, dict[str, Estimate]]
    debiased: dict[str, dict[str, Estimate]]
    stages: tuple[str, ...]
    backend: str
    notes: list[str] = field(default_factory=list)


def _term_parts(nuis, samples: dict[str, Sample], px: dict[str, np.ndarray],
                sources: tuple[str, str, str], a: int, b: int, c: int,
                rows: dict[str, np.ndarray] | None = None, max_weight: float = np.inf
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per sample: (1{X=c}/P(c) nu(Z) on the f_Z sample, the W and Y correction terms on the
    f_W and f_Y samples). ``rows`` restricts each sample to those rows (cross-fitting)."""
    sy, sw, sz = sources
    plug, correction = {}, {}
    for name, full in samples.items():
        s = full if rows is None else full.take(rows[name])
        plug[name] = np.zeros(len(s))
        correction[name] = np.zeros(len(s))
        if name == sz:
            plug[name] += (s.x == c) / px[sz][c] * nuis.nu(sy, sw, a, b, s)
        if name == sw:
            on = s.x == b
            if on.any():
                t = s.take(on)
                rho = np.minimum(nuis.z_ratio((sz, c), (sw, b), t), max_weight)
                correction[name][on] += rho / px[sw][b] * (nuis.mu(sy, a, t)
                                                           - nuis.nu(sy, sw, a, b, t))
        if name == sy:
            on = s.x == a
            if on.any():
                t = s.take(on)
                omega = (nuis.z_ratio((sz, c), (sy, a), t) * nuis.w_ratio((sw, b), (sy, a), t))
                omega = np.minimum(omega, max_weight)
                correction[name][on] += omega / px[sy][a] * (t.y - nuis.mu(sy, a, t))
    return plug, correction


def decompose(samples: dict[str, Sample], backend: str = "saturated", folds: int = 5,
              rng: np.random.Generator | None = None, stages: tuple[str, ...] = STAGES,
              ridge: float = 1e-3, max_weight: float = 1e3,
              check_cancelled: Callable[[], None] = lambda: None,
              on_fold: Callable[[int], None] | None = None) -> Decomposition:
    """Plug-in and cross-fitted one-step estimates of every effect at every stage."""
    rng = rng or np.random.default_rng(0)
    make = (lambda parts: SaturatedNuisances(parts)) if backend == "saturated" else (
        lambda parts: RegressionNuisances(parts, ridge))
    px = {name: np.bincount(s.x, minlength=2) / len(s) for name, s in samples.items()}
    for name, p in px.items():
        if (p == 0).any():
            raise ValueError(f"the {name} sample has no rows with X = x{int(np.argmin(p))}")
    terms = sorted({abc for t in EFFECT_TERMS.values() for _, abc in t})
    keys = [(stage, abc) for stage in stages for abc in terms]

    full = make(samples)
    plug_rows = {key: _term_parts(full, samples, px, STAGE_SOURCES[key[0]], *key[1],
                                  max_weight=max_weight) for key in keys}
    fold_of = {name: rng.permutation(len(s)) % folds for name, s in samples.items()}
    dr_rows = {key: ({n: np.zeros(len(s)) for n, s in samples.items()},
                     {n: np.zeros(len(s)) for n, s in samples.items()}) for key in keys}
    for k in range(folds):
        check_cancelled()
        train = {name: samples[name].take(fold_of[name] != k) for name in samples}
        held = {name: fold_of[name] == k for name in samples}
        nuis = make(train)
        for key in keys:
            plug, corr = _term_parts(nuis, samples, px, STAGE_SOURCES[key[0]], *key[1], held,
                                     max_weight)
            for name in samples:
                dr_rows[key][0][name][held[name]] = plug[name]
                dr_rows[key][1][name][held[name]] = corr[name]
        if on_fold is not None:
            on_fold(k + 1)

    def combine(rows_by_key, with_correction: bool) -> dict[str, dict[str, Estimate]]:
        out: dict[str, dict[str, Estimate]] = {effect: {} for effect in EFFECTS}
        for stage in stages:
            sz = STAGE_SOURCES[stage][2]
            value, influence = {}, {}
            for abc in terms:
                plug, corr = rows_by_key[stage, abc]
                psi = plug[sz].mean() + (sum(corr[n].mean() for n in samples)
                                         if with_correction else 0.0)
                c = abc[2]
                value[abc] = psi
                influence[abc] = {n: corr[n] + (plug[n] - (samples[n].x == c) / px[n][c] * psi
                                                if n == sz else 0.0) for n in samples}
            for effect, parts in EFFECT_TERMS.items():
                est = sum(sign * value[abc] for sign, abc in parts)
                var = sum(np.var(sum(sign * influence[abc][n] for sign, abc in parts))
                          / len(samples[n]) for n in samples)
                out[effect][stage] = Estimate(float(est), float(math.sqrt(var)))
        return out

    notes = []
    if isinstance(full, SaturatedNuisances) and full.empty_cells:
        notes.append(f"{full.empty_cells} empty (x, z, w) cells over the samples; their mu "
                     "falls back to the (x, z) or x mean")
    return Decomposition(plugin=combine({k: (p, c) for k, (p, c) in plug_rows.items()}, False),
                         debiased=combine(dr_rows, True), stages=stages, backend=backend,
                         notes=notes)


def identity_error(values: dict[str, dict[str, float]], stages: tuple[str, ...]) -> float:
    """Largest |TV - (DE - IE - SE)| over the stages."""
    return max(abs(values["TV"][s] - (values["DE"][s] - values["IE"][s] - values["SE"][s]))
               for s in stages)


def point_values(est: dict[str, dict[str, Estimate]]) -> dict[str, dict[str, float]]:
    return {effect: {stage: e.value for stage, e in by_stage.items()}
            for effect, by_stage in est.items()}


# -- the reproduction's binary SCMs -------------------------------------------------------------

def bernoulli_cpt(p_one: np.ndarray) -> np.ndarray:
    """Stack P(v = 0), P(v = 1) on a new last axis."""
    p_one = np.asarray(p_one, dtype=np.float64)
    return np.stack([1 - p_one, p_one], axis=-1)


def binary_sfm(p_x: float, z: Callable, w1: Callable, w2: Callable, y: Callable
               ) -> DiscreteModel:
    """X, Z, W1, W2, Y all binary; each callable maps its parents' codes to P(v = 1)."""
    grid = lambda *cards: np.array(list(itertools.product(*[range(c) for c in cards])))
    g1, g2, g3, g4 = grid(2), grid(2, 2), grid(2, 2, 2), grid(2, 2, 2, 2)
    cpts = [
        bernoulli_cpt(p_x),
        bernoulli_cpt([z(*row) for row in g1]).reshape(2, 2),
        bernoulli_cpt([w1(*row) for row in g2]).reshape(2, 2, 2),
        bernoulli_cpt([w2(*row) for row in g3]).reshape(2, 2, 2, 2),
        bernoulli_cpt([y(*row) for row in g4]).reshape(2, 2, 2, 2, 2),
    ]
    return DiscreteModel(["X", "Z", "W1", "W2", "Y"], ["x", "z", "w", "w", "y"], [2] * 5, cpts)


def reproduction_world() -> DiscreteModel:
    """The real world of the reproduction (fixed before any estimate was run)."""
    return binary_sfm(
        0.5,
        z=lambda x: 0.35 + 0.25 * x,
        w1=lambda x, z: 0.30 + 0.20 * x + 0.20 * z,
        w2=lambda x, z, w1: 0.25 + 0.15 * x + 0.10 * z + 0.30 * w1,
        y=lambda x, z, w1, w2: 0.15 + 0.10 * x + 0.15 * z + 0.20 * w1 + 0.15 * w2)


def reproduction_model() -> DiscreteModel:
    """The generative model: every mechanism perturbed (larger direct effect, other mediation,
    stronger X-Z association)."""
    return binary_sfm(
        0.5,
        z=lambda x: 0.30 + 0.35 * x,
        w1=lambda x, z: 0.30 + 0.30 * x + 0.10 * z,
        w2=lambda x, z, w1: 0.20 + 0.20 * x + 0.15 * z + 0.25 * w1,
        y=lambda x, z, w1, w2: 0.10 + 0.20 * x + 0.10 * z + 0.25 * w1 + 0.10 * w2)
