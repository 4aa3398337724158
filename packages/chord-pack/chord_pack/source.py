"""Where a checkpoint comes from: today a local folder; the Hub download slots in here later."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ChordPackError

# owner/name as the Hub spells it (no leading "./" or "/", exactly one slash)
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Source:
    """A resolved checkpoint: a local folder plus where it came from (recorded in the chord block)."""

    path: Path
    repo: str | None = None  # Hub repo id, None for a local folder
    revision: str | None = None  # resolved commit, None for a local folder

    def describe(self) -> dict:
        return {"path": str(self.path), "repo": self.repo, "revision": self.revision}


def looks_like_repo_id(src: str) -> bool:
    return bool(_REPO_ID.match(src))


def resolve_source(src: str | Path, revision: str | None = None) -> Source:
    """Turn SRC (a local folder, later also a Hub repo id) into a local folder to read from.

    The Hub path (huggingface-hub ``snapshot_download`` with resume, offline mode and the
    resolved revision recorded) is not implemented yet; a repo id gets a clear error.
    """
    path = Path(src).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ChordPackError(f"{src}: --revision only applies to Hub repo ids, not a local folder")
        return Source(path=path.resolve())
    if path.exists():
        raise ChordPackError(f"{src}: not a directory (SRC must be a checkpoint folder)")
    if looks_like_repo_id(str(src)):
        raise ChordPackError(
            f"{src}: no such local folder, and downloading from the Hugging Face Hub is not yet "
            "supported by this chord-pack; download the repo first (e.g. `hf download "
            f"{src} --local-dir DIR`) and pass DIR"
        )
    raise ChordPackError(f"{src}: no such checkpoint folder")
