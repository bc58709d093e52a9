"""The interval behind "beats": seed and probe noise, as a statistician would compute it."""

from __future__ import annotations

import math

import pytest
from scipy.stats import t

from recipe_engine.report.significance import Accuracies, difference


def test_one_seed_is_probe_noise_only_with_the_normal_quantile():
    a, b = Accuracies((0.9,), 96), Accuracies((0.5,), 96)
    found = difference(a, b)
    pa, pb = (0.9 * 96 + 1) / 98, (0.5 * 96 + 1) / 98  # Agresti-Caffo: +1 success, +1 failure
    half = 1.959964 * math.sqrt(pa * (1 - pa) / 98 + pb * (1 - pb) / 98)
    assert not found.training_measured
    assert found.value == pytest.approx(0.4)
    assert (found.low, found.high) == pytest.approx((0.4 - half, 0.4 + half), abs=1e-6)
    assert found.significant


def test_seeds_add_their_variance_with_welch_satterthwaite_degrees_of_freedom():
    a, b = Accuracies((0.5, 0.7, 0.6), 48), Accuracies((0.55, 0.65, 0.75), 48)
    found = difference(b, a)
    seed = 0.01 / 3  # each: sample variance 0.01 over three seeds
    probes = sum(p * (1 - p) / 50 for p in ((0.65 * 48 + 1) / 50, (0.6 * 48 + 1) / 50))
    variance = 2 * seed + probes
    freedom = variance**2 / (2 * seed**2 / 2)  # the binomial terms: infinite freedom
    half = t.ppf(0.975, freedom) * math.sqrt(variance)
    assert found.training_measured and found.value == pytest.approx(0.05)
    assert (found.low, found.high) == pytest.approx((0.05 - half, 0.05 + half))
    assert not found.significant


def test_a_t_quantile_from_a_printed_table():
    # Student's t, two-sided 95%, 1 degree of freedom: 12.706 (any statistics textbook).
    a, b = Accuracies((0.2, 0.4), 10**9), Accuracies((0.1, 0.1), 10**9)
    found = difference(a, b)  # probes so many that their noise vanishes; b has no spread
    se = math.sqrt(statistics_variance((0.2, 0.4)) / 2)
    assert found.high - found.value == pytest.approx(12.706 * se, rel=1e-3)  # 1 d.o.f.


def statistics_variance(values):
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def test_perfect_scores_still_carry_probe_noise():
    found = difference(Accuracies((1.0,), 96), Accuracies((1.0,), 96))
    assert found.value == 0 and found.low < 0 < found.high and not found.significant
