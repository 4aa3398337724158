"""Generate every grid point's routing once, with fixed seeds, into files both sides read.

``python3 -m benchmarks.make_routing --dir DIR [--quick] [--scenarios ep8,tp8] [--seed 0]``

Each ``DIR/routing_<scn>_<dist>_T<T>.pt`` holds ``topk_ids`` (int32 [num_tokens, 8], GLOBAL
expert ids, as vLLM's router returns them), ``expert_map`` (int32 [384], global -> local, -1 for
other ranks' experts; None for TP) and ``meta`` (seeds, counts, a digest). The files are made on
the CPU with torch's CPU generator, so they do not depend on the GPU.

Router model: each token picks 8 distinct experts, without replacement, with probabilities
proportional to a per-expert popularity. Uniform: all popularities equal. Skewed: popularity
~ Gamma(shape 1/cv^2, mean 1) with cv = 1.0, drawn ONCE per (distribution, seed) and shared by
every scenario and T: a model's router has one popularity profile, tokens vary. (EP rank 0's
share of the popularity mass is recorded as ``local_share``; for the uniform router it is
L/384.) EP: n·T tokens are routed over all 384 experts and the pairs on experts 0..L-1 are this
rank's work; TP8: T tokens over the 384 experts.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from . import scenarios as S
from .common import stable_seed, tensor_digest

CHUNK_TOKENS = 1 << 15  # bound the [tokens, 384] float temporaries of torch.multinomial


def popularity(num_experts: int, cv: float, seed: int) -> list[float]:
    """Per-expert popularity, mean 1: all ones for cv 0, else Gamma(1/cv^2, scale cv^2)."""
    if cv == 0:
        return [1.0] * num_experts
    shape = 1.0 / (cv * cv)
    rng = random.Random(seed)  # stdlib: same numbers on every machine and Python version
    return [rng.gammavariate(shape, 1.0 / shape) for _ in range(num_experts)]


def route(num_tokens: int, weights: list[float], top_k: int, seed: int) -> torch.Tensor:
    """int32 [num_tokens, top_k]: distinct experts per token, P(expert) proportional to weights."""
    g = torch.Generator().manual_seed(seed)
    p = torch.tensor(weights, dtype=torch.float64)
    parts = []
    for start in range(0, num_tokens, CHUNK_TOKENS):
        rows = min(CHUNK_TOKENS, num_tokens - start)
        parts.append(torch.multinomial(p.expand(rows, -1), top_k, replacement=False, generator=g))
    return torch.cat(parts).to(torch.int32)


def expert_map_tensor(scenario: S.Scenario) -> torch.Tensor | None:
    emap = scenario.expert_map()
    return None if emap is None else torch.tensor(emap, dtype=torch.int32)


def routing_stats(topk_ids: torch.Tensor, expert_map: torch.Tensor | None, num_local: int) -> dict[str, int]:
    """Counts of this GPU's work: kept (token, expert) pairs, distinct local experts that got
    >= 1 row, distinct tokens with >= 1 kept pair (rows of the gate_up input actually read)."""
    ids = topk_ids.long()
    local = ids if expert_map is None else expert_map.long()[ids]
    keep = (local >= 0) & (local < num_local)
    return {
        "routes_kept": int(keep.sum()),
        "experts_touched": int(torch.unique(local[keep]).numel()),
        "tokens_touched": int(keep.any(dim=1).sum()),
    }


def make_point(point: S.Point, seed: int = 0) -> dict:
    """The routing of one point (deterministic in ``point`` and ``seed``)."""
    scenario = point.spec
    pop_seed = stable_seed("popularity", point.dist, base=seed)
    weights = popularity(S.GLOBAL_EXPERTS, point.cv, pop_seed)
    route_seed = stable_seed("route", point.scenario, point.dist, point.tokens, base=seed)
    topk_ids = route(point.num_tokens, weights, S.TOP_K, route_seed)
    emap = expert_map_tensor(scenario)
    local_share = sum(weights[: scenario.num_local_experts]) / sum(weights)
    meta = {
        "scenario": point.scenario, "dist": point.dist, "tokens": point.tokens, "cv": point.cv,
        "num_tokens": point.num_tokens, "top_k": S.TOP_K, "global_experts": S.GLOBAL_EXPERTS,
        "local_experts": scenario.num_local_experts, "valid_shape_m": point.valid_shape_m,
        "seed": seed, "popularity_seed": pop_seed, "route_seed": route_seed,
        "local_share": local_share, "digest": tensor_digest(topk_ids),
        **routing_stats(topk_ids, emap, scenario.num_local_experts),
    }
    return {"topk_ids": topk_ids, "expert_map": emap, "meta": meta}


def write_all(out_dir: Path, points: list[S.Point], seed: int = 0, verbose: bool = True) -> list[dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    metas = []
    for point in points:
        t0 = time.perf_counter()
        data = make_point(point, seed)
        torch.save(data, out_dir / point.routing_file)
        metas.append(data["meta"])
        if verbose:
            m = data["meta"]
            print(f"{point.routing_file:32} tokens={m['num_tokens']:<6} kept={m['routes_kept']:<6} "
                  f"experts={m['experts_touched']:<3} rows/exp={m['routes_kept'] / m['local_experts']:8.2f} "
                  f"({time.perf_counter() - t0:.2f} s)", flush=True)
    (out_dir / "manifest.json").write_text(json.dumps({"seed": seed, "points": metas}, indent=1) + "\n")
    return metas


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--scenarios", default=",".join(S.DEFAULT_SCENARIOS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tokens", help="comma list of T to keep")
    parser.add_argument("--dists", help="comma list of distributions to keep")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    points = S.grid(S.parse_list(args.scenarios), quick=args.quick,
                    tokens=S.parse_list(args.tokens, int), dists=S.parse_list(args.dists))
    write_all(args.dir, points, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
