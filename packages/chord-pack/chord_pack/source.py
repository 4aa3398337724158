"""Where a checkpoint comes from: a local folder, or a Hub repo id fetched into the hub cache (hub.py)."""

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

    @property
    def complete(self) -> bool:
        """Does ``path`` hold every shard? A Hub snapshot holds only the shards that were fetched."""
        return self.repo is None

    def describe(self) -> dict:
        # a Hub source is named by repo + commit; its cache path differs from machine to machine
        return {"path": None if self.repo else str(self.path), "repo": self.repo, "revision": self.revision}


def looks_like_repo_id(src: str) -> bool:
    return bool(_REPO_ID.match(src))


def resolve_source(src: str | Path, revision: str | None = None, *, sharding=None, log=print) -> Source:
    """Turn SRC (a local folder or a Hub repo id ``org/name``) into a local folder to read from.

    A local folder wins over a repo id of the same spelling. A repo id is downloaded with
    huggingface-hub (see :mod:`chord_pack.hub`); ``revision`` (branch, tag or commit) applies
    to it only, and the resolved commit sha is recorded. With an EP ``sharding``, only the
    shards holding that rank's experts or a pass-through tensor are fetched (plus every
    non-weight file); without sharding or with TP, every shard is.
    """
    path = Path(src).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ChordPackError(f"{src}: --revision only applies to Hub repo ids, not a local folder")
        return Source(path=path.resolve())
    if path.exists():
        raise ChordPackError(f"{src}: not a directory (SRC must be a checkpoint folder)")
    if looks_like_repo_id(str(src)):
        from .hub import download_repo

        snapshot, commit = download_repo(str(src), revision, log, select=_shard_selector(sharding))
        return Source(path=snapshot, repo=str(src), revision=commit)
    raise ChordPackError(f"{src}: no such checkpoint folder")


def _shard_selector(sharding):
    """For an EP rank: the shards its slice reads, decided from config.json and the index alone."""
    if sharding is None or sharding.kind != "ep":
        return None

    def select(snapshot: Path, weight_map: dict[str, str]) -> set[str]:
        from .config import load_config
        from .model import needed_shards
        from .plan import ep_experts

        cfg = load_config(snapshot)
        return needed_shards(weight_map, cfg, ep_experts(cfg, sharding))

    return select
