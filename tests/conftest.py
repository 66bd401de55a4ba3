"""Shared pytest fixtures: real ZooKeeper servers (tests/support/fixtures.py) and brokers."""

from tests.support.fixtures import zookeeper, zookeeper_connect, zookeeper_ensemble  # noqa: F401
