"""The tile loop's deferred-epilogue handoff (csrc/common/w4a16_wgmma_tiles.cuh, DEFER_STORE) as a
state machine, run over random interleavings: consumer threads and store threads step one at a
time in random order. Checks: no deadlock; the store threads read the staging rows, the record
and the out-row set of exactly the tile handed off (never one overwritten by a later tile); every
stored tile is stored once, in order; the end marker ends every store thread.

mbarrier parity waits as the hardware does them: wait(parity) passes once the barrier's
completed-phase count has parity != `parity` (a waiter two phases behind blocks: the model would
report that as a deadlock).

    python3 model.py [schedules]
"""

from __future__ import annotations

import random
import sys


class Barrier:
    def __init__(self, arrivals: int):
        self.expected, self.pending, self.phases = arrivals, arrivals, 0

    def arrive(self):
        self.pending -= 1
        if self.pending == 0:
            self.phases, self.pending = self.phases + 1, self.expected

    def passed(self, parity: int) -> bool:
        return (self.phases & 1) != parity


def consumer(me: int, shared: dict, tiles: list[bool]):
    """One consumer thread: per tile, its out rows into set handoffs % 2; if the tile is stored
    (a split piece that is not the finisher is not), hand it off."""
    handoffs = 0
    for n, stored in enumerate(tiles):
        shared["out_row"][handoffs & 1][me] = n
        yield
        if stored:
            if handoffs > 0:
                while not shared["stored"].passed((handoffs - 1) & 1):
                    yield "blocked"
            shared["staging"][me] = n
            yield
            if me == 0:
                shared["record"] = (n, handoffs & 1)
            yield
            shared["staged"].arrive()
            handoffs += 1
            yield
    if handoffs > 0:
        while not shared["stored"].passed((handoffs - 1) & 1):
            yield "blocked"
    if me == 0:
        shared["record"] = (-1, 0)
    yield
    shared["staged"].arrive()


def store_thread(me: int, shared: dict, consumers: int, out: list):
    h = 0
    while True:
        while not shared["staged"].passed(h & 1):
            yield "blocked"
        tile, rows_set = shared["record"]
        if tile < 0:
            return
        yield
        for c in range(consumers):  # every consumer's staging and out rows of this tile
            assert shared["staging"][c] == tile, f"staging of consumer {c} holds {shared['staging'][c]}, not {tile}"
            assert shared["out_row"][rows_set][c] == tile, f"out rows of {c} hold {shared['out_row'][rows_set][c]}"
            yield
        if me == 0:
            out.append(tile)
        shared["stored"].arrive()
        h += 1
        yield


def run(seed: int, consumers: int = 3, stores: int = 2, tiles: int = 8) -> None:
    rng = random.Random(seed)
    pattern = [rng.random() < 0.75 for _ in range(tiles)]
    shared = {"out_row": [[None] * consumers, [None] * consumers], "staging": [None] * consumers, "record": None,
              "staged": Barrier(consumers), "stored": Barrier(stores)}
    out: list[int] = []
    agents = [consumer(c, shared, pattern) for c in range(consumers)]
    agents += [store_thread(s, shared, consumers, out) for s in range(stores)]
    live = list(agents)
    blocked_streak = 0
    while live:
        agent = rng.choice(live)
        try:
            state = next(agent)
        except StopIteration:
            live.remove(agent)
            blocked_streak = 0
            continue
        blocked_streak = blocked_streak + 1 if state == "blocked" else 0
        if blocked_streak > 10000:
            raise AssertionError(f"deadlock (seed {seed}, pattern {pattern})")
    assert out == [n for n, s in enumerate(pattern) if s], (out, pattern)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    for seed in range(count):
        run(seed)
    print(f"{count} schedules: no deadlock, every store read its own tile, tiles stored once in order")
