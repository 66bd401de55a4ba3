"""free_ports and KAFKALITE_PORT_RANGE: the range parallel test workers and side-by-side local
clusters pick their loopback ports from."""

from __future__ import annotations

import pytest

from kafkalite.local import zookeeper
from kafkalite.local.zookeeper import PORT_RANGE_VARIABLE, free_ports, port_range


def test_without_the_variable_ports_come_from_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_RANGE_VARIABLE, raising=False)
    monkeypatch.setattr(zookeeper, "_ephemeral_floor", lambda: 32768)
    assert port_range() == (20000, 32000)
    assert all(20000 <= port < 32000 for port in free_ports(20))


def test_a_range_reaching_into_the_ephemeral_range_is_cut_where_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zookeeper, "_ephemeral_floor", lambda: 26010)
    monkeypatch.setenv(PORT_RANGE_VARIABLE, "26000-27000")
    assert port_range() == (26000, 26010)
    assert all(26000 <= port < 26010 for port in free_ports(10))
    monkeypatch.delenv(PORT_RANGE_VARIABLE)
    assert port_range() == (20000, 26010)  # so parallel workers split what free_ports really uses


def test_the_variable_narrows_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_VARIABLE, "26000-26050")
    ports = free_ports(30)
    assert len(set(ports)) == 30
    assert all(26000 <= port < 26050 for port in ports)


def test_a_range_above_the_ephemeral_floor_is_taken_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_VARIABLE, "40000-40010")
    monkeypatch.setattr(zookeeper, "_ephemeral_floor", lambda: 32768)
    assert port_range() == (40000, 40010)
    assert all(40000 <= port < 40010 for port in free_ports(5))


@pytest.mark.parametrize("text", ["26000", "26000-", "-26000", "abc-def", "30000-20000", "80-90", "60000-70000",
                                  "26000-26000"])
def test_a_malformed_range_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(PORT_RANGE_VARIABLE, text)
    with pytest.raises(ValueError, match=PORT_RANGE_VARIABLE):
        free_ports(1)


def test_asking_for_more_ports_than_the_range_holds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_VARIABLE, "26000-26004")
    with pytest.raises(ValueError, match="5 ports asked for, 4 in the range 26000-26004"):
        free_ports(5)
