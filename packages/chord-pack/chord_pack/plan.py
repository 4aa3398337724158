"""What a conversion writes: the kept expert projections, their EP/TP slices, the layout checks.

Shared by ``convert`` (which packs these slices) and ``verify`` (which applies the same
slices to the source before comparing), so the two can never disagree on the slicing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from chord_kernels.int4 import GROUP_SIZE, unpack_codes_along_k
from chord_kernels.layouts import BLOCK_K_BY_MODE, MODES, TILE

from .checkpoint import Checkpoint, Reader, TensorInfo, open_checkpoint
from .config import ModelConfig
from .errors import ChordPackError
from .model import ExpertProj, Experts, Scan, check_finite_scale, needed_shards


@dataclass(frozen=True)
class Sharding:
    """One rank's slice: ``ep`` keeps whole experts, ``tp`` slices the intermediate dim."""

    kind: str  # "ep" | "tp"
    size: int
    rank: int

    @classmethod
    def from_args(cls, ep_size=None, ep_rank=None, tp_size=None, tp_rank=None) -> Sharding | None:
        if (ep_size, ep_rank) != (None, None) and (tp_size, tp_rank) != (None, None):
            raise ChordPackError("--ep-size/--ep-rank and --tp-size/--tp-rank are mutually exclusive")
        for kind, size, rank in (("ep", ep_size, ep_rank), ("tp", tp_size, tp_rank)):
            if (size, rank) == (None, None):
                continue
            if size is None or rank is None:
                raise ChordPackError(f"--{kind}-size and --{kind}-rank must be given together")
            if size < 1 or not 0 <= rank < size:
                raise ChordPackError(f"--{kind}-rank {rank} is not in [0, --{kind}-size {size})")
            return cls(kind, size, rank)
        return None

    @classmethod
    def from_block(cls, block: dict | None) -> Sharding | None:
        if block is None:
            return None
        try:
            return cls(block["kind"], int(block["size"]), int(block["rank"]))
        except (KeyError, TypeError, ValueError):
            raise ChordPackError(f"chord block has an invalid sharding entry: {block!r}") from None


@dataclass(frozen=True)
class ProjPlan:
    """One kept expert projection and the part of the source it keeps."""

    src: ExpertProj
    n: int  # output logical N, K
    k: int
    rows: tuple[int, int] | None  # N slice of the source (TP gate/up)
    cols: tuple[int, int] | None  # K slice of the source (TP down)

    def name(self, param: str) -> str:
        return f"{self.src.module}.{param}"

    def read_source(self, reader: Reader) -> tuple[torch.Tensor, torch.Tensor]:
        """Source (uint8 codes [n, k], bf16 scales [n, k/32]) of this slice; scales checked finite."""
        packed = reader.tensor(self.src.packed, self.rows)
        scale = reader.tensor(self.src.scale, self.rows)
        if self.cols is not None:
            k0, k1 = self.cols
            packed = packed[:, k0 // 8:k1 // 8]
            scale = scale[:, k0 // GROUP_SIZE:k1 // GROUP_SIZE]
        check_finite_scale(self.src.scale, scale, self.rows[0] if self.rows else 0,
                           self.cols[0] // GROUP_SIZE if self.cols else 0)
        return unpack_codes_along_k(packed.contiguous()), scale.contiguous()


@dataclass
class Plan:
    mode: str
    block_k: int
    sharding: Sharding | None
    sharding_block: dict | None  # what the chord block records
    experts: list[ProjPlan]
    passthrough: list[TensorInfo]


@dataclass(frozen=True)
class Slices:
    """What a sharding keeps: experts [lo, hi) and, for TP, the intermediate slice."""

    lo: int
    hi: int
    intermediate: tuple[int, int] | None
    block: dict | None  # the chord block's "sharding" entry


def plan_slices(cfg: ModelConfig, mode: str, sharding: Sharding | None) -> Slices:
    """Check the mode and sharding against config.json alone (no tensor data needed)."""
    if mode not in MODES:
        raise ChordPackError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    block_k = BLOCK_K_BY_MODE[mode]
    if sharding is None:
        return Slices(0, cfg.num_experts, None, None)
    if sharding.kind == "ep":
        lo, hi = ep_experts(cfg, sharding)
        return Slices(lo, hi, None, {"kind": "ep", "size": sharding.size, "rank": sharding.rank,
                                     "experts": [lo, hi]})
    inter, size = cfg.moe_intermediate, sharding.size
    per = inter // size
    if inter % size or per % TILE or per % GROUP_SIZE or per % block_k:
        raise ChordPackError(
            f"{cfg.path}: --tp-size {size} slices moe_intermediate_size {inter} into "
            f"{inter / size:g} per rank; it must divide evenly into a multiple of 16 (gate/up N) "
            f"and of 32 and BLOCK_K {block_k} (down K, mode {mode})")
    islice = (per * sharding.rank, per * (sharding.rank + 1))
    return Slices(0, cfg.num_experts, islice,
                  {"kind": "tp", "size": size, "rank": sharding.rank, "intermediate": list(islice)})


def ep_experts(cfg: ModelConfig, sharding: Sharding | None) -> Experts:
    """The routed experts [lo, hi) an EP rank keeps; None when no EP sharding is requested."""
    if sharding is None or sharding.kind != "ep":
        return None
    if cfg.num_experts % sharding.size:
        raise ChordPackError(f"{cfg.path}: n_routed_experts {cfg.num_experts} is not divisible by "
                             f"--ep-size {sharding.size}")
    per = cfg.num_experts // sharding.size
    return per * sharding.rank, per * (sharding.rank + 1)


def open_slice(root, cfg: ModelConfig, sharding: Sharding | None, *,
               require_unopened: bool = True) -> tuple[Checkpoint, Experts]:
    """Open the source for one rank's slice: an EP rank opens only the shards holding its
    experts or a pass-through tensor (:func:`chord_pack.model.needed_shards`); no sharding and
    TP open every shard. Returns the checkpoint and the kept expert range for ``scan_checkpoint``."""
    experts = ep_experts(cfg, sharding)
    select = None if experts is None else (lambda wm: needed_shards(wm, cfg, experts))
    return open_checkpoint(root, select, require_unopened=require_unopened), experts


def make_plan(scan: Scan, cfg: ModelConfig, mode: str, sharding: Sharding | None) -> Plan:
    sl = plan_slices(cfg, mode, sharding)
    block_k = BLOCK_K_BY_MODE[mode]
    islice = sl.intermediate
    experts = []
    for p in scan.experts:
        if not sl.lo <= p.expert < sl.hi:
            continue
        rows = islice if islice and p.proj != "down_proj" else None
        cols = islice if islice and p.proj == "down_proj" else None
        n = rows[1] - rows[0] if rows else p.n
        k = cols[1] - cols[0] if cols else p.k
        if n % TILE or k % block_k:
            raise ChordPackError(f"{p.packed.where()}: [N, K] = [{n}, {k}] does not fit the {mode} "
                                 f"layout (N a multiple of {TILE}, K a multiple of BLOCK_K {block_k})")
        experts.append(ProjPlan(p, n, k, rows, cols))
    return Plan(mode, block_k, sharding, sl.block, experts, list(scan.passthrough))
