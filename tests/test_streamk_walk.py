"""A Python mirror of the dynamic stream-K walk (csrc/common/streamk_schedule.cuh: StreamKWalk
with DYNAMIC, RowTilesAhead): every segment must get its own row tile's indices, read ahead, and
the walk must cover exactly the data-parallel tiles the counter handed out and the CTA's stream-K
run. Keep in step with the header (the GPU tests check the kernel itself; this checks the
protocol over thousands of splits no GPU test reaches)."""

import random


def walk(col_tiles, stages, dp_tiles, sk0, sk1, taken):
    """(tile, row tile whose indices the loader holds, stages [s, s_end)) per segment."""
    takes = iter(taken)
    take = lambda: next(takes, -1)  # noqa: E731
    first = take() if dp_tiles > 0 else -1
    st = {"in_sk": False, "dp_next": take() if first >= 0 else -1}

    def seek(t, s0, s1):
        st.update(tile=t, row=t // col_tiles, col=t % col_tiles, s=s0, s_end=s1)

    def enter_sk():
        st["in_sk"] = True
        t = sk0 // stages
        seek(t, sk0 - t * stages, min(stages, sk1 - t * stages))

    def next_row_tile():
        r = st["row"]
        if st["in_sk"]:
            return r + 1 if (r + 1) * col_tiles * stages < sk1 else -1
        if st["dp_next"] >= 0:
            return st["dp_next"] // col_tiles
        if sk0 >= sk1:
            return -1
        q = sk0 // stages // col_tiles
        return q if q != r else (q + 1 if (q + 1) * col_tiles * stages < sk1 else -1)

    def next_segment():
        if not st["in_sk"]:
            if st["dp_next"] >= 0:
                seek(st["dp_next"], 0, stages)
                st["dp_next"] = take()
                return True
            if sk0 >= sk1:
                return False
            enter_sk()
            return True
        t = st["tile"] + 1
        if t * stages >= sk1:
            return False
        st.update(tile=t, s=0, s_end=min(stages, sk1 - t * stages), col=st["col"] + 1)
        if st["col"] == col_tiles:
            st.update(col=0, row=st["row"] + 1)
        return True

    (seek(first, 0, stages) if first >= 0 else enter_sk())
    if st["s"] >= st["s_end"]:
        return []
    cur = cur_rt = st["row"]
    ahead = next_row_tile()
    nxt = ahead if ahead >= 0 else cur
    segments = [(st["tile"], cur, st["s"], st["s_end"])]
    while next_segment():
        if st["row"] != cur_rt or not st["in_sk"]:  # names_every_segment() in the data-parallel part
            cur, cur_rt = nxt, st["row"]
            ahead = next_row_tile()
            nxt = ahead if ahead >= 0 else nxt
        segments.append((st["tile"], cur, st["s"], st["s_end"]))
    return segments


def test_every_segment_reads_its_own_row_tile_and_the_work_is_covered():
    rng = random.Random(1)
    for _ in range(5000):
        col_tiles, stages, grid = rng.choice([1, 2, 3, 16, 28]), rng.choice([1, 4, 16, 32]), rng.choice([1, 2, 3, 5])
        tiles = rng.randint(1, 12) * col_tiles
        waves, rem = divmod(tiles, grid)  # StreamKWork (K >= kDataParallelMinK)
        dp_tiles = tiles if rem == 0 else max(waves - 1, 0) * grid
        sk_total = (tiles - dp_tiles) * stages
        sk_run = -(-sk_total // grid)
        cta = rng.randrange(grid)
        sk0 = dp_tiles * stages + min(cta * sk_run, sk_total)
        sk1 = dp_tiles * stages + min(cta * sk_run + sk_run, sk_total)
        taken = sorted(rng.sample(range(dp_tiles), rng.randint(0, dp_tiles)))
        segments = walk(col_tiles, stages, dp_tiles, sk0, sk1, taken)
        assert all(tile // col_tiles == held for tile, held, _, _ in segments), segments
        assert [t for t, _, _, _ in segments if t < dp_tiles] == taken
        sk_iterations = [t * stages + s for t, _, s0, s1 in segments if t >= dp_tiles for s in range(s0, s1)]
        assert sk_iterations == list(range(sk0, sk1))
