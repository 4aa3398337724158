"""The benchmark grid as data (pure Python: no torch, so CPU tests and the report can use it).

A *scenario* is one GPU's share of Kimi K2.x's routed experts (hidden 7168, moe_intermediate
2048, 384 experts, top-8) under one parallel layout; a *point* is a scenario, a router
distribution and T, the number of tokens per GPU.

- EPn (expert parallel, rank 0): the GPU holds experts 0..L-1 (L = 384/n) with full-size
  matrices; n·T tokens are routed top-8 over all 384 experts (every rank's tokens reach every
  rank, as with vLLM's all-gather EP) and only the pairs landing on experts 0..L-1 are computed.
- TP8: the GPU holds all 384 experts, each sliced 8 ways (gate_up N = 2·2048/8 = 512, down
  K = 2048/8 = 256); its T tokens are routed top-8 over the 384 experts.

Each point times two GEMMs with vLLM's indexed semantics:
- ``gate_up``: input ``hidden`` [num_tokens, 7168], ``top_k = 8``: route r = token·8 + k reads
  row r // 8 and writes row r of an output with num_tokens·8 rows;
- ``down``: input = the activation rows [num_tokens·8, I], ``top_k = 1``: route r reads row r.

The default run is EP8 and TP8 (issue 4); EP16 and EP32 are defined for later runs.

The *grouped* family (issue 5; EP only: EP8, EP16, EP32) times the same two GEMMs on rows
already grouped by local expert, the routing of each point turned into vLLM's grouped layouts:
``grouped_contiguous`` (per-expert offsets [E+1], rows grouped, no alignment, in vLLM's
[num_tokens*8, K] buffers) and ``grouped_masked`` (per-expert counts, [E*max_m, K] with
max_m = the largest count rounded up to ``MASKED_ALIGN``). Each GEMM reads row i and writes
row i of its buffers (top_k 1 for both projections).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GLOBAL_EXPERTS = 384
TOP_K = 8
HIDDEN = 7168
MOE_INTERMEDIATE = 2048

TOKENS = (1, 8, 20, 32, 64, 128, 512, 2048, 8192)
SKEW_TOKENS = (20, 128, 2048)  # real routers are skewed; skew hurts most at mid batch
QUICK_TOKENS = (1, 20, 128, 2048)
QUICK_SKEW_TOKENS = (128,)

# Router distributions: coefficient of variation of the expert popularity (Gamma with shape
# 1/cv^2, so cv 1.0 is Gamma(1) = Exponential). cv 0 means every expert is equally likely.
DISTS = {"uniform": 0.0, "skew": 1.0}

PROJECTIONS = ("gate_up", "down")


@dataclass(frozen=True)
class Projection:
    """One expert GEMM of a scenario: ``out[r] = in[r // top_k] @ W[expert(r)]^T``."""

    name: str
    n: int  # output features (weight rows)
    k: int  # input features
    top_k: int  # 8 for gate_up (reads hidden rows), 1 for down (reads activation rows)

    def input_rows(self, num_tokens: int) -> int:
        """Rows of the input tensor the framework passes (vLLM buffer shapes)."""
        return num_tokens if self.top_k == TOP_K else num_tokens * TOP_K

    def output_rows(self, num_tokens: int) -> int:
        """Rows of the output buffer: one per route, routed to this GPU or not."""
        return num_tokens * TOP_K


@dataclass(frozen=True)
class Scenario:
    name: str
    num_local_experts: int
    tokens_factor: int  # routed tokens = tokens_factor * T (EPn: n ranks' tokens; TP: 1)
    tp: int  # tensor-parallel split of each expert (1 for EP)
    hidden: int = HIDDEN  # model dims: overridable only so tests can run tiny problems on CPU
    intermediate: int = MOE_INTERMEDIATE

    @property
    def is_ep(self) -> bool:
        return self.num_local_experts < GLOBAL_EXPERTS

    @property
    def projections(self) -> dict[str, Projection]:
        inter = self.intermediate // self.tp
        return {
            "gate_up": Projection("gate_up", n=2 * inter, k=self.hidden, top_k=TOP_K),
            "down": Projection("down", n=self.hidden, k=inter, top_k=1),
        }

    def expert_map(self) -> list[int] | None:
        """vLLM's global -> local expert map for rank 0 (-1 = another rank's expert); None for TP."""
        if not self.is_ep:
            return None
        return [e if e < self.num_local_experts else -1 for e in range(GLOBAL_EXPERTS)]


SCENARIOS = {
    "ep8": Scenario("ep8", num_local_experts=48, tokens_factor=8, tp=1),
    "tp8": Scenario("tp8", num_local_experts=384, tokens_factor=1, tp=8),
    "ep16": Scenario("ep16", num_local_experts=24, tokens_factor=16, tp=1),
    "ep32": Scenario("ep32", num_local_experts=12, tokens_factor=32, tp=1),
}
DEFAULT_SCENARIOS = ("ep8", "tp8")

# Kernel families and the paths (routing layouts) each one times side by side.
FAMILIES = {"indexed": ("indexed",), "grouped": ("grouped_contiguous", "grouped_masked")}
GROUPED_PATHS = FAMILIES["grouped"]
GROUPED_SCENARIOS = ("ep8", "ep16", "ep32")  # the grouped kernels are EP-only
MASKED_ALIGN = 64  # grouped_masked: max_m = largest per-expert count rounded up to this


def family_of(path: str) -> str:
    """'indexed' or 'grouped' for a path name (records without a path are indexed)."""
    for family, paths in FAMILIES.items():
        if path in paths:
            return family
    raise ValueError(f"unknown kernel path {path!r}; known: {', '.join(p for ps in FAMILIES.values() for p in ps)}")


def default_scenarios(family: str) -> tuple[str, ...]:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    return GROUPED_SCENARIOS if family == "grouped" else DEFAULT_SCENARIOS


@dataclass(frozen=True)
class Point:
    scenario: str
    dist: str
    tokens: int  # T, tokens per GPU

    @property
    def spec(self) -> Scenario:
        return SCENARIOS[self.scenario]

    @property
    def num_tokens(self) -> int:
        """Tokens routed (rows of the gate_up input)."""
        return self.spec.tokens_factor * self.tokens

    @property
    def cv(self) -> float:
        return DISTS[self.dist]

    @property
    def num_routes(self) -> int:
        return self.num_tokens * TOP_K

    @property
    def valid_shape_m(self) -> int:
        """vLLM's host-side estimate of the routes this GPU computes (its tuning hint):
        ceil(num_tokens * top_k * local_experts / global_experts)."""
        return math.ceil(self.num_routes * self.spec.num_local_experts / GLOBAL_EXPERTS)

    @property
    def routing_file(self) -> str:
        return routing_filename(self.scenario, self.dist, self.tokens)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scenario, self.dist, self.tokens)


def routing_filename(scenario: str, dist: str, tokens: int) -> str:
    return f"routing_{scenario}_{dist}_T{tokens}.pt"


def grid(scenarios=DEFAULT_SCENARIOS, quick: bool = False, tokens=None, dists=None) -> list[Point]:
    """Points in report order: scenario, then uniform before skew, then T ascending.

    ``quick``: T in 1, 20, 128, 2048 uniform, plus skew at 128. ``dists`` filters. ``tokens``
    names the T to run for every distribution kept, on or off the report grid (a sweep of block
    sizes needs T between the grid's points; a T silently dropped would read as "measured").
    """
    uniform_t = QUICK_TOKENS if quick else TOKENS
    skew_t = QUICK_SKEW_TOKENS if quick else SKEW_TOKENS
    if tokens is not None:
        bad = [t for t in tokens if t < 1]
        if bad:
            raise ValueError(f"tokens must be >= 1, got {bad}")
        uniform_t = skew_t = tuple(sorted(set(tokens)))
    points = []
    for name in scenarios:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
        for dist, ts in (("uniform", uniform_t), ("skew", skew_t)):
            if dists is not None and dist not in dists:
                continue
            points.extend(Point(name, dist, t) for t in ts)
    return points


def sort_key(key: tuple[str, str, int]) -> tuple:
    """Report order for (scenario, dist, T) keys, also for scenarios outside the table."""
    scenario, dist, tokens = key
    s_order = list(SCENARIOS).index(scenario) if scenario in SCENARIOS else len(SCENARIOS)
    d_order = list(DISTS).index(dist) if dist in DISTS else len(DISTS)
    return (s_order, scenario, d_order, dist, tokens)


def parse_list(text: str | None, cast=str):
    """'a,b,c' -> tuple (None stays None), for the CLIs."""
    if text is None or text == "":
        return None
    return tuple(cast(x.strip()) for x in text.split(",") if x.strip())
