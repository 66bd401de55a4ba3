"""Offset and time indexes (kafkalite/storage/index.py) against a model list of every entry:
lookups, truncations, restored lengths and reloads from the file agree wherever the searched
block lies (in memory at the tail, or read from the file), and memory keeps a summary and the
last blocks only."""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from pathlib import Path

import pytest

from kafkalite.storage.index import _STRIDE, _TAIL_BLOCKS, OffsetIndex, TimeIndex

BASE = 5000


def _offset_lookup(model: list[tuple[int, int]], offset: int) -> tuple[int, int]:
    number = bisect_right([relative for relative, _ in model], offset - BASE) - 1
    return (BASE, 0) if number < 0 else (BASE + model[number][0], model[number][1])


def _check_offsets(index: OffsetIndex, model: list[tuple[int, int]], generator: random.Random) -> None:
    assert len(index) == len(model)
    assert index.last_position == (model[-1][1] if model else 0)
    top = model[-1][0] + 10 if model else 10
    for target in [0, top, *(generator.randrange(top) for _ in range(200))]:
        assert index.lookup(BASE + target) == _offset_lookup(model, BASE + target), target


@pytest.mark.parametrize("seed", range(4))
def test_offset_index_agrees_with_a_list_of_every_entry(tmp_path: Path, seed: int) -> None:
    generator = random.Random(seed)
    path = tmp_path / "x.index"
    index = OffsetIndex(path, BASE, 100_000)
    model: list[tuple[int, int]] = []
    relative = position = 0
    for _round in range(30):
        for _ in range(generator.randrange(1, 400)):
            relative += generator.randrange(1, 50)
            position += generator.randrange(1, 4000)
            index.append(BASE + relative, position)
            model.append((relative, position))
        _check_offsets(index, model, generator)
        action = generator.choice(["offset", "position", "restore", "reload", "none"])
        if action == "offset" and model:
            cut = generator.randrange(model[-1][0] + 2)
            index.truncate_to_offset(BASE + cut)
            model = [entry for entry in model if entry[0] < cut]
        elif action == "position" and model:
            cut = generator.randrange(model[-1][1] + 2)
            index.truncate_to_position(cut)
            model = [entry for entry in model if entry[1] < cut]
        elif action == "restore":
            keep = generator.randrange(len(model) + 1)
            index.restore_length(keep)
            model = model[:keep]
        elif action == "reload":
            index = OffsetIndex(path, BASE, 100_000)
            assert index.load(position + 1)
        if model:
            relative, position = model[-1]
        else:
            relative = position = 0
        assert path.stat().st_size == len(model) * OffsetIndex.entry_size
        _check_offsets(index, model, generator)


@pytest.mark.parametrize("seed", range(3))
def test_time_index_agrees_with_a_list_of_every_entry(tmp_path: Path, seed: int) -> None:
    generator = random.Random(seed)
    path = tmp_path / "x.timeindex"
    index = TimeIndex(path, BASE, 100_000)
    model: list[tuple[int, int]] = []
    timestamp, relative = 1_700_000_000_000, 0
    for _round in range(25):
        for _ in range(generator.randrange(1, 300)):
            timestamp += generator.randrange(1, 20)
            relative += generator.randrange(0, 5)  # equal offsets are allowed
            index.maybe_append(timestamp, BASE + relative)
            model.append((timestamp, relative))
        if generator.random() < 0.5 and model:
            cut = generator.randrange(model[-1][1] + 2)
            index.truncate_to_offset(BASE + cut)
            model = [entry for entry in model if entry[1] < cut]
        if generator.random() < 0.3:
            index = TimeIndex(path, BASE, 100_000)
            assert index.load(relative + 10)
        if model:
            timestamp, relative = model[-1]
        assert len(index) == len(model)
        assert index.last_timestamp == (model[-1][0] if model else -1)
        assert index.last_relative_offset == (model[-1][1] if model else 0)
        timestamps = [entry[0] for entry in model]
        for target in [0, timestamp + 5, *(generator.randrange(timestamp + 5) for _ in range(100))]:
            number = bisect_left(timestamps, target) - 1
            assert index.lookup_before(target) == BASE + (model[number][1] if number >= 0 else 0), target


def test_memory_holds_the_summary_and_the_last_blocks_only(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 0, 1_000_000)
    for number in range(100_000):
        index.append(number * 10, number * 100)
    columns = index._entries
    assert len(columns._tail[0]) <= _TAIL_BLOCKS * _STRIDE
    assert len(columns._summary[0]) == -(-100_000 // _STRIDE)
    assert index.lookup(10 * 12_345 + 5) == (10 * 12_345, 12_345 * 100)  # a block read from the file
