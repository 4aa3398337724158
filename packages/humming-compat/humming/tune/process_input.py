"""Placeholder for humming's process-input tuning (Chord's process_input needs none).

vLLM 0.32's facade imports this module to patch its ``DeviceInfo`` name; nothing else uses it.
"""

from ..device import DeviceInfo  # noqa: F401


def get_process_input_tuning_intervals(config, use_pdl: bool = False):
    return [[0, 1 << 40, {}]]
