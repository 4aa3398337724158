"""`humming` import root backed by Chord (stub: the vLLM-facing modules land with their own issue).

vLLM probes this package with a bare ``import humming``; importing it must stay cheap and
touch no GPU, driver or NVML, so nothing here imports torch or chord_kernels eagerly.
"""

__version__ = "0.1.0"
BACKEND = "chord"
