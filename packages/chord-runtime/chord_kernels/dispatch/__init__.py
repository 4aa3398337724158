"""Problem -> kernel configuration, as small pure functions (CPU tests cover them).

A *problem* is what the caller's shapes say (N, K, experts, top_k, routing block size); a
*kernel config* is how Chord runs it (family, tiles, launch shape). ``CHORD_PRINT_CONFIGS=1``
prints each distinct choice once, to stderr. Overrides for experiments and debugging (the default
is the heuristic below): ``CHORD_W4A16_INDEXED_KERNEL=auto|mma_sk|wgmma_sk|mma|wgmma|simple`` forces an indexed
kernel family, ``CHORD_W4A16_TUNING="NT=4,STAGES=4"`` overrides the chosen tensor-core kernel's
config (NT/TT/STAGE_K/STAGES for mma, WM/BN/STAGES for wgmma), and ``CHORD_W4A16_BLOCK_M`` the
routing block size Chord asks the framework for.

The package's modules, in the order a choice is made:
- ``blocks``: the routing block an expert's expected rows ask for (the padding cost model).
- ``shapes``: the kernel family a tile of so many rows runs, and each tile's config (tuning too).
- ``launch``: a config's resources (shared memory, registers, CTAs an SM), the launch builders,
  and the GPU's description beside its arch: SMs (the wave model) and memory bandwidth by device
  name (``memory_tbps_of``: the H200 and the H100 share sm_90a and 132 SMs but not their memory).
- ``indexed`` and ``grouped``: each family's kernels, its choice per call, and every launch it can
  pick (what CI compiles and the serving profiles precompile).
- ``report``: CHORD_PRINT_CONFIGS.
Every public name of them is also a name of the package (``chord_kernels.dispatch.X``, and the
expressions ``scripts/sass_counts.py`` evaluates in this namespace).
"""

from dataclasses import replace  # noqa: F401  (sass_counts expressions: replace(launch, spec=...))

from .blocks import *  # noqa: F403
from .grouped import *  # noqa: F403
from .indexed import *  # noqa: F403
from .launch import *  # noqa: F403
from .report import *  # noqa: F403
from .shapes import *  # noqa: F403
