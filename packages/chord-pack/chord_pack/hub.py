"""SRC as a Hugging Face Hub repo id: download (resumable) into the hub cache with huggingface-hub.

Files are fetched one by one with ``hf_hub_download`` (the library resumes a cut transfer from its
``.incomplete`` file and reuses the cache on a re-run), pinned to the commit that ``config.json``
resolved to, so every file comes from one revision. The commit sha is recorded in the output's
chord block. ``HF_HUB_OFFLINE=1`` reads the cache only (no network at all). ``HF_ENDPOINT``,
``HF_HOME`` and ``HF_HUB_CACHE`` are read when the download starts (not at import time).
Works with huggingface-hub 0.24 through 2.x.

With a shard selection (an EP rank: see :func:`chord_pack.plan.open_slice`), only the shards
the selection names are fetched; the others the index names must exist in the repo listing
(checked online) but are never downloaded. Every non-weight file is always fetched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .checkpoint import INDEX_NAME, SINGLE_NAME, read_index
from .config import CONFIG_NAME
from .errors import ChordPackError

_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


def _cache_dir() -> str | None:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return None  # the library's default


SelectShards = Callable[[Path, dict[str, str]], set[str]]


def download_repo(repo_id: str, revision: str | None, log: Callable[[str], None],
                  select: SelectShards | None = None) -> tuple[Path, str]:
    """Fetch the checkpoint files of ``repo_id`` at ``revision``; return (snapshot folder, commit sha).

    ``select(snapshot, weight_map)`` (called once config.json and the index are in the snapshot)
    names the shards to fetch; default: every shard the index names.
    """
    try:
        import huggingface_hub as hf
        from huggingface_hub.utils import (
            EntryNotFoundError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as e:  # pragma: no cover - a dependency of chord-pack
        raise ChordPackError(f"{repo_id}: huggingface-hub is needed to download from the Hub ({e})") from None

    offline = hub_offline()
    common = {"cache_dir": _cache_dir(), "local_files_only": offline}
    endpoint = os.environ.get("HF_ENDPOINT") or None
    if endpoint:
        common["endpoint"] = endpoint
    where = f"{repo_id}@{revision or 'main'}"

    def fetch(filename: str, rev: str) -> Path:
        try:
            return Path(hf.hf_hub_download(repo_id, filename, revision=rev, **common))
        except LocalEntryNotFoundError:
            if offline:
                raise ChordPackError(f"{where}: {filename} is not in the local Hugging Face cache and "
                                     "HF_HUB_OFFLINE is set (cache only)") from None
            raise ChordPackError(f"{where}: cannot download {filename} (no connection to the Hub?)") from None
        except RepositoryNotFoundError:
            raise ChordPackError(f"{repo_id}: no such Hub repo (or it is private/gated: log in)") from None
        except RevisionNotFoundError:
            raise ChordPackError(f"{repo_id}: no revision {revision!r} on the Hub") from None
        except EntryNotFoundError:
            raise ChordPackError(f"{where}: the repo has no file {filename}") from None
        except OSError as e:
            raise ChordPackError(f"{where}: downloading {filename} failed ({e})") from None

    config = fetch(CONFIG_NAME, revision or "main")
    snapshot = config.parent
    commit = snapshot.name  # the cache keeps each revision under snapshots/<commit sha>/
    files = _repo_files(hf, repo_id, commit, snapshot, offline, endpoint, where)
    if INDEX_NAME in files:
        weight_map = read_index(fetch(INDEX_NAME, commit))
        named = set(weight_map.values())
        shards = named if select is None else set(select(snapshot, weight_map)) & named
        absent = sorted(named - files)
        if absent and not offline:  # offline, the listing is the cache: a shard never fetched is absent
            users = sorted(t for t, f in weight_map.items() if f == absent[0])
            raise ChordPackError(f"{where}: {INDEX_NAME} names {absent[0]} which does not exist in the repo "
                                 f"(for {len(users)} tensors, e.g. {users[0]})")
    elif SINGLE_NAME in files:
        named = shards = {SINGLE_NAME}
    else:
        raise ChordPackError(f"{where}: no {INDEX_NAME} (or {SINGLE_NAME}) in the repo")
    wanted = sorted(f for f in files if not f.endswith(".safetensors") and not Path(f).name.startswith(".")
                    and f not in (CONFIG_NAME, INDEX_NAME) and f not in named)
    wanted += sorted(shards)  # offline, a selected shard missing from the cache is an error that says so
    skipped = f", {len(named) - len(shards)} not needed by this slice" if len(shards) < len(named) else ""
    log(f"chord-pack: {repo_id} at commit {commit}: {'reading the cache' if offline else 'fetching'} "
        f"{len(wanted) + 1 + (INDEX_NAME in files)} files ({len(shards)} of {len(named)} shards{skipped})")
    for f in wanted:
        fetch(f, commit)
    return snapshot, commit


def _repo_files(hf, repo_id: str, commit: str, snapshot: Path, offline: bool, endpoint: str | None,
                where: str) -> set[str]:
    if offline:
        return {p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()}
    try:
        return set(hf.HfApi(endpoint=endpoint).list_repo_files(repo_id, revision=commit))
    except Exception as e:  # the library raises several HTTP error types across versions
        raise ChordPackError(f"{where}: cannot list the repo files ({type(e).__name__}: {e})") from None
