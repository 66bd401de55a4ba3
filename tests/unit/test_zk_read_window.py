"""The window of data-watch reads one ZooKeeper session keeps in flight (kafkalite.coord.zk)."""

from __future__ import annotations

import threading

from kafkalite.coord.zk import _ReadWindow


def test_reads_beyond_the_limit_wait_and_go_in_arrival_order() -> None:
    window = _ReadWindow(2)
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
    window = _ReadWindow(1)
    sent: list[int] = []

    def send(number: int) -> None:
        sent.append(number)
        window.done()

    for number in range(4):
        window.submit(lambda number=number: send(number))  # type: ignore[misc]
    assert sent == [0, 1, 2, 3]


def test_concurrent_submitters_never_exceed_the_limit() -> None:
    window = _ReadWindow(3)
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
