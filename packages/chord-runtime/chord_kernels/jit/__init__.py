"""Run-time compilation and launch: generated TUs -> nvcc -> content-hashed cubin cache -> driver launch."""

from .compiler import compile_kernel, nvcc_version
from .kernel import KernelSpec
from .launch import LoadedKernel, load_kernel

__all__ = ["KernelSpec", "LoadedKernel", "compile_kernel", "load_kernel", "nvcc_version"]
