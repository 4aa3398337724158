"""``chord-pack verify SRC OUT``: unpack every packed tensor and compare with the source, bit for bit.

Uses ``chord_kernels.layouts.unpack_w4a16`` (the runtime's own inverse) on OUT and the
compressed-tensors bit layout (``unpack_codes_along_k``) on SRC, with the EP/TP slice that
OUT's chord block records applied to SRC. Pass-through tensors are compared byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from chord_kernels.layouts import BLOCK_K_BY_MODE, FORMAT_VERSION, PackedW4A16, unpack_w4a16

from .checkpoint import Checkpoint, Reader, TensorInfo, open_checkpoint
from .config import CONFIG_NAME, find_chord_block, load_config, read_json
from .convert import Log, shard_metadata
from .errors import ChordPackError
from .model import scan_checkpoint
from .plan import Plan, ProjPlan, Sharding, make_plan, open_slice
from .source import resolve_source


@dataclass
class VerifyResult:
    packed: int  # expert projections compared (3 tensors each)
    passthrough: int


def read_chord_block(out: Path) -> dict:
    path = out / CONFIG_NAME
    block = find_chord_block(read_json(path, "config.json"))
    if block is None:
        raise ChordPackError(f"{path}: not a Chord-packed checkpoint (config.json has no 'chord' block)")
    mode, block_k, version = block.get("mode"), block.get("block_k"), block.get("format_version")
    if mode not in BLOCK_K_BY_MODE or block_k != BLOCK_K_BY_MODE[mode]:
        raise ChordPackError(f"{path}: chord block has mode {mode!r} with BLOCK_K {block_k!r}, "
                             f"expected one of {BLOCK_K_BY_MODE}")
    if version != FORMAT_VERSION:
        raise ChordPackError(f"{path}: chord format version {version!r}; this chord-pack reads {FORMAT_VERSION}")
    return block


def _fail(where: str, detail: str) -> ChordPackError:
    return ChordPackError(f"verify FAILED: first difference: OUT {where}: {detail}", exit_code=1)


def verify(src: str | Path, out: str | Path, *, log: Log = print, revision: str | None = None) -> VerifyResult:
    out = Path(out).expanduser().absolute()
    block = read_chord_block(out)
    recorded = block.get("source") or {}
    if revision is None and recorded.get("repo") == str(src):
        revision = recorded.get("revision")  # compare with the very commit that was converted
    sharding = Sharding.from_block(block.get("sharding"))
    source = resolve_source(src, revision=revision, sharding=sharding, log=log)  # an EP slice fetches its shards only
    cfg = load_config(source.path)
    ckpt, experts = open_slice(source.path, cfg, sharding, require_unopened=source.complete)
    plan = make_plan(scan_checkpoint(ckpt, cfg, experts=experts), cfg, block["mode"], sharding)
    got = open_checkpoint(out)
    _compare_names(plan, got)
    _check_shard_metadata(plan, got)
    with Reader(ckpt.root) as src_reader, Reader(got.root) as out_reader:
        for p in plan.experts:
            _compare_expert(plan, p, src_reader, out_reader, got)
        for info in plan.passthrough:
            _compare_bytes(info, got.info(info.name), src_reader, out_reader)
    log(f"chord-pack: verify OK: {len(plan.experts)} packed expert projections "
        f"({3 * len(plan.experts)} tensors, mode {plan.mode}) and {len(plan.passthrough)} pass-through "
        f"tensors of {out} match {source.path} bit for bit")
    return VerifyResult(len(plan.experts), len(plan.passthrough))


def _compare_names(plan: Plan, got: Checkpoint) -> None:
    want = {i.name for i in plan.passthrough}
    want |= {p.name(s) for p in plan.experts for s in ("weight_packed", "weight_scale", "weight_shape")}
    have = set(got.weight_map)
    if want - have:
        raise _fail(f"tensor {min(want - have)}", f"missing from OUT ({len(want - have)} missing)")
    if have - want:
        raise _fail(f"{got.weight_map[min(have - want)]}: tensor {min(have - want)}",
                    f"not expected in OUT ({len(have - want)} unexpected)")


def _check_shard_metadata(plan: Plan, got: Checkpoint) -> None:
    want = shard_metadata(plan.mode, plan.block_k)
    for p in plan.experts:
        info = got.info(p.name("weight_packed"))
        meta = {k: v for k, v in got.shards[info.shard].metadata.items() if k.startswith("chord.")}
        if meta != want:
            raise _fail(f"shard {info.shard}", f"metadata {meta}, expected {want}")


def _expect(info: TensorInfo, dtype: str, shape: tuple) -> None:
    if info.dtype != dtype or tuple(info.shape) != tuple(shape):
        raise _fail(info.where(), f"{info.dtype} {list(info.shape)}, expected {dtype} {list(shape)}")


def _compare_expert(plan: Plan, p: ProjPlan, src: Reader, out: Reader, got: Checkpoint) -> None:
    bk = plan.block_k
    q_info, s_info, w_info = (got.info(p.name(s)) for s in ("weight_packed", "weight_scale", "weight_shape"))
    _expect(q_info, "I32", (p.n // 16, p.k // bk, 32, bk // 16))
    _expect(s_info, "BF16", (p.k // 32, p.n))
    _expect(w_info, p.src.shape.dtype, (2,))
    shape = out.tensor(w_info).tolist()
    if shape != [p.n, p.k]:
        raise _fail(w_info.where(), f"weight_shape {shape}, expected {[p.n, p.k]}")
    packed = PackedW4A16(mode=plan.mode, qweight=out.tensor(q_info)[None], scale=out.tensor(s_info)[None],
                         block_k=bk)
    codes, scale = unpack_w4a16(packed)
    want_codes, want_scale = p.read_source(src)
    if not torch.equal(codes[0], want_codes):
        r, c = (int(i) for i in (codes[0] != want_codes).nonzero()[0])
        raise _fail(q_info.where(), f"code at [{r}, {c}] is {int(codes[0, r, c])}, SRC "
                                    f"{p.src.packed.where()} has {int(want_codes[r, c])}")
    if not torch.equal(scale[0].view(torch.int16), want_scale.view(torch.int16)):
        r, g = (int(i) for i in (scale[0].view(torch.int16) != want_scale.view(torch.int16)).nonzero()[0])
        raise _fail(s_info.where(), f"scale at [row {r}, group {g}] is {float(scale[0, r, g])}, SRC "
                                    f"{p.src.scale.where()} has {float(want_scale[r, g])}")


def _compare_bytes(want: TensorInfo, have: TensorInfo, src: Reader, out: Reader) -> None:
    _expect(have, want.dtype, want.shape)
    offset = 0
    for a, b in zip(src.chunks(want), out.chunks(have), strict=True):
        if a != b:
            i = next(j for j in range(len(a)) if a[j] != b[j])
            raise _fail(have.where(), f"byte {offset + i} differs from SRC {want.where()}")
        offset += len(a)
