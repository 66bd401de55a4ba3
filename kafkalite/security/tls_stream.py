"""TLS for the clients' binary channel: one client TLS connection over an asyncio TCP transport.

:func:`open_tls_connection` is ``loop.create_connection(..., ssl=context)`` for a buffered
protocol: it connects, runs the TLS handshake (the context's certificate and host-name checks
decide), then hands the application protocol a :class:`TLSTransport` whose ``write`` encrypts
and whose received records are decrypted straight into the protocol's own buffers
(``get_buffer`` / ``buffer_updated``).

It exists for the read side. Python's ``SSLObject.read()`` decrypts one 16 KiB TLS record per
call and releases and retakes the interpreter lock around each; a consumer reading 4 MiB fetch
answers makes 256 such calls per answer, and while the application's thread holds the lock
each call can wait up to the switch interval to get it back. With the compiled
:mod:`kafkalite.security._tls_records` (built with the other C extensions), every record that
has arrived is decrypted in one call that releases the lock once; without it (or with
``KAFKALITE_NO_EXTENSIONS=1``) the same loop runs over ``SSLObject.read()``, record by record.

Errors: a failed handshake raises the ``ssl.SSLError`` (``ssl.SSLCertVerificationError`` for a
certificate that does not verify) from :func:`open_tls_connection`; a TLS error or a close
without close_notify later ends the connection (``connection_lost`` with the error).

Concurrency: everything runs on the event loop that opened the connection.
"""

from __future__ import annotations

import _ssl
import asyncio
import importlib
import os
import ssl
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar

__all__ = ["RECEIVE_BYTES", "TLSTransport", "open_tls_connection", "records_reader_name"]

#: The most ciphertext read from the socket at a time.
RECEIVE_BYTES = 256 * 1024
#: OpenSSL's SSL_ERROR_* codes that read_records() returns.
_READ_FULL = 0
_WANT_READ = ssl.SSL_ERROR_WANT_READ
_ZERO_RETURN = ssl.SSL_ERROR_ZERO_RETURN

ProtocolT = TypeVar("ProtocolT", bound=asyncio.BufferedProtocol)
RecordsReader = Callable[[ssl.SSLObject, memoryview], tuple[int, int]]


def _python_read_records(tls: ssl.SSLObject, buffer: memoryview) -> tuple[int, int]:
    """Decrypt into ``buffer`` record by record with ``SSLObject.read()``: (bytes, SSL_ERROR_* code)."""
    total = 0
    size = len(buffer)
    while total < size:
        try:
            count = int(tls.read(size - total, buffer[total:]))  # with a buffer: the bytes written
        except ssl.SSLWantReadError:
            return total, _WANT_READ
        except ssl.SSLZeroReturnError:
            return total, _ZERO_RETURN
        if count == 0:  # the peer closed the TLS session
            return total, _ZERO_RETURN
        total += count
    return total, _READ_FULL


def _load_compiled() -> ModuleType | None:
    disabled = os.environ.get("KAFKALITE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")
    if disabled:
        return None
    try:
        module = importlib.import_module("kafkalite.security._tls_records")
    except ImportError:
        return None
    library = getattr(_ssl, "__file__", None)
    socket_type = getattr(_ssl, "_SSLSocket", None)
    if not library or socket_type is None or not module.bind(library, socket_type):
        return None
    # a probe: the layout check passes on an SSLObject of this Python, or the extension stays unused
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(),
                                                            server_hostname="probe.invalid")
    try:
        module.check(getattr(probe, "_sslobj", None))
    except TypeError:
        return None
    return module


_COMPILED = _load_compiled()


def _compiled_read_records(tls: ssl.SSLObject, buffer: memoryview) -> tuple[int, int]:
    assert _COMPILED is not None
    count, status = _COMPILED.read_records(tls._sslobj, buffer)  # type: ignore[attr-defined]
    return int(count), int(status)


_read_records: RecordsReader = _compiled_read_records if _COMPILED is not None else _python_read_records


def records_reader_name() -> str:
    """``compiled`` or ``pure-python``: how received TLS records are decrypted (for logs and benchmarks)."""
    return "compiled" if _COMPILED is not None else "pure-python"


class TLSTransport(asyncio.Transport):
    """What the application protocol writes to: plaintext in, TLS records out on the TCP transport."""

    def __init__(self, wire: _TLSWire) -> None:
        super().__init__()
        self._wire = wire

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._wire.send(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self._wire.send(b"".join(list_of_data))

    def is_closing(self) -> bool:
        return self._wire.closing

    def close(self) -> None:
        self._wire.close()

    def abort(self) -> None:
        self._wire.abort(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._wire.extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._wire.raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._wire.raw.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self._wire.raw.pause_reading()

    def resume_reading(self) -> None:
        self._wire.raw.resume_reading()

    def is_reading(self) -> bool:
        return self._wire.raw.is_reading()

    def can_write_eof(self) -> bool:
        return False


class _TLSWire(asyncio.BufferedProtocol):
    """The protocol on the TCP transport: the handshake, then decrypting into the application's buffers."""

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None,
                 application: asyncio.BufferedProtocol, reader: RecordsReader) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False,
                                    server_hostname=server_hostname)
        self._receive = memoryview(bytearray(RECEIVE_BYTES))
        self._application = application
        self._reader = reader
        self.transport = TLSTransport(self)
        self.handshake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._raw: asyncio.Transport | None = None
        self._connected = False  # the application protocol has had connection_made
        self.closing = False

    @property
    def raw(self) -> asyncio.Transport:
        assert self._raw is not None
        return self._raw

    # -- the TCP transport's callbacks --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = transport  # type: ignore[assignment]  # a TCP connection's transport
        self._continue_handshake()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receive

    def buffer_updated(self, nbytes: int) -> None:
        self._incoming.write(self._receive[:nbytes])
        if not self.handshake.done():
            self._continue_handshake()
        if self._connected:
            self._decrypt()

    def eof_received(self) -> bool | None:
        if not self.handshake.done():
            self._fail_handshake(ConnectionResetError("the broker closed the connection during the TLS handshake"))
            return None
        self._incoming.write_eof()
        self._decrypt()
        return None  # the transport closes itself; connection_lost tells the application

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if not self.handshake.done():
            self._fail_handshake(exc or ConnectionResetError("the connection closed during the TLS handshake"))
            return
        if self._connected:  # (abort() with an error has told the application already)
            self._connected = False
            self._application.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._connected:
            self._application.pause_writing()

    def resume_writing(self) -> None:
        if self._connected:
            self._application.resume_writing()

    # -- TLS ----------------------------------------------------------------------------------
    def _continue_handshake(self) -> None:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except (ssl.SSLError, OSError) as exc:
            self._flush()
            self._fail_handshake(exc)
            return
        self._flush()
        if not self.handshake.done():
            self.handshake.set_result(None)
        self._connected = True
        self._application.connection_made(self.transport)

    def _fail_handshake(self, exc: BaseException) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(exc)
            self.handshake.exception()  # retrieved here: the opener may have stopped waiting
        self.closing = True
        if self._raw is not None:
            self._raw.abort()

    def _decrypt(self) -> None:
        """Decrypt every complete record that has arrived into the application's buffers."""
        application = self._application
        while self._connected and not self.closing:
            buffer = application.get_buffer(-1)
            view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
            if not len(view):
                raise RuntimeError("the protocol offered an empty buffer")
            count, status = self._reader(self.tls, view)
            if count:
                application.buffer_updated(count)
            if status == _READ_FULL:
                continue
            if status == _WANT_READ:
                break
            if status == _ZERO_RETURN:  # close_notify: the broker ended the session
                self._flush()
                self.close()
                break
            try:  # Python's ssl raises the error OpenSSL reported
                self.tls.read(1)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLError, OSError) as exc:
                self.abort(exc)
                return
        if self._outgoing.pending:  # TLS 1.3 post-handshake messages (key updates) answered
            self._flush()

    def _flush(self) -> None:
        if self._outgoing.pending and self._raw is not None and not self._raw.is_closing():
            self._raw.write(self._outgoing.read())

    # -- what TLSTransport asks ---------------------------------------------------------------
    def send(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing:
            return
        try:
            self.tls.write(data)
        except (ssl.SSLError, OSError) as exc:
            self.abort(exc)
            return
        self._flush()

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        try:
            self.tls.unwrap()  # writes close_notify
        except (ssl.SSLError, OSError):
            pass
        self._flush()
        if self._raw is not None:
            self._raw.close()

    def abort(self, exc: BaseException | None) -> None:
        self.closing = True
        if self._raw is None:
            return
        if exc is not None and self._connected:
            # the application learns why: connection_lost with this error, not a bare close
            self._connected = False
            self._raw.abort()
            self._application.connection_lost(exc if isinstance(exc, Exception) else None)
            return
        self._raw.abort()

    def extra_info(self, name: str, default: Any) -> Any:
        if name == "ssl_object":
            return self.tls
        if name == "sslcontext":
            return self.tls.context
        if name == "peercert":
            return self.tls.getpeercert()
        if name == "cipher":
            return self.tls.cipher()
        if name == "compression":
            return self.tls.compression()
        return self.raw.get_extra_info(name, default)


async def open_tls_connection(protocol_factory: Callable[[], ProtocolT], host: str, port: int, *,
                              context: ssl.SSLContext, server_hostname: str | None) -> tuple[TLSTransport, ProtocolT]:
    """Connect to ``host:port``, run the TLS handshake, and connect ``protocol_factory()`` over it.

    Raises what ``loop.create_connection`` raises (``OSError``) and the handshake's ``ssl.SSLError``;
    the caller bounds the time (``asyncio.wait_for``), and cancelling closes the socket."""
    loop = asyncio.get_running_loop()
    application = protocol_factory()
    wire = _TLSWire(context, server_hostname, application, _read_records)
    raw, _ = await loop.create_connection(lambda: wire, host, port)
    try:
        await wire.handshake
    except BaseException:
        raw.abort()
        raise
    return wire.transport, application
