"""``chord-pack convert``: stream a Kimi K2.x INT4 checkpoint into one of Chord's packed layouts.

Order of work: resolve SRC, check OUT, read config + index + every shard header (an EP rank:
only the shards holding its experts or a pass-through tensor) and run every check that needs no
tensor data (nothing is written until all pass), then write each output
shard into a hidden staging folder (under a temp name, renamed when complete and recorded in
the staging folder's journal with its size and sha256) and rename the folder to OUT at the end.
A re-run after a crash finds the staging folder, keeps every journaled shard whose size and
sha256 still match, and writes only the rest.

Parallelism and memory bound: a pool of ``workers`` threads packs expert projections (torch
releases the GIL; each worker runs torch single-threaded). At most ``2 * workers`` projections
are in flight (submitted and not yet written): each holds its packed result (~8.3 MB at Kimi's
2048 x 7168) and, while being packed, ~60 MB of temporaries (source words and scales, uint8
codes, the layout's 64-bit shuffles). Pass-through tensors are copied in 16 MiB chunks. So the
bound is about ``workers * 60 MB + 2 * workers * 8.3 MB + 16 MiB`` (~85 MB per worker);
nothing grows with the shard or model size.

Reading: inside each output shard (which mirrors one source shard) tensors are written in the
order of their source bytes (a projection's three tensors together, at the position of its
packed words), so each source shard is read front to back in one pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from chord_kernels.int4 import GROUP_SIZE
from chord_kernels.layouts import (
    BLOCK_K_BY_MODE,
    FORMAT_VERSION,
    LANES,
    TILE,
    PackedW4A16,
    pack_w4a16,
)
from tqdm import tqdm

from . import __version__
from .checkpoint import INDEX_NAME, TORCH_TO_ST, Reader, open_checkpoint
from .config import CONFIG_NAME, find_chord_block, load_config, read_json
from .errors import ChordPackError
from .model import scan_checkpoint
from .plan import Plan, ProjPlan, Sharding, make_plan, open_slice, plan_slices
from .source import resolve_source
from .writer import OutEntry, tensor_bytes, write_shard

JOURNAL_NAME = ".chord-journal.json"
JOURNAL_VERSION = 1
MAX_WORKERS = 16
# test hook: SIGKILL this process after N shards have been finished and journaled
KILL_AFTER_ENV = "CHORD_PACK_TEST_KILL_AFTER_SHARDS"

SETTINGS_KEYS = ("mode", "block_k", "format_version", "source", "sharding")
Log = Callable[[str], None]


@dataclass
class ConvertResult:
    out: Path
    skipped: bool  # OUT already held this conversion
    shards: int = 0
    packed: int = 0  # expert projections packed
    passthrough: int = 0
    bytes_written: int = 0
    resumed_shards: int = 0  # finished shards kept from an interrupted run
    workers: int = 1


def shard_metadata(mode: str, block_k: int) -> dict[str, str]:
    return {"chord.mode": mode, "chord.block_k": str(block_k), "chord.format_version": str(FORMAT_VERSION)}


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def staging_dir(out: Path, settings: dict) -> Path:
    return out.parent / f".{out.name}.partial-{settings_hash(settings)}"


MEMORY_BASE = 128 * 2**20
MEMORY_PER_WORKER = 192 * 2**20


def memory_bound_bytes(workers: int) -> int:
    """The stated bound on peak RSS growth of a conversion (over the process before it started).

    Measured on the 2 GB true-dims synthetic shard: 193 MB with 1 worker, 422 MB with 2 (glibc
    keeps a malloc arena per worker thread, so freed temporaries stay resident per worker).
    """
    return MEMORY_BASE + MEMORY_PER_WORKER * workers


def default_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def convert(src: str | Path, out: str | Path, mode: str, *, sharding: Sharding | None = None,
            progress: bool | None = None, log: Log = print, workers: int | None = None,
            revision: str | None = None) -> ConvertResult:
    out = Path(out).expanduser().absolute()
    source = resolve_source(src, revision=revision, sharding=sharding, log=log)
    if out == source.path or source.path in out.parents:
        raise ChordPackError(f"{out}: OUT must not be inside SRC {source.path} (SRC is never modified)")
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise ChordPackError(f"--workers must be at least 1, got {workers}")
    cfg = load_config(source.path)
    settings = {"mode": mode, "block_k": BLOCK_K_BY_MODE.get(mode), "format_version": FORMAT_VERSION,
                "source": source.describe(), "sharding": plan_slices(cfg, mode, sharding).block}
    if _existing_is_done(out, settings):
        log(f"chord-pack: {out} already holds this conversion (same settings, complete); nothing to do")
        return ConvertResult(out, skipped=True)
    ckpt, experts = open_slice(source.path, cfg, sharding, require_unopened=source.complete)
    scan = scan_checkpoint(ckpt, cfg, check_scales=True, experts=experts)
    if scan.extra_layer_tensors:
        log(f"chord-pack: {scan.extra_layer_tensors} expert tensors of layers beyond num_hidden_layers "
            f"{cfg.num_layers} (MTP?) pass through unchanged")
    plan = make_plan(scan, cfg, mode, sharding)
    block = {**settings, "packer": f"chord-pack {__version__}"}

    staging = staging_dir(out, settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    journal = Journal.open(staging, _source_fingerprint(ckpt), log)
    try:
        result = _write_all(ckpt, cfg, plan, staging, block, progress, journal, workers)
        journal.close()
        if out.is_dir():  # an empty folder (checked above) is replaced
            out.rmdir()
        os.rename(staging, out)
    except BaseException:
        journal.discard_temps()
        if journal.done:
            log(f"chord-pack: stopped; {len(journal.done)} finished shards are kept in {staging}; "
                "re-run the same command to resume")
        else:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    result.out = out
    result.workers = workers
    resumed = f", {result.resumed_shards} kept from an interrupted run" if result.resumed_shards else ""
    log(f"chord-pack: wrote {out}: {result.packed} expert projections packed ({mode}, BLOCK_K "
        f"{plan.block_k}), {result.passthrough} tensors passed through, {result.shards} shards{resumed}, "
        f"{result.bytes_written / 2**20:.1f} MiB")
    return result


def _source_fingerprint(ckpt) -> dict:
    fp = {}
    for name, shard in sorted(ckpt.shards.items()):
        st = shard.path.stat()
        fp[name] = [st.st_size, st.st_mtime_ns]
    return fp


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_HASH):
            h.update(chunk)
    return h.hexdigest()


CHUNK_HASH = 16 * 1024 * 1024


class Journal:
    """The staging folder's record of finished shards: ``{name: {size, sha256}}`` plus a
    fingerprint of the source shards (size, mtime) so a changed SRC never mixes with old output."""

    def __init__(self, staging: Path, source: dict, done: dict[str, dict]) -> None:
        self.staging, self.source, self.done = staging, source, done

    @classmethod
    def open(cls, staging: Path, source: dict, log: Log) -> Journal:
        if not staging.is_dir():
            if staging.exists():
                staging.unlink()
            staging.mkdir()
            return cls(staging, source, {})
        done: dict[str, dict] = {}
        try:
            data = json.loads((staging / JOURNAL_NAME).read_text(encoding="utf-8"))
            if data.get("version") == JOURNAL_VERSION and data.get("source") == source:
                done = {k: v for k, v in data["shards"].items()
                        if isinstance(v, dict) and {"size", "sha256"} <= v.keys()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            done = {}
        kept = {}
        for name, rec in sorted(done.items()):
            path = staging / name
            if path.is_file() and path.stat().st_size == rec["size"] and file_sha256(path) == rec["sha256"]:
                kept[name] = rec
            else:
                log(f"chord-pack: {name} in {staging.name} is incomplete or corrupt; redoing it")
        for entry in staging.iterdir():  # everything else: temp files, unjournaled shards, ...
            if entry.name in kept:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        journal = cls(staging, source, kept)
        journal._save()
        if kept:
            log(f"chord-pack: resuming in {staging}: {len(kept)} finished shards kept")
        return journal

    def _save(self) -> None:
        tmp = self.staging / (JOURNAL_NAME + ".tmp")
        data = {"version": JOURNAL_VERSION, "source": self.source, "shards": self.done}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.staging / JOURNAL_NAME)

    def temp_path(self, name: str) -> Path:
        return self.staging / f".{name}.tmp"

    def finish(self, name: str, size: int, sha256: str) -> None:
        """Rename the shard's temp file to its name and record it (the rename is the commit)."""
        os.replace(self.temp_path(name), self.staging / name)
        _fsync_dir(self.staging)
        self.done[name] = {"size": size, "sha256": sha256}
        self._save()

    def discard_temps(self) -> None:
        for entry in self.staging.glob(".*.tmp") if self.staging.is_dir() else ():
            entry.unlink(missing_ok=True)

    def close(self) -> None:
        (self.staging / JOURNAL_NAME).unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _existing_is_done(out: Path, settings: dict) -> bool:
    """True if OUT holds this very conversion; raise if OUT holds anything else."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise ChordPackError(f"{out}: OUT exists and is not a directory")
    if not any(out.iterdir()):
        return False
    cfg_path = out / CONFIG_NAME
    block = find_chord_block(read_json(cfg_path, "config.json")) if cfg_path.is_file() else None
    if block is None:
        raise ChordPackError(f"{out}: OUT exists and is not a chord-pack output; remove it or choose another OUT")
    differ = {k: (block.get(k), settings[k]) for k in SETTINGS_KEYS if block.get(k) != settings[k]}
    if differ:
        text = "; ".join(f"{k}: existing {a!r}, requested {b!r}" for k, (a, b) in differ.items())
        raise ChordPackError(f"{out}: OUT exists with different settings ({text}); "
                             "remove it or choose another OUT")
    try:
        open_checkpoint(out)
    except ChordPackError as e:
        raise ChordPackError(f"{out}: OUT exists with the same settings but is incomplete ({e}); remove it") from None
    return True


def _out_entries(plan: Plan) -> dict[str, list[tuple[OutEntry, object]]]:
    """Per source shard: the output tensors it will hold (mirroring the source assignment), in
    the order of their source bytes (a projection's tensors together, at its packed words)."""
    shards: dict[str, list[tuple[tuple[int, str], OutEntry, object]]] = {}
    for info in plan.passthrough:
        shards.setdefault(info.shard, []).append(((info.begin, info.name), OutEntry(info.name, info.dtype, info.shape, info.nbytes), info))
    bk = plan.block_k
    for p in plan.experts:
        n, k = p.n, p.k
        shape_src = p.src.shape
        parts = (
            (OutEntry(p.name("weight_packed"), "I32", (n // TILE, k // bk, LANES, bk // TILE), n * k // 2), p.src.packed),
            (OutEntry(p.name("weight_scale"), "BF16", (k // GROUP_SIZE, n), n * k // GROUP_SIZE * 2), p.src.scale),
            (OutEntry(p.name("weight_shape"), shape_src.dtype, (2,), shape_src.nbytes), shape_src),
        )
        for shard in {info.shard for _, info in parts}:
            mine = [(e, info) for e, info in parts if info.shard == shard]
            anchor = min(info.begin for _, info in mine)
            for i, (entry, _info) in enumerate(mine):
                shards.setdefault(shard, []).append(((anchor, p.src.module + str(i)), entry, p))
    return {name: [(e, w) for _, e, w in sorted(items, key=lambda it: it[0])] for name, items in shards.items()}


def _pack_one(reader: Reader, p: ProjPlan, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    codes, scale = p.read_source(reader)
    packed: PackedW4A16 = pack_w4a16(codes[None], scale[None], mode)
    return packed.qweight[0], packed.scale[0]


class _ShardPacker:
    """Packs one shard's projections on the pool, at most ``window`` ahead of the writer."""

    def __init__(self, pool: ThreadPoolExecutor, reader: Reader, plan: Plan,
                 items: list[tuple[OutEntry, object]], window: int) -> None:
        self.pool, self.reader, self.plan, self.window = pool, reader, plan, window
        self.order: list[ProjPlan] = []
        self.left: dict[ProjPlan, int] = {}
        for _e, w in items:
            if isinstance(w, ProjPlan):
                if w not in self.left:
                    self.order.append(w)
                    self.left[w] = 0
                self.left[w] += 1
        self.index = {p: i for i, p in enumerate(self.order)}
        self.futures: dict[ProjPlan, Future] = {}
        self.submitted = 0
        self._ensure(window)

    def _ensure(self, upto: int) -> None:
        while self.submitted < min(upto, len(self.order)):
            p = self.order[self.submitted]
            self.futures[p] = self.pool.submit(_pack_one, self.reader, p, self.plan.mode)
            self.submitted += 1

    def tensor(self, entry: OutEntry, p: ProjPlan) -> torch.Tensor:
        self._ensure(self.index[p] + self.window)
        if entry.name.endswith(".weight_shape"):
            t = torch.tensor([p.n, p.k], dtype=_torch_dtype(p.src.shape.dtype))
        else:
            qweight, scale = self.futures[p].result()
            t = qweight if entry.name.endswith(".weight_packed") else scale
        self.left[p] -= 1
        if self.left[p] == 0:  # written all of it: drop the result
            self.futures.pop(p, None)
        return t

    def cancel(self) -> None:
        for f in self.futures.values():
            f.cancel()


def _write_all(ckpt, cfg, plan: Plan, staging: Path, block: dict, progress: bool | None,
               journal: Journal, workers: int) -> ConvertResult:
    layout = _out_entries(plan)
    total = sum(e.nbytes for items in layout.values() for e, _ in items)
    kept = sum(e.nbytes for name, items in layout.items() if name in journal.done for e, _ in items)
    result = ConvertResult(staging, skipped=False, packed=len(plan.experts), passthrough=len(plan.passthrough))
    weight_map = {e.name: name for name, items in layout.items() for e, _ in items}
    kill_after = int(os.environ.get(KILL_AFTER_ENV, "0") or 0)
    finished_now = 0
    threads_before = torch.get_num_threads()

    with Reader(ckpt.root) as reader, \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chord-pack",
                               initializer=torch.set_num_threads, initargs=(1,)) as pool, \
            tqdm(total=total, initial=kept, unit="B", unit_scale=True, unit_divisor=1024,
                 desc="chord-pack convert", disable=None if progress is None else not progress,
                 dynamic_ncols=True) as bar:
        if workers > 1:
            torch.set_num_threads(1)  # the pool is the parallelism; the writer thread copies bytes
        try:
            for shard_name in sorted(layout):
                items = layout[shard_name]
                if shard_name in journal.done:
                    result.resumed_shards += 1
                    result.shards += 1
                    result.bytes_written += journal.done[shard_name]["size"]
                    continue
                src_meta = ckpt.shards[shard_name].metadata
                has_packed = any(isinstance(w, ProjPlan) for _, w in items)
                meta = {**src_meta, **(shard_metadata(plan.mode, plan.block_k) if has_packed else {})}
                lookup = {e.name: w for e, w in items}
                packer = _ShardPacker(pool, reader, plan, items, window=2 * workers)

                def produce(e: OutEntry, lookup=lookup, packer=packer):
                    what = lookup[e.name]
                    if isinstance(what, ProjPlan):
                        return [tensor_bytes(packer.tensor(e, what))]
                    return reader.chunks(what)

                digest = hashlib.sha256()
                try:
                    size = write_shard(journal.temp_path(shard_name), [e for e, _ in items], meta,
                                       produce, bar.update, digest=digest)
                finally:
                    packer.cancel()
                journal.finish(shard_name, size, digest.hexdigest())
                result.bytes_written += size
                result.shards += 1
                finished_now += 1
                if kill_after and finished_now >= kill_after:
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            torch.set_num_threads(threads_before)

    index = {"metadata": {"total_size": total, "chord": {k: block[k] for k in ("mode", "block_k", "format_version")}},
             "weight_map": dict(sorted(weight_map.items()))}
    (staging / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    (staging / CONFIG_NAME).write_text(json.dumps(cfg.with_chord_block(block), indent=2) + "\n", encoding="utf-8")
    _copy_other_files(ckpt.root, staging, skip={INDEX_NAME, CONFIG_NAME, *ckpt.weight_map.values()})
    return result


def _torch_dtype(st: str) -> torch.dtype:
    return {v: k for k, v in TORCH_TO_ST.items()}[st]


def _copy_other_files(src: Path, dst: Path, skip: set[str]) -> None:
    """Copy tokenizer, generation_config, code files...: everything but weights and hidden entries."""
    for entry in sorted(src.iterdir()):
        if entry.name.startswith(".") or entry.name in skip or entry.name.endswith(".safetensors"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, dst / entry.name, ignore=shutil.ignore_patterns(".*", "*.safetensors"))
        elif entry.is_file():
            shutil.copyfile(entry, dst / entry.name)
