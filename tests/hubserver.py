"""A local fake of the Hugging Face Hub, for testing downloads with the real ``huggingface_hub`` client.

Standard library only. :class:`FakeHub` runs two HTTP servers on 127.0.0.1 (ephemeral ports) in
background threads:

* the *Hub* (``hub.url``): ``/api/models/...`` (model info, tree listing, paths-info) and
  ``/{repo_id}/resolve/{revision}/{filename}`` exactly like huggingface.co answers them;
* the *CDN* (``hub.cdn_url``): serves LFS file bytes under signed, content-addressed URLs. As on the
  real Hub, ``resolve`` answers an LFS file with a ``302`` to the CDN, and the file metadata the client
  needs (``X-Repo-Commit``, ``X-Linked-Etag`` = quoted sha256, ``X-Linked-Size``) is carried by the
  302 itself: huggingface_hub 2.4.0 only follows redirects that stay on the same origin (scheme, host,
  port) or go to a known Hub host, so with the CDN on another port the client stops at the 302, reads
  the metadata there, then GETs the CDN URL directly (without the ``Authorization`` header). With
  ``FakeHub(cdn="same")`` the CDN lives on the Hub's own origin instead (like the Hub's
  ``/api/resolve-cache`` redirects): the client then follows the redirect during its HEAD and reads
  the metadata from the CDN response, which therefore also carries the Hub headers.

Small non-LFS files (README.md, config.json, ...) are served by ``resolve`` directly (200, ``ETag`` =
quoted git blob sha1). Whether a file is LFS: ``add_file(..., lfs=True/False)``; by default binary
model extensions (.gguf, .bin, .safetensors, ...) and files over 10 MiB are LFS. No Xet header is
ever sent, so the client always uses plain HTTP downloads.

Fault injection: :meth:`FakeHub.drop_after`, :meth:`FakeHub.corrupt`, :meth:`FakeHub.override_name`,
:meth:`FakeHub.require_token`, :meth:`FakeHub.fail_next`, :meth:`FakeHub.throttle`. Every request is
logged (:attr:`FakeHub.log`, :meth:`FakeHub.content_gets`, :meth:`FakeHub.bytes_sent`).

Pointing the real client at it takes more than ``HF_ENDPOINT``: huggingface_hub reads most of its
environment variables once, at import time, into ``huggingface_hub.constants``; use
:func:`configure_client` (see its docstring).

Usage::

    from hubserver import FakeHub, configure_client

    def test_download(tmp_path, monkeypatch):
        with FakeHub() as hub:
            info = hub.add_file("org/model-GGUF", "Q8_0/model-00001-of-00002.gguf", b"...")
            env = configure_client(monkeypatch, hub, tmp_path)
            from huggingface_hub import hf_hub_download
            path = hf_hub_download("org/model-GGUF", "Q8_0/model-00001-of-00002.gguf")
            assert hub.bytes_sent("org/model-GGUF") == info.size
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

__all__ = [
    "FakeHub",
    "HubFile",
    "LoggedRequest",
    "ClientEnv",
    "configure_client",
    "set_offline",
    "free_port",
]

LFS_EXTENSIONS = (
    ".gguf", ".bin", ".safetensors", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".msgpack", ".npz",
    ".npy", ".tflite", ".model", ".zip", ".tar", ".gz", ".7z", ".pkl", ".pickle", ".ot", ".mlmodel",
)
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
SEND_CHUNK = 64 * 1024
_DATE = "2024-01-01T00:00:00.000Z"


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class HubFile:
    """One published file. ``etag`` is what the client uses as blob name in its cache."""

    path: str
    data: bytes = field(repr=False)
    size: int
    sha256: str
    git_oid: str  # git blob sha1 (of the LFS pointer for LFS files), the Hub's ``blobId`` / tree ``oid``
    lfs: bool
    pointer_size: int | None

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.git_oid


@dataclass
class LoggedRequest:
    """One request seen by either server. Appended *before* the response is sent and ``bytes_sent``
    is increased *before* each body write, so a client that has seen a response always finds it here."""

    server: str  # "hub" or "cdn"
    method: str
    path: str  # raw request target, with query string
    range: str | None  # the Range header, verbatim
    authorization: str | None
    kind: str = "other"  # "model_info", "tree", "paths_info", "resolve", "cdn", "other"
    repo_id: str | None = None
    filename: str | None = None
    status: int | None = None
    bytes_sent: int = 0  # body bytes written (a HEAD or an aborted body counts what was really sent)
    content: bool = False  # True when the body is (part of) a file's bytes
    dropped: bool = False  # True when the connection was cut on purpose (drop_after)
    started: float = field(default_factory=time.monotonic)

    @property
    def range_start(self) -> int | None:
        m = re.fullmatch(r"\s*bytes\s*=\s*(\d+)\s*-\s*\d*\s*", self.range or "")
        return int(m.group(1)) if m else None


@dataclass
class _DropRule:
    nbytes: int
    times: int
    reset: bool


@dataclass
class _Repo:
    repo_id: str
    commits: dict[str, dict[str, HubFile]]  # sha -> {path: file}
    head: str
    private: bool = False
    extra_info: dict[str, Any] = field(default_factory=dict)


class _AbortConnection(Exception):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, hub: FakeHub, role: str):
        self.hub = hub
        self.role = role
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request, client_address):
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def close_all_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeHub/1.0"
    timeout = 30  # idle keep-alive connections end eventually

    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - silence stderr logging
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        hub = self.server.hub
        entry = LoggedRequest(
            server=self.server.role, method=method, path=self.path, range=self.headers.get("Range"),
            authorization=self.headers.get("Authorization"),
        )
        hub._log_append(entry)
        self._entry = entry
        body = b""
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length)
        try:
            hub._handle(self, method, body)
        except _AbortConnection:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # -- response helpers (used by FakeHub._handle) --------------------------------------------
    def _start(self, status: int, headers: dict[str, str]) -> None:
        self._entry.status = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _write(self, data: bytes | memoryview) -> None:
        self._entry.bytes_sent += len(data)
        try:
            self.wfile.write(data)
        except OSError:
            self._entry.bytes_sent -= len(data)
            raise

    def _abort(self, reset: bool) -> None:
        """Cut the connection: FIN (peer sees a short body) or, with ``reset``, an RST."""
        self._entry.dropped = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise _AbortConnection()


def _error_headers(code: str | None, message: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    h = {"X-Error-Message": message}
    if code:
        h["X-Error-Code"] = code
    if extra:
        h.update(extra)
    return h


class FakeHub:
    """A fake huggingface.co (plus its CDN) on 127.0.0.1. See the module docstring.

    Args:
        cdn: ``"separate"`` (default): LFS bytes come from a second server on another port, i.e. another
            origin, as on the real Hub. ``"same"``: the CDN path is served by the Hub server itself.
        page_size: entries per page of the tree listing (the client follows ``Link: <...>; rel="next"``).
    """

    def __init__(self, *, cdn: str = "separate", page_size: int = 1000):
        if cdn not in ("separate", "same"):
            raise ValueError("cdn must be 'separate' or 'same'")
        self.cdn_mode = cdn
        self.page_size = page_size
        self._lock = threading.RLock()
        self._repos: dict[str, _Repo] = {}
        self._blobs: dict[str, bytes] = {}  # sha256 -> data (content addressed, like the CDN)
        self._drops: dict[tuple[str, str], list[_DropRule]] = {}
        self._corrupt: dict[tuple[str, str], int] = {}  # -> offset of the flipped byte
        self._names: dict[tuple[str, str], str] = {}  # (repo, real path) -> advertised name
        self._throttle: dict[tuple[str, str], tuple[int, float]] = {}
        self._fail: list[list[Any]] = []  # [status, times, kind, repo_id, filename]
        self._tokens: dict[str | None, str] = {}  # repo_id or None (all repos) -> token
        self._secret = os.urandom(16)
        self.log: list[LoggedRequest] = []
        self._hub: _Server | None = None
        self._cdn: _Server | None = None
        self._threads: list[threading.Thread] = []
        self._stopped = False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeHub:
        if self._hub is not None:
            return self
        self._hub = _Server(self, "hub")
        self._cdn = _Server(self, "cdn") if self.cdn_mode == "separate" else None
        for srv in filter(None, (self._hub, self._cdn)):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                                 name=f"fakehub-{srv.role}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stop both servers and cut every open (keep-alive) connection; the ports then refuse.
        Idempotent; ``url`` stays valid (and unreachable) afterwards."""
        if self._stopped:
            return
        self._stopped = True
        for srv in filter(None, (self._hub, self._cdn)):
            srv.shutdown()
            srv.close_all_connections()
            srv.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The Hub endpoint, for ``HF_ENDPOINT``: ``http://127.0.0.1:PORT``."""
        assert self._hub is not None, "call start() first"
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        if self._cdn is None:
            return self.url
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    # -- content -------------------------------------------------------------------------------
    def add_file(self, repo_id: str, filename: str, data: bytes | str | os.PathLike, *,
                 lfs: bool | None = None) -> HubFile:
        """Publish ``filename`` (may contain sub-folders; not validated, so hostile names such as
        ``../evil.gguf`` can be published too) in model repo ``repo_id`` (created if needed).
        ``data`` is bytes or a path to read. Makes a new commit: the repo's sha changes."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data = Path(data).read_bytes()
        data = bytes(data)
        if lfs is None:
            lfs = filename.lower().endswith(LFS_EXTENSIONS) or len(data) > LFS_SIZE_THRESHOLD
        sha256 = hashlib.sha256(data).hexdigest()
        if lfs:
            pointer = _lfs_pointer(sha256, len(data))
            f = HubFile(filename, data, len(data), sha256, _git_blob_oid(pointer), True, len(pointer))
        else:
            f = HubFile(filename, data, len(data), sha256, _git_blob_oid(data), False, None)
        with self._lock:
            self._blobs[sha256] = data
            repo = self._repos.get(repo_id)
            files = dict(repo.commits[repo.head]) if repo else {}
            files[filename] = f
            self._commit(repo_id, files)
        return f

    def remove_file(self, repo_id: str, filename: str) -> None:
        with self._lock:
            repo = self._repos[repo_id]
            files = dict(repo.commits[repo.head])
            del files[filename]
            self._commit(repo_id, files)

    def create_repo(self, repo_id: str, *, private: bool = False, **extra_info: Any) -> None:
        """Create an empty repo (``add_file`` does it implicitly). ``extra_info`` is merged into the
        model-info JSON (e.g. ``gguf={...}``, ``tags=[...]``)."""
        with self._lock:
            if repo_id not in self._repos:
                self._commit(repo_id, {})
            self._repos[repo_id].private = private
            self._repos[repo_id].extra_info.update(extra_info)

    def _commit(self, repo_id: str, files: dict[str, HubFile]) -> str:
        repo = self._repos.get(repo_id)
        parent = repo.head if repo else ""
        h = hashlib.sha1(f"{repo_id}\n{parent}\n".encode())
        for p in sorted(files):
            h.update(f"{p}\0{files[p].git_oid}\n".encode())
        sha = h.hexdigest()
        if repo is None:
            self._repos[repo_id] = _Repo(repo_id, {sha: files}, sha)
        else:
            repo.commits[sha] = files
            repo.head = sha
        return sha

    def commit_sha(self, repo_id: str) -> str:
        """The current commit sha (what ``main`` resolves to)."""
        with self._lock:
            return self._repos[repo_id].head

    def file(self, repo_id: str, filename: str) -> HubFile:
        with self._lock:
            repo = self._repos[repo_id]
            return repo.commits[repo.head][filename]

    # -- fault injection ---------------------------------------------------------------------
    def drop_after(self, repo_id: str, filename: str, nbytes: int, times: int = 1, *,
                   reset: bool = False) -> None:
        """The next ``times`` GETs of the file's bytes (from resolve or from the CDN) send the full
        headers, then only ``nbytes`` bytes of body (counted from the start of the requested range),
        then cut the connection: a clean close (FIN) by default, a TCP reset (RST) with ``reset``."""
        with self._lock:
            self._drops.setdefault((repo_id, filename), []).append(_DropRule(nbytes, times, reset))

    def corrupt(self, repo_id: str, filename: str, enabled: bool = True, *, offset: int | None = None) -> None:
        """Serve the file with one byte flipped (at ``offset``, default the middle), while the
        advertised sha256 / ETag / size stay those of the real content."""
        with self._lock:
            if enabled:
                size = self.file(repo_id, filename).size
                self._corrupt[(repo_id, filename)] = size // 2 if offset is None else offset
            else:
                self._corrupt.pop((repo_id, filename), None)

    def override_name(self, repo_id: str, filename: str, advertised: str) -> None:
        """List ``filename`` as ``advertised`` (e.g. ``../evil.gguf``) in model info, tree and
        paths-info. ``resolve`` answers for both names."""
        with self._lock:
            self._names[(repo_id, filename)] = advertised

    def require_token(self, token: str | None, repo_id: str | None = None) -> None:
        """Hub requests (API and resolve; not the signed CDN URLs) for ``repo_id`` (all repos if None)
        need ``Authorization: Bearer <token>``. Missing token -> 401 + ``X-Error-Code: RepoNotFound``
        (what the Hub answers for a private repo); wrong token -> 401 + ``X-Error-Message: Invalid
        credentials in Authorization header``. ``token=None`` lifts the requirement."""
        with self._lock:
            if token is None:
                self._tokens.pop(repo_id, None)
            else:
                self._tokens[repo_id] = token

    def fail_next(self, status: int = 503, times: int = 1, *, kind: str | None = None,
                  repo_id: str | None = None, filename: str | None = None) -> None:
        """Answer the next ``times`` matching requests (``kind`` as in :class:`LoggedRequest`:
        "model_info", "tree", "resolve", "cdn", ...; None = any) with ``status``."""
        with self._lock:
            self._fail.append([status, times, kind, repo_id, filename])

    def throttle(self, repo_id: str, filename: str, chunk: int = 16 * 1024, delay: float = 0.01) -> None:
        """Serve the file's bytes slowly: ``chunk`` bytes then sleep ``delay`` seconds. ``delay=0`` ends it."""
        with self._lock:
            if delay <= 0:
                self._throttle.pop((repo_id, filename), None)
            else:
                self._throttle[(repo_id, filename)] = (chunk, delay)

    # -- request log -------------------------------------------------------------------------
    def _log_append(self, entry: LoggedRequest) -> None:
        with self._lock:
            self.log.append(entry)

    def requests(self, *, kind: str | None = None, method: str | None = None, repo_id: str | None = None,
                 filename: str | None = None) -> list[LoggedRequest]:
        with self._lock:
            out = list(self.log)
        return [r for r in out if (kind is None or r.kind == kind) and (method is None or r.method == method)
                and (repo_id is None or r.repo_id == repo_id) and (filename is None or r.filename == filename)]

    def content_gets(self, repo_id: str | None = None, filename: str | None = None) -> list[LoggedRequest]:
        """GETs that carried (part of) a file's bytes: CDN GETs and direct resolve GETs."""
        return [r for r in self.requests(method="GET", repo_id=repo_id, filename=filename) if r.content]

    def bytes_sent(self, repo_id: str | None = None, filename: str | None = None, *,
                   content_only: bool = True) -> int:
        """Body bytes sent in total (file bytes only by default; ``content_only=False`` adds JSON
        and redirect bodies)."""
        reqs = self.requests(repo_id=repo_id, filename=filename)
        return sum(r.bytes_sent for r in reqs if r.content or not content_only)

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    # -- request handling --------------------------------------------------------------------
    def _handle(self, h: _Handler, method: str, body: bytes) -> None:
        split = urlsplit(h.path)
        query = parse_qs(split.query)
        segs = split.path.split("/")[1:]  # raw (still %-encoded) segments
        if h.server.role == "cdn" or (segs and segs[0] == "cdn-lfs"):
            return self._handle_cdn(h, method, segs, query)
        if len(segs) >= 2 and segs[0] == "api" and segs[1] in ("models", "datasets", "spaces"):
            return self._handle_api(h, method, segs[1], segs[2:], query, body)
        return self._handle_resolve(h, method, segs)

    def _split_repo(self, segs: list[str]) -> tuple[str, list[str]]:
        """Split raw path segments into (repo_id, rest), preferring known repos."""
        names = [unquote(s) for s in segs]
        with self._lock:
            if len(names) >= 2 and f"{names[0]}/{names[1]}" in self._repos:
                return f"{names[0]}/{names[1]}", segs[2:]
            if names and names[0] in self._repos:
                return names[0], segs[1:]
        if len(names) >= 2:
            return f"{names[0]}/{names[1]}", segs[2:]
        return (names[0] if names else ""), segs[1:]

    def _send_json(self, h: _Handler, method: str, obj: Any, status: int = 200,
                   headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        hdrs = {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(data))}
        hdrs.update(headers or {})
        h._start(status, hdrs)
        if method != "HEAD":
            h._write(data)

    def _send_error(self, h: _Handler, method: str, status: int, code: str | None, message: str,
                    extra: dict[str, str] | None = None) -> None:
        self._send_json(h, method, {"error": message}, status, _error_headers(code, message, extra))

    def _check_injected_failure(self, h: _Handler, method: str) -> bool:
        e = h._entry
        with self._lock:
            for rule in self._fail:
                status, times, kind, repo_id, filename = rule
                if times > 0 and (kind is None or kind == e.kind) and (repo_id is None or repo_id == e.repo_id) \
                        and (filename is None or filename == e.filename):
                    rule[1] -= 1
                    break
            else:
                return False
        self._send_error(h, method, status, None, f"Injected failure {status}")
        return True

    def _check_auth(self, h: _Handler, method: str, repo_id: str) -> bool:
        """True if the request may proceed; otherwise a 401 has been sent."""
        with self._lock:
            token = self._tokens.get(repo_id, self._tokens.get(None))
            private = repo_id in self._repos and self._repos[repo_id].private
        auth = h.headers.get("Authorization")
        if token is None and not private:
            return True
        if token is not None and auth == f"Bearer {token}":
            return True
        if auth is None:
            self._send_error(h, method, 401, "RepoNotFound", "Invalid username or password.")
        else:
            self._send_error(h, method, 401, None, "Invalid credentials in Authorization header")
        return False

    def _lookup(self, h: _Handler, method: str, repo_id: str, revision: str | None
                ) -> tuple[str, dict[str, HubFile]] | None:
        """(commit sha, files) or None after sending the Hub's 404."""
        with self._lock:
            repo = self._repos.get(repo_id)
            if repo is not None:
                rev = revision or "main"
                sha = repo.head if rev == "main" else rev if rev in repo.commits else None
                if sha is not None:
                    return sha, repo.commits[sha]
        if repo is None:
            self._send_error(h, method, 404, "RepoNotFound", "Repository not found")
        else:
            self._send_error(h, method, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return None

    def _advertised(self, repo_id: str, path: str) -> str:
        return self._names.get((repo_id, path), path)

    def _find_file(self, repo_id: str, files: dict[str, HubFile], name: str) -> HubFile | None:
        if name in files:
            return files[name]
        with self._lock:
            for (r, real), adv in self._names.items():
                if r == repo_id and adv == name and real in files:
                    return files[real]
        return None

    # /api/models/...
    def _handle_api(self, h: _Handler, method: str, repo_type: str, segs: list[str], query: dict,
                    body: bytes) -> None:
        repo_id, rest = self._split_repo(segs)
        e = h._entry
        e.repo_id = repo_id
        rest_dec = [unquote(s) for s in rest]
        if not rest_dec or rest_dec[0] == "revision":
            e.kind = "model_info"
        elif rest_dec[0] == "tree":
            e.kind = "tree"
        elif rest_dec[0] == "paths-info":
            e.kind = "paths_info"
        if self._check_injected_failure(h, method):
            return
        if repo_type != "models":
            return self._send_error(h, method, 404, "RepoNotFound", "Repository not found")
        if not self._check_auth(h, method, repo_id):
            return
        if e.kind == "model_info" and method in ("GET", "HEAD") and len(rest_dec) in (0, 2):
            found = self._lookup(h, method, repo_id, rest_dec[1] if rest_dec else None)
            if found:
                self._send_json(h, method, self._model_info(repo_id, *found, blobs=_flag(query, "blobs")))
            return
        if e.kind == "tree" and method in ("GET", "HEAD") and len(rest_dec) >= 2:
            found = self._lookup(h, method, repo_id, rest_dec[1])
            if found:
                path = "/".join(rest_dec[2:]).strip("/")
                self._send_tree(h, method, repo_id, found[0], found[1], path, rest, query)
            return
        if e.kind == "paths_info" and method == "POST" and len(rest_dec) == 2:
            found = self._lookup(h, method, repo_id, rest_dec[1])
            if found:
                form = parse_qs(body.decode())
                paths = form.get("paths", [])
                expand = _flag(form, "expand")
                entries = self._entries(repo_id, found[0], found[1], "", recursive=True, expand=expand)
                by_path = {x["path"]: x for x in entries}
                self._send_json(h, method, [by_path[p] for p in paths if p in by_path])
            return
        self._send_error(h, method, 404, None, "Not Found")

    def _model_info(self, repo_id: str, sha: str, files: dict[str, HubFile], *, blobs: bool) -> dict:
        repo = self._repos[repo_id]
        siblings = []
        for path in sorted(files):
            f = files[path]
            s: dict[str, Any] = {"rfilename": self._advertised(repo_id, path)}
            if blobs:
                s["blobId"] = f.git_oid
                s["size"] = f.size
                if f.lfs:
                    s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
            siblings.append(s)
        info = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0] if "/" in repo_id else None,
            "sha": sha,
            "lastModified": _DATE,
            "createdAt": _DATE,
            "private": repo.private,
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(f.size for f in files.values()),
        }
        info.update(repo.extra_info)
        return info

    def _entries(self, repo_id: str, sha: str, files: dict[str, HubFile], path: str, *, recursive: bool,
                 expand: bool) -> list[dict]:
        """Tree entries (files and directories) under ``path``, using advertised names."""
        prefix = f"{path}/" if path else ""
        names = {self._advertised(repo_id, p): f for p, f in files.items()}
        out: dict[str, dict] = {}
        for name, f in names.items():
            if not name.startswith(prefix):
                continue
            parts = name[len(prefix):].split("/")
            # directories on the way
            for i in range(1, len(parts)):
                if not recursive and i > 1:
                    break
                d = prefix + "/".join(parts[:i])
                if d not in out:
                    out[d] = {"type": "directory", "oid": hashlib.sha1(f"tree {sha} {d}".encode()).hexdigest(),
                              "size": 0, "path": d}
            if not recursive and len(parts) > 1:
                continue
            entry: dict[str, Any] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": name}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
            out[name] = entry
        if expand:
            for entry in out.values():
                entry["lastCommit"] = {"id": sha, "title": "Upload", "date": _DATE}
        return [out[k] for k in sorted(out)]

    def _send_tree(self, h: _Handler, method: str, repo_id: str, sha: str, files: dict[str, HubFile],
                   path: str, raw_rest: list[str], query: dict) -> None:
        with self._lock:
            is_dir = not path or any(self._advertised(repo_id, p).startswith(path + "/") for p in files)
        if not is_dir:
            return self._send_error(h, method, 404, "EntryNotFound", f"{path} does not exist on \"main\"",
                                    {"X-Repo-Commit": sha})
        entries = self._entries(repo_id, sha, files, path, recursive=_flag(query, "recursive"),
                                expand=_flag(query, "expand"))
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor:cursor + self.page_size]
        headers = {}
        if cursor + self.page_size < len(entries):
            q = {k: v[0] for k, v in query.items()}
            q["cursor"] = str(cursor + self.page_size)
            base = "/".join(["", "api", "models", *[quote(p, safe="") for p in repo_id.split("/")], *raw_rest])
            headers["Link"] = f'<{self.url}{base}?{urlencode(q)}>; rel="next"'
        self._send_json(h, method, page, headers=headers)

    # /{repo_id}/resolve/{revision}/{filename}
    def _handle_resolve(self, h: _Handler, method: str, segs: list[str]) -> None:
        e = h._entry
        idx = None
        for i in (2, 1):
            if len(segs) > i + 1 and segs[i] == "resolve":
                cand = "/".join(unquote(s) for s in segs[:i])
                with self._lock:
                    known = cand in self._repos
                if known or idx is None:
                    idx = i
                if known:
                    break
        if idx is None or method not in ("GET", "HEAD"):
            return self._send_error(h, method, 404, None, "Not Found")
        repo_id = "/".join(unquote(s) for s in segs[:idx])
        revision = unquote(segs[idx + 1])
        filename = unquote("/".join(segs[idx + 2:]))
        e.kind, e.repo_id, e.filename = "resolve", repo_id, filename
        if self._check_injected_failure(h, method):
            return
        if not self._check_auth(h, method, repo_id):
            return
        found = self._lookup(h, method, repo_id, revision)
        if not found:
            return
        sha, files = found
        f = self._find_file(repo_id, files, filename)
        if f is None:
            return self._send_error(h, method, 404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        e.filename = f.path
        hub_headers = {
            "X-Repo-Commit": sha,
            "Accept-Ranges": "bytes",
            "Vary": "Origin, Accept-Encoding",
            "Access-Control-Expose-Headers": "X-Repo-Commit,X-Linked-Etag,X-Linked-Size,ETag,Content-Range",
        }
        if f.lfs:
            location = self._cdn_location(repo_id, sha, f)
            body = f"Found. Redirecting to {location}".encode()
            hdrs = dict(hub_headers)
            hdrs.update({
                "Location": location,
                "X-Linked-Etag": f'"{f.sha256}"',
                "X-Linked-Size": str(f.size),
                "ETag": f'"{f.sha256}"',
                "Content-Type": "text/plain; charset=utf-8",
                "Content-Length": str(len(body)),
            })
            h._start(302, hdrs)
            if method == "GET":
                h._write(body)
            return
        hdrs = dict(hub_headers)
        hdrs.update({"ETag": f'"{f.git_oid}"', "Content-Type": "application/octet-stream",
                     "Content-Disposition": _disposition(f.path)})
        self._send_content(h, method, repo_id, f, hdrs)

    def _sign(self, sha256: str, repo_id: str, filename: str) -> str:
        return hmac.new(self._secret, f"{sha256}\n{repo_id}\n{filename}".encode(), "sha256").hexdigest()

    def _cdn_location(self, repo_id: str, sha: str, f: HubFile) -> str:
        q = {"repo": repo_id, "file": f.path, "commit": sha, "X-Amz-Expires": "3600",
             "X-Amz-Signature": self._sign(f.sha256, repo_id, f.path)}
        return f"{self.cdn_url}/cdn-lfs/{f.sha256}?{urlencode(q)}"

    def _handle_cdn(self, h: _Handler, method: str, segs: list[str], query: dict) -> None:
        e = h._entry
        e.kind = "cdn"
        repo_id = query.get("repo", [None])[0]
        filename = query.get("file", [None])[0]
        e.repo_id, e.filename = repo_id, filename
        if self._check_injected_failure(h, method):
            return
        sha256 = segs[1] if len(segs) == 2 and segs[0] == "cdn-lfs" else ""
        with self._lock:
            data = self._blobs.get(sha256)
        if data is None or method not in ("GET", "HEAD"):
            return self._send_error(h, method, 404, None, "NoSuchKey")
        sig = query.get("X-Amz-Signature", [""])[0]
        if repo_id is None or filename is None or not hmac.compare_digest(sig, self._sign(sha256, repo_id, filename)):
            return self._send_error(h, method, 403, None, "SignatureDoesNotMatch")
        f = HubFile(filename, data, len(data), sha256, "", True, None)
        hdrs = {"ETag": f'"{sha256}"', "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                "Content-Disposition": _disposition(filename), "Cache-Control": "public, max-age=604800"}
        if h.server.role == "hub":
            # Same-origin "CDN": the client follows the redirect during its HEAD and reads this response.
            hdrs.update({"X-Repo-Commit": query.get("commit", [""])[0], "X-Linked-Etag": f'"{sha256}"',
                         "X-Linked-Size": str(len(data))})
        self._send_content(h, method, repo_id, f, hdrs)

    def _send_content(self, h: _Handler, method: str, repo_id: str, f: HubFile, hdrs: dict[str, str]) -> None:
        size = f.size
        rng = _parse_range(h.headers.get("Range"), size)
        if rng == "unsatisfiable":
            return self._send_error(h, method, 416, None, "Requested Range Not Satisfiable",
                                    {"Content-Range": f"bytes */{size}"})
        if rng is None:
            start, end, status = 0, size, 200
        else:
            start, end = rng
            status = 206
            hdrs["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        hdrs["Content-Length"] = str(end - start)
        key = (repo_id, f.path)
        h._entry.content = True
        drop: _DropRule | None = None
        with self._lock:
            flip = self._corrupt.get(key)
            throttle = self._throttle.get(key)
            if method == "GET":
                rules = self._drops.get(key) or []
                if rules:
                    drop = rules[0]
                    drop.times -= 1
                    if drop.times <= 0:
                        rules.pop(0)
        data = f.data
        if flip is not None and 0 <= flip < size:
            b = bytearray(data)
            b[flip] ^= 0xFF
            data = bytes(b)
        h._start(status, hdrs)
        if method == "HEAD":
            return
        view = memoryview(data)[start:end]
        limit = len(view) if drop is None else min(drop.nbytes, len(view))
        step = throttle[0] if throttle else SEND_CHUNK
        pos = 0
        while pos < limit:
            n = min(step, limit - pos)
            h._write(view[pos:pos + n])
            pos += n
            if throttle:
                time.sleep(throttle[1])
        if drop is not None:
            h._abort(drop.reset)


def _flag(query: dict, name: str) -> bool:
    v = query.get(name)
    return bool(v) and v[0].lower() in ("1", "true", "yes")


def _disposition(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return f"inline; filename*=UTF-8''{quote(base)}; filename=\"{base}\";"


def _parse_range(header: str | None, size: int):
    """None (serve all), "unsatisfiable", or (start, end_exclusive). Multi-ranges are ignored (200)."""
    if not header:
        return None
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    a, b = m.group(1), m.group(2)
    if not a:  # suffix: last n bytes
        n = int(b)
        if n == 0:
            return "unsatisfiable"
        return max(0, size - n), size
    start = int(a)
    end = size if not b else min(int(b) + 1, size)
    if start >= size or (b and int(b) < start):
        return "unsatisfiable"
    return start, end


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (for 'unreachable server' tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------
# Client configuration
# ------------------------------------------------------------------------------------------------

@dataclass
class ClientEnv:
    endpoint: str
    cache_dir: Path  # the HF hub cache (HF_HUB_CACHE)
    home: Path  # HF_HOME (token file, xet cache, ...): isolated from the user's real one
    sleeps: list[float]  # sleeps the client's retry loops asked for (skipped when no_sleep)


def configure_client(monkeypatch, hub: FakeHub | str, tmp_path: str | os.PathLike, *, token: str | None = None,
                     offline: bool = False, no_sleep: bool = True, chunk_size: int | None = None) -> ClientEnv:
    """Point the real huggingface_hub client (2.4.0, and 1.0.0, the lowest localspec takes) at
    ``hub`` for one test, via ``monkeypatch``.

    Setting ``HF_ENDPOINT`` & co. in ``os.environ`` is not enough in-process: ``huggingface_hub.constants``
    reads them once at import. This sets the environment (for subprocesses, e.g. the ``localspec`` CLI)
    *and* patches what was computed at import time:

    * ``constants.ENDPOINT`` and ``constants.HUGGINGFACE_CO_URL_TEMPLATE`` (``hf_hub_url`` formats the
      template, so patching ENDPOINT alone keeps downloading from huggingface.co), ``HF_URL_HOSTS``,
      ``utils._http._HUB_ORIGINS`` (origins whose redirects are followed / keep the auth header);
    * ``huggingface_hub.hf_api.api.endpoint``: the module-level shortcuts (``huggingface_hub.model_info``,
      ``list_repo_files``...) are bound methods of an ``HfApi`` built at import. ``HfApi()`` objects built
      afterwards read ``constants.ENDPOINT`` in ``__init__``, so they are fine;
    * ``HF_HUB_CACHE`` / ``HUGGINGFACE_HUB_CACHE`` (default ``cache_dir`` of downloads),
      ``HF_HOME``, ``HF_TOKEN_PATH``, ``HF_STORED_TOKENS_PATH`` (so a real login on this machine is not
      picked up), ``HF_XET_CACHE``, ``HF_ASSETS_CACHE``;
    * ``HF_HUB_OFFLINE`` (``constants.is_offline_mode()`` reads the constant), ``HF_HUB_DISABLE_XET``,
      ``HF_HUB_DISABLE_TELEMETRY``, ``HF_HUB_DISABLE_PROGRESS_BARS`` (also copied by value into
      ``huggingface_hub.utils.tqdm``), ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` (False);
    * ``HF_TOKEN`` is read from ``os.environ`` at each request, so it is only set/unset in the environment.

    ``no_sleep`` makes the client's retry back-offs instant (``time.sleep`` in ``file_download`` and
    ``utils._http``; requested durations are recorded in ``ClientEnv.sleeps``). ``chunk_size`` patches
    ``constants.DOWNLOAD_CHUNK_SIZE`` (10 MiB): bytes of a dropped connection that did not fill a whole
    chunk are lost by the client, so resuming with a ``Range`` only shows up on small test files with a
    small chunk size. Also closes the client's shared HTTP session so no connection is reused across tests.
    """
    import importlib

    import huggingface_hub
    from huggingface_hub import constants, file_download, hf_api
    from huggingface_hub.utils import _http

    hf_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")

    endpoint = hub if isinstance(hub, str) else hub.url
    endpoint = endpoint.rstrip("/")
    tmp = Path(tmp_path)
    cache_dir = tmp / "cache"
    home = tmp / "hf_home"
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(cache_dir),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_ENABLE_HF_TRANSFER": "0",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_OFFLINE": "1" if offline else "0",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "HF_TOKEN_PATH", "HUGGING_FACE_HUB_TOKEN",
              "HUGGINGFACE_CO_STAGING", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(k, raising=False)
    if token is None:
        monkeypatch.delenv("HF_TOKEN", raising=False)
    else:
        monkeypatch.setenv("HF_TOKEN", token)

    c = constants
    monkeypatch.setattr(c, "ENDPOINT", endpoint)
    monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    if hasattr(c, "HF_URL_HOSTS"):   # 2.x; 1.x follows every redirect and has no such lists
        monkeypatch.setattr(c, "HF_URL_HOSTS", frozenset(c.HF_URL_HOSTS | {urlsplit(endpoint).hostname}))
    if hasattr(_http, "_HUB_ORIGINS"):
        monkeypatch.setattr(_http, "_HUB_ORIGINS", frozenset(_http._HUB_ORIGINS | {_http._url_origin(endpoint)}))
    monkeypatch.setattr(hf_api.api, "endpoint", endpoint)
    monkeypatch.setattr(c, "HF_HOME", str(home))
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(cache_dir))
    monkeypatch.setattr(c, "HUGGINGFACE_HUB_CACHE", str(cache_dir))
    monkeypatch.setattr(c, "HF_ASSETS_CACHE", str(home / "assets"))
    monkeypatch.setattr(c, "HF_XET_CACHE", str(home / "xet"))
    monkeypatch.setattr(c, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(c, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False)
    monkeypatch.setattr(hf_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    if chunk_size is not None:
        monkeypatch.setattr(c, "DOWNLOAD_CHUNK_SIZE", chunk_size)

    sleeps: list[float] = []
    if no_sleep:
        fast_time = SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("__")})
        fast_time.sleep = sleeps.append
        monkeypatch.setattr(file_download, "time", fast_time)
        monkeypatch.setattr(_http, "time", fast_time)

    _http.close_session()
    assert huggingface_hub.constants.ENDPOINT == endpoint
    return ClientEnv(endpoint=endpoint, cache_dir=cache_dir, home=home, sleeps=sleeps)


def set_offline(monkeypatch, offline: bool = True) -> None:
    """Switch ``HF_HUB_OFFLINE`` on/off mid-test (env var and the import-time constant)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
