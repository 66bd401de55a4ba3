"""Sending written partition states to the other brokers: :class:`StatePublisher`.

What the controller decides (leaders, ISRs) and what a leader changes (its ISR) is written to the
partition's state znode, and every broker's watch on that znode reads it again. At thousands of
partitions that is one ZooKeeper notification and one read per partition per broker, and a burst
of them (a failover, a broker back in every ISR) reaches a broker's metadata seconds after it was
written. So the writer also sends the states it wrote, with their znode versions, to every other
live broker in one request per batch, as Kafka's controller sends LeaderAndIsr and
UpdateMetadata; the receiver takes each state that is newer than the one it holds
(:meth:`~kafkalite.broker.metadata.MetadataCache.adopt_states`). The writer's own listeners (its
replicas, its controller) are told at once too, not when its own watch reads the state back.
The watches stay the source of truth: a send that fails (the broker is down, slow, or
unreachable) costs only time, and a state the watch delivers later is not applied twice.

Only states that were written are sent, each with the version ZooKeeper gave it, so a receiver
never holds a state ZooKeeper did not: a deposed controller's fenced writes fail, and with them
their sends.

Concurrency: event-loop only. States published while a send is in flight are merged (the newest
version per partition) and go out in the next one; one send per broker at a time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafkalite import protocol
from kafkalite.broker.metadata import MetadataCache, PublishedState
from kafkalite.config import BrokerConfig
from kafkalite.coord import znodes
from kafkalite.errors import InvalidRequestError, KafkaliteError
from kafkalite.transport import AsyncTransport

log = logging.getLogger(__name__)

#: States per request: a request of this many is about 100 kB of JSON.
STATES_PER_REQUEST = 1000


def encode_states(states: list[PublishedState]) -> dict[str, Any]:
    """The JSON body of a states request."""
    return {"states": [{"topic": topic, "partition": number, "version": version, "leader": state.leader,
                        "leader_epoch": state.leader_epoch, "isr": list(state.isr),
                        "controller_epoch": state.controller_epoch}
                       for topic, number, state, version in states]}


#: Every integer of a state (ids, epochs, the znode version) is an int32 on Kafka's and
#: ZooKeeper's wire.
_INT32_MAX = 2 ** 31 - 1


def _integer(item: dict[str, Any], name: str, minimum: int) -> int:
    value = item.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= _INT32_MAX:
        raise InvalidRequestError(f"states[].{name} must be an integer from {minimum} to {_INT32_MAX}")
    return value


def decode_states(body: Any) -> list[PublishedState]:
    """The states of a request body; InvalidRequestError names what is malformed."""
    if not isinstance(body, dict) or not isinstance(body.get("states"), list):
        raise InvalidRequestError("the body must be an object with a list 'states'")
    decoded: list[PublishedState] = []
    for item in body["states"]:
        if not isinstance(item, dict):
            raise InvalidRequestError("each of 'states' must be an object")
        topic = item.get("topic")
        if not isinstance(topic, str) or not topic:
            raise InvalidRequestError("states[].topic must be a topic name")
        isr = item.get("isr")
        if not isinstance(isr, list) or not all(isinstance(broker, int) and not isinstance(broker, bool)
                                                and broker <= _INT32_MAX for broker in isr):
            raise InvalidRequestError("states[].isr must be a list of broker ids")
        leader, leader_epoch = _integer(item, "leader", -1), _integer(item, "leader_epoch", 0)
        controller_epoch = _integer(item, "controller_epoch", 0)
        try:
            state = znodes.PartitionState(leader=leader, leader_epoch=leader_epoch, isr=list(isr),
                                          controller_epoch=controller_epoch)
        except (KafkaliteError, ValueError) as exc:  # the state's own checks (distinct, non-negative ids)
            raise InvalidRequestError(f"states[]: {exc}") from None
        decoded.append((topic, _integer(item, "partition", 0), state, _integer(item, "version", 0)))
    return decoded


class StatePublisher:
    """Sends the states this broker wrote to the other live brokers (see the module docstring)."""

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, transport: AsyncTransport) -> None:
        self.broker_id = config.broker_id
        self.request_timeout_ms = config.request_timeout_ms
        self.metadata = metadata
        self.transport = transport
        self._pending: dict[int, dict[tuple[str, int], PublishedState]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._stopped = False
        #: states sent and sends that failed, for tests and metrics
        self.states_sent = 0
        self.sends_failed = 0

    def publish(self, states: list[PublishedState]) -> None:
        """Tell this broker's listeners of ``states`` (written to ZooKeeper just now) and send
        them to every other live broker."""
        if self._stopped or not states:
            return
        self.metadata.adopt_states(states)
        for broker_id in self.metadata.brokers:
            if broker_id == self.broker_id:
                continue
            pending = self._pending.setdefault(broker_id, {})
            for published in states:
                key = (published[0], published[1])
                held = pending.get(key)
                if held is None or held[3] < published[3]:
                    pending[key] = published
            sender = self._senders.get(broker_id)
            if sender is None or sender.done():
                self._senders[broker_id] = asyncio.get_running_loop().create_task(
                    self._send_all(broker_id), name=f"state-push-{broker_id}")

    async def _send_all(self, broker_id: int) -> None:
        while not self._stopped:
            pending = self._pending.pop(broker_id, None)
            if not pending:
                return
            endpoint = self.metadata.endpoint(broker_id)
            if endpoint is None:
                return  # gone: its watches (or its next start) read the states
            states = list(pending.values())
            for start in range(0, len(states), STATES_PER_REQUEST):
                chunk = states[start:start + STATES_PER_REQUEST]
                try:
                    await self.transport.request_json(endpoint.address, "POST", protocol.PARTITION_STATES,
                                                      encode_states(chunk), timeout_ms=self.request_timeout_ms)
                    self.states_sent += len(chunk)
                except KafkaliteError as exc:
                    self.sends_failed += 1
                    log.debug("partition states not sent to broker %d (its watches read them): %s", broker_id, exc)
                    break

    async def stop(self) -> None:
        """Send nothing more; cancel the sends in flight."""
        self._stopped = True
        self._pending.clear()
        senders = [task for task in self._senders.values() if not task.done()]
        for task in senders:
            task.cancel()
        if senders:
            await asyncio.gather(*senders, return_exceptions=True)
        self._senders.clear()


__all__ = ["STATES_PER_REQUEST", "StatePublisher", "decode_states", "encode_states"]
