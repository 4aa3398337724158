"""A model of v46's trailing-warpgroup protocol (w4a16_wgmma_streamk.cuh consume + produce):
the producer fills a ring of STAGES slots, the leader and trailer consumer warpgroups consume
every iteration, the trailer syncs named barrier generation i at the top of i, the leader
arrives for i at the top of i + 1 or at the end of i's segment; split segments end in a fix-up
that joins both warpgroups. Random interleavings; fails on a deadlock or on a named barrier
generation that would complete without the trailer (two leader arrivals in one generation)."""
import random


def run(segments, fixups, stages, seed):
    rnd = random.Random(seed)
    n = sum(segments)
    seg_end = set()
    seg_first = set()
    pos = 0
    fix_at = {}
    for s, f in zip(segments, fixups, strict=True):
        seg_first.add(pos)
        pos += s
        seg_end.add(pos - 1)
        fix_at[pos - 1] = f
    loaded = -1                      # producer: iterations loaded
    released = {0: set(), 1: set()}  # iterations each warpgroup released
    bar = {}                         # id -> [leader arrived, trailer waiting]
    fix = {}                         # iteration -> set of warpgroups at its fix-up barrier

    def gen_ok(i):  # slot of iteration i may be (re)filled
        j = i - stages
        return j < 0 or (j in released[0] and j in released[1])

    def leader():
        owed = None
        for i in range(n):
            if owed is not None:
                yield from arrive(owed)
                owed = None
            while loaded < i:
                yield "wait full"
            if i not in seg_first:
                released[0].add(i - 1)
            owed = i
            yield "mma"
            if i in seg_end:
                yield from arrive(owed)
                owed = None
                if fix_at[i]:
                    fix.setdefault(i, set()).add(0)
                    while len(fix[i]) < 2:
                        yield "fixup"
                released[0].add(i)


    def arrive(i):
        b = bar.setdefault(i % stages, [False, False])
        if b[0]:
            raise AssertionError(f"two leader arrivals in one generation (id {i % stages}, iteration {i})")
        if b[1]:
            b[1] = False  # completes with the waiting trailer
            done_gen.add(i)
        else:
            b[0] = True
            pending_gen[i % stages] = i
        yield "arrive"

    done_gen = set()
    pending_gen = {}

    def trailer():
        for i in range(n):
            b = bar.setdefault(i % stages, [False, False])
            if b[0]:
                if pending_gen[i % stages] != i:
                    raise AssertionError(f"trailer at {i} met the leader's arrival for {pending_gen[i % stages]}")
                b[0] = False
            else:
                b[1] = True
                while i not in done_gen:
                    yield "sync"
            while loaded < i:
                yield "wait full"
            if i not in seg_first:
                released[1].add(i - 1)
            yield "mma"
            if i in seg_end:
                if fix_at[i]:
                    fix.setdefault(i, set()).add(1)
                    while len(fix[i]) < 2:
                        yield "fixup"
                released[1].add(i)

    def producer():
        nonlocal loaded
        for i in range(n):
            while not gen_ok(i):
                yield "wait empty"
            loaded = i
            yield "load"

    agents = {"producer": producer(), "leader": leader(), "trailer": trailer()}
    last = {k: None for k in agents}
    stuck = 0
    while agents:
        name = rnd.choice(list(agents))
        try:
            what = next(agents[name])
        except StopIteration:
            del agents[name]
            stuck = 0
            continue
        if what in ("wait full", "sync", "fixup", "wait empty") and last[name] == what:
            stuck += 1
        else:
            stuck = 0
        last[name] = what
        if stuck > 10000:
            raise AssertionError(f"deadlock: {last}")


if __name__ == "__main__":
    rnd = random.Random(1)
    for trial in range(3000):
        stages = rnd.choice([2, 3, 4, 6, 8])
        segments = [rnd.randint(1, 9) for _ in range(rnd.randint(1, 6))]
        fixups = [rnd.random() < 0.5 for _ in segments]
        run(segments, fixups, stages, trial)
    print("ok: 3000 random schedules, no deadlock, every generation one arrive + one sync")
