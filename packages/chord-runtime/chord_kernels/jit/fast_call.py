"""The fast call: the entry points' launch path in C++ (csrc/launcher/fast_call.cpp).

The entry points (chord_kernels.ops) ask it first; it launches a call whose signature and
weight addresses the Python path planned and launched before, and answers False for anything
else, which then runs the Python path (every check, plan and error message lives there) and
records its launch here. Why: the issue's target is 5 µs of host time a call, and on an H100
host the launch alone takes ~3.5 µs; the Python path's signature key and parameter pack took
~3.9 µs more (7.0-7.3 µs a call in all), the fast call ~0.5 (3.8-4.2 µs in all;
docs/design/indexed-kernels.md, "Host overhead per call").

The module links torch's C++ ABI (it reads tensor metadata from TensorImpl), so it is built at
run time against the process's torch, like the kernels: a content-hashed build in the cache
(the source, torch's version, Python's ABI, the compiler's version, the flags), compiled to a
temporary name and renamed into place under a file lock, built ahead by ``chord-runtime
precompile``. Importing chord_kernels builds and loads nothing.

CHORD_FAST_CALL=0 turns it off (the Python path alone). Where it cannot be built or loaded (no
C++ compiler, say), the first CUDA call says why in a RuntimeWarning and the Python path serves
every call: the same launches, ~3 µs more host time a call.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path

from filelock import FileLock

from .. import env
from .paths import cache_dir, csrc_dir

MODULE = "_chord_fast_call"  # PyInit__chord_fast_call in the source
SOURCE = ("launcher", "fast_call.cpp")
FLAGS = ("-O2", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden", "-w")

# The forms (the first argument of call/remember); each names the environment overrides its
# Python path keys its plans on (ops._indexed_cuda, ops._grouped_cuda: keep the two in step),
# which the signature then reads too.
INDEXED, CONTIGUOUS, CONTIGUOUS_OFFSETS, MASKED = range(4)
_FORM_ENV = {INDEXED: (env.INDEXED_KERNEL, env.TUNING), CONTIGUOUS: (env.GROUPED_SPLIT_K,),
             CONTIGUOUS_OFFSETS: (env.GROUPED_SPLIT_K,), MASKED: (env.GROUPED_SPLIT_K,)}


class BuildError(RuntimeError):
    """The C++ compiler failed; the message carries the command and its output."""


def find_compiler() -> str:
    """$CXX, else c++ or g++ on PATH."""
    for candidate in (os.environ.get("CXX"), shutil.which("c++"), shutil.which("g++")):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise FileNotFoundError("no C++ compiler found for the fast call (set CXX)")


def _torch_build_flags() -> list[str]:
    import torch
    from torch.utils import cpp_extension

    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    return [*(f"-I{p}" for p in cpp_extension.include_paths()), f"-I{sysconfig.get_paths()['include']}",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-L{lib}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", f"-Wl,-rpath,{lib}"]


def _identity(compiler: str) -> dict:
    """Everything the built module depends on (the cache key's parts)."""
    import torch

    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    return {"source": csrc_dir().joinpath(*SOURCE).read_text(), "flags": list(FLAGS), "compiler": version,
            "torch": torch.__version__, "torch_git": getattr(torch.version, "git_version", ""),
            "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI), "python": sys.version,
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX")}


def module_key(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _cached(compiler: str) -> Path:
    identity = _identity(compiler)
    key = module_key(identity)
    return cache_dir() / "host" / key[:2] / key / f"{MODULE}{identity['ext_suffix']}"


def cached_path() -> Path | None:
    """The built module's path if the cache holds it, else None (builds nothing)."""
    try:
        path = _cached(find_compiler())
    except (FileNotFoundError, subprocess.CalledProcessError):
        return None
    return path if path.is_file() else None


def module_path() -> Path:
    """The built module in the cache, built first if it is not there (once across processes)."""
    compiler = find_compiler()
    final = _cached(compiler)
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent) + ".lock"):
        if final.is_file():
            return final
        with tempfile.TemporaryDirectory(dir=final.parent, prefix=".build-") as tmp:
            out = Path(tmp) / final.name
            cmd = [compiler, *FLAGS, str(csrc_dir().joinpath(*SOURCE)), "-o", str(out), *_torch_build_flags()]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or not out.is_file():
                raise BuildError(f"the fast call's build failed (exit {proc.returncode}):\n  {' '.join(cmd)}\n"
                                 f"{proc.stdout}{proc.stderr}")
            os.replace(out, final)  # atomic: readers see no module or the whole module
    return final


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_module = None  # the loaded module
recording = False  # the Python path records its launches (True once the fast call is configured)


def _never(*args) -> bool:
    return False


def load(launch_hook=None, stream_of=None):
    """The configured module (built and loaded on the first use). For tests on a machine with no
    GPU: ``launch_hook`` is called as hook(fn, ctx, grid, block, smem, stream, params) instead of
    the driver, ``stream_of(device)`` instead of torch's current-stream query."""
    global _module, recording
    if _module is None:
        _module = _import(module_path())
    if launch_hook is None:
        from .launch import _launcher

        entry = _launcher().launch_entry()
    else:
        entry = 0
    import torch

    raw = getattr(os.environ, "_data", None)
    if not isinstance(raw, dict):
        raise RuntimeError("the fast call reads os.environ's bytes mapping, which this platform lacks")
    keys = [[name.encode() for name in _FORM_ENV[form]] for form in sorted(_FORM_ENV)]
    # torch's raw current-stream query (ops._current_stream's), else the public one
    stream_of = stream_of or getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
        lambda device: torch.cuda.current_stream(device).cuda_stream)
    _module.configure(entry, stream_of, raw, keys, launch_hook)
    recording = True
    return _module


def entry():
    """What the entry points call: the module's ``call``, or, where CHORD_FAST_CALL=0 or the
    module cannot be built or loaded (a RuntimeWarning says why), a function that always answers
    False (the Python path serves every call)."""
    if env.text(env.raw(env.FAST_CALL), "1").strip() == "0":
        return _never
    try:
        return load().call
    except Exception as exc:  # noqa: BLE001 - any failure here leaves the Python path, said once
        warnings.warn(f"chord_kernels: the fast call is off ({type(exc).__name__}: {exc}); every call takes the "
                      "Python launch path (~3 µs more host time a call)", RuntimeWarning, stacklevel=3)
        return _never


def remember(form: int, ints: tuple, operands: tuple, routes: tuple, launches: list, device: int,
             address_slots: tuple) -> None:
    """Record what the Python path just launched for this call: the form, its three ints, (a,
    qweight, scale, out), its routing tensors, ``launches`` ((LoadedKernel, grid, block, smem,
    params) each, in launch order), the stream's device, and the MoeParams slots whose addresses
    the parameters after the pointers depend on (tensor maps). The fast call launches the same
    next time."""
    routes = (*routes, None, None, None)[:3]
    _module.remember(form, *ints, *operands, *routes, [(k.fn, k.ctx, grid, block, smem, params)
                                                       for k, grid, block, smem, params in launches],
                     device, address_slots)


def forget() -> None:
    """Drop every plan the module holds (the next call of each signature takes the Python path).
    For tests that change what the Python path would plan (a dispatch rule patched) without
    changing the signature; nothing in serving needs it."""
    if _module is not None:
        _module.forget()


def reset() -> None:
    """Forget the module's configuration and plans (tests): the next entry() configures again."""
    global recording
    forget()
    recording = False
