"""SRC as a Hub repo id, against a loopback stand-in for the Hub (HF_ENDPOINT) and then offline.

The server speaks the routes huggingface-hub calls: ``HEAD/GET /{repo}/resolve/{rev}/{file}``
(X-Repo-Commit, ETag, Content-Length, Range -> 206) and ``GET /api/models/{repo}/tree/{rev}``.
It serves the bundled tiny fixture at two revisions, cuts one transfer mid-file once (the client
must resume with a Range request), listens on 127.0.0.1 only, and shuts itself down after 120 s.
It records every request, so the EP tests can check which shards a rank fetched: they serve
the fixture re-sharded so that the experts of EP rank 0 and rank 1 live in different shards.
"""

import hashlib
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pytest
from chord_pack import ChordPackError
from chord_pack.convert import convert
from chord_pack.fixtures import bundled_fixture
from chord_pack.info import inspect_checkpoint
from chord_pack.plan import Sharding
from chord_pack.verify import verify
from safetensors.torch import load_file, save_file

pytest.importorskip("huggingface_hub")

THINKING = bundled_fixture()
REPO = "chord-test/tiny-kimi"
SHA_MAIN = "a" * 40
SHA_V1 = "b" * 40
CUT_FILE = "model-00001-of-000002.safetensors"


def _commit_files(v1: bool) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in sorted(THINKING.iterdir()) if p.is_file()}
    if v1:  # the older revision differs in one small file
        gen = json.loads(files["generation_config.json"])
        files["generation_config.json"] = (json.dumps({**gen, "temperature": 0.6}, indent=2) + "\n").encode()
    return files


class FakeHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, main_files: dict[str, bytes] | None = None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.commits = {SHA_MAIN: main_files or _commit_files(False), SHA_V1: _commit_files(True)}
        self.refs = {"main": SHA_MAIN, "v1": SHA_V1, SHA_MAIN: SHA_MAIN, SHA_V1: SHA_V1}
        self.cut_pending = True
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def requested(self, since: int = 0) -> set[str]:
        """Files of the repo asked for (HEAD or GET) since log entry ``since``."""
        with self.lock:
            return {p.split("/resolve/", 1)[1].split("/", 1)[1] for _m, p, _r in self.log[since:]
                    if "/resolve/" in p}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_a):  # quiet
        pass

    def _send(self, code, body=b"", headers=None, head=False):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _not_found(self, code="EntryNotFound"):
        self._send(404, b'{"error": "not found"}', {"X-Error-Code": code, "Content-Type": "application/json"},
                   head=self.command == "HEAD")

    def _route(self):
        hub: FakeHub = self.server
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        with hub.lock:
            hub.log.append((self.command, url.path, self.headers.get("Range")))
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            repo, rev = "/".join(parts[2:4]), parts[5]
            sha = hub.refs.get(rev) if repo == REPO else None
            if sha is None:
                return self._not_found("RevisionNotFound" if repo == REPO else "RepoNotFound")
            body = json.dumps([{"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                               for f, b in sorted(hub.commits[sha].items())]).encode()
            return self._send(200, body, {"Content-Type": "application/json"})
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, rev, fname = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            if repo != REPO:
                return self._not_found("RepoNotFound")
            sha = hub.refs.get(rev)
            if sha is None:
                return self._not_found("RevisionNotFound")
            data = hub.commits[sha].get(fname)
            if data is None:
                return self._not_found()
            etag = '"' + hashlib.sha256(data).hexdigest() + '"'
            base = {"X-Repo-Commit": sha, "ETag": etag, "Accept-Ranges": "bytes"}
            if self.command == "HEAD":
                self.send_response(200)
                for k, v in base.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return None
            rng = self.headers.get("Range")
            if rng:
                start = int(rng.split("=")[1].split("-")[0])
                body = data[start:]
                return self._send(206, body, {**base, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"})
            with hub.lock:
                cut = fname == CUT_FILE and hub.cut_pending
                hub.cut_pending = hub.cut_pending and not cut
            if cut:  # promise the whole file, send half, drop the connection
                self.send_response(200)
                for k, v in base.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return None
            return self._send(200, data, base)
        return self._not_found("RepoNotFound")

    do_GET = _route
    do_HEAD = _route


def _serve(server: FakeHub, tmp_path, monkeypatch):
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    stopper = threading.Timer(120, server.shutdown)  # bounded even if a test hangs
    stopper.daemon = True
    stopper.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    yield server
    stopper.cancel()
    server.shutdown()
    server.server_close()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    yield from _serve(FakeHub(), tmp_path, monkeypatch)


quiet = dict(progress=False, log=lambda _m: None)


def test_download_resumes_a_cut_transfer_and_records_the_commit(hub, tmp_path, monkeypatch):
    import huggingface_hub.constants

    # the client keeps what it has written in whole chunks (10 MiB by default; the fixture shard
    # is 0.7 MB), so use small chunks to make the cut land after some bytes are on disk
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024, raising=False)
    out = tmp_path / "out"
    r = convert(REPO, out, "indexed", **quiet)
    assert r.packed == 24
    block = json.loads((out / "config.json").read_text())["chord"]
    assert block["source"] == {"path": None, "repo": REPO, "revision": SHA_MAIN}
    cut_gets = [rng for m, p, rng in hub.log if m == "GET" and p.endswith(CUT_FILE)]
    assert len(cut_gets) == 2 and cut_gets[0] is None and cut_gets[1].startswith("bytes=")
    assert not hub.cut_pending
    verify(REPO, out, log=lambda _m: None)
    s = inspect_checkpoint(out)
    assert s["source"]["repo"] == REPO and s["source"]["revision"] == SHA_MAIN
    # the cache holds exactly the library's layout: refs/main -> the commit, snapshots/<commit>/...
    cache = tmp_path / "hf-home" / "hub" / "models--chord-test--tiny-kimi"
    assert (cache / "refs" / "main").read_text().strip() == SHA_MAIN
    assert (cache / "snapshots" / SHA_MAIN / CUT_FILE).read_bytes() == (THINKING / CUT_FILE).read_bytes()


def test_a_second_revision_and_offline_mode(hub, tmp_path, monkeypatch):
    out_v1 = tmp_path / "v1"
    convert(REPO, out_v1, "masked", revision="v1", **quiet)
    block = json.loads((out_v1 / "config.json").read_text())["chord"]
    assert block["source"]["revision"] == SHA_V1
    assert json.loads((out_v1 / "generation_config.json").read_text())["temperature"] == 0.6
    convert(REPO, tmp_path / "main", "masked", **quiet)
    # offline: the server is gone; everything must come from the cache built above
    hub.shutdown()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    out = tmp_path / "offline"
    convert(REPO, out, "indexed", revision="v1", **quiet)
    assert json.loads((out / "config.json").read_text())["chord"]["source"]["revision"] == SHA_V1
    verify(REPO, out, log=lambda _m: None)
    convert(REPO, tmp_path / "offline-main", "indexed", **quiet)
    block = json.loads((tmp_path / "offline-main" / "config.json").read_text())["chord"]
    assert block["source"]["revision"] == SHA_MAIN
    with pytest.raises(ChordPackError, match="not in the local Hugging Face cache"):
        convert("chord-test/never-downloaded", tmp_path / "x", "indexed", **quiet)


def test_unknown_repo_and_revision(hub, tmp_path):
    with pytest.raises(ChordPackError, match="no such Hub repo"):
        convert("chord-test/missing", tmp_path / "x", "indexed", **quiet)
    with pytest.raises(ChordPackError, match="no revision 'v9'"):
        convert(REPO, tmp_path / "x", "indexed", revision="v9", **quiet)
    assert not (tmp_path / "x").exists()


# ---- EP ranks fetch only their shards -------------------------------------------------------

EP_SHARDS = [f"model-{i:05d}-of-00004.safetensors" for i in (1, 2, 3, 4)]
SPLIT = "model.layers.2.mlp.experts.3.down_proj"  # a rank-1 triple split over S3 and S4


def _ep_shard_of(name: str) -> int:
    """S1: non-expert tensors + rank 0's layer-1 experts; S2: rank 0's layer-2 experts;
    S3: rank 1's experts; S4: lm_head, the final norm and part of one rank-1 triple."""
    parts = name.split(".")
    if "experts" not in parts:
        return 3 if name in ("lm_head.weight", "model.norm.weight") else 0
    layer, expert = int(parts[2]), int(parts[5])
    if expert >= 2:
        return 3 if name in (f"{SPLIT}.weight_scale", f"{SPLIT}.weight_shape") else 2
    return 0 if layer == 1 else 1


def make_ep_layout(dst):
    """The bundled fixture (4 experts, EP 2 keeps 2 each) re-sharded as ``_ep_shard_of`` says."""
    dst.mkdir()
    tensors = {}
    for f in sorted(THINKING.glob("*.safetensors")):
        tensors.update(load_file(f))
    for i, shard in enumerate(EP_SHARDS):
        save_file({n: t for n, t in tensors.items() if _ep_shard_of(n) == i}, str(dst / shard),
                  metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
             "weight_map": {n: EP_SHARDS[_ep_shard_of(n)] for n in sorted(tensors)}}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    for f in ("config.json", "generation_config.json"):
        shutil.copyfile(THINKING / f, dst / f)
    return dst


SMALL = {"config.json", "generation_config.json", "model.safetensors.index.json"}
RANK_SHARDS = {0: {EP_SHARDS[0], EP_SHARDS[1], EP_SHARDS[3]}, 1: {EP_SHARDS[0], EP_SHARDS[2], EP_SHARDS[3]}}


@pytest.fixture
def ep_hub(tmp_path, monkeypatch):
    layout = make_ep_layout(tmp_path / "ep-layout")
    server = FakeHub({p.name: p.read_bytes() for p in sorted(layout.iterdir())})
    server.cut_pending = False
    yield from _serve(server, tmp_path, monkeypatch)


def test_an_ep_rank_fetches_only_its_shards(ep_hub, tmp_path, monkeypatch):
    out0 = tmp_path / "ep0"
    r = convert(REPO, out0, "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    assert r.packed == 12 and r.shards == 3
    assert ep_hub.requested() == SMALL | RANK_SHARDS[0]
    snapshot = tmp_path / "hf-home" / "hub" / "models--chord-test--tiny-kimi" / "snapshots" / SHA_MAIN
    assert not (snapshot / EP_SHARDS[2]).exists()
    mark = len(ep_hub.log)
    verify(REPO, out0, log=lambda _m: None)  # verify applies the same slice: still no rank-1 shard
    assert ep_hub.requested(mark) <= SMALL | RANK_SHARDS[0]
    assert not (snapshot / EP_SHARDS[2]).exists()
    assert json.loads((out0 / "config.json").read_text())["chord"]["sharding"]["experts"] == [0, 2]
    assert sorted(p.name for p in out0.glob("*.safetensors")) == sorted(RANK_SHARDS[0])

    # offline: rank 0 converts from the cache; rank 1 needs a shard that was never fetched
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    convert(REPO, tmp_path / "ep0-offline", "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    with pytest.raises(ChordPackError, match=f"{EP_SHARDS[2]} is not in the local Hugging Face cache"):
        convert(REPO, tmp_path / "ep1-offline", "indexed", sharding=Sharding("ep", 2, 1), **quiet)
    assert not (tmp_path / "ep1-offline").exists()
    monkeypatch.delenv("HF_HUB_OFFLINE")

    mark = len(ep_hub.log)
    out1 = tmp_path / "ep1"
    convert(REPO, out1, "masked", sharding=Sharding("ep", 2, 1), **quiet)
    assert EP_SHARDS[2] in ep_hub.requested(mark) and EP_SHARDS[1] not in ep_hub.requested(mark)
    verify(REPO, out1, log=lambda _m: None)
    assert not set(json.loads((out0 / "model.safetensors.index.json").read_text())["weight_map"]) \
        & {n for n in json.loads((out1 / "model.safetensors.index.json").read_text())["weight_map"]
           if ".experts." in n}


def test_an_ep_rank_refuses_an_index_naming_a_shard_the_repo_lacks(ep_hub, tmp_path):
    del ep_hub.commits[SHA_MAIN][EP_SHARDS[2]]  # rank 0 does not need it, but the index is wrong
    with pytest.raises(ChordPackError, match=f"names {EP_SHARDS[2]} which does not exist in the repo"):
        convert(REPO, tmp_path / "x", "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    assert EP_SHARDS[2] not in ep_hub.requested() and not (tmp_path / "x").exists()


def test_a_local_ep_rank_reads_only_its_tensors(tmp_path, monkeypatch):
    import chord_pack.checkpoint as ckpt_mod

    src = make_ep_layout(tmp_path / "src")
    headers, tensors = [], []
    real_header, real_read = ckpt_mod.read_shard_header, ckpt_mod.Reader.read_into

    def header(path, name):
        headers.append(name)
        return real_header(path, name)

    def read_into(self, info, begin, nbytes):
        if self.root == src:
            tensors.append(info.name)
        return real_read(self, info, begin, nbytes)

    monkeypatch.setattr(ckpt_mod, "read_shard_header", header)
    monkeypatch.setattr(ckpt_mod.Reader, "read_into", read_into)
    weight_map = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    for rank in (0, 1):
        headers.clear()
        tensors.clear()
        out = tmp_path / f"ep{rank}"
        convert(src, out, "contiguous", sharding=Sharding("ep", 2, rank), **quiet)
        assert set(headers) == RANK_SHARDS[rank]
        others = {n for n in weight_map if ".experts." in n and int(n.split(".")[5]) // 2 != rank}
        assert tensors and not set(tensors) & others
        assert set(tensors) == set(weight_map) - others  # every kept tensor is read (checks + data)
        verify(src, out, log=lambda _m: None)

    # rank 0 never opens S3, so damage there does not stop it; rank 1 is refused
    with open(src / EP_SHARDS[2], "r+b") as f:
        f.truncate((src / EP_SHARDS[2]).stat().st_size - 1)
    convert(src, tmp_path / "ep0-again", "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    with pytest.raises(ChordPackError, match=f"shard {EP_SHARDS[2]} truncated"):
        convert(src, tmp_path / "ep1-again", "indexed", sharding=Sharding("ep", 2, 1), **quiet)
    with pytest.raises(ChordPackError, match=f"shard {EP_SHARDS[2]} truncated"):
        convert(src, tmp_path / "full", "indexed", **quiet)
    # other ranks' experts are still checked from the index: a missing or stray one is refused
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"].pop(f"{SPLIT}.weight_shape")
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ChordPackError, match=f"1 routed-expert tensors missing.*{SPLIT}.weight_shape"):
        convert(src, tmp_path / "ep0-missing", "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    index["weight_map"]["model.layers.1.mlp.experts.7.up_proj.weight_packed"] = EP_SHARDS[2]
    index["weight_map"][f"{SPLIT}.weight_shape"] = EP_SHARDS[3]
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ChordPackError, match="expert 7 out of range"):
        convert(src, tmp_path / "ep0-range", "indexed", sharding=Sharding("ep", 2, 0), **quiet)
    (src / EP_SHARDS[2]).unlink()  # a local folder must hold every shard its index names
    with pytest.raises(ChordPackError, match=f"index names {EP_SHARDS[2]} which does not exist"):
        convert(src, tmp_path / "ep0-gone", "indexed", sharding=Sharding("ep", 2, 0), **quiet)
