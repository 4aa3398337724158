"""A Python model of v54's chunked stream-K schedule (v54.diff: StreamKWork, StreamKChunks, the
fix-up by pieces), checked on the CPU before the device run: every stream-K iteration lies in
exactly one piece, no chunk is shorter than 4 iterations, at most 4 chunks a CTA, and each split
tile's contributors are the pieces c0..c1 that hold its iterations, one slot each (c0 slot 1,
the others slot 0), which is the order the finisher adds them in.

    python3 benchmarks/results/sweeps/2026-12-05_v54_chunked_tail/chunks_model.py
"""

from __future__ import annotations

NO_CHUNKS = 2**31 - 1


def streamk_run(tiles: int, stages: int, grid: int) -> int:
    equal = (tiles * stages + grid - 1) // grid
    whole = (tiles + grid - 1) // grid * stages
    return whole if whole - equal <= 1 else equal


def schedule(row_tiles: int, col_tiles: int, stages: int, grid: int, k: int = 4096) -> dict:
    """The launch's schedule as every CTA computes it (StreamKWork then StreamKChunks::make)."""
    tiles = row_tiles * col_tiles
    waves, rem = divmod(tiles, grid)
    all_whole = rem == 0 or (waves <= 0 and rem * 8 >= grid * 6)  # kMmaWholeTiles
    dp = 0 if k < 1024 else tiles if all_whole else max(waves - 1, 0) * grid
    base, sk_total = dp * stages, (tiles - dp) * stages
    s = {"base": base, "run": streamk_run(tiles - dp, stages, grid), "dyn0": NO_CHUNKS, "chunk": 1, "chunks": 0,
         "end": base + sk_total}
    if stages >= 8 and s["run"] >= 32:
        run = sk_total // grid * 3 // 4
        dyn = sk_total - run * grid
        s["chunk"] = max(4, -(-dyn // (4 * grid)))
        s["chunks"] = dyn // s["chunk"]
        s["dyn0"] = base + run * grid
        s["run"] = run
    return s


def pieces(s: dict, grid: int) -> list[tuple[int, int, int]]:
    """(piece, first iteration, end): the static runs, then the chunks (the last takes the rest)."""
    out = []
    for cta in range(grid):
        a = min(s["base"] + cta * s["run"], min(s["dyn0"], s["end"]))
        b = min(a + s["run"], min(s["dyn0"], s["end"]))
        if a < b:
            out.append((cta, a, b))
    for j in range(s["chunks"]):
        a = s["dyn0"] + j * s["chunk"]
        b = s["end"] if j == s["chunks"] - 1 else a + s["chunk"]
        out.append((grid + j, a, b))
    return out


def piece_of(s: dict, g: int, grid: int) -> int:
    if g < s["dyn0"]:
        return (g - s["base"]) // s["run"]
    return grid + min((g - s["dyn0"]) // s["chunk"], s["chunks"] - 1)


def check(row_tiles: int, col_tiles: int, stages: int, grid: int) -> dict:
    s = schedule(row_tiles, col_tiles, stages, grid)
    assert s["chunks"] <= 4 * grid
    cover = [0] * (s["end"] - s["base"])
    contributions: dict[int, list[tuple[int, int, int, int]]] = {}
    for piece, a, b in pieces(s, grid):
        assert piece < grid or b - a >= 4, "a chunk shorter than 4 iterations"
        for g in range(a, b):
            cover[g - s["base"]] += 1
        g = a
        while g < b:
            first = g // stages * stages
            if not (first >= a and first + stages <= b):  # a split tile: this piece's partial
                c0, c1 = piece_of(s, first, grid), piece_of(s, first + stages - 1, grid)
                contributions.setdefault(first, []).append((piece, 0 if first < a else 1, c0, c1))
            g = min(first + stages, b)
    assert all(n == 1 for n in cover), "an iteration in no piece or in two"
    for got in contributions.values():
        c0, c1 = got[0][2], got[0][3]
        assert all((x[2], x[3]) == (c0, c1) for x in got)
        assert sorted(x[:2] for x in got) == [(c0, 1)] + [(c0 + i, 0) for i in range(1, c1 - c0 + 1)]
    return s


if __name__ == "__main__":
    shapes = [(r, c, st, g) for g in (132, 264, 396, 528) for st in (8, 14, 16, 28, 32, 56)
              for r in (1, 3, 16, 20, 48, 96, 200) for c in (4, 16, 32, 56)]
    for shape in shapes:
        check(*shape)
    print(f"ok: {len(shapes)} shapes; EP8 T=20 gate_up (48 x 16 tiles of 56 stages, 396 CTAs):",
          check(48, 16, 56, 396))
