"""The metric store behind the CloudWatch API: raw samples, bounded in memory.

``MetricStore`` is the sink the fleet gives its samples to (``MetricSink`` in
``emulator/metrics.py``). Samples are kept raw (a real epoch second and a value, 16 bytes each,
in numpy chunks) so that every statistic, including percentiles, is exact over any window and
any period down to one emulated second.

Retention (the constants below, all [U]: CloudWatch keeps
one-second data for 3 hours and one-minute data for 15 days, an emulator cannot): per series at
most ``MAX_SAMPLES_PER_SERIES`` samples and ``RETENTION_EMULATED_S`` emulated seconds; at most
``MAX_SERIES`` series. Oldest samples go first.
"""

from __future__ import annotations

import logging
import math
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from emulator.clock import Clock
from emulator.metrics import SAMPLED_AT

log = logging.getLogger(__name__)

CHUNK = 4096
MAX_SAMPLES_PER_SERIES = 64 * CHUNK  # 256 Ki samples, 4 MiB per series  [U]
MAX_SERIES = 10_000  # [U]
RETENTION_EMULATED_S = 24 * 3600.0  # [U]

Dimensions = tuple[tuple[str, str], ...]


class SeriesKey(NamedTuple):
    namespace: str
    metric_name: str
    dimensions: Dimensions  # sorted by name: CloudWatch treats each combination as one metric

    @staticmethod
    def of(namespace: str, metric_name: str, dimensions: Mapping[str, str]) -> SeriesKey:
        return SeriesKey(namespace, metric_name, tuple(sorted(dimensions.items())))


class _Series:
    """A series' samples in chunks of CHUNK (appended to at C speed: every invocation adds six
    to eight samples); whole chunks expire."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self.chunks: list[tuple[array[float], array[float]]] = [(array("d"), array("d"))]
        # The latest time in each chunk: a read skips the chunks that end before its window
        # (an alarm reads its last few minutes of a series of 256 Ki samples every minute).
        # Taken when a chunk is full (once per CHUNK samples, not per append: the hot path);
        # the open chunk, the last, is read always (inf).
        self.latest: list[float] = [math.inf]
        self.last_time = 0.0

    def append(self, when: float, value: float) -> bool:
        """Add one sample; True when it started a new chunk (the moment to expire old ones)."""
        times, values = self.chunks[-1]
        started = len(times) == CHUNK
        if started:
            self.latest[-1] = max(times)  # full: later samples go to the next chunk
            times, values = array("d"), array("d")
            self.chunks.append((times, values))
            self.latest.append(math.inf)
            if len(self.chunks) > MAX_SAMPLES_PER_SERIES // CHUNK:
                del self.chunks[0], self.latest[0]
        times.append(when)
        values.append(value)
        if when > self.last_time:
            self.last_time = when
        return started

    def expire(self, before: float) -> None:
        """Drop whole chunks older than ``before`` (a partly expired chunk stays until full)."""
        while len(self.chunks) > 1 and self.latest[0] < before:
            del self.chunks[0], self.latest[0]

    def window(self, start: float, end: float) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        # Copies (the caller holds the store's lock): an array viewed by numpy cannot grow.
        chunks = [c for c, latest in zip(self.chunks, self.latest, strict=True)
                  if latest >= start] or self.chunks[-1:]
        times = np.concatenate([np.frombuffer(t, dtype=np.float64) for t, _v in chunks])
        values = np.concatenate([np.frombuffer(v, dtype=np.float64) for _t, v in chunks])
        keep = (times >= start) & (times < end)
        return times[keep], values[keep]


class MetricStore:
    """Samples by (namespace, metric, dimensions); times are real epoch seconds."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._series: dict[SeriesKey, _Series] = {}
        self._lock = threading.Lock()
        self._refused = 0

    def clear(self) -> int:
        """Every sample of every series forgotten; how many series there were."""
        with self._lock:
            count = len(self._series)
            self._series.clear()
            self._refused = 0
        return count

    def record(self, namespace: str, metric_name: str, dimensions: Mapping[str, str],
               value: float, unit: str) -> None:
        """One sample, stamped now."""
        self.record_many(dimensions, ((namespace, unit, metric_name, value),))

    def record_many(self, dimensions: Mapping[str, str],
                    samples: Sequence[tuple[str, str, str, float]]) -> None:
        """The fleet's metric sink (``emulator.metrics.MetricSink``): samples (namespace, unit,
        metric name, value) under one set of dimensions, stamped now (at ``SAMPLED_AT`` where
        it is set: a periodic sample's tick). An invocation records six to nine at once, so
        they share one clock reading and one lock."""
        dims: Dimensions = tuple(sorted(dimensions.items()))
        at = SAMPLED_AT.get()
        now = self.clock.now() if at is None else at
        series_of = self._series
        with self._lock:
            for namespace, unit, metric_name, value in samples:
                # A plain tuple finds the SeriesKey it equals, for less than a SeriesKey costs.
                series = series_of.get((namespace, metric_name, dims))  # type: ignore[call-overload]  # keys are SeriesKey
                if series is None:
                    if len(self._series) >= MAX_SERIES:
                        self._refused += 1
                        if self._refused == 1:
                            log.warning("metric store full (%d series): new series dropped",
                                        MAX_SERIES)
                        continue
                    key = SeriesKey(namespace, metric_name, dims)
                    series = series_of[key] = _Series(unit)
                if series.append(now, float(value)):
                    series.expire(now - self.clock.real_duration(RETENTION_EMULATED_S))

    def record_at(self, namespace: str, metric_name: str, dimensions: Mapping[str, str],
                  when: float, values: Sequence[float], unit: str) -> None:
        """Samples stamped ``when`` (real epoch seconds): PutMetricData's, which may name a
        past moment. A series keeps the unit of its first sample; samples of another unit are
        not mixed in (CloudWatch keeps them apart; a read asking for a unit gets its own)."""
        key = SeriesKey.of(namespace, metric_name, dimensions)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                if len(self._series) >= MAX_SERIES:
                    self._refused += 1
                    return
                series = self._series[key] = _Series(unit)
            for value in values:
                if series.append(when, float(value)):
                    now = self.clock.now()
                    series.expire(now - self.clock.real_duration(RETENTION_EMULATED_S))

    def samples(self, key: SeriesKey, start: float, end: float,
                unit: str | None = None) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        """Times and values in the real interval [start, end); nothing if ``unit`` differs."""
        with self._lock:
            series = self._series.get(key)
            if series is None or (unit is not None and unit != series.unit):
                return np.empty(0), np.empty(0)
            return series.window(start, end)

    def unit(self, key: SeriesKey) -> str | None:
        with self._lock:
            series = self._series.get(key)
            return series.unit if series is not None else None

    def keys(self, active_since: float | None = None) -> Iterator[SeriesKey]:
        with self._lock:
            items = list(self._series.items())
        for key, series in items:
            if active_since is None or series.last_time >= active_since:
                yield key
