"""The CUDA entry points' host side, on CPU: the per-signature plan (checks, kernel choice, grid,
parameter values) and the packed parameter struct, with kernel resolution stubbed out."""

import struct

import pytest
import torch
from chord_kernels import dispatch, layouts, ops, routing, tma


def _problem(e=4, n=64, k=256, tokens=3, top_k=2, block_m=8):
    codes = torch.randint(0, 16, (e, n, k), dtype=torch.uint8)
    scale = torch.rand(e, n, k // 32).to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, "indexed")
    a = torch.randn(tokens, k).to(torch.bfloat16)
    topk = torch.randint(0, e, (tokens, top_k), dtype=torch.int32)
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk, block_m, e)
    out = torch.empty(tokens * top_k, n, dtype=torch.bfloat16)
    return a, packed, sorted_ids, expert_ids, ntp, out


def test_indexed_plan_values(stub_device):
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    kernel, launch, grid, block, tail, device, tails = ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 8,
                                                                         out, "mma", "")
    assert tails is None  # no tensor maps: the tail alone, the same every call
    lda, ldc, *rest = ops._PARAMS_TAIL.unpack(tail)  # the signature's part of MoeParams, packed once
    ints, scratch = rest[:len(ops._INTS)], tuple(rest[len(ops._INTS):])
    assert (lda, ldc) == (a.stride(0), out.stride(0))
    assert kernel == "kernel" and stub_device == [launch.spec] and device == 0
    want = dispatch.choose_indexed_mma(dispatch.IndexedProblem(64, 256, 4, 2, 8))
    assert launch.spec == want.spec and block == (128, 1, 1)
    assert grid == (1, expert_ids.numel() * launch.ctas_per_block(dispatch.IndexedProblem(64, 256, 4, 2, 8)), 1)
    fields = dict(zip(ops._INTS, ints, strict=True))
    assert fields == {"num_routes": 6, "n": 64, "k": 256, "top_k": 2, "num_experts": 4, "block_m": 8,
                      "num_blocks": expert_ids.numel(), "ctas_per_block": 1, "sorted_len": sorted_ids.numel(),
                      "max_m": 0, "pick_rows": 0, "pick_cost": 0, "pick_other_cost": 0, "pick_first": 0,
                      "evict_first_tiles": 0}  # the one-CTA mma tile never loads evict-first
    assert scratch == (0, 0)  # one CTA per tile: no stream-K workspace


def test_indexed_streamk_plan_is_persistent_with_scratch(stub_device):
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    plan = ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out, "mma_sk", "")
    launch, grid, scratch = plan[1], plan[2], ops._PARAMS_TAIL.unpack(plan[4])[-2:]
    assert launch.spec.family == "indexed_mma_sk" and grid == (3 * launch.spec.min_blocks_per_sm, 1, 1)
    workspace, locks = ops._streamk_buffers[0][-1]
    assert scratch == (workspace.data_ptr(), locks.data_ptr())
    assert workspace.numel() >= grid[0] * launch.partial_floats and locks.numel() >= grid[0]
    assert not locks.any()  # the kernels rely on zeroed locks
    fields = dict(zip(ops._INTS, ops._PARAMS_TAIL.unpack(plan[4])[2:-2], strict=True))
    assert fields["evict_first_tiles"] == dispatch.evict_first_tiles(launch, 256) > 0
    # a second plan needing no more reuses the buffers; the kept ones are never freed
    again = ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out, "mma_sk", "")
    assert ops._PARAMS_TAIL.unpack(again[4])[-2:] == scratch and len(ops._streamk_buffers[0]) == 1


def test_indexed_paired_decode_plan_packs_the_pick(stub_device):
    """The short-K tile holding the pair tile (dispatch.paired_decode, PAIRED=2): the plan packs the
    dual's pick (pair tiles of 16 rows at 51 against 8-row tiles at 50, the 8-row tile first) and
    sizes the stream-K workspace for the pair tile's partials."""
    a, packed, sorted_ids, expert_ids, ntp, out = _problem(e=8, n=2048, k=256, tokens=200, top_k=2)
    plan = ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out, "mma_sk", "PAIRED=2")
    launch, grid = plan[1], plan[2]
    assert launch == dispatch.indexed_mma_decode_dual(4, 128, 3, 2)
    fields = dict(zip(ops._INTS, ops._PARAMS_TAIL.unpack(plan[4])[2:-2], strict=True))
    assert (fields["pick_rows"], fields["pick_cost"], fields["pick_other_cost"], fields["pick_first"]) == (
        16, *dispatch.PAIRED_COST, 1)
    assert (fields["block_m"], fields["ctas_per_block"]) == (8, 1)
    workspace, _ = ops._streamk_buffers[0][-1]
    assert workspace.numel() >= grid[0] * launch.partial_floats == grid[0] * 2 * 128 * 32


def test_indexed_plan_rejects_bad_signatures(stub_device):
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    with pytest.raises(ValueError, match="sorted_ids must be int32"):
        ops._indexed_plan(a, packed, sorted_ids.long(), expert_ids, ntp, 2, 8, out, "mma", "")
    with pytest.raises(ValueError, match="a has K=128, the weight has K=256"):
        ops._indexed_plan(a[:, :128], packed, sorted_ids, expert_ids, ntp, 2, 8, out, "mma", "")
    with pytest.raises(ValueError, match="out has shape"):
        ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out[:5], "mma", "")
    with pytest.raises(ValueError, match="too few for"):
        ops._indexed_plan(a, packed, sorted_ids, expert_ids[:1], ntp, 2, 8, out, "mma", "")
    wide = torch.zeros(a.shape[0], 260, dtype=torch.bfloat16)[:, :256]  # row stride 260: 8-byte rows
    with pytest.raises(ValueError, match="a's row stride \\(260 elements\\) must be a multiple of 8"):
        ops._indexed_plan(wide, packed, sorted_ids, expert_ids, ntp, 2, 8, out, "mma", "")



def test_params_struct_layout():
    # Mirrors csrc/common/moe_params.cuh's static_asserts: 176 bytes, lda at 80, num_routes at 96,
    # the stream-K workspace pointer at 160 (after the 15 int fields and 4 bytes of padding).
    assert ops.MOE_PARAMS.size == 176
    raw = ops.MOE_PARAMS.pack(*range(1, 11), 111, 222, *range(301, 316), 401, 402)
    assert struct.unpack_from("@q", raw, 80)[0] == 111 and struct.unpack_from("@i", raw, 96)[0] == 301
    assert struct.unpack_from("@i", raw, 96 + 4 * 9)[0] == 310  # max_m
    assert struct.unpack_from("@i", raw, 96 + 4 * 13)[0] == 314  # pick_first
    assert struct.unpack_from("@i", raw, 96 + 4 * 14)[0] == 315  # evict_first_tiles is the last int field
    assert ops._INTS[-1] == "evict_first_tiles"
    assert struct.unpack_from("@2P", raw, 160) == (401, 402)  # workspace, locks


def test_cpu_grouped_paths_write_only_valid_rows():
    """The CPU reference path keeps the kernels' contract: padding rows (m_indices -1) and rows
    past masked_m are left as they were."""
    from chord_kernels import contiguous, masked

    e, n, k = 3, 32, 128
    codes = torch.randint(0, 16, (e, n, k), dtype=torch.uint8)
    scale = torch.rand(e, n, k // 32).to(torch.bfloat16)
    a = torch.randn(24, k).to(torch.bfloat16)
    out = torch.full((24, n), float("nan"), dtype=torch.bfloat16)
    m_indices = torch.full((24,), -1, dtype=torch.int32)
    m_indices[:3] = 0
    contiguous(a, layouts.pack_w4a16(codes, scale, "contiguous"), m_indices, out)
    assert torch.isfinite(out[:3].float()).all() and torch.isnan(out[3:].float()).all()
    out.fill_(float("nan"))
    masked(a, layouts.pack_w4a16(codes, scale, "masked"), torch.tensor([2, 0, 8], dtype=torch.int32), 4, out)
    written = torch.isfinite(out.float()).all(dim=1)
    assert written.tolist() == [True] * 2 + [False] * 6 + [False] * 8 + [True] * 8


def test_indexed_launch_path_packs_and_launches_once_per_signature(stub_device, monkeypatch):
    """The CUDA launch path itself (plan lookup, parameter pack, launch), run with CPU tensors
    and a stub kernel: one plan per signature, parameters point at this call's tensors."""
    launches = []

    class StubKernel:
        def launch(self, grid, block, smem, stream, params):
            launches.append((grid, block, smem, stream, params))

    monkeypatch.setattr(ops, "_load", lambda launch, device: stub_device.append(launch.spec) or StubKernel())
    monkeypatch.setattr(ops, "_current_stream", lambda index: 77)
    ops._indexed_plans.clear()
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    for _ in range(3):
        ops._indexed_cuda(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    assert len(stub_device) == 1 and len(launches) == 3  # resolved once, launched every call
    grid, block, smem, stream, raw = launches[-1]
    fields = ops.MOE_PARAMS.unpack(raw)
    assert fields[:7] == (a.data_ptr(), packed.qweight.data_ptr(), packed.scale.data_ptr(), out.data_ptr(),
                          sorted_ids.data_ptr(), expert_ids.data_ptr(), ntp.data_ptr())
    assert fields[7:10] == (0, 0, 0) and fields[10:12] == (a.stride(0), out.stride(0)) and stream == 77
    plan = ops._indexed_plans[next(iter(ops._indexed_plans))]
    assert raw[ops._PARAMS_POINTERS.size:] == plan[4]  # leading dims, ints, stream-K scratch: packed once
    ops._indexed_cuda(a[:2], packed, sorted_ids, expert_ids, ntp, 2, 8, out)  # a new signature
    assert len(stub_device) == 2
    ops._indexed_plans.clear()


@pytest.mark.parametrize("family", ["wgmma", "wgmma_sk"])
def test_tma_launches_append_the_weights_tensor_maps(stub_device, monkeypatch, family):
    """A wgmma launch on BLOCK_K-64 weights passes MoeTmaParams: MoeParams, zeros to offset 192,
    then the weight and scale maps for its tile's rows, encoded once per weight."""
    launches = []

    class StubKernel:
        def launch(self, grid, block, smem, stream, params):
            launches.append(params)

    monkeypatch.setattr(ops, "_load", lambda launch, device: stub_device.append(launch.spec) or StubKernel())
    monkeypatch.setattr(ops, "_current_stream", lambda index: 77)
    monkeypatch.setenv("CHORD_W4A16_INDEXED_KERNEL", family)
    encoded = []
    stub_encode = tma.encode
    monkeypatch.setattr(tma, "encode", lambda geo, address: encoded.append(geo) or stub_encode(geo, address))
    ops._indexed_plans.clear()
    a, packed, sorted_ids, expert_ids, ntp, out = _problem(n=512, block_m=64)
    for _ in range(2):
        ops._indexed_cuda(a, packed, sorted_ids, expert_ids, ntp, 2, 64, out)
    launch = ops._indexed_plans[next(iter(ops._indexed_plans))][1]
    raw = launches[-1]
    assert launch.tensor_maps and len(raw) == 448 and raw[ops.MOE_PARAMS.size:192] == bytes(192 - ops.MOE_PARAMS.size)
    assert ops.MOE_PARAMS.unpack(raw[:ops.MOE_PARAMS.size])[1] == packed.qweight.data_ptr()
    rows = launch.cols_per_cta
    assert struct.unpack_from("@2Q", raw, 192) == (packed.qweight.data_ptr(), 32 * rows)  # the stub map's record
    assert struct.unpack_from("@2Q", raw, 320) == (packed.scale.data_ptr(), 4 * rows)
    assert encoded == [tma.weight_map_geometry(4, 512, 256, rows), tma.scale_map_geometry(4, 512, 256, rows)]
    # Another weight of the same shapes (another layer) shares the plan, not the maps.
    other = layouts.pack_w4a16(*layouts.unpack_w4a16(packed), "indexed")
    for weight in (other, packed, other):
        ops._indexed_cuda(a, weight, sorted_ids, expert_ids, ntp, 2, 64, out)
        assert struct.unpack_from("@Q", launches[-1], 192)[0] == weight.qweight.data_ptr()
        assert struct.unpack_from("@Q", launches[-1], 320)[0] == weight.scale.data_ptr()
    assert len(encoded) == 4 and len(ops._indexed_plans) == 1
    ops._indexed_plans.clear()


# ----------------------------------------------------------------------------------- grouped


def _grouped_problem(mode, e=4, n=64, k=256, rows=24):
    codes = torch.randint(0, 16, (e, n, k), dtype=torch.uint8)
    scale = torch.rand(e, n, k // 32).to(torch.bfloat16)
    packed = layouts.pack_w4a16(codes, scale, mode)
    a = torch.randn(rows, k).to(torch.bfloat16)
    out = torch.empty(rows, n, dtype=torch.bfloat16)
    return packed, a, out


@pytest.fixture
def grouped_stub(stub_device, monkeypatch):
    """select_grouped counted, kernels stubbed (launches recorded), stream 77, plans cleared."""
    calls, launches = [], []

    class StubKernel:
        def launch(self, grid, block, smem, stream, params):
            launches.append((grid, block, smem, stream, params))

    real_select = ops.select_grouped
    monkeypatch.setattr(ops, "select_grouped",
                        lambda problem, *args: calls.append(problem) or real_select(problem, *args))
    monkeypatch.setattr(ops, "_load", lambda launch, device: stub_device.append(launch.spec) or StubKernel())
    monkeypatch.setattr(ops, "_current_stream", lambda index: 77)
    ops._grouped_plans.clear()
    yield {"select": calls, "launches": launches, "loaded": stub_device}
    ops._grouped_plans.clear()


@pytest.mark.parametrize("routing_name", ["contiguous", "contiguous_offsets", "masked"])
def test_grouped_launch_path_resolves_once_per_signature(grouped_stub, routing_name):
    """The grouped CUDA launch path (plan lookup, parameter pack, launch) with CPU tensors and a
    stub kernel: the second and later calls of one signature do not select or load a kernel
    again, and the parameters point at each call's own tensors."""
    mode = "masked" if routing_name == "masked" else "contiguous"
    packed, a, out = _grouped_problem(mode)
    route = {"contiguous": torch.zeros(24, dtype=torch.int32),
             "contiguous_offsets": torch.tensor([0, 5, 5, 12, 20]),
             "masked": torch.tensor([3, 0, 6, 1], dtype=torch.int32)}[routing_name]
    hint = 0 if routing_name == "contiguous" else 6
    for _ in range(3):
        ops._grouped_cuda(routing_name, a, packed, route, out, hint)
    assert len(grouped_stub["select"]) == 1 and len(grouped_stub["loaded"]) == 1
    assert len(grouped_stub["launches"]) == 3 and len(ops._grouped_plans) == 1
    grid, block, smem, stream, raw = grouped_stub["launches"][-1]
    fields = ops.MOE_PARAMS.unpack(raw)
    ptrs = dict(zip(ops._POINTERS, fields[:10], strict=True))
    slot_name = {"contiguous": "m_indices", "contiguous_offsets": "expert_offsets", "masked": "masked_m"}[routing_name]
    assert ptrs["a"] == a.data_ptr() and ptrs["qweight"] == packed.qweight.data_ptr()
    assert ptrs["scale"] == packed.scale.data_ptr() and ptrs["out"] == out.data_ptr()
    assert ptrs[slot_name] == route.data_ptr()
    assert all(v == 0 for name, v in ptrs.items() if name not in ("a", "qweight", "scale", "out", slot_name))
    assert fields[10:12] == (a.stride(0), out.stride(0)) and stream == 77
    ints = dict(zip(ops._INTS, fields[12:-2], strict=True))
    problem = grouped_stub["select"][0]
    launch = dispatch.select_grouped(problem)
    tile = launch.rows_per_cta
    assert (ints["num_routes"], ints["n"], ints["k"], ints["num_experts"]) == (24, 64, 256, 4)
    assert problem == dispatch.GroupedProblem(routing_name, 64, 256, 4, 6, packed.block_k)  # 24 rows / 4 = hint 6
    # 6 rows per expert: the stream-K schedule, every resident CTA (3 SMs here), with scratch
    assert launch.persistent and grid == (3 * launch.spec.min_blocks_per_sm, 1, 1)
    workspace, locks = ops._streamk_buffers[0][-1]
    assert fields[-2:] == (workspace.data_ptr(), locks.data_ptr()) and block == (launch.spec.threads, 1, 1)
    assert ints["pick_rows"] == 0  # no pair at 6 rows an expert
    # the mma tile's L2 evict-first bound, which the kernel compares with its routed tiles (not the DeepGEMM form's)
    assert ints["evict_first_tiles"] == dispatch.evict_first_tiles(launch, 256)
    assert (ints["evict_first_tiles"] > 0) == (routing_name != "contiguous")
    if routing_name == "masked":
        assert (ints["max_m"], ints["ctas_per_block"]) == (6, -(-6 // tile))
    else:
        assert (ints["max_m"], ints["ctas_per_block"]) == (0, 0)
    # new tensors with the same signature reuse the plan; a new signature builds one more
    a_new, out_new = a.clone(), out.clone()
    ops._grouped_cuda(routing_name, a_new, packed, route, out_new, hint)
    assert ops.MOE_PARAMS.unpack(grouped_stub["launches"][-1][4])[0] == a_new.data_ptr()
    assert len(grouped_stub["select"]) == 1
    if hint:  # another expected_m
        ops._grouped_cuda(routing_name, a, packed, route, out, 40)
    else:  # another shape
        ops._grouped_cuda(routing_name, a[:16], packed, route[:16], out, 0)
    assert len(grouped_stub["select"]) == 2 and len(ops._grouped_plans) == 2


@pytest.mark.parametrize("rows,first_rows", [(683, dispatch.TALL_TILE_ROWS), (280, 96)])
def test_grouped_tall_tile_pair_launches_both_with_mirrored_picks(grouped_stub, rows, first_rows):
    """Where the offsets form pairs a short tile with the 240-row one (dispatch.Launch.pick),
    every call launches both, back to back on one stream, the host's choice first (683 rows an
    expert: the tall tile; 280: the 256 x 96 tile): the same pointers, each with the other's
    height and the two row-tile costs swapped, the first winning ties (csrc MoeParams::pick_*),
    each with its own tile width's tensor maps."""
    packed, a, out = _grouped_problem("contiguous", e=3, n=256, k=1024, rows=3 * rows)
    offsets = torch.tensor([0, rows, 2 * rows, 3 * rows])
    ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, rows)
    launch = dispatch.select_grouped(grouped_stub["select"][0])
    other, cost, other_cost = launch.pick
    assert launch.rows_per_cta == first_rows and dispatch.TALL_TILE_ROWS in (launch.rows_per_cta, other.rows_per_cta)
    assert len(grouped_stub["launches"]) == 2 and grouped_stub["loaded"] == [launch.spec, other.spec]
    first, second = (ops.MOE_PARAMS.unpack(raw[:ops.MOE_PARAMS.size]) for *_, raw in grouped_stub["launches"])
    assert first[:12] == second[:12] and grouped_stub["launches"][0][3] == grouped_stub["launches"][1][3] == 77
    picks = [dict(zip(ops._INTS, f[12:-2], strict=True)) for f in (first, second)]
    assert [(p["pick_rows"], p["pick_cost"], p["pick_other_cost"], p["pick_first"]) for p in picks] == [
        (other.rows_per_cta, cost, other_cost, 1), (launch.rows_per_cta, other_cost, cost, 0)]
    assert cost != other_cost and cost > 0 and other_cost > 0
    for (grid, block, smem, _, raw), lau in zip(grouped_stub["launches"], (launch, other), strict=True):
        assert block == (lau.spec.threads, 1, 1) and smem == lau.smem_bytes and lau.tile_loop
        assert grid == (3 * lau.spec.min_blocks_per_sm, 1, 1)  # the resident CTAs (3 SMs here)
        box_bytes = struct.unpack_from("@2Q", raw, 192)[1]  # the weight map's box: the tile's n-tiles
        assert lau.tensor_maps and box_bytes == lau.cols_per_cta // 16 * 512
        # then the activations' map (MoeTmaActParams): a's address, a stage of the tile's rows
        assert len(raw) == 576 and struct.unpack_from("@2Q", raw, 448) == (a.data_ptr(), 64 * lau.rows_per_cta * 2)
    ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, rows)
    assert len(grouped_stub["launches"]) == 4 and len(grouped_stub["select"]) == 1


def test_grouped_masked_3d_inputs(grouped_stub):
    """A [G, max_m, K] input that views as [G*max_m, K] is read in place; one that does not
    (here: max_m and G swapped in memory) is copied flat on each call, as reshape does."""
    packed, _, out = _grouped_problem("masked")
    masked_m = torch.tensor([3, 0, 6, 1], dtype=torch.int32)
    a3 = torch.randn(4, 6, 256).to(torch.bfloat16)
    ops._grouped_cuda("masked", a3, packed, masked_m, out, 2)
    fields = ops.MOE_PARAMS.unpack(grouped_stub["launches"][-1][4])
    assert fields[0] == a3.data_ptr() and fields[10] == 256

    strided = torch.randn(6, 4, 256).to(torch.bfloat16).transpose(0, 1)  # [4, 6, 256], not flat-viewable
    ops._grouped_cuda("masked", strided, packed, masked_m, out, 2)
    fields = ops.MOE_PARAMS.unpack(grouped_stub["launches"][-1][4])
    assert fields[0] != strided.data_ptr() and fields[10] == 256
    plan = ops._grouped_plans[next(k for k in ops._grouped_plans if k[2] == strided.stride())]
    assert plan[4] is True  # copied flat on each call; its row stride is K (in the packed tail)


def test_grouped_plan_keeps_the_entry_points_checks(grouped_stub):
    packed_c, a, out = _grouped_problem("contiguous")
    packed_m, _, _ = _grouped_problem("masked")
    with pytest.raises(ValueError, match=r"a must be \[m, K\] and m_indices \[m\]"):
        ops._grouped_cuda("contiguous", a, packed_c, torch.zeros(5, dtype=torch.int32), out, 0)
    with pytest.raises(ValueError, match="m_indices must be int32"):
        ops._grouped_cuda("contiguous", a, packed_c, torch.zeros(24, dtype=torch.int64), out, 0)
    with pytest.raises(ValueError, match=r"expert_offsets must be int64 \[5\]"):
        ops._grouped_cuda("contiguous_offsets", a, packed_c, torch.zeros(5, dtype=torch.int32), out, 0)
    with pytest.raises(ValueError, match=r"a must be \[M, K\]"):
        ops._grouped_cuda("contiguous_offsets", a[None], packed_c, torch.zeros(5, dtype=torch.int64), out, 0)
    with pytest.raises(ValueError, match=r"a must be \[G\*max_m, K\] or \[G, max_m, K\] with G=4"):
        ops._grouped_cuda("masked", a[:22], packed_m, torch.zeros(4, dtype=torch.int32), out, 1)
    with pytest.raises(ValueError, match=r"masked_m must be \[4\]"):
        ops._grouped_cuda("masked", a, packed_m, torch.zeros(3, dtype=torch.int32), out, 1)
    with pytest.raises(ValueError, match="a has K=128, the weight has K=256"):
        ops._grouped_cuda("contiguous", a[:, :128], packed_c, torch.zeros(24, dtype=torch.int32), out, 0)
    with pytest.raises(ValueError, match="out has shape"):
        ops._grouped_cuda("contiguous", a, packed_c, torch.zeros(24, dtype=torch.int32), out[:20], 0)
    assert ops._grouped_plans == {} and grouped_stub["launches"] == []  # a failed check caches nothing


def test_grouped_entry_points_check_mode_and_expected_m():
    packed_c, a, _ = _grouped_problem("contiguous")
    packed_m, _, _ = _grouped_problem("masked")
    from chord_kernels import contiguous_offsets, masked

    with pytest.raises(ops.ModeError, match="packed for mode 'masked'"):
        contiguous_offsets(a, packed_m, torch.tensor([0, 1, 2, 3, 4]))
    with pytest.raises(ValueError, match="expected_m must be a positive int"):
        masked(a, packed_m, torch.zeros(4, dtype=torch.int32), 0)
    with pytest.raises(ValueError, match=r"expert_offsets must be int64 \[5\]"):
        contiguous_offsets(a, packed_c, torch.tensor([0, 1, 2, 3], dtype=torch.int64))


def test_grids_past_cuda_limit_are_a_clear_error(grouped_stub, monkeypatch):
    """Row tiles of one-CTA-per-tile kernels map to grid y (at most 65535): a buffer too tall for
    its tile size raises before any launch instead of failing in the driver."""
    # 32-row tiles (expected_m 24) on deep K, N >= 2048: the 4-warpgroup wgmma tile split over K
    # (one-CTA clusters), 65535 * 2 + E tiles (the rows are a broadcast view: no 8 GB buffer)
    monkeypatch.setenv("CHORD_GROUPED_SPLIT_K", "2")
    packed, _, _ = _grouped_problem("contiguous", n=2048, k=1024)
    a = torch.empty(1, 1024, dtype=torch.bfloat16).expand(64 * 65535, 1024)
    out = torch.empty(1, packed.n, dtype=torch.bfloat16).expand(a.shape[0], packed.n)
    offsets = torch.tensor([0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="contiguous_offsets over 4194240 rows .* grid y, over CUDA's 65535"):
        ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, 24)
    assert not grouped_stub["launches"]


def test_tile_loop_grid_does_not_grow_with_the_buffers(grouped_stub, monkeypatch):
    """The wgmma tile with 2 consumer warpgroups loops over whole tiles (csrc/common/
    w4a16_wgmma_tiles.cuh): however tall vLLM's over-allocated buffer, the grid is at most the
    resident CTAs, and fewer when the buffer holds fewer tiles; the CTAs claim tiles from the
    zeroed stream-K locks."""
    packed, _, _ = _grouped_problem("contiguous", k=1024)
    offsets = torch.tensor([0, 1, 2, 3, 4])
    # the buffers below are one broadcast row (stride 0), which no activation map takes
    monkeypatch.setattr(tma, "activation_map", lambda a, rows: bytes(128))
    # 128-row tiles (expected_m 100), 1 column tile: ceil(rows / 128) + 4 experts row tiles at most
    for rows, resident, want in ((64 * 65535, 3, 3), (100, 1000, 5)):
        monkeypatch.setattr(ops, "_resident_ctas", lambda kernel, launch, device, n=resident: n)
        a = torch.empty(1, 1024, dtype=torch.bfloat16).expand(rows, 1024)
        out = torch.empty(1, packed.n, dtype=torch.bfloat16).expand(rows, packed.n)
        ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, 100)
        assert grouped_stub["launches"][-1][0] == (want, 1, 1)
    assert all(spec.describe().startswith("grouped_wgmma[") for spec in grouped_stub["loaded"])
    launch = dispatch.indexed_wgmma(2, 128, 6)
    with pytest.raises(ValueError, match="tiles, over 2.31"):
        ops._launch_grid("kernel", launch, torch.device("cpu"), 7168, (56, 2**26, 1), "indexed")
    # the loop claims tiles from a counter (the zeroed locks' first two); a split tail takes a
    # lock per split tile and a tile's FP32 partial per piece, at most one of each a CTA
    grid, (workspace, locks) = ops._launch_grid("kernel", launch, torch.device("cpu"), 7168, (56, 1000, 1), "indexed")
    assert grid == (1000, 1, 1) and workspace != 0 and locks != 0
    floats, lock_ints = ops._streamk_buffers[0][-1]
    assert floats.numel() >= 1000 * 256 * 128 and lock_ints.numel() >= 1002 and not lock_ints.any()


def test_streamk_iteration_count_past_int32_is_a_clear_error(stub_device):
    """The stream-K kernels count (row tile, column tile, K stage) iterations in int32."""
    launch = dispatch.indexed_mma_streamk(2, 1, 256)
    with pytest.raises(ValueError, match="stream-K iterations, over 2.31"):
        ops._launch_grid("kernel", launch, torch.device("cpu"), 7168, (56, 2**21, 1), "indexed")
    grid, scratch = ops._launch_grid("kernel", launch, torch.device("cpu"), 7168, (56, 1000, 1), "indexed")
    assert grid == (3 * launch.spec.min_blocks_per_sm, 1, 1) and scratch != (0, 0)


def test_env_switches_stay_live_and_decode_once(monkeypatch):
    """The launch paths key their plans on env.raw() values and read flags through a per-value
    cache: a change in-process is still seen on the next call."""
    from chord_kernels import env

    monkeypatch.delenv(env.VALIDATE_ROUTING, raising=False)
    assert env.raw(env.VALIDATE_ROUTING) is None and env.flag(env.VALIDATE_ROUTING) is False
    for value, want in (("1", True), (" Yes ", True), ("0", False), ("on", True), ("", False)):
        monkeypatch.setenv(env.VALIDATE_ROUTING, value)
        assert env.flag(env.VALIDATE_ROUTING) is want, value
        assert env.text(env.raw(env.VALIDATE_ROUTING)) == value
    monkeypatch.setenv(env.INDEXED_KERNEL, "wgmma")
    assert env.get(env.INDEXED_KERNEL, "auto") == "wgmma"
    monkeypatch.delenv(env.INDEXED_KERNEL)
    assert env.get(env.INDEXED_KERNEL, "auto") == "auto" and env.text(None, "auto") == "auto"


def test_split_k_grid_cluster_and_override(grouped_stub, monkeypatch):
    """CHORD_GROUPED_SPLIT_K=2 runs the one-CTA tile (4 experts x 4 column tiles of 512 x 32) as
    clusters of 2 CTAs along grid z; the variable is part of the plan key and is checked against
    the splits the tile and K allow before anything launches. Unset, K 1024 is too shallow for
    the dispatch to split."""
    packed, _, _ = _grouped_problem("contiguous", n=2048, k=1024)
    offsets = torch.tensor([0, 20, 40, 60, 80])
    a = torch.randn(80, 1024).to(torch.bfloat16)
    out = torch.empty(80, packed.n, dtype=torch.bfloat16)
    ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, 24)
    assert grouped_stub["loaded"][-1].cluster_z == 1 and grouped_stub["launches"][-1][0][2] == 1
    monkeypatch.setenv("CHORD_GROUPED_SPLIT_K", "2")
    ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, 24)
    spec = grouped_stub["loaded"][-1]
    assert spec.cluster_z == 2 and spec.config["SPLIT_K"] == 2 and spec.config["CWG"] == 4
    assert grouped_stub["launches"][-1][0] == (4, -(-80 // 32) + 4, 2)
    monkeypatch.setenv("CHORD_GROUPED_SPLIT_K", "4")
    launches = len(grouped_stub["launches"])
    with pytest.raises(ValueError, match="CHORD_GROUPED_SPLIT_K='4'.*auto or one of 1, 2"):
        ops._grouped_cuda("contiguous_offsets", a, packed, offsets, out, 24)
    assert len(grouped_stub["launches"]) == launches


def test_grouped_tile_loop_maps_the_activations(grouped_stub):
    """The grouped tile loop's parameters end with the activations' map (MoeTmaActParams): a's
    address and a stage of the tile's rows; a masked 3-D input is mapped as [G*max_m, K]."""
    packed, _, _ = _grouped_problem("masked", n=256, k=1024)
    a3 = torch.randn(4, 256, 1024).to(torch.bfloat16)
    out = torch.empty(4 * 256, 256, dtype=torch.bfloat16)
    ops._grouped_cuda("masked", a3, packed, torch.tensor([200, 0, 256, 90], dtype=torch.int32), out, 140)
    launch = dispatch.select_grouped(grouped_stub["select"][0])
    assert launch.tile_loop and launch.act_map_rows == launch.rows_per_cta
    raw = grouped_stub["launches"][-1][4]
    assert len(raw) == 576 and struct.unpack_from("@2Q", raw, 448) == (a3.data_ptr(), 64 * launch.rows_per_cta * 2)
    with pytest.raises(ValueError, match="16-byte aligned"):
        flat = torch.randn(4 * 256 * 1024 + 1).to(torch.bfloat16)
        ops._grouped_cuda("masked", flat[1:].view(4, 256, 1024), packed, torch.tensor([1, 2, 3, 4], dtype=torch.int32),
                          out, 140)


def test_grouped_maps_are_encoded_once_per_address(grouped_stub, monkeypatch):
    """A tile-loop plan keeps each (a, weight) address's parameter tail: a second call on the same
    buffers encodes and looks up no map; a new a (or a new weight of the same shapes) gets its
    own maps, and every call's parameters point at its own tensors."""
    packed, _, _ = _grouped_problem("masked", n=256, k=1024)
    a, a2 = (torch.randn(4 * 256, 1024).to(torch.bfloat16) for _ in range(2))
    out = torch.empty(4 * 256, 256, dtype=torch.bfloat16)
    counts = torch.tensor([200, 0, 256, 90], dtype=torch.int32)
    encoded = []
    real_map = tma.activation_map
    monkeypatch.setattr(tma, "activation_map", lambda t, rows: encoded.append(t.data_ptr()) or real_map(t, rows))
    other = layouts.pack_w4a16(*layouts.unpack_w4a16(packed), "masked")
    for a_now, w_now in ((a, packed), (a, packed), (a2, packed), (a, packed), (a, other)):
        ops._grouped_cuda("masked", a_now, w_now, counts, out, 140)
        raw = grouped_stub["launches"][-1][4]
        assert ops.MOE_PARAMS.unpack_from(raw)[:2] == (a_now.data_ptr(), w_now.qweight.data_ptr())
        assert struct.unpack_from("@Q", raw, 192)[0] == w_now.qweight.data_ptr()  # the weight's map
        assert struct.unpack_from("@Q", raw, 448)[0] == a_now.data_ptr()  # the activations' map
    assert encoded == [a.data_ptr(), a2.data_ptr(), a.data_ptr()]  # the last: the other weight's tail
    plan = next(iter(ops._grouped_plans.values()))
    assert len(plan[-2]) == 3


def test_misaligned_activations_raise_before_the_launch(grouped_stub):
    """a's start is checked per call (addresses are no part of a signature): 2 bytes off 16 is a
    clear error on both launch paths, and nothing launches."""
    ops._indexed_plans.clear()
    a, packed, sorted_ids, expert_ids, ntp, out = _problem()
    base = torch.zeros(a.numel() + 8, dtype=torch.bfloat16)
    shifted = base[1:1 + a.numel()].view(a.shape)
    with pytest.raises(ValueError, match="must start 16-byte aligned"):
        ops._indexed_cuda(shifted, packed, sorted_ids, expert_ids, ntp, 2, 8, out)
    ops._indexed_plans.clear()
    codes, scale = layouts.unpack_w4a16(packed)
    grouped = layouts.pack_w4a16(codes, scale, "contiguous")
    with pytest.raises(ValueError, match="must start 16-byte aligned"):
        ops._grouped_cuda("contiguous_offsets", shifted, grouped, torch.tensor([0, 1, 1, 2, 3]), out, 1)
    assert not grouped_stub["launches"]

def test_deferred_tile_loop_bounds_a_before_anything_compiles(stub_device, monkeypatch):
    """The deferred short-K tile loop's loader warp keeps a's rows as 32-bit offsets in 16-byte
    units (WgmmaTile::WarpRows): an a past A_MAX_BYTES (64 GB) is refused for that kernel before
    it is loaded; the kernels that address a in 64 bits take it."""
    a, packed, sorted_ids, expert_ids, ntp, out = _problem(block_m=96)
    monkeypatch.setattr(ops, "A_MAX_BYTES", a.numel() * a.element_size() - 2)
    with pytest.raises(ValueError, match="DEFER_STORE1 addresses at most"):
        ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 96, out, "wgmma", "")
    assert stub_device == []  # nothing compiled or loaded
    launch = ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 96, out, "wgmma_sk", "")[1]
    assert "DEFER_STORE" not in launch.spec.config


def test_loaded_kernel_launch_passes_its_handles_and_shape_to_the_extension(monkeypatch):
    """LoadedKernel.launch calls the extension's entry (bound once, not imported per launch) with
    the function and context handles, the grid, the block, shared memory, stream and parameters."""
    from chord_kernels.jit import launch as jit_launch

    calls = []
    monkeypatch.setattr(jit_launch, "_launch", lambda *args: calls.append(args))
    kernel = jit_launch.LoadedKernel(spec=None, device=0, fn=11, ctx=12, max_dynamic_smem=0)
    kernel.launch((3, 2, 1), (128, 1, 1), 4096, 77, b"params")
    assert calls == [(11, 12, 3, 2, 1, 128, 1, 1, 4096, 77, b"params")]
    monkeypatch.setattr(jit_launch, "_launch", None)  # unbound: the first launch binds the entry
    monkeypatch.setattr(jit_launch, "_launcher", lambda: type("Ext", (), {"launch": staticmethod(
        lambda *args: calls.append(("bound", *args)))}))
    kernel.launch((1, 1, 1), (64, 1, 1), 0, 5, b"p")
    assert calls[-1] == ("bound", 11, 12, 1, 1, 1, 64, 1, 1, 0, 5, b"p") and jit_launch._launch is not None


@pytest.mark.parametrize("hint,e,n,k,heights,costs", [
    (10, 2, 2048, 4096, (16, dispatch.NARROW_MID_BATCH_ROWS), dispatch.NARROW_PAIR_COST)])
def test_masked_mma_pairs_launch_both(grouped_stub, hint, e, n, k, heights, costs):
    """The masked form's pair led by an mma tile (dispatch.pair_narrow_mid_batch: the 16-row tile
    and the 256 x 24 tile loop) launches both on one stream with mirrored picks, like the tile
    loops' pair. The mma tile has no tensor maps: its parameters are the plain MoeParams; the
    tile loop's end with its maps all the same."""
    packed, a, out = _grouped_problem("masked", e=e, n=n, k=k, rows=e * hint)
    ops._grouped_cuda("masked", a, packed, torch.tensor([hint] * e, dtype=torch.int32), out, hint)
    launch = dispatch.select_grouped(grouped_stub["select"][0])
    other, cost, other_cost = launch.pick
    assert (launch.rows_per_cta, other.rows_per_cta) == heights and (cost, other_cost) == costs
    assert len(grouped_stub["launches"]) == 2 and grouped_stub["loaded"] == [launch.spec, other.spec]
    raws = [raw for *_, raw in grouped_stub["launches"]]
    assert len(raws[0]) == ops.MOE_PARAMS.size  # no maps after the mma tile's parameters
    assert len(raws[1]) == (576 if other.tensor_maps else ops.MOE_PARAMS.size)  # the weight's and a's maps
    first, second = (ops.MOE_PARAMS.unpack(raw[:ops.MOE_PARAMS.size]) for raw in raws)
    assert first[:12] == second[:12]
    picks = [dict(zip(ops._INTS, f[12:-2], strict=True)) for f in (first, second)]
    assert [(p["pick_rows"], p["pick_cost"], p["pick_other_cost"], p["pick_first"]) for p in picks] == [
        (heights[1], cost, other_cost, 1), (heights[0], other_cost, cost, 0)]
    for (grid, block, smem, stream, _), lau in zip(grouped_stub["launches"], (launch, other), strict=True):
        assert block == (lau.spec.threads, 1, 1) and smem == lau.smem_bytes and stream == 77
        assert grid == (3 * lau.spec.min_blocks_per_sm, 1, 1)  # the resident CTAs (3 SMs here)


def test_masked_decode_dual_launches_once_with_the_pick(grouped_stub):
    """The masked form's kernel holding two tile heights (dispatch.dual_decode_16) launches once,
    with the pick's parameters (the 16-row height, the costs, first) and the larger tile's shared
    memory, at the resident CTAs of its occupancy."""
    hint, e = dispatch.DECODE_16_MIN_ROWS - 1, 4
    packed, a, out = _grouped_problem("masked", e=e, n=256, k=1024, rows=e * hint)
    ops._grouped_cuda("masked", a, packed, torch.tensor([hint] * e, dtype=torch.int32), out, hint)
    launch = dispatch.select_grouped(grouped_stub["select"][0])
    assert launch.dual == (16, *dispatch.DECODE_DUAL_COST) and launch.pick is None
    assert len(grouped_stub["launches"]) == 1 and grouped_stub["loaded"] == [launch.spec]
    (grid, block, smem, stream, raw), = grouped_stub["launches"]
    assert len(raw) == ops.MOE_PARAMS.size  # no tensor maps
    fields = dict(zip(ops._INTS, ops.MOE_PARAMS.unpack(raw)[12:-2], strict=True))
    assert (fields["pick_rows"], fields["pick_cost"], fields["pick_other_cost"], fields["pick_first"]) == (
        16, *dispatch.DECODE_DUAL_COST, 1)
    assert block == (launch.spec.threads, 1, 1) and smem == launch.smem_bytes and stream == 77
    assert grid == (3 * launch.spec.min_blocks_per_sm, 1, 1)  # the resident CTAs (3 SMs here)
