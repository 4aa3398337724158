"""The schema of a pre-packed Chord checkpoint (``chord-pack convert`` output), for vLLM's Route B.

A converted checkpoint's ``quantization_config`` is ``{"quant_method": "humming", "format":
"chord-packed", "chord_mode": ..., "chord_block_k": ..., "chord_format_version": ...,
"chord_sharding": ..., "ignore": [...]}`` (written by ``chord_pack.config``). vLLM selects its
Humming route from ``quant_method`` (``--quantization humming``, or on its own), resolves
``BaseWeightSchema.from_config`` -> ``HummingWeightSchema.from_config`` -> this class (on
``format``), and then:

* ``create_weights`` registers the parameters :meth:`get_padded_tensors_attrs` describes, per
  rank (N and K are the rank's ``2*I/TP``, ``H`` / ``H``, ``I/TP``; E is the rank's local experts);
* vLLM's FusedMoE ``weight_loader`` copies each checkpoint tensor into them, slicing it for the
  rank itself (``process_loaded_weight`` only views the 4-D packed tensor as 2-D, no copy);
* ``convert_humming`` and ``humming.transform`` re-view the loaded parameters as Chord's
  ``PackedW4A16`` tensors: no repack and no second copy of the weights at load.

How vLLM's loader slices the packed tensors (per expert, ``BK`` = BLOCK_K of the mode)::

    weight_packed  checkpoint int32 [N/16, K/BK, 32, BK/16]   (chord_kernels.layouts, format v1)
                   parameter  int32 [E, N/16, 2*K]            (the same bytes: per 16-row tile, the
                                                              K/BK blocks of 2*BK words in order)
                   input_dim 2, output_dim 1 -> vLLM's is_transposed False -> it shards dim 0 of
                   the expert (N tiles) for gate/up (w1/w3 halves of w13) and dim 1 (words) for
                   down (w2). A word slice [2*K_r*r, 2*K_r*(r+1)) is exactly K blocks
                   [K_r*r/BK, K_r*(r+1)/BK) when the rank's K_r is a multiple of BK.
    weight_scale   checkpoint bf16 [K/32, N]  parameter [E, K/32, N]
                   input_dim 1, output_dim 2 -> is_transposed True -> vLLM shards N (dim 1) for
                   w1/w3 and K/32 (dim 0) for w2, matching the weight.
    weight_shape   [2] -> [E, 2], vLLM stores it unsliced; dropped at conversion.

So slicing is exact when the rank's gate/up half ``I/TP`` is a multiple of 16 (whole N tiles) and
the rank's down K ``I/TP`` is a multiple of BLOCK_K (whole K blocks). Kimi K2.x (I = 2048) fits
every mode up to TP16 (128 = 2 blocks of 64, 1 of 128) and every EP size (EP never slices N or
K). Other shapes raise a ValueError naming the case at ``create_weights`` / conversion.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .. import dtypes
from ..errors import not_supported
from .base import add_expert_dim
from .humming import GROUP_SIZE, HummingWeightSchema

PACKED_FORMAT = "chord-packed"
TILE_N = 16
LANES = 32


def _layouts():
    from chord_kernels import layouts

    return layouts


@dataclasses.dataclass(kw_only=True)
class ChordPackedWeightSchema(HummingWeightSchema):
    """uint4 / group-32 BF16 weights already in Chord's packed layout (one mode, one BLOCK_K)."""

    quant_method: str = "humming"
    format: str = PACKED_FORMAT
    b_dtype: dtypes.DataType = dataclasses.field(default_factory=lambda: dtypes.uint4)
    bs_dtype: dtypes.DataType | None = dataclasses.field(default_factory=lambda: dtypes.bfloat16)
    weight_scale_group_size: int = GROUP_SIZE
    chord_mode: str
    chord_block_k: int
    chord_format_version: int
    chord_sharding: dict | None = None

    def __post_init__(self):
        super().__post_init__()
        layouts = _layouts()
        if self.format != PACKED_FORMAT:
            raise ValueError(f"ChordPackedWeightSchema needs format {PACKED_FORMAT!r}, got {self.format!r}")
        layouts.check_mode(self.chord_mode)
        if self.chord_format_version != layouts.FORMAT_VERSION:
            raise ValueError(
                f"this Chord-packed checkpoint has format version {self.chord_format_version}; the installed "
                f"chord_kernels reads version {layouts.FORMAT_VERSION} (re-convert with this chord-pack)")
        want_bk = layouts.BLOCK_K_BY_MODE[self.chord_mode]
        if self.chord_block_k != want_bk:
            raise ValueError(f"Chord-packed checkpoint: mode {self.chord_mode!r} uses BLOCK_K {want_bk}, "
                             f"its quantization_config says {self.chord_block_k}")
        if self.chord_sharding:
            kind = self.chord_sharding.get("kind", "?")
            raise not_supported(
                f"serving a {kind.upper()}-sliced chord-pack output (chord_sharding={self.chord_sharding})",
                "vLLM slices a checkpoint per TP/EP rank itself: convert without --tp-*/--ep-* and serve that")
        self.check_supported()

    # ------------------------------------------------------------------ create_weights (Route B)

    def _check_rank_shape(self, shape_n: int, shape_k: int) -> None:
        bk = self.chord_block_k
        if shape_n % TILE_N or shape_k % bk:
            raise ValueError(
                f"a Chord-packed checkpoint (mode {self.chord_mode!r}, BLOCK_K {bk}) cannot be loaded at this "
                f"rank's shape N={shape_n}, K={shape_k}: vLLM slices whole 16-row N tiles and whole BLOCK_K "
                f"K blocks, so the per-rank N must be a multiple of {TILE_N} and K of {bk} (gate/up: "
                f"moe_intermediate/TP per half; down: K = moe_intermediate/TP); use a smaller TP size, EP, "
                "or a mode with a smaller BLOCK_K")

    def get_tensors_attrs(self, shape_n, shape_k, param_dtype, num_experts=None, has_bias=False,
                          stack_size=1) -> dict[str, dict[str, Any]]:
        self.check_supported(param_dtype)
        if has_bias:
            raise not_supported("bias on quantized MoE weights")
        if not num_experts:
            raise not_supported("dense (non-MoE) quantized Linear layers in a Chord-packed checkpoint",
                                "only routed experts are packed; list the module in quantization_config.ignore")
        self._check_rank_shape(shape_n, shape_k)
        bk = self.chord_block_k
        attrs = {
            "weight_packed": {
                "shape": (shape_n // TILE_N, 2 * shape_k), "dtype": torch.int32,
                "extra_attrs": {"input_dim": 1, "output_dim": 0, "chord_mode": self.chord_mode,
                                "chord_block_k": bk, "chord_words_per_k_block": 2 * bk,
                                "chord_rows_per_n_tile": TILE_N}},
            "weight_scale": {"shape": (shape_k // GROUP_SIZE, shape_n), "dtype": torch.bfloat16,
                             "extra_attrs": {"input_dim": 0, "output_dim": 1, "scale_type": "group"}},
            "weight_shape": {"shape": (2,), "dtype": torch.int64, "extra_attrs": {}},
        }
        return add_expert_dim(attrs, num_experts)

    def process_loaded_weight(self, tensor, name: str):
        """The checkpoint's packed tensor [N/16, K/BK, 32, BK/16] -> the 2-D view vLLM's loader
        slices ([N/16, 2K], same storage). Scales and weight_shape pass unchanged."""
        if name != "weight_packed":
            return tensor
        bk = self.chord_block_k
        if tensor.dtype != torch.int32 or tensor.dim() != 4 or tuple(tensor.shape[2:]) != (LANES, bk // TILE_N):
            raise ValueError(
                f"weight_packed of shape {tuple(tensor.shape)} ({tensor.dtype}) is not Chord mode "
                f"{self.chord_mode!r} (BLOCK_K {bk}): expected int32 [N/16, K/{bk}, {LANES}, {bk // TILE_N}] per "
                "expert, as the checkpoint's quantization_config declares; was it converted with another --mode?")
        return tensor.reshape(tensor.shape[0], -1)

    # ------------------------------------------------------------------ after loading

    def to_humming_schema(self, param_dtype) -> ChordPackedWeightSchema:
        return self

    def convert_humming(self, tensors, shape_n_stacks, shape_k_stacks, param_dtype, num_experts=None,
                        device=None, convert_symmetric_integer: bool = True):
        """The loaded ``weight_packed``/``weight_scale`` -> ``weight``/``weight_scale``, as views.

        ``weight_shape`` holds each expert's unsliced logical [N, K] (vLLM does not slice it);
        it is dropped here."""
        self.check_supported(param_dtype)
        unknown = set(tensors) - {"weight_packed", "weight_scale", "weight_shape"}
        if unknown:
            raise not_supported(f"extra weight tensors {sorted(unknown)} in a Chord-packed checkpoint")
        for n in shape_n_stacks:
            self._check_rank_shape(n, sum(shape_k_stacks))
        n, k = sum(shape_n_stacks), sum(shape_k_stacks)
        packed, scale = tensors["weight_packed"], tensors["weight_scale"]
        lead = (num_experts,) if num_experts else ()
        if tuple(packed.shape) != (*lead, n // TILE_N, 2 * k) or tuple(scale.shape) != (*lead, k // GROUP_SIZE, n):
            raise ValueError(f"loaded weight_packed {tuple(packed.shape)} / weight_scale {tuple(scale.shape)} do not "
                             f"match the Chord-packed layout for {lead + (n, k)}")
        return self, {"weight": packed, "weight_scale": scale}

    def packed_tensors(self, weight: torch.Tensor, scale: torch.Tensor):
        """Wrap the loaded tensors as ``chord_kernels.layouts.PackedW4A16`` (views, checked)."""
        layouts = _layouts()
        bk = self.chord_block_k
        e, nt = weight.shape[0], weight.shape[1]
        k = scale.shape[1] * GROUP_SIZE
        qweight = weight.view(e, nt, k // bk, LANES, bk // TILE_N)
        packed = layouts.PackedW4A16(mode=self.chord_mode, qweight=qweight, scale=scale, block_k=bk,
                                     format_version=self.chord_format_version)
        packed.check()
        return packed


def is_chord_packed_config(config: dict[str, Any]) -> bool:
    return config.get("format") == PACKED_FORMAT
