"""SRC as a Hub repo id, against a loopback stand-in for the Hub (HF_ENDPOINT) and then offline.

The server speaks the routes huggingface-hub calls: ``HEAD/GET /{repo}/resolve/{rev}/{file}``
(X-Repo-Commit, ETag, Content-Length, Range -> 206) and ``GET /api/models/{repo}/tree/{rev}``.
It serves the bundled tiny fixture at two revisions, cuts one transfer mid-file once (the client
must resume with a Range request), listens on 127.0.0.1 only, and shuts itself down after 120 s.
"""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pytest
from chord_pack import ChordPackError
from chord_pack.convert import convert
from chord_pack.fixtures import bundled_fixture
from chord_pack.info import inspect_checkpoint
from chord_pack.verify import verify

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

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.commits = {SHA_MAIN: _commit_files(False), SHA_V1: _commit_files(True)}
        self.refs = {"main": SHA_MAIN, "v1": SHA_V1, SHA_MAIN: SHA_MAIN, SHA_V1: SHA_V1}
        self.cut_pending = True
        self.log: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


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


@pytest.fixture
def hub(tmp_path, monkeypatch):
    server = FakeHub()
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
