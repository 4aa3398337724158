"""`humming` import root backed by Chord: vLLM's Humming backend runs on ``chord_kernels``.

vLLM probes this package with a bare ``import humming`` (``has_humming()``), also on CPU-only
machines; importing it must stay cheap and touch no GPU, driver or NVML. So nothing here
imports torch or chord_kernels: vLLM reaches the submodules lazily (``humming.dtypes``,
``humming.config``, ``humming.schema``, ``humming.transform``, ``humming.tune``,
``humming.forward``, ``humming.ops``, ``humming.device``, ``humming.utils.*``,
``humming.layer``), and those import torch on first use.

Only what Kimi K2.x needs is supported: BF16 activations, uint4 offset-binary weights with
group-32 BF16 scales (compressed-tensors ``pack-quantized``, symmetric), MoE gemm types
``indexed``, ``grouped_contiguous`` and ``grouped_masked``, SiLU-and-mul. Everything else
raises :class:`humming.errors.NotSupportedError` naming the option, at load time.
"""

__version__ = "0.1.0"
BACKEND = "chord"
