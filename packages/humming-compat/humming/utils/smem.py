"""``humming.utils.smem``: vLLM 0.32 imports it only to patch its ``DeviceInfo`` name. Chord sizes
shared memory in ``chord_kernels.dispatch``; these answers are for callers that ask anyway."""

from ..device import DeviceInfo  # noqa: F401

SMEM_PER_SM = 227 * 1024


def fits_device_smem(smem_bytes: int, device=None) -> bool:
    return smem_bytes <= SMEM_PER_SM
