"""Convert the bundled tiny Kimi checkpoint into every layout, verify, and (on SM90) run kernels.

Usage: python scripts/demo.py [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from chord_kernels import indexed, layouts, reference, routing

BUNDLED = Path(__import__("chord_pack").__file__).parent / "data" / "tiny-kimi-k2-thinking"


def chord_pack(*args: str) -> None:
    cmd = [sys.executable, "-m", "chord_pack.cli", *args]
    print("$ chord-pack " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


def load_packed_experts(out: Path, layer: int, proj: str) -> layouts.PackedW4A16:
    """Stack one layer's per-expert packed tensors from a converted checkpoint."""
    from safetensors import safe_open

    config = json.loads((out / "config.json").read_text())
    chord = config.get("chord") or config.get("text_config", {}).get("chord")
    weight_map = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    prefix = f"model.layers.{layer}.mlp.experts."
    experts = sorted({int(k[len(prefix):].split(".")[0]) for k in weight_map if k.startswith(prefix)})
    q, s = [], []
    for e in experts:
        for name, dst in (("weight_packed", q), ("weight_scale", s)):
            key = f"{prefix}{e}.{proj}.{name}"
            with safe_open(out / weight_map[key], "pt") as f:
                dst.append(f.get_tensor(key))
    packed = layouts.PackedW4A16(chord["mode"], torch.stack(q), torch.stack(s), chord["block_k"], chord["format_version"])
    packed.check()
    return packed


def time_us(fn, reps=50) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def gpu_section(out_dir: Path) -> None:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("\nNo SM90 GPU here: skipping the kernel run (the conversion above is the whole job on CPU).")
        return
    print(f"\nGPU: {torch.cuda.get_device_name()} — indexed kernel vs the PyTorch reference")
    g = torch.Generator().manual_seed(0)
    rows = []
    # 1) The converted tiny checkpoint's experts, end to end.
    tiny = load_packed_experts(out_dir / "indexed", layer=1, proj="gate_proj").to("cuda")
    cases = [("tiny ckpt gate_proj", tiny, 5, 2)]
    # 2) Kimi-shaped problems with random weights (EP8 rank: 48 experts; TP8: 384 experts).
    for name, e, n, k, tokens in (("EP8 down", 48, 7168, 2048, 8), ("TP8 gate_up", 384, 512, 7168, 8)):
        codes = torch.randint(0, 16, (e, n, k), dtype=torch.uint8, device="cuda")
        scale = (torch.rand(e, n, k // 32, device="cuda") * 0.02 + 1e-3).to(torch.bfloat16)
        cases.append((name, layouts.pack_w4a16(codes, scale, "indexed"), tokens, 8))
    for name, packed, tokens, top_k in cases:
        a = torch.randn(tokens, packed.k, generator=g).to(torch.bfloat16).cuda()
        topk = torch.stack([torch.randperm(packed.num_experts, generator=g)[:top_k] for _ in range(tokens)])
        sorted_ids, expert_ids, ntp = routing.moe_align_block_size(topk.to(torch.int32).cuda(), 16, packed.num_experts)
        out = indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, 16)
        ref = reference.moe_indexed_reference(a.cpu(), reference.dequantize_w4a16(packed.to("cpu")),
                                              sorted_ids.cpu(), expert_ids.cpu(), ntp.cpu(), top_k, 16).float()
        rel = ((out.cpu().float() - ref).norm() / ref.norm()).item()
        us = time_us(lambda: indexed(a, packed, sorted_ids, expert_ids, ntp, top_k, 16, out))  # noqa: B023
        rows.append((name, packed.num_experts, packed.n, packed.k, tokens, rel, us))
    print(f"{'case':<20}{'E':>5}{'N':>6}{'K':>6}{'tokens':>8}{'rel err':>10}{'µs':>9}")
    for name, e, n, k, t, rel, us in rows:
        print(f"{name:<20}{e:>5}{n:>6}{k:>6}{t:>8}{rel:>10.1e}{us:>9.1f}")
    worst = max(r[5] for r in rows)
    print("kernel check:", "PASS" if worst <= 5e-3 else "FAIL", f"(worst relative error {worst:.1e}, bar 5e-3)")
    if worst > 5e-3:
        sys.exit(1)
    print("(single calls, CUDA events; docs/performance.md has the side-by-side numbers)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="output folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chord-demo-") as tmp:
        out_dir = args.out or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        print(f"Bundled checkpoint: {BUNDLED}")
        for mode in layouts.MODES:
            target = out_dir / mode
            chord_pack("convert", str(BUNDLED), str(target), "--mode", mode)
            chord_pack("verify", str(BUNDLED), str(target))
        chord_pack("inspect", str(out_dir / "indexed"))
        gpu_section(out_dir)
        print(f"\nDone: converted into {', '.join(layouts.MODES)} and verified bit for bit.")


if __name__ == "__main__":
    main()
