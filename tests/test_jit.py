"""JIT: cache keys, the header closure, one compile across processes, atomic results, errors,
and the CI compile check (real nvcc, sm_90a) of every kernel the default profiles can pick, and
of the profiles' mma-tile kernels for Blackwell (sm_100a, sm_103a); the evict-first copy's build
under the ptxas versions that miscompile its cache hint."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from chord_kernels.dispatch import indexed_simple
from chord_kernels.jit import compiler
from chord_kernels.jit.paths import csrc_dir
from chord_kernels.profiles import all_default_specs

SPEC = indexed_simple().spec


def test_key_covers_source_headers_flags_compiler_and_arch(tmp_path, monkeypatch):
    base = compiler.cache_key(SPEC, compiler_version="nvcc A")
    assert base == compiler.cache_key(SPEC, compiler_version="nvcc A")
    assert base != compiler.cache_key(SPEC, compiler_version="nvcc B")
    other_args = dataclasses.replace(SPEC, template_args=(("BLOCK_K", 128),))
    assert base != compiler.cache_key(other_args, compiler_version="nvcc A")
    assert base != compiler.cache_key(dataclasses.replace(SPEC, extra_flags=("-DX=1",)), compiler_version="nvcc A")
    assert base != compiler.cache_key(dataclasses.replace(SPEC, arch="sm_100a"), compiler_version="nvcc A")
    # A change in a header the source reaches only indirectly changes the key too.
    copy = tmp_path / "csrc"
    shutil.copytree(csrc_dir(), copy)
    assert compiler.cache_key(SPEC, copy, "nvcc A") == base  # the checkout's path is not part of it
    with open(copy / "common" / "w4a16_fragment.cuh", "a") as f:
        f.write("\n// edited\n")
    assert compiler.cache_key(SPEC, copy, "nvcc A") != base


def test_include_closure_follows_nested_headers():
    closure = compiler.include_closure(SPEC.source(), csrc_dir())
    assert set(closure) == {"indexed/w4a16_indexed_simple.cuh", "common/moe_params.cuh", "common/w4a16_fragment.cuh",
                            "common/tma_sm90.cuh", "common/mbarrier_sm90.cuh"}


def test_missing_header_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match='#include "nope.cuh" not found'):
        compiler.include_closure('#include "nope.cuh"\n', tmp_path)


FAKE_NVCC = textwrap.dedent("""\
    #!/usr/bin/env bash
    # Stand-in for nvcc: logs each compile, takes a while, writes a fake cubin.
    if [ "$1" = "--version" ]; then echo "fake nvcc 1.0"; exit 0; fi
    echo "compile $$" >> "$FAKE_NVCC_LOG"
    [ -n "$FAKE_NVCC_FAIL" ] && { echo "error: planted failure" >&2; exit 1; }
    sleep 1
    while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then out="$2"; fi; shift; done
    printf 'CUBIN' > "$out"
""")


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    script = tmp_path / "nvcc"
    script.write_text(FAKE_NVCC)
    script.chmod(0o755)
    log = tmp_path / "compiles.log"
    env = {"CHORD_NVCC": str(script), "FAKE_NVCC_LOG": str(log), "CHORD_CACHE_DIR": str(tmp_path / "cache")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    compiler._nvcc_version.cache_clear()
    yield log
    compiler._nvcc_version.cache_clear()


def test_two_processes_compile_once(fake_nvcc, tmp_path):
    code = ("from chord_kernels.dispatch import indexed_simple\n"
            "from chord_kernels.jit import compile_kernel\n"
            "print(compile_kernel(indexed_simple().spec))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] and Path(outs[0]).read_bytes() == b"CUBIN"
    assert len(fake_nvcc.read_text().splitlines()) == 1
    leftovers = [p.name for p in Path(outs[0]).parent.iterdir() if p.name.startswith(".build-")]
    assert leftovers == []
    # A third call in this process is a cache hit: still one compile.
    assert str(compiler.compile_kernel(SPEC)) == outs[0]
    assert len(fake_nvcc.read_text().splitlines()) == 1


def test_failed_compile_raises_and_leaves_no_cubin(fake_nvcc, monkeypatch):
    monkeypatch.setenv("FAKE_NVCC_FAIL", "1")
    with pytest.raises(compiler.CompileError, match="planted failure"):
        compiler.compile_kernel(SPEC)
    assert not compiler.cubin_path(SPEC).exists()


def test_compile_check_default_profiles(tmp_path, monkeypatch, real_nvcc):
    """CI's compile check: every kernel the default profiles can pick builds for sm_90a."""
    from chord_kernels.cli import precompile

    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path / "cache"))
    specs = all_default_specs()
    assert len(specs) >= 2
    for spec, cubin in zip(specs, precompile(specs, jobs=os.cpu_count() or 1, progress=False), strict=True):
        assert cubin.stat().st_size > 1000, spec.describe()


def _ptxas_reports(specs, nvcc: str, tmp_path) -> list[tuple[str, list[int], list[str]]]:
    """(description, spill-store bytes per function, C751x warnings) of ptxas -v for each spec,
    compiled in parallel."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    root = csrc_dir()

    def report(spec):
        src = tmp_path / f"{spec.symbol}_{spec.arch}.cu"
        src.write_text(spec.source())
        cmd = [nvcc, "-cubin", *compiler.compile_flags(spec, root), "-Xptxas", "-v", "-o", str(src) + ".cubin", str(src)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        # C7515/C7517: ptxas serialized wgmma or injected waits (the async MMA pipeline broken).
        return spec.describe(), [int(n) for n in re.findall(r"(\d+) bytes spill stores", out)], re.findall(r"C751\d", out)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(report, specs))


def _spilling(results) -> list[tuple[str, list[int]]]:
    return [(name, s) for name, s, _ in results if not s or any(s)]


def test_no_register_spills_in_any_reachable_kernel(tmp_path, real_nvcc):
    """ptxas -v for every kernel the dispatch can pick: the occupancy each asks for
    (__launch_bounds__) must fit without spilling to local memory."""
    results = _ptxas_reports(all_default_specs(), real_nvcc, tmp_path)
    assert not _spilling(results), f"spilling (or unreported) kernels: {_spilling(results)}"
    serialized = [(name, w) for name, _, w in results if w]
    assert not serialized, f"kernels whose wgmma pipeline ptxas serialized: {serialized}"


# The kernels on the mma tile (mma.sync m16n8k16 and cp.async: no Hopper-only instruction) are the
# decode and mid-batch kernels; they are meant to carry to Blackwell. They build there and are not
# run (chord_kernels.device admits SM90 only: nothing of them is tested on an SM100 GPU).
BLACKWELL_ARCHS = ("sm_100a", "sm_103a")
MMA_TILE_FAMILIES = ("indexed_mma", "indexed_mma_sk", "grouped_mma_sk")


def test_decode_kernels_build_for_blackwell_without_spills(tmp_path, real_nvcc):
    """Every mma-tile kernel the serving profiles pick, built for sm_100a and sm_103a: ptxas
    fits the same occupancy (__launch_bounds__) without spilling."""
    from chord_kernels.profiles import PROFILES, profile_specs

    specs = {(spec.symbol, arch): spec for arch in BLACKWELL_ARCHS for name in PROFILES
             for spec in profile_specs(name, arch) if spec.family in MMA_TILE_FAMILIES}
    assert len(specs) >= 2 * 10 and {arch for _, arch in specs} == set(BLACKWELL_ARCHS)
    results = _ptxas_reports(list(specs.values()), real_nvcc, tmp_path)
    assert not _spilling(results), f"spilling (or unreported) kernels: {_spilling(results)}"


def _struct_sizes(nvcc: str, tmp_path, header: str, types: list[str]) -> list[int]:
    """sizeof(T) for each type T, as nvcc's host compiler sees the header (no GPU needed)."""
    prints = "\n".join(f'  std::printf("%zu\\n", sizeof({t}));' for t in types)
    src = tmp_path / "smem_size.cu"
    src.write_text(f'#include <cstdio>\n#include "{header}"\nint main() {{\n{prints}\n}}\n')
    exe = tmp_path / "smem_size"
    subprocess.run([nvcc, "-std=c++17", "-arch=sm_90a", f"-I{csrc_dir()}", str(src), "-o", str(exe)], check=True,
                   capture_output=True)
    return [int(line) for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]


def test_wgmma_smem_bytes_is_the_struct_size(tmp_path, real_nvcc):
    """The host's shared-memory size for the wgmma tile (the launch's dynamic smem, and the
    kernel traps if it is smaller) equals sizeof(WgmmaTile::Smem), for every BN, both stage
    parities and both consumer warpgroup counts, and with the tile loop's deferred epilogue."""
    from chord_kernels.dispatch import WGMMA_BN_CHOICES, tall_wgmma_shape, wgmma_smem_bytes

    # WM 4 on 2 warpgroups: the tuning override's (v61) 512-row tile
    configs = [(wm, bn, stages, cwg) for wm in (1, 2, 4) for bn in WGMMA_BN_CHOICES for stages in (5, 6, 8)
               for cwg in (2, 4) if (cwg == 2 and wm * bn <= 256) or (cwg == 4 and wm < 4 and wm * bn <= 64)]
    configs.append(tuple(tall_wgmma_shape()[key] for key in ("WM", "BN", "STAGES", "CWG")))  # the offsets form's 240 rows
    configs = [(*cfg, False) for cfg in configs] + [(*cfg, True) for cfg in configs if cfg[3] == 2]  # DEFER_STORE
    sizes = _struct_sizes(real_nvcc, tmp_path, "common/w4a16_wgmma_tile.cuh",
                          [f"chord::WgmmaTile<{wm}, {bn}, {st}, 64, {cwg}, true, {str(defer).lower()}>::Smem"
                           for wm, bn, st, cwg, defer in configs])
    assert sizes == [wgmma_smem_bytes(*cfg) for cfg in configs]


def test_moe_params_struct_is_the_host_pack(tmp_path, real_nvcc):
    """chord::MoeParams (with the pair's four pick_* ints) and MoeTmaParams as nvcc lays them out
    are the bytes chord_kernels.ops packs (MOE_PARAMS, then padding and the maps to 448)."""
    from chord_kernels import ops

    sizes = _struct_sizes(real_nvcc, tmp_path, "common/moe_params.cuh",
                          ["chord::MoeParams", "chord::MoeTmaParams", "chord::MoeTmaActParams"])
    assert sizes == [ops.MOE_PARAMS.size, ops._TMA_MAPS_OFFSET + 256, ops._TMA_MAPS_OFFSET + 384] == [176, 448, 576]


def test_mma_smem_bytes_is_the_struct_size(tmp_path, real_nvcc):
    """The same for the mma tile: mma_smem_bytes equals sizeof(MmaTile::Smem) over its weight
    tiles, row tiles, stage widths, ring depths and both packed BLOCK_Ks."""
    from chord_kernels.dispatch import mma_smem_bytes

    configs = [(nt, tt, stage_k, stages, block_k) for nt in (1, 2, 4) for tt in (1, 2, 4, 8)
               for stage_k in (64, 128, 256) for stages in (3, 4) for block_k in (64, 128) if stage_k % block_k == 0]
    sizes = _struct_sizes(real_nvcc, tmp_path, "common/w4a16_mma_tile.cuh",
                          [f"chord::MmaTile<{nt}, {tt}, {sk}, {st}, {bk}>::Smem" for nt, tt, sk, st, bk in configs])
    assert sizes == [mma_smem_bytes(nt, tt, sk, st) for nt, tt, sk, st, _ in configs]


def _evict_first_ptx(nvcc: str, tmp_path, *flags: str) -> str:
    """The PTX of one cp_async_16_evict_first (common/mma_sm80.cuh), compiled with ``flags``."""
    src = tmp_path / "evict_first.cu"
    src.write_text('#include "common/mma_sm80.cuh"\n'
                   "__global__ void copy(const int4* g) {\n  __shared__ int4 s[32];\n"
                   "  chord::cp_async_16_evict_first(&s[threadIdx.x], g + threadIdx.x, 16);\n"
                   "  chord::cp_async_commit();\n  chord::cp_async_wait<0>();\n}\n")
    out = tmp_path / "evict_first.ptx"
    subprocess.run([nvcc, "-ptx", "-std=c++17", *compiler.gencode_flags("sm_90a"), f"-I{csrc_dir()}", *flags,
                    str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_text()


def test_evict_first_copy_drops_its_cache_hint_where_ptxas_miscompiles_it(tmp_path, real_nvcc):
    """ptxas 13.1-13.3 can drop the createpolicy feeding a cp.async's L2 cache hint (an illegal-
    instruction trap at run time): those compilers build the plain copy. The version rule, checked
    at compile time, and both builds of the copy."""
    rule = tmp_path / "rule.cu"
    rule.write_text('#include "common/mma_sm80.cuh"\n'
                    "static_assert(CHORD_PTXAS_DROPS_CACHE_POLICY(13, 1) && CHORD_PTXAS_DROPS_CACHE_POLICY(13, 3));\n"
                    "static_assert(!CHORD_PTXAS_DROPS_CACHE_POLICY(13, 0) && !CHORD_PTXAS_DROPS_CACHE_POLICY(13, 4));\n"
                    "static_assert(!CHORD_PTXAS_DROPS_CACHE_POLICY(12, 9) && !CHORD_PTXAS_DROPS_CACHE_POLICY(14, 1));\n")
    subprocess.run([real_nvcc, "-c", "-std=c++17", *compiler.gencode_flags("sm_90a"), f"-I{csrc_dir()}", str(rule),
                    "-o", str(tmp_path / "rule.o")], check=True, capture_output=True)
    hinted = _evict_first_ptx(real_nvcc, tmp_path, "-DCHORD_CP_ASYNC_CACHE_HINT=1")
    plain = _evict_first_ptx(real_nvcc, tmp_path, "-DCHORD_CP_ASYNC_CACHE_HINT=0")
    assert "createpolicy.fractional.L2::evict_first" in hinted and "L2::cache_hint" in hinted
    assert "createpolicy" not in plain and "cache_hint" not in plain and "cp.async.cg.shared.global" in plain
    version = subprocess.run([real_nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    release = re.search(r"release (\d+)\.(\d+)", version)
    default = _evict_first_ptx(real_nvcc, tmp_path)
    drops = release is not None and (int(release[1]), int(release[2])) in {(13, 1), (13, 2), (13, 3)}
    assert ("createpolicy" in default) != drops, version
