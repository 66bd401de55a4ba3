"""Client quotas, Kafka's model: which quota applies to a (user, client id) and how long to throttle.

Three quota keys live in the ``users``/``clients`` config entities (``/config/users/<user>``,
``/config/users/<user>/clients/<client-id>``, ``/config/clients/<client-id>``, ``<default>`` for
defaults): ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per second per broker) and
``request_percentage`` (a share of one request handler's time, in percent per second).

Precedence (Kafka's ``ClientQuotaManager``), the first entity that sets the key wins::

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

Usage is measured per *quota group*, Kafka's metric tags: the user and/or client id the winning
entity is keyed on (a default entity stands for each user/client on its own, so every client under
``/config/clients/<default>`` gets its own budget, while all client ids of a user quota'd at
``/config/users/<user>`` share one).

Rates are Kafka's ``Rate`` over a ``SampledStat``: ``quota.window.num`` (11) samples of
``quota.window.size.seconds`` (1 s); the rate is the sum of the live samples divided by the time
they span, counting at least ``num - 1`` whole windows. A recorded value that takes the rate above
the bound is recorded anyway and answered with a throttle time (Kafka's ``QuotaUtils.throttleTime``):
with observed rate O, bound T and the window W the rate was measured over, the client must stay
away X = (O - T) / T * W so that O * W / (W + X) = T. Byte-rate throttles are capped at the span of
the samples (``num * size``) and request-percentage throttles at one window, as Kafka's
``ClientRequestQuotaManager`` does (Kafka leaves byte-rate throttles uncapped; a cap keeps one huge
batch from muting a connection for minutes).

Concurrency: not thread-safe; a broker uses one :class:`ClientQuotaManager` per quota key from
its event loop only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kafkalite.errors import InvalidConfigurationError

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: Every quota key Kafka's ``users``/``clients`` entities accept.
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
#: The entity name of a default (``/config/users/<default>``, ``/config/clients/<default>``).
DEFAULT_ENTITY = "<default>"

#: Kafka's ``quota.window.num`` and ``quota.window.size.seconds`` defaults.
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_SECONDS = 1
#: Kafka drops a quota group's sensor after an hour without traffic.
INACTIVE_SENSOR_EXPIRY_SECONDS = 3600.0

EntityConfigs = Callable[[str | None, str | None], Mapping[str, str]]
"""``configs(user, client_id)``: the config of one entity, empty when it has none. ``user`` None
means a ``/config/clients/...`` entity, ``client_id`` None a ``/config/users/<user>`` one; either
may be :data:`DEFAULT_ENTITY`."""


def parse_quota_value(key: str, value: str) -> float:
    """The value of quota ``key`` as a number; an unknown key, a non-number or a value that is not
    positive is an INVALID_CONFIG naming the key."""
    if key not in QUOTA_KEYS:
        raise InvalidConfigurationError(f"unknown quota config {key!r}; quota configs are {', '.join(QUOTA_KEYS)}")
    try:
        number = float(value) if key == REQUEST_PERCENTAGE else float(int(value))
    except (TypeError, ValueError):
        kind = "a number" if key == REQUEST_PERCENTAGE else "an integer (bytes per second)"
        raise InvalidConfigurationError(f"{key} must be {kind}, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise InvalidConfigurationError(f"{key} must be positive, got {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """The quota that applies to one request: its bound (None: unlimited) and the quota group the
    usage is measured in, as Kafka's metric tags (``""`` for a tag the group is not keyed on)."""

    bound: float | None
    user_tag: str
    client_tag: str


def resolve_quota(key: str, user: str, client_id: str, configs: EntityConfigs) -> ResolvedQuota:
    """The quota ``key`` that applies to ``user`` (a principal's name) and ``client_id`` by Kafka's
    eight-level precedence; an entity whose value does not parse is skipped (the tool refuses
    such values; a hand-written znode must not stop a broker)."""
    levels: tuple[tuple[str | None, str | None, str, str], ...] = (
        (user, client_id, user, client_id),
        (user, DEFAULT_ENTITY, user, client_id),
        (user, None, user, ""),
        (DEFAULT_ENTITY, client_id, user, client_id),
        (DEFAULT_ENTITY, DEFAULT_ENTITY, user, client_id),
        (DEFAULT_ENTITY, None, user, ""),
        (None, client_id, "", client_id),
        (None, DEFAULT_ENTITY, "", client_id),
    )
    for entity_user, entity_client, user_tag, client_tag in levels:
        value = configs(entity_user, entity_client).get(key)
        if value is None:
            continue
        try:
            return ResolvedQuota(parse_quota_value(key, value), user_tag, client_tag)
        except InvalidConfigurationError:
            continue
    return ResolvedQuota(None, "", client_id)


@dataclass(slots=True)
class _Sample:
    window_start: float
    value: float = 0.0


@dataclass(slots=True)
class SampledRate:
    """Kafka's ``Rate`` over ``samples`` windows of ``window_seconds``: values per second. Times
    are seconds on a monotonic clock."""

    samples: int = DEFAULT_WINDOW_NUM
    window_seconds: float = DEFAULT_WINDOW_SIZE_SECONDS
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0
    last_record: float = 0.0

    def record(self, value: float, now: float) -> None:
        """Adds ``value`` at ``now`` to the current window, starting a new window (reusing the
        oldest) when the current one is complete."""
        self.last_record = now
        if not self._samples:
            self._samples.append(_Sample(now))
            self._current = 0
        sample = self._samples[self._current]
        if now - sample.window_start >= self.window_seconds:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                sample = _Sample(now)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.window_start, sample.value = now, 0.0
        sample.value += value

    def _purge(self, now: float) -> None:
        expire_age = self.samples * self.window_seconds
        for sample in self._samples:
            if now - sample.window_start >= expire_age:
                sample.window_start, sample.value = now, 0.0

    def window_size(self, now: float) -> float:
        """The time (seconds) the rate is measured over: since the oldest live window, at least
        ``samples - 1`` whole windows (Kafka's ``Rate.windowSize``)."""
        self._purge(now)
        oldest = min((sample.window_start for sample in self._samples), default=now)
        elapsed = now - oldest
        full_windows = int(elapsed // self.window_seconds)
        minimum = self.samples - 1
        if full_windows < minimum:
            elapsed += (minimum - full_windows) * self.window_seconds
        return elapsed

    def measure(self, now: float) -> float:
        """Values per second over :meth:`window_size`."""
        self._purge(now)
        total = sum(sample.value for sample in self._samples)
        size = self.window_size(now)
        return total / size if size > 0 else 0.0


def throttle_time_ms(observed: float, bound: float, window_seconds: float) -> int:
    """Kafka's ``QuotaUtils.throttleTime``: how long (ms) a client whose rate is ``observed`` over a
    window of ``window_seconds`` must stay away for the rate to come down to ``bound``."""
    if observed <= bound:
        return 0
    return round((observed - bound) / bound * window_seconds * 1000)


class ClientQuotaManager:
    """One quota key's usage per quota group and the throttle time each recorded value earns
    (Kafka's ``ClientQuotaManager``; ``request_percentage`` records percent of handler time).

    ``configs`` is read on every record, so a changed entity applies at once; a changed bound
    keeps the group's measured usage, as Kafka's metric-config update does.
    """

    def __init__(self, key: str, configs: EntityConfigs, *, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_seconds: float = DEFAULT_WINDOW_SIZE_SECONDS,
                 max_throttle_ms: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if key not in QUOTA_KEYS:
            raise InvalidConfigurationError(f"unknown quota config {key!r}")
        self.key = key
        self._configs = configs
        self._window_num = window_num
        self._window_size = window_size_seconds
        if max_throttle_ms is None:
            span = window_size_seconds if key == REQUEST_PERCENTAGE else window_num * window_size_seconds
            max_throttle_ms = int(span * 1000)
        self.max_throttle_ms = max_throttle_ms
        self._clock = clock
        self._rates: dict[tuple[str, str], SampledRate] = {}
        self._last_expiry = clock()
        #: Throttle times handed out (ms), for the broker's metrics.
        self.throttle_time_total_ms = 0
        self.throttled_count = 0

    def quota(self, user: str, client_id: str) -> ResolvedQuota:
        """The quota that applies to ``user`` / ``client_id`` now."""
        return resolve_quota(self.key, user, client_id, self._configs)

    def record(self, user: str, client_id: str, value: float) -> int:
        """Records ``value`` for the caller's quota group and returns the throttle time (ms), 0
        within quota or without one. The value counts even when it is throttled (Kafka)."""
        resolved = self.quota(user, client_id)
        if resolved.bound is None:
            return 0
        now = self._clock()
        self._expire(now)
        group = (resolved.user_tag, resolved.client_tag)
        rate = self._rates.get(group)
        if rate is None:
            rate = self._rates[group] = SampledRate(self._window_num, self._window_size)
        rate.record(value, now)
        observed = rate.measure(now)
        throttle = min(throttle_time_ms(observed, resolved.bound, rate.window_size(now)), self.max_throttle_ms)
        if throttle > 0:
            self.throttle_time_total_ms += throttle
            self.throttled_count += 1
        return throttle

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Takes back ``value`` (a throttled fetch sends no data, so its bytes do not count)."""
        resolved = self.quota(user, client_id)
        rate = self._rates.get((resolved.user_tag, resolved.client_tag))
        if rate is not None:
            rate.record(-value, self._clock())

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most one request may carry without being throttled for certain (Kafka bounds a
        fetch's size by it): bound × (num - 1) × size; None without a quota."""
        bound = self.quota(user, client_id).bound
        return None if bound is None else bound * (self._window_num - 1) * self._window_size

    def _expire(self, now: float) -> None:
        if now - self._last_expiry < 60:
            return
        self._last_expiry = now
        for group, rate in list(self._rates.items()):
            if now - rate.last_record >= INACTIVE_SENSOR_EXPIRY_SECONDS:
                del self._rates[group]
