"""``humming.utils``: the helper modules vLLM names (``weight``, ``smem``)."""
