"""The one exception type of chord-pack: every refusal names the file and the tensor."""

from __future__ import annotations


class ChordPackError(Exception):
    """A checkpoint or a request chord-pack refuses; the message says which file/tensor and why.

    ``exit_code`` is what the CLI exits with (2 for bad input or usage, 1 for a ``verify``
    that found a difference).
    """

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
