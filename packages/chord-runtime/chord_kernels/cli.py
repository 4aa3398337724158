"""``chord-runtime``: precompile a profile's kernels before serving, inspect the cache."""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed

from . import env
from .jit import fast_call
from .jit.compiler import cache_key, compile_kernel, cubin_path, nvcc_version
from .jit.kernel import DEFAULT_ARCH, KernelSpec
from .jit.paths import cache_dir
from .profiles import DEFAULT_PROFILES, PROFILES, profile_specs


def precompile(specs: list[KernelSpec], jobs: int, progress: bool = True) -> list:
    """Compile ``specs`` with ``jobs`` parallel nvcc processes; returns the cubin paths in order."""
    from tqdm import tqdm

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(compile_kernel, s): s for s in specs}
        with tqdm(total=len(specs), desc="chord precompile", unit="kernel", disable=not progress) as bar:
            for fut in as_completed(futures):
                fut.result()  # raise the first compile error as soon as it happens
                bar.set_postfix_str(futures[fut].symbol)
                bar.update()
    return [fut.result() for fut in futures]


def _cmd_precompile(args) -> int:
    names = args.profile or list(DEFAULT_PROFILES)
    specs: dict[str, KernelSpec] = {}
    for name in names:
        for spec in profile_specs(name, args.arch):
            specs.setdefault(spec.symbol, spec)
    paths = precompile(list(specs.values()), args.jobs, progress=not args.quiet)
    print(f"{len(paths)} kernel(s) ready in {cache_dir()} for profile(s) {', '.join(names)}")
    if env.text(env.raw(env.FAST_CALL), "1").strip() != "0":  # the entry points' C++ launch path too
        print(f"fast call ready: {fast_call.module_path()}")
    return 0


def _cmd_profiles(args) -> int:
    for name, (desc, *_) in PROFILES.items():
        print(f"{name}: {desc}")
        for spec in profile_specs(name, args.arch):
            print(f"    {spec.describe()}")
    return 0


def _cmd_cache(args) -> int:
    print(f"cache dir: {cache_dir()}")
    print(f"nvcc: {nvcc_version().splitlines()[-1]}")
    print(f"fast call: {fast_call.cached_path() or 'missing'}")
    for name in PROFILES:
        for spec in profile_specs(name, args.arch):
            state = "cached" if cubin_path(spec, cache_key(spec)).is_file() else "missing"
            print(f"{name}: {spec.symbol} [{state}]")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chord-runtime", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("precompile", help="compile a profile's kernels into the cache")
    p.add_argument("--profile", action="append", choices=sorted(PROFILES),
                   help="profile to compile (repeatable; default: all default profiles)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--arch", default=DEFAULT_ARCH)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(fn=_cmd_precompile)
    p = sub.add_parser("profiles", help="list profiles and their kernels")
    p.add_argument("--arch", default=DEFAULT_ARCH)
    p.set_defaults(fn=_cmd_profiles)
    p = sub.add_parser("cache", help="show the cache directory and which kernels are cached")
    p.add_argument("--arch", default=DEFAULT_ARCH)
    p.set_defaults(fn=_cmd_cache)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
