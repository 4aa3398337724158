"""The wgmma tile's tensor maps (chord_kernels.tma), checked on the CPU: each box, read the way the
TMA unit reads it (dims, byte strides, zero fill past the tensor), holds exactly the bytes the
tile's consumers expect in that ring slot."""

import pytest
import torch
from chord_kernels import dispatch, layouts, ops, tma


def read_box(storage: torch.Tensor, geo: tma.MapGeometry, coords: tuple[int, ...]) -> torch.Tensor:
    """The box at ``coords`` (innermost first) of a 4-byte-element tensor map over ``storage``,
    elements outside the dims zero: what lands in shared memory, outermost box dim first."""
    flat = storage.contiguous().view(-1).view(torch.int32)
    strides = (1,) + tuple(s // 4 for s in geo.strides)
    full = torch.as_strided(flat, tuple(reversed(geo.dims)), tuple(reversed(strides)))
    out = torch.zeros(tuple(reversed(geo.box)), dtype=torch.int32)
    src = full[tuple(slice(c, min(c + b, d)) for c, b, d in reversed(list(zip(coords, geo.box, geo.dims, strict=True))))]
    out[tuple(slice(0, n) for n in src.shape)] = src
    return out


def packed_weight(e: int, n: int, k: int, mode: str = "indexed") -> layouts.PackedW4A16:
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 16, (e, n, k), dtype=torch.uint8, generator=g)
    scale = (torch.rand(e, n, k // 32, generator=g) + 0.5).to(torch.bfloat16)
    return layouts.pack_w4a16(codes, scale, mode)


@pytest.mark.parametrize("rows", [512, 256, 128])
def test_weight_box_is_the_tiles_n_tiles_of_one_stage(rows):
    e, n, k = 3, 336, 256  # N ends inside a 256- and a 512-row tile: the last box reads past N
    packed = packed_weight(e, n, k)
    geo = tma.weight_map_geometry(e, n, k, rows)
    for expert, col_tile, stage in [(0, 0, 0), (2, 1, 3), (1, (n - 1) // rows, 2)]:
        box = read_box(packed.qweight, geo, (0, stage, col_tile * rows // 16, expert))
        assert box.shape == (1, rows // 16, 1, 128)
        for t in range(rows // 16):  # ring slot n-tile t: the consumer's tile_in_cta == t
            tile = col_tile * rows // 16 + t
            want = packed.qweight[expert, tile, stage].reshape(-1) if tile < n // 16 else torch.zeros(128, dtype=torch.int32)
            assert torch.equal(box[0, t, 0], want)


@pytest.mark.parametrize("rows", [512, 256, 128])
def test_block_k_128_weight_box_is_a_stage_pair_in_memory_order(rows):
    """BLOCK_K 128 (masked): one box a K block (two ring stages), n-tile t's 1024 bytes at t, lane o's
    16 bytes of stage h at 2 o + h: WgmmaTile::weight_chunk's stage-pair layout."""
    e, n, k = 3, 336, 512
    packed = packed_weight(e, n, k, "masked")
    geo = tma.weight_map_geometry(e, n, k, rows, block_k=128)
    assert geo.box == (256, 1, rows // 16, 1) and geo.box_bytes == 64 * rows
    codes = layouts.untile_codes(packed.qweight, 128)
    indexed = layouts.tile_codes(codes, 64)  # the same codes packed a stage a block
    for expert, col_tile, block in [(0, 0, 0), (2, 1, 3), (1, (n - 1) // rows, 2)]:
        box = read_box(packed.qweight, geo, (0, block, col_tile * rows // 16, expert))
        assert box.shape == (1, rows // 16, 1, 256)
        for t in range(rows // 16):
            tile = col_tile * rows // 16 + t
            chunks = box[0, t, 0].view(32, 2, 4)  # [lane][stage of the pair][4 words]
            for h in range(2):
                want = indexed[expert, tile, 2 * block + h] if tile < n // 16 else torch.zeros(32, 4, dtype=torch.int32)
                assert torch.equal(chunks[:, h], want)


@pytest.mark.parametrize("rows", [512, 256, 128])
def test_block_k_128_weight_box_is_one_stage_in_the_block_k_64_layout(rows):
    """BLOCK_K-128 stage boxes (masked, the 128-row tall tile and stream-K): a box a stage, n-tile
    t's 512 bytes at t, lane o's 16 bytes of the stage at o: the shared memory a BLOCK_K-64 box of
    the same codes fills (WgmmaTile::weight_chunk reads one layout), for both stages of a block."""
    e, n, k = 3, 336, 512
    packed = packed_weight(e, n, k, "masked")
    geo = tma.weight_map_geometry(e, n, k, rows, block_k=128, stage_boxes=True)
    assert geo.box == (4, 32, 1, rows // 16, 1) and geo.box_bytes == 32 * rows
    indexed = layouts.tile_codes(layouts.untile_codes(packed.qweight, 128), 64)  # the same codes, a stage a block
    geo64 = tma.weight_map_geometry(e, n, k, rows)
    for expert, col_tile, stage in [(0, 0, 0), (0, 0, 1), (2, 1, 5), (1, (n - 1) // rows, 6)]:
        n_tile0 = col_tile * rows // 16
        box = read_box(packed.qweight, geo, tma.weight_box_coords(stage, n_tile0, expert, 128, stage_boxes=True))
        assert box.shape == (1, rows // 16, 1, 32, 4)
        want = read_box(indexed, geo64, tma.weight_box_coords(stage, n_tile0, expert))
        assert torch.equal(box.reshape(-1), want.reshape(-1))
        for t in range(rows // 16):
            tile = n_tile0 + t
            expect = indexed[expert, tile, stage] if tile < n // 16 else torch.zeros(32, 4, dtype=torch.int32)
            assert torch.equal(box[0, t, 0], expect)


@pytest.mark.parametrize("rows", [512, 256, 128])
def test_scale_box_is_the_stages_two_groups_of_the_tiles_rows(rows):
    e, n, k = 2, 336, 256
    packed = packed_weight(e, n, k)
    geo = tma.scale_map_geometry(e, n, k, rows)
    for expert, col_tile, stage in [(0, 0, 0), (1, (n - 1) // rows, 3)]:
        box = read_box(packed.scale, geo, (col_tile * rows // 2, 2 * stage, expert))
        got = box[0].contiguous().view(torch.bfloat16)  # [2 groups][rows] as the tile reads it
        want = torch.zeros(2, rows, dtype=torch.bfloat16)
        cols = packed.scale[expert, 2 * stage:2 * stage + 2, col_tile * rows:(col_tile + 1) * rows]
        want[:, :cols.shape[1]] = cols
        assert torch.equal(got, want)


def test_box_bytes_are_a_ring_slots_weights_and_scales():
    """WgmmaTile::kTmaStageBytes (the bytes `full` is armed with) = the two boxes, for every
    wgmma tile shape the dispatch builds; a BLOCK_K-128 weight box fills two slots' weights, or
    one slot's as a stage box."""
    for wm, cwg in [(1, 2), (2, 2), (2, 4)]:
        rows = cwg * 64 * wm
        slot = dispatch.wgmma_smem_bytes(wm, 32, 2, cwg) - dispatch.wgmma_smem_bytes(wm, 32, 1, cwg)
        act_ids_barriers = 32 * 128 + 32 * 4 + 16
        weights, scales = tma.weight_map_geometry(48, 4096, 7168, rows), tma.scale_map_geometry(48, 4096, 7168, rows)
        assert weights.box_bytes + scales.box_bytes == slot - act_ids_barriers
        assert tma.weight_map_geometry(48, 4096, 7168, rows, block_k=128).box_bytes == 2 * weights.box_bytes
        assert tma.weight_map_geometry(48, 4096, 7168, rows, 128, stage_boxes=True).box_bytes == weights.box_bytes


def test_kimi_geometry():
    w = tma.weight_map_geometry(48, 4096, 7168, 512)
    assert w.dims == (128, 112, 256, 48) and w.box == (128, 1, 32, 1)
    assert w.strides == (512, 512 * 112, 512 * 112 * 256)
    m = tma.weight_map_geometry(48, 4096, 7168, 128, 128, stage_boxes=True)  # the masked tall tile: 16-byte rows
    assert tma.weight_map_geometry(48, 4096, 7168, 128, 64, stage_boxes=True) == tma.weight_map_geometry(48, 4096, 7168, 128)
    assert m.dims == (8, 32, 56, 256, 48) and m.box == (4, 32, 1, 8, 1)
    assert m.strides == (32, 1024, 1024 * 56, 1024 * 56 * 256)
    assert tma.weight_box_coords(13, 32, 5, 128, stage_boxes=True) == (4, 0, 6, 32, 5)
    assert tma.weight_box_coords(12, 32, 5, 128) == (0, 6, 32, 5) and tma.weight_box_coords(13, 32, 5) == (0, 13, 32, 5)
    s = tma.scale_map_geometry(48, 7168, 2048, 512)
    assert s.dims == (3584, 64, 48) and s.box == (256, 2, 1) and s.strides == (14336, 14336 * 64)


def test_geometry_rejects_what_a_box_cannot_hold():
    with pytest.raises(ValueError, match="16-512 weight rows"):
        tma.weight_map_geometry(1, 512, 256, 1024)
    with pytest.raises(ValueError, match="K=96"):
        tma.weight_map_geometry(1, 512, 96, 256)
    with pytest.raises(ValueError, match="K=192 must be a multiple of BLOCK_K=128"):
        tma.weight_map_geometry(1, 512, 192, 256, block_k=128)
    with pytest.raises(ValueError, match="got 256"):
        tma.weight_map_geometry(1, 512, 512, 256, block_k=256)


def test_tensor_maps_refuse_strided_tensors():
    packed = packed_weight(2, 64, 256)
    strided = layouts.PackedW4A16("indexed", packed.qweight[:, ::2], packed.scale[:, :, ::2], 64)
    with pytest.raises(ValueError, match="qweight must be contiguous"):
        tma.tensor_maps(strided, 128)


def test_tma_launches_take_the_maps_in_their_parameters():
    """Every wgmma launch, on either BLOCK_K and schedule, is declared with MoeTmaParams and
    appends the maps (448 bytes: MoeParams, padding to 192, two 128-byte maps); mma launches do not.
    BLOCK_K-128 weights come a K block a box (stage pairs) on whole-block tiles of 256+ weight rows,
    else a stage a box (WgmmaTile::kBlockPairs)."""
    assert ops._TMA_MAPS_OFFSET == 192 and ops._TMA_MAPS_OFFSET + 256 == 448
    for launch in (dispatch.indexed_wgmma(2, 32, 8, cwg=4), dispatch.indexed_wgmma_streamk(2, 56, 8),
                   dispatch.grouped_wgmma("masked", 2, 32, 8, 128, cwg=4, split_k=2),
                   dispatch.grouped_wgmma_streamk("masked", 2, 56, 6, 128)):
        assert launch.tensor_maps and launch.spec.params_type == "chord::MoeTmaParams" and not launch.act_map_rows
        assert "run(chord::moe_params(params))" in launch.spec.source()
    # the grouped tile loop also takes its activations' map (MoeTmaActParams, 576 bytes)
    for launch in (dispatch.grouped_wgmma("contiguous", 2, 128, 6, 64), dispatch.grouped_wgmma("masked", 2, 56, 6, 128),
                   dispatch.grouped_wgmma("contiguous_offsets", 2, 32, 8, 64, cwg=4, loop=True)):
        assert launch.tensor_maps and launch.spec.params_type == "chord::MoeTmaActParams"
        assert launch.act_map_rows == launch.rows_per_cta and launch.spec.config["TMA_ACTS"] == 1
    pairs = [dispatch.grouped_wgmma("masked", 2, 56, 6, 128), dispatch.grouped_wgmma("masked", 2, 32, 8, 128, cwg=4, split_k=2)]
    stage_boxes = [dispatch.grouped_wgmma("masked", 1, 240, 4, 128), dispatch.grouped_wgmma_streamk("masked", 2, 56, 6, 128),
                   dispatch.grouped_wgmma("masked", 1, 64, 6, 128)]
    assert [launch.stage_boxes for launch in pairs + stage_boxes] == [False] * 2 + [True] * 3
    assert not dispatch.grouped_wgmma("contiguous_offsets", 1, 240, 4, 64).stage_boxes
    launch = dispatch.indexed_mma_streamk(2, 2, 256)
    assert not launch.tensor_maps and launch.spec.params_type == "chord::MoeParams"


def test_activation_map_geometry():
    """a [rows, K] bf16 as boxes of one 64-column stage of the tile's rows, 128-byte swizzled (the
    wgmma tile's K-major activation layout); the row stride must be 16-byte aligned."""
    geo = tma.activation_map_geometry(rows=5000, k=7168, lda=7168, box_rows=240)
    assert geo.dtype == tma.DTYPE_BFLOAT16 and geo.swizzle == tma.SWIZZLE_128B
    assert geo.dims == (7168, 5000) and geo.strides == (7168 * 2,) and geo.box == (64, 240)
    assert geo.box_bytes == 64 * 240 * 2  # one stage of the tile's act slot (WgmmaTile::Smem::act)
    assert tma.activation_map_geometry(100, 2048, 2056, 8).strides == (4112,)  # a padded row stride
    for kwargs, match in ((dict(rows=8, k=7168, lda=7170, box_rows=8), "multiple of 8 elements"),
                          (dict(rows=8, k=7168, lda=64, box_rows=8), "at least K"),
                          (dict(rows=8, k=100, lda=128, box_rows=8), "multiple of 64"),
                          (dict(rows=8, k=64, lda=64, box_rows=260), "8-256 rows"),
                          (dict(rows=8, k=64, lda=64, box_rows=12), "8-256 rows")):
        with pytest.raises(ValueError, match=match):
            tma.activation_map_geometry(**kwargs)


def test_activation_map_encodes_a_as_2d(monkeypatch):
    """The map is a's address and shape as [rows, K] (a masked 3-D view as [G*max_m, K]); a
    misaligned a is a clear error before anything is encoded. (The plans keep maps by address.)"""
    encoded = []
    monkeypatch.setattr(tma, "encode", lambda geo, address: encoded.append((geo, address)) or bytes(128))
    a = torch.zeros(64, 128, dtype=torch.bfloat16)
    assert tma.activation_map(a, 32) == bytes(128)
    assert encoded[0][1] == a.data_ptr() and encoded[0][0].dims == (128, 64) and encoded[0][0].box == (64, 32)
    tma.activation_map(a.view(4, 16, 128), 32)  # the masked form's 3-D view: [G*max_m, K]
    assert encoded[-1][0].dims == (128, 64) and encoded[-1][0].strides == (256,)
    with pytest.raises(ValueError, match="16-byte aligned"):
        tma.activation_map(a.view(-1)[1:129].view(1, 128), 8)
    assert len(encoded) == 2
