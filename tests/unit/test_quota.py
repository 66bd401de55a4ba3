"""Kafka's client quota model: precedence of the eight entity levels, the sampled rate, throttle times."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kafkalite.errors import InvalidConfigurationError
from kafkalite.security.quota import (
    CONSUMER_BYTE_RATE,
    DEFAULT_ENTITY,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    SampledRate,
    parse_quota_value,
    resolve_quota,
    throttle_time_ms,
)

D = DEFAULT_ENTITY
#: Every level, each with its own producer_byte_rate, in Kafka's order of precedence.
LEVELS: list[tuple[str | None, str | None]] = [
    ("alice", "app"), ("alice", D), ("alice", None), (D, "app"), (D, D), (D, None), (None, "app"), (None, D)]


class Store:
    def __init__(self, entities: dict[tuple[str | None, str | None], dict[str, str]]) -> None:
        self.entities = entities

    def __call__(self, user: str | None, client: str | None) -> Mapping[str, str]:
        return self.entities.get((user, client), {})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("winner", range(len(LEVELS)))
def test_the_most_specific_configured_level_wins(winner: int) -> None:
    store = Store({level: {PRODUCER_BYTE_RATE: str(1000 + index)}
                   for index, level in enumerate(LEVELS) if index >= winner})
    assert resolve_quota(PRODUCER_BYTE_RATE, "alice", "app", store).bound == 1000 + winner


def test_levels_are_per_key_and_other_users_and_clients_do_not_match() -> None:
    store = Store({("alice", "app"): {CONSUMER_BYTE_RATE: "5"}, ("bob", None): {PRODUCER_BYTE_RATE: "6"},
                   (None, "other"): {PRODUCER_BYTE_RATE: "7"}, (None, D): {PRODUCER_BYTE_RATE: "8"}})
    assert resolve_quota(PRODUCER_BYTE_RATE, "alice", "app", store).bound == 8
    assert resolve_quota(CONSUMER_BYTE_RATE, "alice", "app", store).bound == 5
    assert resolve_quota(PRODUCER_BYTE_RATE, "bob", "app", store).bound == 6
    assert resolve_quota(REQUEST_PERCENTAGE, "alice", "app", store).bound is None


def test_quota_groups_follow_kafkas_metric_tags() -> None:
    """A user quota is shared by all its client ids; a default client quota is per client id."""
    users = Store({("alice", None): {PRODUCER_BYTE_RATE: "10"}})
    assert {(q.user_tag, q.client_tag) for q in (resolve_quota(PRODUCER_BYTE_RATE, "alice", client, users)
                                                  for client in ("a", "b"))} == {("alice", "")}
    clients = Store({(None, D): {PRODUCER_BYTE_RATE: "10"}})
    assert {(q.user_tag, q.client_tag) for q in (resolve_quota(PRODUCER_BYTE_RATE, "alice", client, clients)
                                                  for client in ("a", "b"))} == {("", "a"), ("", "b")}


@pytest.mark.parametrize(("key", "value"), [
    ("producer_byte_rate", "fast"), ("producer_byte_rate", "0"), ("producer_byte_rate", "-5"),
    ("producer_byte_rate", "1.5"), ("request_percentage", "nan"), ("producer_bytes_rate", "100")])
def test_bad_quota_values_and_unknown_keys_are_named_errors(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigurationError, match=key):
        parse_quota_value(key, value)


def test_a_bad_stored_value_falls_through_to_the_next_level() -> None:
    store = Store({("alice", None): {PRODUCER_BYTE_RATE: "oops"}, (None, D): {PRODUCER_BYTE_RATE: "9"}})
    assert resolve_quota(PRODUCER_BYTE_RATE, "alice", "app", store).bound == 9


def test_rate_counts_at_least_num_minus_one_windows() -> None:
    rate = SampledRate(samples=11, window_seconds=1.0)
    rate.record(1000, now=0.0)
    assert rate.window_size(0.0) == pytest.approx(10.0)
    assert rate.measure(0.0) == pytest.approx(100.0)
    for second in range(1, 20):
        rate.record(1000, now=float(second))
    # Eleven live windows, the oldest started 10 s ago: 11000 bytes over 10 s of windows (+ the current).
    assert rate.measure(19.0) == pytest.approx(11000 / 10.0)
    # Everything older than 11 windows is forgotten.
    assert rate.measure(100.0) == 0.0


def test_throttle_time_is_kafkas_formula() -> None:
    assert throttle_time_ms(observed=150.0, bound=100.0, window_seconds=10.0) == 5000
    assert throttle_time_ms(observed=100.0, bound=100.0, window_seconds=10.0) == 0


def test_manager_throttles_above_the_bound_and_the_client_that_waits_comes_back_within_it() -> None:
    clock = Clock()
    store = Store({(None, "slow"): {PRODUCER_BYTE_RATE: "1000"}})
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, store, clock=clock)
    assert manager.record("ANONYMOUS", "fast", 10**9) == 0  # no quota for this client
    assert manager.record("ANONYMOUS", "slow", 5000) == 0  # 5000 B over the 10 s minimum window
    throttle = manager.record("ANONYMOUS", "slow", 10000)  # 15000 B / 10 s = 1500 B/s
    assert throttle == 5000
    clock.now += throttle / 1000
    sent = 15000
    # A client that sends one batch, then honours each throttle, averages the bound.
    start = clock.now - 5.0
    for _ in range(200):
        sent += 1000
        clock.now += manager.record("ANONYMOUS", "slow", 1000) / 1000 or 0.01
    assert sent / (clock.now - start) == pytest.approx(1000, rel=0.2)


def test_throttle_is_capped_and_unrecord_takes_bytes_back() -> None:
    clock = Clock()
    manager = ClientQuotaManager(CONSUMER_BYTE_RATE, Store({(None, D): {CONSUMER_BYTE_RATE: "10"}}), clock=clock)
    assert manager.record("u", "c", 10**9) == manager.max_throttle_ms == 11000
    manager.unrecord("u", "c", 10**9)
    assert manager.record("u", "c", 1) == 0
    assert manager.max_value_in_window("u", "c") == 100.0
    request = ClientQuotaManager(REQUEST_PERCENTAGE, Store({(None, D): {REQUEST_PERCENTAGE: "10"}}), clock=clock)
    assert request.max_throttle_ms == 1000


def test_unknown_key_refused() -> None:
    with pytest.raises(InvalidConfigurationError):
        ClientQuotaManager("bytes", Store({}))
