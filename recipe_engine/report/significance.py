"""Is one recipe's held-out accuracy above another's, beyond training and probe noise?

Two sources of noise separate a measured accuracy from the recipe's true one:
- training noise: another seed (LoRA initialisation, data order, dropout) trains other
  weights; measured by the spread of the per-seed accuracies (sample variance / seeds);
- probe noise: the held-out probes are a finite sample of the task; a binomial variance
  p(1-p)/n with Agresti-Caffo's adjustment (one success and one failure added), so that an
  accuracy of 0% or 100% does not claim zero noise.

The difference of two recipes' mean accuracies gets a 95% Welch interval: the four variances
added (unpaired: the recipes share probes, which this ignores, on the cautious side) and
Student's t at the Welch-Satterthwaite degrees of freedom of the seed variances (the binomial
terms are known-variance, infinite degrees of freedom). The difference is significant when
the interval excludes zero. With one seed per recipe the training noise is unmeasured: the
interval holds probe noise only and says so.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
METHOD = (
    "95% Welch interval of the difference of mean accuracies: seed variance plus binomial "
    "probe variance (Agresti-Caffo), t at Welch-Satterthwaite degrees of freedom"
)
PROBES_ONLY = (
    "95% interval of the difference from binomial probe variance (Agresti-Caffo) only: "
    "training noise unmeasured with one seed"
)


@dataclass(frozen=True)
class Accuracies:
    """One recipe's held-out accuracy per seed, each on `probes` probes."""

    per_seed: tuple[float, ...]
    probes: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.per_seed)

    @property
    def seeds(self) -> int:
        return len(self.per_seed)

    def seed_variance(self) -> float | None:
        """Variance of the mean over seeds; None with one seed (unmeasured)."""
        if self.seeds < 2:
            return None
        return statistics.variance(self.per_seed) / self.seeds

    def probe_variance(self) -> float:
        """Binomial variance of an accuracy on these probes, Agresti-Caffo adjusted."""
        adjusted = (self.mean * self.probes + 1) / (self.probes + 2)
        return adjusted * (1 - adjusted) / (self.probes + 2)


@dataclass(frozen=True)
class Difference:
    """`a.mean - b.mean` with its 95% interval, in accuracy units (0.05 = 5 points)."""

    value: float
    low: float
    high: float
    training_measured: bool  # False: one seed, the interval holds probe noise only

    @property
    def significant(self) -> bool:
        return self.low > 0 or self.high < 0

    def points(self) -> str:
        """ "+12 points [+5..+19]"."""
        return f"{self.value * 100:+.0f} points [{self.low * 100:+.0f}..{self.high * 100:+.0f}]"


def difference(a: Accuracies, b: Accuracies) -> Difference:
    """The 95% interval of `a.mean - b.mean` (see the module docstring)."""
    seed_variances = [(x.seed_variance(), x.seeds - 1) for x in (a, b)]
    measured = all(variance is not None for variance, _ in seed_variances)
    seed_parts = [(v, df) for v, df in seed_variances if v is not None] if measured else []
    variance = sum(v for v, _ in seed_parts) + a.probe_variance() + b.probe_variance()
    half = _critical(variance, seed_parts) * math.sqrt(variance)
    value = a.mean - b.mean
    return Difference(value, value - half, value + half, measured)


def _critical(variance: float, seed_parts: Sequence[tuple[float, int]]) -> float:
    """Student's t quantile at the Welch-Satterthwaite degrees of freedom (normal when the
    seed variances are zero or unmeasured)."""
    from scipy.stats import norm, t

    quantile = 0.5 + CONFIDENCE / 2
    spread = sum(v * v / df for v, df in seed_parts if v > 0)
    if spread == 0:
        return float(norm.ppf(quantile))
    return float(t.ppf(quantile, variance * variance / spread))
