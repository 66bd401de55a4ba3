"""The window of data-watch reads one ZooKeeper session keeps in flight (kafkalite.coord.zk)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kafkalite.coord.zk import _ReadWindow


def _inline(send: Callable[[], None]) -> None:
    send()


def test_reads_are_sent_through_the_dispatcher_never_by_the_caller() -> None:
    """kazoo calls back on its connection thread holding its state: a read must not be sent
    from there, so the window hands every send to its dispatcher."""
    handed: list[Callable[[], None]] = []
    window = _ReadWindow(1, handed.append)
    sent: list[int] = []
    window.submit(lambda: sent.append(0))
    window.submit(lambda: sent.append(1))
    assert sent == [] and len(handed) == 1
    handed.pop()()
    window.done()  # the answer of read 0, on a kazoo thread: read 1 is handed on, not sent
    assert sent == [0] and len(handed) == 1
    handed.pop()()
    assert sent == [0, 1]


def test_reads_beyond_the_limit_wait_and_go_in_arrival_order() -> None:
    window = _ReadWindow(2, _inline)
    sent: list[int] = []
    for number in range(5):
        window.submit(lambda number=number: sent.append(number))  # type: ignore[misc]
    assert sent == [0, 1]
    window.done()
    assert sent == [0, 1, 2]
    window.done()
    window.done()
    assert sent == [0, 1, 2, 3, 4]
    window.done()
    window.done()
    # every slot is free again: the next two go at once, the third waits
    for number in range(5, 8):
        window.submit(lambda number=number: sent.append(number))  # type: ignore[misc]
    assert sent[-2:] == [5, 6]


def test_a_read_that_ends_while_being_sent_hands_its_slot_on() -> None:
    """A send whose answer comes back at once (done() inside send()) does not lose the slot or
    deadlock: the window's lock is not held while a read is sent."""
    window = _ReadWindow(1, _inline)
    sent: list[int] = []

    def send(number: int) -> None:
        sent.append(number)
        window.done()

    for number in range(4):
        window.submit(lambda number=number: send(number))  # type: ignore[misc]
    assert sent == [0, 1, 2, 3]


def test_concurrent_submitters_never_exceed_the_limit() -> None:
    window = _ReadWindow(3, _inline)
    lock = threading.Lock()
    in_flight = peak = 0
    total = 0

    def send() -> None:
        nonlocal in_flight, peak, total
        with lock:
            in_flight += 1
            total += 1
            peak = max(peak, in_flight)
        with lock:
            in_flight -= 1
        window.done()

    def submitter() -> None:
        for _ in range(500):
            window.submit(send)

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert total == 2000
    assert peak <= 3


def test_a_closed_window_sends_nothing_more() -> None:
    """Once the session is being closed, reads failing with it do not send the waiting ones
    (kazoo fails them in a loop that would fail each new one in turn)."""
    window = _ReadWindow(1, _inline)
    sent: list[int] = []
    for number in range(3):
        window.submit(lambda number=number: sent.append(number))  # type: ignore[misc]
    assert sent == [0]
    window.close()
    window.done()
    window.submit(lambda: sent.append(9))
    assert sent == [0]
