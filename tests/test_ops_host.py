"""The CUDA entry points' host side, on CPU: the per-signature plan (checks, kernel choice, grid,
parameter values) and the packed parameter struct, with kernel resolution stubbed out."""

import struct

import pytest
import torch
from chord_kernels import dispatch, layouts, ops, routing


@pytest.fixture
def stub_device(monkeypatch):
    loaded = []
    monkeypatch.setattr(ops, "kernel_arch", lambda index: "sm_90a")
    monkeypatch.setattr(ops, "_load", lambda launch, device: loaded.append(launch.spec) or "kernel")
    monkeypatch.setattr(ops, "_device_index", lambda device: 0)
    return loaded


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
    kernel, launch, grid, block, ints, device = ops._indexed_plan(a, packed, sorted_ids, expert_ids, ntp, 2, 8, out, "mma", "")
    assert kernel == "kernel" and stub_device == [launch.spec] and device == 0
    want = dispatch.choose_indexed_mma(dispatch.IndexedProblem(64, 256, 4, 2, 8))
    assert launch.spec == want.spec and block == (128, 1, 1)
    assert grid == (1, expert_ids.numel() * launch.ctas_per_block(dispatch.IndexedProblem(64, 256, 4, 2, 8)), 1)
    fields = dict(zip(ops._INTS, ints, strict=True))
    assert fields == {"num_routes": 6, "n": 64, "k": 256, "top_k": 2, "num_experts": 4, "block_m": 8,
                      "num_blocks": expert_ids.numel(), "ctas_per_block": 1, "sorted_len": sorted_ids.numel(),
                      "max_m": 0}


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


def test_params_struct_layout():
    # Mirrors csrc/common/moe_params.cuh's static_asserts: 136 bytes, lda at 80, num_routes at 96.
    assert ops.MOE_PARAMS.size == 136
    raw = ops.MOE_PARAMS.pack(*range(1, 11), 111, 222, *range(301, 311))
    assert struct.unpack_from("@q", raw, 80)[0] == 111 and struct.unpack_from("@i", raw, 96)[0] == 301
    assert struct.unpack_from("@i", raw, 96 + 4 * 9)[0] == 310  # max_m is the last field


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
    assert fields[12:] == ops._indexed_plans[next(iter(ops._indexed_plans))][4]
    ops._indexed_cuda(a[:2], packed, sorted_ids, expert_ids, ntp, 2, 8, out)  # a new signature
    assert len(stub_device) == 2
    ops._indexed_plans.clear()
