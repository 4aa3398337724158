"""Replay vLLM's recorded call sequence into ``humming`` (tests/vllm_contract/sample_calls.json).

A helper module (no tests here): tests/test_humming_replay.py drives it on CPU at small shapes,
tests/gpu/test_humming_replay_gpu.py on the H200 at Kimi shapes. Per gemm type the sequence is
the one vLLM 0.32's Humming experts make:

``prepare_and_transform_humming_tensors`` (w13, then w2; gemm type from
``VLLM_HUMMING_MOE_GEMM_TYPE``) -> ``get_heuristics_config`` (w13, w2) -> per forward:
``may_process_input`` (w13 side) -> ``humming_forward`` (w13) -> ``may_process_input``
(SiLU-and-mul) -> ``humming_forward`` (w2).

* indexed: ``moe_align_block_size`` outputs (global expert count + ``expert_map``), w13 with the
  model's top_k, w2 with top_k=1 and the block size of the w2 table (re-aligned if it differs).
* grouped_contiguous: scatter layout (``inv_perm``) into ``[T*top_k, K]``, per-expert offsets
  int64 [E+1], ``num_valid_tokens`` for the activation.
* grouped_masked: per-expert counts int32 [E] and ``[E, max_tokens, K]`` inputs (passed flat, as
  recorded).

Every output is a preallocated NaN-poisoned buffer; ``sorted_ids`` / ``expert_ids`` tails past
the used range hold random in-range ids (vLLM's over-allocated workspaces are not cleared).
The result checked is the per-route down output (vLLM's weighted top-k sum is vLLM's).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

import torch
from chord_kernels import routing
from chord_kernels.int4 import dequantize_packed, pack_codes_along_k
from humming import forward as hforward
from humming import transform as htransform
from humming import tune as htune
from humming.config import GemmType
from humming.schema import HummingInputSchema, HummingWeightSchema

BF16 = torch.bfloat16
SILU = "(a / (1.f + expf(-a))) * b"
GROUP = 32
LOCKS = 132 * 8  # vLLM's locks workspace as recorded (int32 [1056]); Chord ignores it
TOL = 5e-3
GEMM_TYPES = ("indexed", "grouped_contiguous", "grouped_masked")
ENV_VALUE = {"indexed": "indexed", "grouped_contiguous": "grouped", "grouped_masked": "grouped_masked"}


@dataclass(frozen=True)
class ReplayShapes:
    num_experts: int  # local experts E (weights on this rank)
    hidden: int  # K of w13, N of w2
    intermediate: int  # I: w13 N = 2I, w2 K = I
    tokens: int
    top_k: int = 8
    global_experts: int | None = None  # router's expert count; > num_experts means EP with an expert_map
    rank: int = 0  # EP rank: owns global experts [rank*E, (rank+1)*E)
    max_tokens_per_expert: int | None = None  # masked rows per expert (default: tokens)

    @property
    def n_global(self) -> int:
        return self.global_experts or self.num_experts

    @property
    def max_m(self) -> int:
        return self.max_tokens_per_expert or self.tokens

    @property
    def num_routes(self) -> int:
        return self.tokens * self.top_k


# ---------------------------------------------------------------------------------- load


def ct_expert_weights(e: int, n: int, k: int, device, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """compressed-tensors form: weight_packed int32 [E, N, K/8] (offset-binary nibbles along K),
    weight_scale bf16 [E, N, K/32]. Codes are drawn on ``device`` one expert at a time."""
    weight = torch.empty(e, n, k // 8, dtype=torch.int32, device=device)
    for i in range(e):
        codes = torch.randint(0, 16, (n, k), generator=gen, device=device, dtype=torch.uint8)
        weight[i] = pack_codes_along_k(codes)
        del codes
    scale = (torch.rand(e, n, k // GROUP, generator=gen, device=device) * 0.01 + 0.005).to(BF16)
    return {"weight": weight, "weight_scale": scale}


@contextlib.contextmanager
def gemm_type_env(gemm_type: str):
    """VLLM_HUMMING_MOE_GEMM_TYPE as vLLM sets it before weight loading (restored after)."""
    old = os.environ.get(htransform.GEMM_TYPE_ENV)
    os.environ[htransform.GEMM_TYPE_ENV] = ENV_VALUE[gemm_type]
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(htransform.GEMM_TYPE_ENV, None)
        else:
            os.environ[htransform.GEMM_TYPE_ENV] = old


@dataclass
class Sublayer:
    config: object  # humming LayerConfig
    weight: torch.Tensor  # Chord-packed
    weight_scale: torch.Tensor
    table: str  # tuning_config as vLLM hands it back (JSON)
    ct: dict  # the compressed-tensors tensors (kept for the reference)

    def block_m(self, valid_shape_m: int) -> int:
        return int(htune.lookup(json.loads(self.table), valid_shape_m)["block_shape"][0])


def load_layer(shapes: ReplayShapes, gemm_type: str, device, seed: int = 0) -> tuple[Sublayer, Sublayer]:
    """Both sublayers through humming's transform + tuning table, with the recorded arguments."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    e, h, i = shapes.num_experts, shapes.hidden, shapes.intermediate
    ct13 = ct_expert_weights(e, 2 * i, h, device, gen)
    ct2 = ct_expert_weights(e, h, i, device, gen)
    wschema = HummingWeightSchema(b_dtype="uint4", bs_dtype="bfloat16", weight_scale_group_size=GROUP)
    out = []
    with gemm_type_env(gemm_type):
        for ct, n, k in ((ct13, 2 * i, h), (ct2, h, i)):
            cfg, packed = htransform.prepare_and_transform_humming_tensors(
                tensors=dict(ct), shape_n=n, shape_k=k, pad_n_to_multiple=256, pad_k_to_multiple=128,
                input_schema=HummingInputSchema(), weight_schema=wschema, has_bias=False, num_experts=e,
                torch_dtype=BF16, device=device)
            out.append((cfg, packed, ct))
    layers = []
    for cfg, packed, ct in out:
        table = htune.get_heuristics_config(layer_config=cfg, use_f16_accum=False, use_batch_invariant=False,
                                            gemm_type=GemmType(gemm_type))
        layers.append(Sublayer(cfg, packed["weight"], packed["weight_scale"], json.dumps(table), ct))
    return layers[0], layers[1]


# ---------------------------------------------------------------------------------- routing


def route_tokens(shapes: ReplayShapes, seed: int, device) -> torch.Tensor:
    """top_k distinct global experts per token (uniform), int32 [T, top_k], drawn on the host."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(shapes.tokens, shapes.n_global, generator=g).argsort(dim=1)[:, :shapes.top_k]
    return ids.to(torch.int32).to(device)


def expert_map_for(shapes: ReplayShapes, device) -> torch.Tensor | None:
    if shapes.n_global == shapes.num_experts:
        return None
    m = torch.full((shapes.n_global,), -1, dtype=torch.int32)
    lo = shapes.rank * shapes.num_experts
    m[lo:lo + shapes.num_experts] = torch.arange(shapes.num_experts, dtype=torch.int32)
    return m.to(device)


def _garbage_tail(buf: torch.Tensor, used: torch.Tensor, high: int, gen: torch.Generator) -> torch.Tensor:
    """Entries at/after ``used`` (device int [1]) replaced by random ids in [0, high): no sync."""
    pos = torch.arange(buf.numel(), device=buf.device)
    junk = torch.randint(0, max(high, 1), (buf.numel(),), generator=gen, device="cpu").to(buf.device, buf.dtype)
    return torch.where(pos >= used.long(), junk, buf)


def _indexed_routing(topk_ids, shapes, expert_map, block_m, gen):
    sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk_ids, block_m, shapes.n_global, expert_map)
    sorted_ids = _garbage_tail(sorted_ids, ntp, shapes.num_routes, gen)
    used_blocks = (ntp.long() + block_m - 1) // block_m
    expert_ids = _garbage_tail(expert_ids, used_blocks, shapes.num_experts, gen)
    return sorted_ids, expert_ids, ntp


def local_experts(topk_ids: torch.Tensor, expert_map: torch.Tensor | None) -> torch.Tensor:
    """int64 [T*top_k]: local expert of each route, -1 if it lives on another rank."""
    ids = topk_ids.reshape(-1).long()
    return ids if expert_map is None else expert_map.long()[ids]


# ---------------------------------------------------------------------------------- replay


class Replay:
    """Static buffers + the recorded call sequence for one gemm type; ``set_routing`` copies new
    routing into the same buffers (what a CUDA graph replay needs)."""

    def __init__(self, shapes: ReplayShapes, gemm_type: str, w13: Sublayer, w2: Sublayer, device, seed: int = 0):
        assert gemm_type in GEMM_TYPES
        self.shapes, self.gemm_type, self.w13, self.w2 = shapes, gemm_type, w13, w2
        self.device = torch.device(device)
        self.gen = torch.Generator().manual_seed(seed + 7)
        self.expert_map = expert_map_for(shapes, self.device)
        s, dev = shapes, self.device
        h, i, rows = s.hidden, s.intermediate, s.num_routes
        self.compute_config = json.dumps({"use_batch_invariant": False, "use_f16_accum": False, "gemm_type": gemm_type})
        self.locks = torch.zeros(LOCKS, dtype=torch.int32, device=dev)
        self.x = torch.empty(s.tokens, h, dtype=BF16, device=dev)
        # vLLM's estimate_local_valid_shape_m: routes expected on this rank. A function of shapes
        # only, so the warm-up compiles what later calls and the captured graph launch (for the
        # masked sample it equals the recorded sum of counts).
        self.valid_shape_m = -(-rows * s.num_experts // s.n_global)
        if gemm_type == "indexed":
            self.block_m13 = w13.block_m(self.valid_shape_m)
            self.block_m2 = w2.block_m(self.valid_shape_m)
            self.out_rows = rows
        elif gemm_type == "grouped_contiguous":
            self.out_rows = rows
            self.scattered = torch.empty(rows, h, dtype=BF16, device=dev)
        else:
            self.out_rows = s.num_experts * s.max_m
            self.xb = torch.empty(s.num_experts, s.max_m, h, dtype=BF16, device=dev)
        self.gate_up = torch.empty(self.out_rows, 2 * i, dtype=BF16, device=dev)
        self.down_in = torch.empty(self.out_rows, i, dtype=BF16, device=dev)
        self.down = torch.empty(self.out_rows, h, dtype=BF16, device=dev)
        self.routing: dict[str, torch.Tensor] = {}

    # -- inputs
    def set_routing(self, topk_ids: torch.Tensor, x: torch.Tensor) -> None:
        """Build the gemm type's routing tensors and copy them (and ``x``) into the static buffers."""
        s = self.shapes
        self.topk_ids = topk_ids.to(torch.int32)
        self.x.copy_(x)
        new: dict[str, torch.Tensor] = {}
        if self.gemm_type == "indexed":
            new["sorted_ids"], new["expert_ids"], new["ntp"] = _indexed_routing(
                self.topk_ids, s, self.expert_map, self.block_m13, self.gen)
            if self.block_m2 != self.block_m13:
                new["sorted_ids2"], new["expert_ids2"], new["ntp2"] = _indexed_routing(
                    self.topk_ids, s, self.expert_map, self.block_m2, self.gen)
            self.route_rows = torch.where(local_experts(self.topk_ids, self.expert_map) >= 0,
                                          torch.arange(s.num_routes, device=self.device), -1)
        elif self.gemm_type == "grouped_contiguous":
            new["offsets"], new["inv_perm"] = routing.contiguous_offsets(self.topk_ids, s.num_experts, self.expert_map)
            self.route_rows = new["inv_perm"].reshape(-1).long()
        else:
            new["counts"], slots = routing.masked_layout(self.topk_ids, s.num_experts, s.max_m, self.expert_map)
            self.route_rows = slots.reshape(-1).long()
            # the dispatcher's job: token rows into their expert's slots, the rest is garbage (NaN)
            flat = self.xb.view(-1, s.hidden)
            flat.fill_(float("nan"))
            tok = torch.arange(s.num_routes, device=self.device) // s.top_k
            keep = self.route_rows >= 0
            flat[self.route_rows[keep]] = self.x[tok[keep]]
        for k, v in new.items():
            if k in self.routing:  # same buffers (a captured graph reads these addresses)
                assert self.routing[k].shape == v.shape, f"routing buffer {k}: {tuple(v.shape)} vs {tuple(self.routing[k].shape)}"
                self.routing[k].copy_(v)
            else:
                self.routing[k] = v.clone()

    def poison(self) -> None:
        for buf in self.outputs():
            buf.fill_(float("nan"))

    def outputs(self):
        bufs = [self.gate_up, self.down_in, self.down]
        if self.gemm_type == "grouped_contiguous":
            bufs.append(self.scattered)
        return bufs

    # -- the recorded call sequence
    def forward(self) -> torch.Tensor:
        w13, w2, r = self.w13, self.w2, self.routing
        pf, fwd = hforward.may_process_input, hforward.humming_forward
        weights13 = {"weight": w13.weight, "weight_scale": w13.weight_scale}
        weights2 = {"weight": w2.weight, "weight_scale": w2.weight_scale}
        none_q = {"zero_point": None, "bias": None, "weight_scale_2": None, "input_scale": None, "input_scale_2": None}
        act = {"activation_type": "binary_split", "activation_impl": SILU}
        s = self.shapes
        if self.gemm_type == "indexed":
            inputs, _, _ = pf(w13.config, inputs=self.x, outputs=None, token_scales=None, hadamard_block_size=0,
                              layout="normal", expert_tokens=None, scatter_idx=None, num_valid_tokens=None)
            fwd(w13.config, inputs=inputs, **weights13, **none_q, outputs=self.gate_up, locks=self.locks,
                top_k=s.top_k, tuning_config=w13.table, sorted_ids=r["sorted_ids"], expert_ids=r["expert_ids"],
                num_tokens_padded=r["ntp"], compute_config=self.compute_config, valid_shape_m=self.valid_shape_m)
            inputs, _, _ = pf(w2.config, inputs=self.gate_up, outputs=self.down_in, token_scales=None,
                              hadamard_block_size=0, layout="normal", expert_tokens=None, scatter_idx=None,
                              num_valid_tokens=None, **act)
            two = "2" if "sorted_ids2" in r else ""
            fwd(w2.config, inputs=inputs, **weights2, **none_q, outputs=self.down, locks=self.locks, top_k=1,
                tuning_config=w2.table, sorted_ids=r["sorted_ids" + two], expert_ids=r["expert_ids" + two],
                num_tokens_padded=r["ntp" + two], compute_config=self.compute_config, valid_shape_m=self.valid_shape_m)
        elif self.gemm_type == "grouped_contiguous":
            inputs, _, _ = pf(w13.config, inputs=self.x, outputs=self.scattered, token_scales=None,
                              hadamard_block_size=0, layout="scatter", expert_tokens=None, scatter_idx=r["inv_perm"],
                              num_valid_tokens=None)
            fwd(w13.config, inputs=inputs, **weights13, **none_q, outputs=self.gate_up, locks=self.locks,
                valid_shape_m=self.valid_shape_m, expert_layout=r["offsets"], compute_config=self.compute_config,
                tuning_config=w13.table)
            inputs, _, _ = pf(w2.config, inputs=self.gate_up, outputs=self.down_in, token_scales=None,
                              hadamard_block_size=0, layout="normal", expert_tokens=None, scatter_idx=None,
                              num_valid_tokens=r["offsets"][-1:], **act)
            fwd(w2.config, inputs=inputs, **weights2, **none_q, outputs=self.down, locks=self.locks,
                valid_shape_m=self.valid_shape_m, expert_layout=r["offsets"], compute_config=self.compute_config,
                tuning_config=w2.table)
        else:
            inputs, _, _ = pf(w13.config, inputs=self.xb.view(-1, s.hidden), outputs=None, token_scales=None,
                              hadamard_block_size=0, layout="grouped_mask", expert_tokens=r["counts"],
                              scatter_idx=None, num_valid_tokens=None)
            fwd(w13.config, inputs=inputs, **weights13, **none_q, outputs=self.gate_up, locks=self.locks,
                valid_shape_m=self.valid_shape_m, expert_layout=r["counts"], compute_config=self.compute_config,
                tuning_config=w13.table)
            inputs, _, _ = pf(w2.config, inputs=self.gate_up, outputs=self.down_in, token_scales=None,
                              hadamard_block_size=0, layout="grouped_mask", expert_tokens=r["counts"],
                              scatter_idx=None, num_valid_tokens=None, **act)
            fwd(w2.config, inputs=inputs, **weights2, **none_q, outputs=self.down, locks=self.locks,
                valid_shape_m=self.valid_shape_m, expert_layout=r["counts"], compute_config=self.compute_config,
                tuning_config=w2.table)
        return self.down

    # -- the check
    def reference(self):
        """fp32 per-route reference from the dequantized compressed-tensors weights, one expert at
        a time; gate_up and the activation are rounded to BF16 where vLLM's buffers are BF16.
        Returns (route ids kept on this rank, gate_up ref [R, 2I], down ref [R, H])."""
        s = self.shapes
        local = local_experts(self.topk_ids, self.expert_map)
        routes = torch.arange(s.num_routes, device=self.device)[local >= 0]
        experts = local[routes]
        ref13 = torch.empty(routes.numel(), 2 * s.intermediate, dtype=torch.float32, device=self.device)
        ref2 = torch.empty(routes.numel(), s.hidden, dtype=torch.float32, device=self.device)
        for e in experts.unique().tolist():
            sel = experts == e
            xr = self.x[routes[sel] // s.top_k].float()
            w13 = dequantize_packed(self.w13.ct["weight"][e], self.w13.ct["weight_scale"][e]).float()
            up = (xr @ w13.t()).to(BF16).float()
            del w13
            a = (torch.nn.functional.silu(up[:, :s.intermediate]) * up[:, s.intermediate:]).to(BF16).float()
            w2 = dequantize_packed(self.w2.ct["weight"][e], self.w2.ct["weight_scale"][e]).float()
            ref13[sel], ref2[sel] = up, a @ w2.t()
            del w2
        return routes, ref13, ref2

    def check(self, tol: float = TOL) -> dict:
        """Compare the per-route outputs with the reference; every row no route owns must still be
        NaN (untouched). Raises AssertionError with the numbers; returns them."""
        routes, ref13, ref2 = self.reference()
        rows = self.route_rows[routes]
        assert (rows >= 0).all(), "a local route has no row (masked overflow?)"
        got13, got2 = self.gate_up[rows].float(), self.down[rows].float()
        res = {"routes": int(routes.numel()), "rows": self.out_rows}
        assert torch.isfinite(got13).all() and torch.isfinite(got2).all(), "NaN/Inf in a routed row"
        if routes.numel():
            res["rel13"] = _rel(got13, ref13)
            res["rel2"] = _rel(got2, ref2)
            assert res["rel13"] <= tol and res["rel2"] <= tol, res
        owned = torch.zeros(self.out_rows, dtype=torch.bool, device=self.device)
        owned[rows] = True
        zero_ok = self.gemm_type == "grouped_masked" and self.device.type == "cpu"
        for name, buf in (("gate_up", self.gate_up), ("down", self.down)):
            rest = buf[~owned]
            untouched = torch.isnan(rest)
            if zero_ok:  # Chord's CPU masked reference zero-fills rows past masked_m (the GPU kernel skips them)
                untouched |= rest == 0
            assert untouched.all(), f"{name}: rows no local route owns were written ({self.gemm_type})"
        return res


def _rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def make_replay(shapes: ReplayShapes, gemm_type: str, device, seed: int = 0) -> Replay:
    w13, w2 = load_layer(shapes, gemm_type, device, seed)
    return Replay(shapes, gemm_type, w13, w2, device, seed)


def random_inputs(shapes: ReplayShapes, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(topk_ids, x): a routing and BF16 hidden states for one forward."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(shapes.tokens, shapes.hidden, generator=g).to(BF16).to(device)
    return route_tokens(shapes, seed, device), x


@contextlib.contextmanager
def no_host_sync(device):
    """``torch.cuda.set_sync_debug_mode("error")`` around the block on CUDA (no-op on CPU)."""
    if torch.device(device).type != "cuda":
        yield
        return
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


def run_once(replay: Replay, topk_ids: torch.Tensor, x: torch.Tensor, *, sync_check: bool = True) -> dict:
    """Routing into the buffers, poison outputs, the recorded forward (sync-checked), compare."""
    replay.set_routing(topk_ids, x)
    replay.poison()
    if sync_check:
        with no_host_sync(replay.device):
            replay.forward()
    else:
        replay.forward()
    if replay.device.type == "cuda":
        torch.cuda.synchronize(replay.device)
    return replay.check()


def capture_graph(replay: Replay) -> torch.cuda.CUDAGraph:
    """Capture the forward (buffers already hold a routing; kernels already compiled)."""
    stream = torch.cuda.Stream(replay.device)
    stream.wait_stream(torch.cuda.current_stream(replay.device))
    with torch.cuda.stream(stream):
        replay.forward()
    torch.cuda.current_stream(replay.device).wait_stream(stream)
    torch.cuda.synchronize(replay.device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replay.forward()
    return graph


def replay_graph(replay: Replay, graph: torch.cuda.CUDAGraph, topk_ids: torch.Tensor, x: torch.Tensor) -> dict:
    """New routing copied into the captured buffers, outputs re-poisoned, graph replayed, compared."""
    replay.set_routing(topk_ids, x)
    replay.poison()
    graph.replay()
    torch.cuda.synchronize(replay.device)
    return replay.check()
