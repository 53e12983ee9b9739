"""Property tests: bus bandwidth arithmetic, counter rates, threshold logic."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuhealth.active.probes import run_probes
from gpuhealth.bandwidth import (
    algorithm_bandwidth,
    allreduce_bus_bandwidth,
    allreduce_bus_factor,
)
from gpuhealth.history import CounterHistory
from gpuhealth.models import MODELS, get_model
from gpuhealth.report import CheckStatus
from gpuhealth.thresholds import DEFAULTS, Thresholds, UnknownThresholdError

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
ranks = st.integers(min_value=1, max_value=100_000)
bandwidths = st.floats(min_value=0, max_value=1e5, allow_nan=False)


@given(ranks, bandwidths)
def test_busbw_is_algbw_times_two_n_minus_one_over_n(n: int, algbw: float) -> None:
    assert allreduce_bus_bandwidth(algbw_gbps=algbw, ranks=n) == pytest.approx(
        algbw * 2 * (n - 1) / n
    )


@given(ranks)
def test_bus_factor_is_below_two_and_grows_with_ranks(n: int) -> None:
    assert 0 <= allreduce_bus_factor(n) < 2
    assert allreduce_bus_factor(n + 1) > allreduce_bus_factor(n)


def test_eight_ranks_factor_matches_nccl_tests() -> None:
    # 261.48 GB/s algbw on 8 GPUs is printed by nccl-tests as 457.59 GB/s busbw.
    assert allreduce_bus_bandwidth(algbw_gbps=261.48, ranks=8) == pytest.approx(457.59)


def test_algorithm_bandwidth_refuses_zero_time() -> None:
    with pytest.raises(ValueError, match="positive"):
        algorithm_bandwidth(size_bytes=1, seconds=0)


@given(
    st.floats(min_value=0, max_value=1e6),
    st.lists(st.integers(min_value=1, max_value=600), min_size=1, max_size=30),
)
def test_rate_of_a_linear_counter_is_its_slope(slope: float, steps: list[int]) -> None:
    history = CounterHistory(window=datetime.timedelta(minutes=10))
    now, value = T0, 0.0
    assert history.rate_per_second("c", now=now, value=value) is None
    rate = None
    for step in steps:
        now += datetime.timedelta(seconds=step)
        value += slope * step
        rate = history.rate_per_second("c", now=now, value=value)
    assert rate == pytest.approx(slope, rel=1e-9, abs=1e-9)


def test_counter_reset_restarts_the_rate() -> None:
    history = CounterHistory(window=datetime.timedelta(minutes=10))
    history.rate_per_second("c", now=T0, value=1000)
    after_reset = history.rate_per_second("c", now=T0 + datetime.timedelta(seconds=60), value=5)
    assert after_reset is None


def test_unknown_threshold_override_is_refused() -> None:
    with pytest.raises(UnknownThresholdError, match=r"ecc\.sbe_per_hour_wran"):
        Thresholds({"ecc.sbe_per_hour_wran": 5})


@given(st.sampled_from(sorted(DEFAULTS)), st.floats(min_value=0, max_value=1e9))
def test_overrides_replace_only_their_threshold(name: str, value: float) -> None:
    thresholds = Thresholds({name: value})
    assert thresholds[name] == value
    assert all(thresholds[other] == DEFAULTS[other].default for other in DEFAULTS if other != name)


class FixedProbes:
    name = "fixed"

    def __init__(self, value: float) -> None:
        self.value = value

    def gemm_tflops(self, gpu: int) -> float:
        return self.value

    def hbm_gbps(self, gpu: int) -> float:
        return self.value

    def h2d_gbps(self, gpu: int) -> float:
        return self.value

    def allreduce_busbw_gbps(self) -> float:
        return self.value


@given(st.sampled_from(sorted(MODELS)), st.floats(min_value=0, max_value=5000))
def test_a_probe_fails_exactly_when_below_its_floor(model: str, value: float) -> None:
    gpu_model = get_model(model)
    results = run_probes(FixedProbes(value), suite="full", model=gpu_model, gpus=[0, 1])
    floors = {
        "gemm": gpu_model.gemm_floor_tflops,
        "hbm": gpu_model.hbm_floor_gbps,
        "pcie-bandwidth": gpu_model.pcie_floor_gbps,
        "nccl-allreduce": gpu_model.nccl_intra_floor_gbps,
    }
    for result in results:
        expected = CheckStatus.FAIL if value < floors[result.name] else CheckStatus.PASS
        assert result.status is expected, result
