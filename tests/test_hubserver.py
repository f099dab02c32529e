"""The fake Hub in ``hubserver.py`` driven by the real huggingface_hub client (2.4.0).

These tests double as the record of how huggingface_hub 2.4.0 behaves for a downloader: which
requests it makes, what it raises, what it retries and what it does not verify.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
from hubserver import FakeHub, configure_client, free_port, set_offline
from huggingface_hub import (
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session

REPO = "acme/Tiny-GGUF"
SHARD1 = "Q8_0/tiny-Q8_0-00001-of-00002.gguf"
SHARD2 = "Q8_0/tiny-Q8_0-00002-of-00002.gguf"
SINGLE = "tiny-Q4_K_M.gguf"
README = "README.md"

BLOB = random.Random(1234).randbytes(300_000)  # a few hundred KB of random bytes
BLOB2 = random.Random(99).randbytes(120_000)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tiny_gguf(path: Path) -> Path:
    """A real (tiny) GGUF file written with the gguf package."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "hubserver-test")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(4, 16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def hub():
    with FakeHub() as h:
        h.add_file(REPO, SHARD1, BLOB)
        h.add_file(REPO, SHARD2, BLOB2)
        h.add_file(REPO, README, b"---\nlicense: mit\n---\n# Tiny\n")
        yield h


@pytest.fixture
def client(monkeypatch, hub, tmp_path):
    return configure_client(monkeypatch, hub, tmp_path)


def incomplete_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.incomplete"))


# --- 1. metadata -------------------------------------------------------------------------------

def test_model_info_and_listing(hub, client):
    api = HfApi()
    info = api.model_info(REPO, files_metadata=True)
    assert info.id == REPO
    assert info.sha == hub.commit_sha(REPO) and len(info.sha) == 40
    sib = {s.rfilename: s for s in info.siblings}
    assert set(sib) == {SHARD1, SHARD2, README}
    assert sib[SHARD1].size == len(BLOB)
    assert sib[SHARD1].lfs.sha256 == sha256(BLOB) and sib[SHARD1].lfs.size == len(BLOB)
    assert sib[SHARD1].lfs.pointer_size > 100
    assert sib[SHARD1].blob_id == hub.file(REPO, SHARD1).git_oid
    assert sib[README].lfs is None and sib[README].size == len(hub.file(REPO, README).data)
    # the git blob sha1 of a regular file is what the Hub advertises (and what verify_repo_checksums checks)
    data = hub.file(REPO, README).data
    assert sib[README].blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    # without files_metadata: names only
    plain = api.model_info(REPO)
    assert {s.rfilename for s in plain.siblings} == set(sib)
    assert all(s.size is None and s.lfs is None for s in plain.siblings)
    # pinned revision; and the module-level shortcut (an HfApi built at import, patched by configure_client)
    assert api.model_info(REPO, revision=info.sha).sha == info.sha
    assert huggingface_hub.model_info(REPO).sha == info.sha
    assert [r.path for r in hub.requests(kind="model_info")][:2] == [
        f"/api/models/{REPO}?blobs=true", f"/api/models/{REPO}"]

    # tree listing
    root = list(api.list_repo_tree(REPO))
    assert [(type(e).__name__, e.path) for e in root] == [("RepoFolder", "Q8_0"), ("RepoFile", README)]
    deep = {e.path: e for e in api.list_repo_tree(REPO, recursive=True)}
    assert set(deep) == {"Q8_0", SHARD1, SHARD2, README}
    assert deep[SHARD1].size == len(BLOB) and deep[SHARD1].lfs.sha256 == sha256(BLOB)
    assert deep[README].lfs is None
    sub = [e.path for e in api.list_repo_tree(REPO, path_in_repo="Q8_0")]
    assert sub == [SHARD1, SHARD2]
    assert sorted(api.list_repo_files(REPO)) == sorted([SHARD1, SHARD2, README])
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree(REPO, path_in_repo="nope"))

    # paths-info (POST), and the dry run of hf_hub_download (HEAD only): two ways to get sizes
    (p,) = api.get_paths_info(REPO, [SHARD2])
    assert p.size == len(BLOB2) and p.lfs.sha256 == sha256(BLOB2)
    dry = hf_hub_download(REPO, SHARD1, dry_run=True)
    assert dry.file_size == len(BLOB) and dry.will_download and not dry.is_cached
    assert dry.commit_hash == info.sha
    assert hub.content_gets() == []


def test_tree_pagination(monkeypatch, tmp_path):
    with FakeHub(page_size=2) as hub:
        names = [f"Q4_0/part-{i:05d}.gguf" for i in range(5)]
        for n in names:
            hub.add_file(REPO, n, n.encode())
        configure_client(monkeypatch, hub, tmp_path)
        assert sorted(HfApi().list_repo_files(REPO)) == names
        pages = hub.requests(kind="tree")
        assert len(pages) == 3  # 6 entries (1 folder + 5 files), 2 per page, via Link rel="next"
        assert "cursor=2" in pages[1].path and "recursive=true" in pages[1].path


# --- 2. downloads ------------------------------------------------------------------------------

def test_download_and_cache_layout(hub, client, tmp_path):
    real = tiny_gguf(tmp_path / "real.gguf")
    hub.add_file(REPO, SINGLE, real)
    sha = hub.commit_sha(REPO)
    hub.clear_log()

    path = Path(hf_hub_download(REPO, SHARD1))
    assert path.read_bytes() == BLOB and sha256(path.read_bytes()) == sha256(BLOB)
    storage = client.cache_dir / "models--acme--Tiny-GGUF"
    assert path == storage / "snapshots" / sha / SHARD1
    assert path.is_symlink() and path.resolve() == storage / "blobs" / sha256(BLOB)  # LFS blob = sha256
    assert (storage / "refs" / "main").read_text() == sha
    # requests: HEAD resolve (302 to the CDN, on another port) then a GET on the CDN only
    assert [(r.server, r.method, r.kind, r.status) for r in hub.log] == [
        ("hub", "HEAD", "resolve", 302), ("cdn", "GET", "cdn", 200)]
    assert hub.bytes_sent(REPO) == len(BLOB)

    # a real small GGUF: downloads and parses
    import gguf

    gpath = hf_hub_download(REPO, SINGLE)
    assert Path(gpath).read_bytes() == real.read_bytes()
    reader = gguf.GGUFReader(gpath)
    assert [t.name for t in reader.tensors] == ["token_embd.weight"]

    # a regular (non-LFS) file: served by resolve itself, blob named by its git sha1
    rpath = Path(hf_hub_download(REPO, README))
    assert rpath.read_bytes() == hub.file(REPO, README).data
    assert rpath.resolve().name == hub.file(REPO, README).git_oid

    # second call: a HEAD to check the etag, no GET of the bytes
    hub.clear_log()
    assert Path(hf_hub_download(REPO, SHARD1)) == path
    assert [(r.method, r.kind) for r in hub.log] == [("HEAD", "resolve")]
    assert hub.content_gets() == [] and hub.bytes_sent() == 0
    # pinned to the commit sha and cached: no request at all
    assert Path(hf_hub_download(REPO, SHARD1, revision=sha)) == path
    assert len(hub.log) == 1
    assert incomplete_files(client.cache_dir) == []


def test_progress_reported_through_tqdm_class(hub, client):
    """``tqdm_class`` gets (total=..., initial=..., desc=..., unit=, unit_scale=) and update(n) calls.
    A class that is not a subclass of huggingface_hub's tqdm is used even with progress bars disabled."""
    events = []

    class Recorder:
        def __init__(self, *args, **kwargs):
            events.append(("init", kwargs.get("total"), kwargs.get("initial")))

        def update(self, n=1):
            events.append(("update", n))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            events.append(("close",))

    hf_hub_download(REPO, SHARD1, tqdm_class=Recorder)
    assert events[0] == ("init", len(BLOB), 0)
    assert sum(e[1] for e in events if e[0] == "update") == len(BLOB)
    assert events[-1] == ("close",)


def test_snapshot_download_with_patterns(hub, client):
    folder = Path(snapshot_download(REPO, allow_patterns=["Q8_0/*"]))
    assert (folder / SHARD1).read_bytes() == BLOB and (folder / SHARD2).read_bytes() == BLOB2
    assert not (folder / README).exists()
    kinds = [r.kind for r in hub.log]
    assert kinds[:2] == ["model_info", "tree"]  # repo_info (for the sha), then the recursive tree at that sha
    assert f"/tree/{hub.commit_sha(REPO)}" in hub.requests(kind="tree")[0].path


def test_same_origin_cdn(monkeypatch, tmp_path):
    """With the CDN on the Hub's own origin the client follows the 302 during its HEAD."""
    with FakeHub(cdn="same") as hub:
        hub.add_file(REPO, SHARD1, BLOB)
        configure_client(monkeypatch, hub, tmp_path)
        path = hf_hub_download(REPO, SHARD1)
        assert Path(path).read_bytes() == BLOB
        assert [(r.method, r.kind, r.status) for r in hub.log] == [
            ("HEAD", "resolve", 302), ("HEAD", "cdn", 200), ("GET", "cdn", 200)]


# --- 3. byte ranges ------------------------------------------------------------------------------

def test_range_request_through_client_session(hub, monkeypatch, tmp_path):
    configure_client(monkeypatch, hub, tmp_path, token="hf_range")
    hub.require_token("hf_range")
    url = hf_hub_url(REPO, SHARD1)
    assert url == f"{hub.url}/{REPO}/resolve/main/{SHARD1}"
    headers = build_hf_headers()  # carries "authorization: Bearer <HF_TOKEN>"
    assert headers["authorization"] == "Bearer hf_range"
    # the shared httpx2.Client follows redirects; httpx drops Authorization on the cross-origin hop
    r = get_session().get(url, headers={**headers, "Range": "bytes=0-1023"})
    assert r.status_code == 206 and r.content == BLOB[:1024]
    assert r.headers["Content-Range"] == f"bytes 0-1023/{len(BLOB)}"
    assert hub.bytes_sent() == 1024
    resolve, cdn = hub.log[-2:]
    assert resolve.authorization == "Bearer hf_range" and resolve.status == 302
    assert cdn.authorization is None and cdn.range == "bytes=0-1023"

    # metadata without downloading: follows nothing cross-origin, reads the 302's headers
    meta = get_hf_file_metadata(url)
    assert (meta.size, meta.etag, meta.commit_hash) == (len(BLOB), sha256(BLOB), hub.commit_sha(REPO))
    assert meta.location.startswith(hub.cdn_url + "/cdn-lfs/")
    # ranges straight from the CDN location, open-ended and suffix forms; 416 past the end
    assert get_session().get(meta.location, headers={"Range": "bytes=299000-"}).content == BLOB[299000:]
    assert get_session().get(meta.location, headers={"Range": "bytes=-10"}).content == BLOB[-10:]
    assert get_session().get(meta.location, headers={"Range": f"bytes={len(BLOB)}-"}).status_code == 416
    # non-LFS files answer ranges on resolve directly
    r = get_session().get(hf_hub_url(REPO, README), headers={**headers, "Range": "bytes=4-10"})
    assert r.status_code == 206 and r.content == hub.file(REPO, README).data[4:11]


# --- 4. dropped connections ------------------------------------------------------------------

def test_drop_is_retried_inside_one_call(hub, client):
    """A connection closed mid-body (RemoteProtocolError) is retried by http_get after sleep(1).
    Bytes that did not fill a whole DOWNLOAD_CHUNK_SIZE (10 MiB) chunk are lost, so on small files
    the retry starts from 0 again, without a Range header."""
    hub.drop_after(REPO, SHARD1, 100_000, times=1)
    path = hf_hub_download(REPO, SHARD1)
    assert Path(path).read_bytes() == BLOB
    gets = hub.content_gets()
    assert [(g.range, g.bytes_sent, g.dropped) for g in gets] == [(None, 100_000, True), (None, len(BLOB), False)]
    assert client.sleeps == [1]


def test_drop_resumes_with_range_when_chunks_are_complete(hub, monkeypatch, tmp_path):
    env = configure_client(monkeypatch, hub, tmp_path, chunk_size=16 * 1024)
    hub.drop_after(REPO, SHARD1, 100_000, times=3)
    path = hf_hub_download(REPO, SHARD1)
    assert sha256(Path(path).read_bytes()) == sha256(BLOB)
    ranges = [g.range for g in hub.content_gets()]
    # resumes from the last complete 16 KiB chunk written: 6*16384, then 12*16384, 18*16384
    assert ranges == [None, "bytes=98304-", "bytes=196608-", "bytes=294912-"]
    assert env.sleeps == [1, 1, 1]


def test_drop_beyond_internal_retries_then_new_call(hub, client):
    """5 retries after the first attempt, the budget being reset whenever bytes reach the file.
    6 drops in a row without progress: the call raises httpx2.RemoteProtocolError. Its temporary
    ``<blob>.<8 hex>.incomplete`` file is deleted: nothing is left to resume, and the next call
    downloads the whole file again (no Range)."""
    hub.drop_after(REPO, SHARD1, 100_000, times=6)
    with pytest.raises(httpx2.RemoteProtocolError):
        hf_hub_download(REPO, SHARD1)
    assert len(hub.content_gets()) == 6 and client.sleeps == [1] * 5
    assert incomplete_files(client.cache_dir) == []
    storage = client.cache_dir / "models--acme--Tiny-GGUF"
    assert not (storage / "blobs").exists() or list((storage / "blobs").iterdir()) == []

    hub.clear_log()
    path = hf_hub_download(REPO, SHARD1)
    assert sha256(Path(path).read_bytes()) == sha256(BLOB)
    (get,) = hub.content_gets()
    assert get.range is None and get.bytes_sent == len(BLOB)


def test_five_drops_still_succeed(hub, client):
    hub.drop_after(REPO, SHARD1, 1000, times=5)
    assert Path(hf_hub_download(REPO, SHARD1)).read_bytes() == BLOB
    assert len(hub.content_gets()) == 6


def test_connection_reset_is_not_retried(hub, client):
    """An RST (ECONNRESET) surfaces as httpx2.ReadError, which http_get does NOT retry."""
    hub.drop_after(REPO, SHARD1, 100_000, times=1, reset=True)
    with pytest.raises(httpx2.ReadError):
        hf_hub_download(REPO, SHARD1)
    assert len(hub.content_gets()) == 1 and client.sleeps == []
    assert incomplete_files(client.cache_dir) == []
    assert Path(hf_hub_download(REPO, SHARD1)).read_bytes() == BLOB


# --- 5. corrupt bytes ------------------------------------------------------------------------

def test_corrupt_bytes_are_not_detected_by_download(hub, client):
    """hf_hub_download only checks the size: a corrupted body lands in the cache under the blob
    name of the advertised sha256. HfApi.verify_repo_checksums finds it afterwards."""
    hub.corrupt(REPO, SHARD1)
    path = Path(hf_hub_download(REPO, SHARD1))
    got = path.read_bytes()
    assert len(got) == len(BLOB) and got != BLOB
    assert path.resolve().name == sha256(BLOB) != sha256(got)
    assert sum(a != b for a, b in zip(got, BLOB)) == 1

    report = HfApi().verify_repo_checksums(REPO, cache_dir=client.cache_dir)
    assert [(m["path"], m["expected"], m["actual"], m["algorithm"]) for m in report.mismatches] == [
        (SHARD1, sha256(BLOB), sha256(got), "sha256")]
    assert set(report.missing_paths) == {SHARD2, README}


# --- 6. errors -------------------------------------------------------------------------------

def test_not_found_errors(hub, client):
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("acme/missing", SHARD1)
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info("acme/missing")
    with pytest.raises(RemoteEntryNotFoundError) as exc:
        hf_hub_download(REPO, "Q8_0/missing.gguf")
    assert isinstance(exc.value, EntryNotFoundError) and exc.value.response.status_code == 404
    # the 404's X-Repo-Commit lets the client cache the absence of the file
    no_exist = (client.cache_dir / "models--acme--Tiny-GGUF" / ".no_exist" / hub.commit_sha(REPO) / "Q8_0"
                / "missing.gguf")
    assert no_exist.exists()
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, SHARD1, revision="v9")
    with pytest.raises(RevisionNotFoundError):
        HfApi().model_info(REPO, revision="v9")
    assert hub.content_gets() == []


def test_hostile_sibling_name(hub, client):
    hub.override_name(REPO, SHARD2, "../evil.gguf")
    hub.add_file(REPO, "/abs.gguf", b"x")
    names = [s.rfilename for s in HfApi().model_info(REPO, files_metadata=True).siblings]
    assert "../evil.gguf" in names and "/abs.gguf" in names and SHARD2 not in names
    assert "../evil.gguf" in HfApi().list_repo_files(REPO)
    hub.clear_log()
    for bad in ("../evil.gguf", "/abs.gguf"):
        with pytest.raises(ValueError, match="Invalid filename"):  # refused before any request
            hf_hub_download(REPO, bad)
    assert hub.log == []


def test_unreachable_server(hub, client, monkeypatch, tmp_path):
    cached = hf_hub_download(REPO, SHARD1)
    hub.stop()
    # HEAD fails with ConnectError -> falls back to the cached snapshot of refs/main
    assert hf_hub_download(REPO, SHARD1) == cached
    # not cached: retried (with back-off sleeps, made instant here), then LocalEntryNotFoundError
    with pytest.raises(LocalEntryNotFoundError) as exc:
        hf_hub_download(REPO, SHARD2)
    assert isinstance(exc.value.__cause__, httpx2.ConnectError)
    assert client.sleeps == [1, 2, 4, 8, 8]
    # HfApi calls are not wrapped
    with pytest.raises(httpx2.ConnectError):
        HfApi().model_info(REPO)
    # a port nothing listens on behaves the same
    configure_client(monkeypatch, f"http://127.0.0.1:{free_port()}", tmp_path / "other")
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download(REPO, SHARD1)


def test_offline_mode(hub, client, monkeypatch):
    cached = hf_hub_download(REPO, SHARD1)
    hub.clear_log()
    set_offline(monkeypatch, True)
    assert hf_hub_download(REPO, SHARD1) == cached
    with pytest.raises(LocalEntryNotFoundError) as exc:
        hf_hub_download(REPO, SHARD2)
    assert isinstance(exc.value.__cause__, OfflineModeIsEnabled)
    with pytest.raises(OfflineModeIsEnabled):
        HfApi().model_info(REPO)
    # local_files_only=True is the per-call equivalent
    set_offline(monkeypatch, False)
    assert hf_hub_download(REPO, SHARD1, local_files_only=True) == cached
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download(REPO, SHARD2, local_files_only=True)
    assert hub.log == []


def test_server_errors(hub, client):
    """5xx on the metadata HEAD: retried (with back-off) when nothing is cached. 5xx on the byte GET:
    http_get only retries 408/429, so a 503 from the CDN fails the call at once."""
    hub.fail_next(503, times=2, kind="resolve")
    assert Path(hf_hub_download(REPO, SHARD1)).read_bytes() == BLOB
    assert [r.status for r in hub.requests(kind="resolve")] == [503, 503, 302]
    assert client.sleeps == [1]  # 1st failure -> fall back to the cache (empty) -> retry loop: 503, sleep, 302
    hub.fail_next(503, times=1, kind="cdn")
    with pytest.raises(HfHubHTTPError) as exc:
        hf_hub_download(REPO, SHARD2)
    assert exc.value.response.status_code == 503
    assert incomplete_files(client.cache_dir) == []


# --- 7. concurrency --------------------------------------------------------------------------

def _download_in_threads(n: int, **kwargs) -> list:
    results: list = [None] * n

    def work(i: int) -> None:
        try:
            results[i] = hf_hub_download(REPO, SHARD1, **{k: v[i] if isinstance(v, list) else v
                                                         for k, v in kwargs.items()})
        except BaseException as e:  # noqa: BLE001
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_two_threads_same_cache(hub, client):
    hub.throttle(REPO, SHARD1, chunk=32 * 1024, delay=0.02)
    a, b = _download_in_threads(2)
    assert a == b and isinstance(a, str)
    assert Path(a).read_bytes() == BLOB
    # the client's per-blob file lock makes the second thread wait and reuse the blob
    assert len(hub.content_gets()) == 1
    assert incomplete_files(client.cache_dir) == []


def test_two_concurrent_transfers_from_the_server(hub, client, tmp_path):
    hub.throttle(REPO, SHARD1, chunk=32 * 1024, delay=0.02)  # ~0.2 s per transfer
    caches = [str(tmp_path / "c1"), str(tmp_path / "c2")]
    results = _download_in_threads(2, cache_dir=caches)
    assert all(isinstance(r, str) and Path(r).read_bytes() == BLOB for r in results)
    g1, g2 = hub.content_gets()
    assert abs(g1.started - g2.started) < 0.15  # both bodies were being served at the same time
    assert hub.bytes_sent() == 2 * len(BLOB)


# --- 8. token --------------------------------------------------------------------------------

def test_token_required(hub, monkeypatch, tmp_path):
    hub.require_token("hf_secret")
    configure_client(monkeypatch, hub, tmp_path)  # no HF_TOKEN
    with pytest.raises(RepositoryNotFoundError) as exc:
        hf_hub_download(REPO, SHARD1)
    assert exc.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info(REPO)
    # a wrong token is a plain 401 HfHubHTTPError, not RepositoryNotFoundError
    with pytest.raises(HfHubHTTPError) as exc:
        hf_hub_download(REPO, SHARD1, token="hf_wrong")
    assert exc.value.response.status_code == 401 and not isinstance(exc.value, RepositoryNotFoundError)
    assert hub.content_gets() == []

    configure_client(monkeypatch, hub, tmp_path, token="hf_secret")  # HF_TOKEN=hf_secret
    assert os.environ["HF_TOKEN"] == "hf_secret"
    hub.clear_log()
    path = hf_hub_download(REPO, SHARD1)
    assert Path(path).read_bytes() == BLOB
    head, get = hub.log
    assert head.authorization == "Bearer hf_secret"
    assert get.server == "cdn" and get.authorization is None  # not sent to the CDN
    assert HfApi().model_info(REPO).sha == hub.commit_sha(REPO)
