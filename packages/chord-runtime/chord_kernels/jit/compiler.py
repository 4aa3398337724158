"""nvcc compilation into a content-addressed, multi-process-safe cubin cache.

The cache key hashes everything that decides the cubin: the generated source, every header it
includes (followed transitively through ``#include "..."``), the nvcc flags, the compiler's
version banner and the target arch. A compile writes to a temporary name in the key's folder
and renames it into place while holding a file lock on that key, so many ranks starting at
once compile each kernel exactly once and nobody ever reads a half-written cubin.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from .kernel import KernelSpec
from .paths import cache_dir, csrc_dir

CACHE_FORMAT = 1  # bump when the cache folder layout or the wrapper generator changes
BASE_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo")
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


class CompileError(RuntimeError):
    """nvcc failed; the message carries the command and the compiler's output."""


def find_nvcc() -> str:
    """$CHORD_NVCC, else $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc, else nvcc on PATH."""
    for candidate in (
        os.environ.get("CHORD_NVCC"),
        os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc") if os.environ.get("CUDA_HOME") else None,
        "/usr/local/cuda/bin/nvcc",
        shutil.which("nvcc"),
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("nvcc not found: install the CUDA toolkit or set CHORD_NVCC / CUDA_HOME")


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip()


def nvcc_version() -> str:
    return _nvcc_version(find_nvcc())


def gencode_flags(arch: str) -> list[str]:
    # The -gencode form: "-arch=sm_90a" also runs a plain sm_90 pass that rejects wgmma.
    num = arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{num},code=sm_{num}"]


def include_closure(source: str, root: Path) -> dict[str, str]:
    """{path relative to root: text} of every quoted include reached from ``source``."""
    seen: dict[str, str] = {}
    pending = [(source, root)]
    while pending:
        text, base = pending.pop()
        for name in _INCLUDE_RE.findall(text):
            path = next((p for p in (base / name, root / name) if p.is_file()), None)
            if path is None:
                raise FileNotFoundError(f'#include "{name}" not found under {base} or {root}')
            rel = path.resolve().relative_to(root.resolve()).as_posix()
            if rel not in seen:
                seen[rel] = path.read_text()
                pending.append((seen[rel], path.parent))
    return seen


def compile_flags(spec: KernelSpec, include_root: Path) -> list[str]:
    return [*BASE_FLAGS, *gencode_flags(spec.arch), f"-I{include_root}", *spec.extra_flags]


def cache_key(spec: KernelSpec, root: Path | None = None, compiler_version: str | None = None) -> str:
    root = root or csrc_dir()
    source = spec.source()
    h = hashlib.sha256()
    parts = {
        "cache_format": CACHE_FORMAT,
        "source": source,
        "headers": sorted(include_closure(source, root).items()),
        # The include path is machine-specific and does not change the code: keep it out.
        "flags": [f for f in compile_flags(spec, root) if not f.startswith("-I")],
        "compiler": compiler_version if compiler_version is not None else nvcc_version(),
        "arch": spec.arch,
    }
    h.update(json.dumps(parts, sort_keys=True).encode())
    return h.hexdigest()


def cubin_path(spec: KernelSpec, key: str | None = None) -> Path:
    key = key or cache_key(spec)
    return cache_dir() / key[:2] / key / f"{spec.symbol}.cubin"


def compile_kernel(spec: KernelSpec) -> Path:
    """Return the cached cubin for ``spec``, compiling it once (across processes) if needed."""
    root = csrc_dir()
    key = cache_key(spec, root)
    final = cubin_path(spec, key)
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent) + ".lock"):
        if final.is_file():  # another process finished it while we waited
            return final
        _run_nvcc(spec, root, final)
    return final


def _run_nvcc(spec: KernelSpec, root: Path, final: Path) -> None:
    nvcc = find_nvcc()
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".build-") as tmp:
        src = Path(tmp) / f"{spec.symbol}.cu"
        src.write_text(spec.source())
        out = Path(tmp) / "kernel.cubin"
        cmd = [nvcc, "-cubin", *compile_flags(spec, root), "-o", str(out), str(src)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            raise CompileError(
                f"nvcc failed for {spec.describe()} (exit {proc.returncode}):\n  {' '.join(cmd)}\n"
                f"{proc.stdout}{proc.stderr}"
            )
        (final.parent / "source.cu").write_text(spec.source())
        meta = {"spec": spec.describe(), "symbol": spec.symbol, "command": cmd,
                "seconds": round(time.perf_counter() - start, 3), "nvcc": _nvcc_version(nvcc)}
        (final.parent / "meta.json").write_text(json.dumps(meta, indent=2))
        os.replace(out, final)  # atomic: readers see no cubin or the whole cubin
