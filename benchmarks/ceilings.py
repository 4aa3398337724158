"""Measure the two ceilings the floors are computed from, in the same run as the kernels.

``python3 -m benchmarks.ceilings --out ceilings.json``

- copy bandwidth: a 2 GiB device-to-device ``copy_``; read + write bytes counted (2 x size / t).
  A copy is the most favourable streaming pattern the GPU has, so it is what "all bytes moved
  at full speed" means in practice (H200 spec 4.8 TB/s; measured ~4.25 TB/s before).
- dense BF16 rate: an 8192^3 ``torch.matmul`` on random data (cuBLAS), 2 x 8192^3 / t.

Both with ``triton.testing.do_bench`` (median, L2 flushed). Also records the GPU, its clocks
(nvidia-smi) and the software versions for the report header.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import torch

from .common import bench_us

COPY_BYTES = 2 << 30
GEMM_SIZE = 8192


def copy_bandwidth_gbs(nbytes: int = COPY_BYTES, warmup_ms: float = 50, rep_ms: float = 400) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 256)
    dst = torch.empty_like(src)
    us = bench_us(lambda: dst.copy_(src), warmup_ms, rep_ms)
    return 2 * nbytes / (us * 1e-6) / 1e9


def bf16_tflops(n: int = GEMM_SIZE, warmup_ms: float = 100, rep_ms: float = 500) -> float:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((n, n), generator=g, device="cuda", dtype=torch.bfloat16)
    b = torch.randn((n, n), generator=g, device="cuda", dtype=torch.bfloat16)
    c = torch.empty((n, n), device="cuda", dtype=torch.bfloat16)
    us = bench_us(lambda: torch.matmul(a, b, out=c), warmup_ms, rep_ms)
    return 2 * n**3 / (us * 1e-6) / 1e12


SMI_FIELDS = ("name", "clocks.sm", "clocks.max.sm", "clocks.applications.graphics", "clocks.mem",
              "clocks.max.mem", "power.limit", "driver_version", "pstate")


def nvidia_smi(index: int = 0) -> dict[str, str]:
    """Clocks and driver as nvidia-smi reports them ({} when it is not there)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")] if out.stdout.strip() else []
    return dict(zip(SMI_FIELDS, values, strict=False))


def gpu_info() -> dict:
    props = torch.cuda.get_device_properties(0)
    info = {"name": props.name, "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
            "cuda": torch.version.cuda}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("ceilings.json"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("ceilings need a CUDA GPU")
    copy = copy_bandwidth_gbs()
    torch.cuda.empty_cache()  # give the 4 GiB of copy buffers back before the GEMM
    gemm = bf16_tflops()
    smi = nvidia_smi()  # right after the GEMM, while the clocks are still up
    result = {"copy_gbs": copy, "bf16_tflops": gemm, "copy_bytes": COPY_BYTES, "gemm_size": GEMM_SIZE,
              "gpu": gpu_info(), "nvidia_smi": smi}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"copy {copy:.0f} GB/s (read+write)  dense BF16 {gemm:.0f} TFLOP/s  on {result['gpu']['name']}"
          f"  clocks: {smi.get('clocks.sm', '?')} (max {smi.get('clocks.max.sm', '?')}), mem {smi.get('clocks.mem', '?')}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
