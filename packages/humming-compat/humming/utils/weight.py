"""``humming.utils.weight``: vLLM exports ``quantize_weight`` (online quantization); Chord serves
pre-quantized INT4 checkpoints only, so using it raises."""

from ..errors import not_supported


def quantize_weight(*args, **kwargs):
    raise not_supported("online weight quantization (humming.utils.weight.quantize_weight)",
                        "serve an INT4 compressed-tensors checkpoint")


def dequantize_weight(*args, **kwargs):
    raise not_supported("humming.utils.weight.dequantize_weight", "use chord_kernels.reference.dequantize_w4a16")
