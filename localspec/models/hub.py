"""The Hugging Face Hub, through the real ``huggingface_hub`` client.

List a repo's files with their sizes and SHA-256, read the GGUF header of a remote file
with HTTP range requests (a few MB instead of the whole file), download into the Hugging
Face cache (resumable, honouring HF_TOKEN, HF_ENDPOINT, HF_HUB_OFFLINE and the cache), and
verify what arrived against the Hub's SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..engine.gguf_meta import GGUFMetadata, read_metadata_stream
from ..errors import BadInput, LocalspecError

Progress = Callable[[str, int, int], None]   # (label, done bytes, total bytes)

_SAFE_PART = re.compile(r"^[A-Za-z0-9._\-+=@ ()\[\]]+$")


class HubError(LocalspecError):
    """The Hub could not give us what we asked for (one line, exit code 1)."""


class Cancelled(LocalspecError):
    exit_code = 130


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    path: str
    size: int
    sha256: str | None
    revision: str          # the commit the listing came from

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


def safe_repo_path(path: str) -> str:
    """Refuse remote file names that could escape the download folder."""
    if not path or path.startswith(("/", "\\")) or "\\" in path or "\x00" in path:
        raise BadInput(f"refusing remote file name {path!r}")
    parts = PurePosixPath(path).parts
    if any(p in ("..", ".") or not _SAFE_PART.match(p) for p in parts):
        raise BadInput(f"refusing remote file name {path!r} (path traversal or odd characters)")
    return path


def safe_repo_id(repo: str) -> str:
    if not re.match(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$", repo) or ".." in repo:
        raise BadInput(f"not a Hugging Face repo id: {repo!r} (expected owner/name)")
    return repo


def endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE")
    if env is not None:
        return env.strip().upper() in ("1", "ON", "YES", "TRUE")
    return bool(constants.HF_HUB_OFFLINE)


def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def _translate(exc: Exception, what: str) -> LocalspecError:
    """One line for everything the client can raise."""
    from huggingface_hub import errors as hf_errors

    name = type(exc).__name__
    if isinstance(exc, LocalspecError):
        return exc
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        return HubError(f"{what}: repository not found on {endpoint()} (or private: set HF_TOKEN)")
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return HubError(f"{what}: revision not found")
    if isinstance(exc, hf_errors.EntryNotFoundError):
        return HubError(f"{what}: file not found in the repository")
    if isinstance(exc, hf_errors.GatedRepoError):
        return HubError(f"{what}: gated repository: accept its terms on the Hub and set HF_TOKEN")
    if isinstance(exc, hf_errors.OfflineModeIsEnabled) or isinstance(exc, hf_errors.LocalEntryNotFoundError):
        if offline():
            return HubError(f"{what}: HF_HUB_OFFLINE is set and it is not in the Hugging Face cache")
        return HubError(f"{what}: cannot reach {endpoint()} and it is not in the Hugging Face cache")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", "?")
        if status in (401, 403):
            return HubError(f"{what}: access denied (HTTP {status}); set HF_TOKEN")
        return HubError(f"{what}: the Hub answered HTTP {status}")
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
        return LocalspecError(f"{what}: disk full")
    if "Connect" in name or "Timeout" in name or "Network" in name or "Protocol" in name \
            or "RemoteProtocol" in name or "ReadError" in name:
        return HubError(f"{what}: connection to {endpoint()} failed ({name}); run the same command "
                        "again to resume")
    return HubError(f"{what}: {name}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": "))


# ---------------------------------------------------------------------------------------
# Listing


def _cached_listing(repo: str, revision: str | None) -> list[RemoteFile]:
    """What the Hugging Face cache holds of a repo (HF_HUB_OFFLINE): its snapshot's files.

    LFS blobs are named after their SHA-256, which stands in for the Hub's checksum.
    """
    folder = cache_dir() / ("models--" + repo.replace("/", "--"))
    ref = revision or "main"
    ref_file = folder / "refs" / ref
    commit = ref_file.read_text().strip() if ref_file.is_file() else ref
    snap = folder / "snapshots" / commit
    if not snap.is_dir():
        raise HubError(f"{repo}: HF_HUB_OFFLINE is set and the repository is not in the Hugging Face cache")
    out = []
    for p in sorted(snap.rglob("*")):
        if p.is_file():
            blob = p.resolve().name
            sha = blob if re.fullmatch(r"[0-9a-f]{64}", blob) else None
            out.append(RemoteFile(repo, p.relative_to(snap).as_posix(), p.stat().st_size, sha, commit))
    return out


def list_files(repo: str, revision: str | None = None) -> list[RemoteFile]:
    """Every file of a model repo, with size and SHA-256 (LFS files), at one commit.
    With HF_HUB_OFFLINE set, what the Hugging Face cache holds of it."""
    from huggingface_hub import HfApi

    safe_repo_id(repo)
    if offline():
        return _cached_listing(repo, revision)
    try:
        info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - every client error becomes one line
        raise _translate(exc, repo) from None
    out = []
    for s in info.siblings or []:
        lfs = getattr(s, "lfs", None)
        sha = getattr(lfs, "sha256", None) if lfs is not None else None
        if sha is None and isinstance(lfs, dict):
            sha = lfs.get("sha256")
        size = getattr(s, "size", None)
        if size is None and lfs is not None:
            size = getattr(lfs, "size", None) or (lfs.get("size") if isinstance(lfs, dict) else None)
        out.append(RemoteFile(repo, s.rfilename, int(size or 0), sha, info.sha or (revision or "main")))
    return out


# ---------------------------------------------------------------------------------------
# Remote headers


class RangeReader:
    """A read-only stream over a remote file, fetched with HTTP range requests in growing chunks."""

    def __init__(self, rf: RemoteFile, first_chunk: int = 256 * 1024, max_chunk: int = 8 * 1024 * 1024):
        from huggingface_hub import hf_hub_url

        self.rf = rf
        self.url = hf_hub_url(rf.repo, rf.path, revision=rf.revision, endpoint=endpoint())
        self.pos = 0
        self.buf = b""
        self.buf_start = 0
        self.chunk = first_chunk
        self.max_chunk = max_chunk
        self.fetched = 0

    def _fetch(self, start: int, length: int) -> bytes:
        from huggingface_hub.utils import build_hf_headers, get_session

        end = start + length - 1
        if self.rf.size:
            end = min(end, self.rf.size - 1)
        if self.rf.size and start >= self.rf.size:
            return b""
        headers = build_hf_headers()
        headers["Range"] = f"bytes={start}-{end}"
        try:
            r = get_session().get(self.url, headers=headers, follow_redirects=True)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc, f"{self.rf.repo}/{self.rf.path}") from None
        if r.status_code == 404:
            raise HubError(f"{self.rf.repo}/{self.rf.path}: file not found in the repository")
        if r.status_code in (401, 403):
            raise HubError(f"{self.rf.repo}/{self.rf.path}: access denied (HTTP {r.status_code}); set HF_TOKEN")
        if r.status_code not in (200, 206):
            raise HubError(f"{self.rf.repo}/{self.rf.path}: the Hub answered HTTP {r.status_code}")
        data = r.content
        if r.status_code == 200:   # the server ignored the range: keep only what we asked for
            data = data[start:end + 1]
        self.fetched += len(data)
        return data

    def read(self, n: int) -> bytes:
        out = bytearray()
        while n > 0:
            off = self.pos - self.buf_start
            if 0 <= off < len(self.buf):
                take = self.buf[off:off + n]
                out += take
                self.pos += len(take)
                n -= len(take)
                continue
            want = max(self.chunk, n)
            data = self._fetch(self.pos, want)
            if not data:
                break
            self.buf, self.buf_start = data, self.pos
            self.chunk = min(self.chunk * 2, self.max_chunk)
        return bytes(out)


def remote_metadata(rf: RemoteFile) -> tuple[GGUFMetadata, int]:
    """The GGUF metadata of a remote file and how many bytes it took to read it (a file
    already in the cache is read locally)."""
    local = cached_file(rf)
    if local is not None:
        from ..engine.gguf_meta import read_metadata

        return read_metadata(local), 0
    if offline():
        raise HubError(f"{rf.repo}/{rf.path}: HF_HUB_OFFLINE is set and it is not in the Hugging Face cache")
    reader = RangeReader(rf)
    meta = read_metadata_stream(reader, f"{rf.repo}/{rf.path}")
    return meta, reader.fetched


# ---------------------------------------------------------------------------------------
# Downloads


def cached_file(rf: RemoteFile) -> Path | None:
    """The file's path in the Hugging Face cache, if it is there at this revision."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(rf.repo, rf.path, revision=rf.revision, cache_dir=cache_dir())
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def _repo_folder(repo: str) -> Path:
    return cache_dir() / ("models--" + repo.replace("/", "--"))


def _link_snapshot(rf: RemoteFile, blob: Path) -> Path:
    """Give a blob its place in the Hugging Face cache: snapshots/<commit>/<path> and refs/main."""
    folder = _repo_folder(rf.repo)
    snap = folder / "snapshots" / rf.revision / rf.path
    snap.parent.mkdir(parents=True, exist_ok=True)
    # Built under a private name and renamed over the old link, so two pulls of the same
    # file (two processes, or the app and the CLI) never see a missing or half-made link.
    tmp = snap.with_name(f".{snap.name}.{os.getpid()}.{threading.get_ident()}.link")
    tmp.unlink(missing_ok=True)
    try:
        tmp.symlink_to(os.path.relpath(blob, snap.parent))
    except OSError:  # pragma: no cover - file systems without symlinks
        shutil.copyfile(blob, tmp)
    os.replace(tmp, snap)
    refs = folder / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    if re.fullmatch(r"[0-9a-f]{40}", rf.revision):
        (refs / "main").write_text(rf.revision)
    return snap


def _retry_pause(attempt: int) -> None:
    time.sleep(min(0.5 * attempt, 4.0))


_ATTEMPTS = 6   # transfers per file and pull; each must make progress, then the pull stops


def download(rf: RemoteFile, progress: Progress | None = None,
             cancel: threading.Event | None = None) -> tuple[Path, str | None]:
    """Download one file into the Hugging Face cache; return (path, sha256 if computed).

    LFS files (the GGUFs) go to ``blobs/<sha256>.incomplete`` first, under a name that is the
    same from one run to the next: an interrupted pull leaves it there and the next pull
    continues it with an HTTP range request. Bytes are hashed as they arrive and the file
    only takes its final name when its SHA-256 matches the Hub's. A lock file serialises
    concurrent pulls of the same blob.
    """
    from filelock import FileLock
    from huggingface_hub import hf_hub_download, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    safe_repo_path(rf.path)
    have = cached_file(rf)
    if have is not None:
        return have, None
    if offline():
        raise HubError(f"{rf.repo}/{rf.path}: HF_HUB_OFFLINE is set and it is not in the Hugging Face cache")
    label = f"{rf.repo}/{rf.path}"
    if not rf.sha256:  # a small git file (README, config): the client's own download is fine
        try:
            return Path(hf_hub_download(rf.repo, rf.path, revision=rf.revision, cache_dir=cache_dir())), None
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc, label) from None
    blobs = _repo_folder(rf.repo) / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    blob = blobs / rf.sha256
    partial = blobs / f"{rf.sha256}.incomplete"
    url = hf_hub_url(rf.repo, rf.path, revision=rf.revision, endpoint=endpoint())
    with FileLock(str(blobs / f"{rf.sha256}.lock")):
        if blob.is_file() and blob.stat().st_size == rf.size:
            return _link_snapshot(rf, blob), None
        hasher = hashlib.sha256()
        done = 0
        if partial.exists():
            done = partial.stat().st_size
            if done > rf.size:
                partial.unlink()
                done = 0
            else:
                with open(partial, "rb") as f:
                    for block in iter(lambda: f.read(8 << 20), b""):
                        hasher.update(block)
        attempt = stalled = 0
        while done < rf.size or rf.size == 0:
            attempt += 1
            before = done
            headers = build_hf_headers()
            if done:
                headers["Range"] = f"bytes={done}-"
            try:
                with get_session().stream("GET", url, headers=headers, follow_redirects=True) as r:
                    if r.status_code == 416 and done:
                        break
                    if r.status_code >= 400:
                        r.read()
                        r.raise_for_status()
                    if done and r.status_code == 200:   # range ignored: start over
                        hasher, done = hashlib.sha256(), 0
                        partial.unlink(missing_ok=True)
                    with open(partial, "ab") as f:
                        if progress:
                            progress(label, done, rf.size)
                        for chunk in r.iter_bytes():
                            if cancel is not None and cancel.is_set():
                                raise Cancelled("download cancelled; run the same command to resume")
                            f.write(chunk)
                            hasher.update(chunk)
                            done += len(chunk)
                            if progress:
                                progress(label, done, rf.size)
                if rf.size == 0:
                    break
                if done < rf.size:
                    raise ConnectionError("the transfer ended early")
            except Cancelled:
                raise
            except Exception as exc:  # noqa: BLE001
                if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
                    raise LocalspecError(f"{label}: disk full after {done} of {rf.size} bytes; free some "
                                         "space and run the same command to resume") from None
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status is not None and status not in (408, 429, 500, 502, 503, 504):
                    raise _translate(exc, label) from None
                stalled = 0 if done > before else stalled + 1
                if attempt < _ATTEMPTS and stalled <= 1:
                    _retry_pause(attempt)
                    continue
                kept = f"; {done} of {rf.size} bytes kept, run the same command to resume" if done else ""
                raise HubError(f"{label}: download interrupted ({type(exc).__name__}){kept}") from None
        if done != rf.size:
            raise HubError(f"{label}: got {done} bytes, the Hub says {rf.size}; run the command again")
        digest = hasher.hexdigest()
        if digest != rf.sha256:
            partial.unlink(missing_ok=True)
            raise HubError(f"{label}: checksum mismatch (sha256 {digest[:12]}... but the Hub says "
                           f"{rf.sha256[:12]}...); removed the corrupt file, nothing was registered")
        os.replace(partial, blob)
        return _link_snapshot(rf, blob), digest


def sha256_file(path: Path, progress: Progress | None = None, label: str = "",
                cancel: threading.Event | None = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(8 * 1024 * 1024)
            if not block:
                break
            h.update(block)
            done += len(block)
            if progress:
                progress(label, done, total)
            if cancel is not None and cancel.is_set():
                raise Cancelled("verification cancelled")
    return h.hexdigest()


def verify(rf: RemoteFile, path: Path, progress: Progress | None = None,
           cancel: threading.Event | None = None) -> str:
    """Check size and SHA-256 against the Hub's; on a mismatch remove the file and fail."""
    size = path.stat().st_size
    if rf.size and size != rf.size:
        _discard(path)
        raise HubError(f"{rf.repo}/{rf.path}: size {size} differs from the Hub's {rf.size}; "
                       "removed it, run the command again")
    digest = sha256_file(path, progress, f"verify {rf.path}", cancel)
    if rf.sha256 and digest != rf.sha256:
        _discard(path)
        raise HubError(f"{rf.repo}/{rf.path}: checksum mismatch (sha256 {digest[:12]}... but the Hub "
                       f"says {rf.sha256[:12]}...); removed the corrupt file, nothing was registered")
    return digest


def _discard(path: Path) -> None:
    """Remove a bad download from the cache: the snapshot link and the blob behind it."""
    try:
        real = path.resolve()
        path.unlink(missing_ok=True)
        if real != path:
            real.unlink(missing_ok=True)
    except OSError:
        pass
