"""Client quota enforcement on both front ends: who a request is from, what it costs, how long it waits.

A request's identity is Kafka's: the principal's name (``ANONYMOUS`` until a listener
authenticates) and the client id: the Kafka protocol's request header ``client_id``; on HTTP and
the binary channel the ``User-Agent`` the kafkalite clients send (``kafkalite/<client-id>``;
any other agent string is the client id as it is). The quotas themselves are the ``users`` /
``clients`` config entities (:mod:`kafkalite.security.quota` resolves them; the configs come from
the broker's entity cache).

What is measured (per broker, as in Kafka): a produce request's record bytes against
``producer_byte_rate``; a consumer fetch answer's record bytes against ``consumer_byte_rate``
(follower fetches are never throttled). A throttled fetch is answered without records and its
bytes are taken back, as Kafka does. The JSON records routes count their records' keys, values
and headers the same way. Every request's time on the broker against
``request_percentage`` (Kafka's request quota; 100 is one request handler's whole time): the
event-loop time its handler takes (:class:`LoopTimer`: the steps of its coroutine, not the
time it waits for replicas, a long poll, the disk workers or its own throttle), plus the
request's decoding on the Kafka protocol. Exempt, as in Kafka: follower fetches and the
requests a connection makes before it is authenticated (ApiVersions, SaslHandshake,
SaslAuthenticate).

How a client is held back (KIP-219):

- Kafka protocol: the answer carries ``throttle_time_ms`` at once, then the connection is muted
  (not read from) for that long; Kafka clients also hold back on their own. An ``acks=0``
  produce has no answer: the connection's next request waits for the throttle time.
- HTTP and the binary channel: the broker holds the answer for the throttle time and sends it
  then, with the time in the ``Throttle-Time-Ms`` response header on HTTP. A channel serves its
  messages one at a time, so its later requests wait behind the held answer: the channel is
  muted like a Kafka connection, and kafkalite's clients need no change to honour it.

Concurrency: event-loop only. The HTTP identity travels in a context variable set by
:func:`http_middleware` in the task that serves the request (for the channel, the WebSocket's
whole life).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kafkalite import protocol
from kafkalite.security.principal import ANONYMOUS, KafkaPrincipal
from kafkalite.security.quota import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    EntityConfigs,
)

if TYPE_CHECKING:
    from aiohttp import web

    from kafkalite.broker.entity_configs import EntityConfigs as EntityConfigCache
    from kafkalite.config import BrokerConfig

#: The response header that carries an HTTP answer's throttle time (ms).
THROTTLE_HEADER = "Throttle-Time-Ms"
_AGENT_PREFIX = "kafkalite/"
T = TypeVar("T")


class LoopTimer(Generic[T]):
    """Awaits ``awaitable`` and adds up the event-loop time of its steps in :attr:`seconds`.

    Each time the coroutine runs until it next waits (a step) is timed; the waits themselves
    (futures, sleeps, other tasks, worker threads) are not. So it is the time the request kept
    the loop busy: what Kafka's request quota counts as handler-thread time. Results, exceptions
    and cancellation pass through unchanged.

    Concurrency: awaited once, from the task that serves the request.
    """

    __slots__ = ("_awaitable", "seconds")

    def __init__(self, awaitable: Awaitable[T]) -> None:
        self._awaitable = awaitable
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine, clock = self._awaitable.__await__(), time.perf_counter
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            began = clock()
            try:
                waiting_on = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as finished:
                return finished.value  # type: ignore[no-any-return]  # the awaitable's result
            finally:
                self.seconds += clock() - began
                thrown = None
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # handed to the coroutine (cancellation too)
                thrown, sent = exc, None


def _no_configs(user: str | None, client_id: str | None) -> dict[str, str]:
    return {}


def client_id_of_agent(agent: str | None) -> str:
    """The client id in a kafkalite client's ``User-Agent`` (``kafkalite/<client-id>``)."""
    if not agent:
        return ""
    return agent[len(_AGENT_PREFIX):] if agent.startswith(_AGENT_PREFIX) else agent


@dataclasses.dataclass(slots=True)
class _HttpIdentity:
    request: web.BaseRequest
    principal_of: Callable[[web.BaseRequest], KafkaPrincipal]
    #: The longest throttle handed out while serving this HTTP request (for its header).
    throttle_ms: int = 0
    #: Whether the request (or channel message) being served is outside the request quota.
    exempt: bool = False

    @property
    def principal(self) -> KafkaPrincipal:
        return self.principal_of(self.request)

    @property
    def client_id(self) -> str:
        return client_id_of_agent(self.request.headers.get("User-Agent"))


_http_identity: contextvars.ContextVar[_HttpIdentity | None] = contextvars.ContextVar(
    "kafkalite_http_quota_identity", default=None)


class BrokerQuotas:
    """This broker's quota managers (produce bytes, fetch bytes, request time) and the front-end hooks.

    ``sleep`` holds a throttled answer and ``clock`` (monotonic seconds) times the quota
    windows; tests inject both. ``configs`` reads one ``users``/``clients`` entity (see
    :data:`~kafkalite.security.quota.EntityConfigs`); :meth:`following` builds one over the
    broker's entity cache that skips all accounting while no entity sets a quota (as Kafka's
    ``quotasEnabled``), so an unquota'd cluster pays nothing per request.
    """

    def __init__(self, config: BrokerConfig, configs: EntityConfigs | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._configs: EntityConfigs = configs or _no_configs
        self.produce, self.fetch, self.request = (
            ClientQuotaManager(key, self._entity, window_num=config.quota_window_num,
                               window_size_seconds=config.quota_window_size_seconds, clock=clock)
            for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE))
        self._sleep = sleep
        #: Whether any entity sets a quota key (None: not known, look again).
        self._enabled: bool | None = True
        self._any_quota: Callable[[], bool] = lambda: True

    @classmethod
    def following(cls, config: BrokerConfig, cache: EntityConfigCache) -> BrokerQuotas:
        """Quotas read from the broker's entity cache, re-checking whether any quota is set
        whenever an entity changes."""
        quotas = cls(config, cache.entity_configs)
        quotas._any_quota = lambda: any(key in configs for configs in cache.entities().values()
                                        for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE))
        quotas._enabled = None
        cache.add_listener(quotas._entity_changed)
        return quotas

    def _entity_changed(self, entity_path: str) -> None:
        self._enabled = None

    @property
    def enabled(self) -> bool:
        """Whether any quota is set (requests are only counted then)."""
        if self._enabled is None:
            self._enabled = self._any_quota()
        return self._enabled

    def _entity(self, user: str | None, client_id: str | None) -> Mapping[str, str]:
        return self._configs(user, client_id)

    # -- accounting -----------------------------------------------------------------------------
    def record_produce(self, principal: KafkaPrincipal, client_id: str | None,
                       partitions: Sequence[protocol.ProducePartition]) -> int:
        """Counts a produce request's record bytes; its throttle time (ms), 0 within quota."""
        if not self.enabled:
            return 0
        size = sum(len(partition.records) for partition in partitions)
        return self.produce.record(principal.name, client_id or "", size)

    def record_request_time(self, principal: KafkaPrincipal, client_id: str | None, seconds: float) -> int:
        """Counts a request's time on the broker against ``request_percentage``; its throttle
        time (ms), 0 within quota. Kafka's unit: one second of handler time is 100 (percent)."""
        if not self.enabled:
            return 0
        return self.request.record(principal.name, client_id or "", seconds * 100)

    def record_fetch(self, principal: KafkaPrincipal, client_id: str | None,
                     results: list[protocol.FetchResult]) -> tuple[list[protocol.FetchResult], int]:
        """Counts a consumer fetch answer's record bytes: the answer to send and its throttle
        time (ms). A throttled answer goes without records and its bytes are not counted."""
        if not self.enabled:
            return results, 0
        size = sum(len(result.records) for result in results)
        if size == 0:
            return results, 0
        user, client = principal.name, client_id or ""
        throttle = self.fetch.record(user, client, size)
        if throttle == 0:
            return results, 0
        self.fetch.unrecord(user, client, size)
        return [dataclasses.replace(result, records=b"") for result in results], throttle

    # -- HTTP and the channel -----------------------------------------------------------------
    def http_middleware(self, principal_of: Callable[[web.BaseRequest], KafkaPrincipal]) -> Any:
        """An aiohttp middleware that makes the request's identity known to :meth:`hold_http_produce`
        and :meth:`hold_http_fetch` and puts the throttle time in the ``Throttle-Time-Ms`` header."""
        from aiohttp import web

        @web.middleware
        async def quota_identity(request: web.Request, handler: Callable[[web.Request], Any]) -> Any:
            identity = _HttpIdentity(request, principal_of)
            token = _http_identity.set(identity)
            try:
                if request.path == protocol.CHANNEL:  # its messages are counted one by one
                    response = await handler(request)
                else:
                    response = await self.serve_timed(handler(request))
            finally:
                _http_identity.reset(token)
            if identity.throttle_ms and isinstance(response, web.Response) and not response.prepared:
                response.headers[THROTTLE_HEADER] = str(identity.throttle_ms)
            return response

        return quota_identity

    async def serve_timed(self, call: Coroutine[Any, Any, T]) -> T:
        """Awaits one HTTP request's (or channel message's) handling, counts its event-loop time
        against ``request_percentage`` and holds the answer for the throttle time it earns."""
        identity = _http_identity.get()
        if not self.enabled or identity is None:
            return await call
        identity.exempt = False
        timer = LoopTimer(call)
        try:
            result = await timer
        except asyncio.CancelledError:
            raise
        except Exception:  # answered by the error middleware: the time it took counts as well
            await self._hold_for_request_time(identity, timer.seconds)
            raise
        await self._hold_for_request_time(identity, timer.seconds)
        return result

    async def _hold_for_request_time(self, identity: _HttpIdentity, seconds: float) -> None:
        if not identity.exempt:
            await self._hold(identity, self.record_request_time(identity.principal, identity.client_id, seconds))

    async def hold_http_produce(self, request: protocol.ProduceRequest) -> None:
        """Counts an HTTP or channel produce and holds the answer for its throttle time."""
        identity = _http_identity.get()
        principal = identity.principal if identity is not None else ANONYMOUS
        await self._hold(identity, self.record_produce(principal, identity.client_id if identity else "",
                                                       request.partitions))

    async def hold_http_record_bytes(self, produced: bool, size: int) -> None:
        """Counts the record bytes (keys, values and headers) of a JSON records route against
        ``producer_byte_rate`` (``produced``) or ``consumer_byte_rate`` and holds the answer for
        the throttle time; a throttled JSON fetch keeps its records (the hold alone slows it)."""
        if not self.enabled or size <= 0:
            return
        identity = _http_identity.get()
        principal = identity.principal if identity is not None else ANONYMOUS
        manager = self.produce if produced else self.fetch
        await self._hold(identity, manager.record(principal.name, identity.client_id if identity else "", size))

    async def hold_http_fetch(self, request: protocol.FetchRequest,
                              results: list[protocol.FetchResult]) -> list[protocol.FetchResult]:
        """Counts an HTTP or channel consumer fetch: the answer to send, after its throttle time."""
        identity = _http_identity.get()
        if request.is_from_follower:
            if identity is not None:
                identity.exempt = True
            return results
        principal = identity.principal if identity is not None else ANONYMOUS
        results, throttle = self.record_fetch(principal, identity.client_id if identity else "", results)
        await self._hold(identity, throttle)
        return results

    async def mute(self, throttle_ms: int) -> None:
        """Hold the caller (a Kafka connection serving an ``acks=0`` produce, which has no answer to
        carry the throttle time) for ``throttle_ms``: its later requests wait, as on a muted channel."""
        if throttle_ms > 0:
            await self._sleep(throttle_ms / 1000)

    async def _hold(self, identity: _HttpIdentity | None, throttle_ms: int) -> None:
        if throttle_ms <= 0:
            return
        if identity is not None:
            identity.throttle_ms = max(identity.throttle_ms, throttle_ms)
        await self._sleep(throttle_ms / 1000)

    # -- metrics --------------------------------------------------------------------------------
    def throttle_totals(self) -> dict[str, tuple[int, int]]:
        """Per quota key: (throttled responses, total throttle time in ms) since start."""
        return {manager.key: (manager.throttled_count, manager.throttle_time_total_ms)
                for manager in (self.produce, self.fetch, self.request)}
