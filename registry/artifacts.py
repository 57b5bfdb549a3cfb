"""Where model artifacts are kept: on this machine's disk, or in S3-compatible object
storage that every web and worker machine reads (``DYNABENCH_ARTIFACTS_URL``).

- ``file:///path`` (the default: ``DYNABENCH_MODELS_DIR``): an artifact is a directory
  there, stored in the registry by its path relative to that folder. Machines share
  it only if they share the disk.
- ``s3://bucket/prefix``: a registered artifact is uploaded under
  ``<prefix>/artifacts/<sha256>/`` (its metadata.json last, so a half-finished upload
  is never complete) and registered as that URL. Each machine downloads it once into
  its local cache, ``DYNABENCH_ARTIFACTS_CACHE`` (default ``<DYNABENCH_MODELS_DIR>/
  .store-cache``), keyed by the sha256: a download lands in a temporary folder, is
  checked file by file against the digests the registry recorded, and only then
  takes its place. A missing, truncated or tampered object is an
  ``ml.ArtifactError`` (the model is never loaded); a store that cannot be reached
  is ``StoreUnavailable`` (503 with Retry-After on the web; a job retries later).
  ``AWS_ENDPOINT_URL_S3`` points boto3 at another S3-compatible store (MinIO, Ceph);
  credentials come from boto3's usual chain (environment, profile, instance role).

boto3 is used directly rather than through django-storages: the store is read by
workers outside any request, the two failures (missing or tampered against
unreachable) must stay apart, and the objects are directories checked against the
registry's digests, which a Storage's file API does not model.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

import ml
from core.errors import RetryLater

METADATA = "metadata.json"


class StoreUnavailable(RetryLater):
    """The artifact store cannot be reached now (network, credentials, the store's
    own outage): nothing was loaded or registered; worth retrying."""

    code = "store_unavailable"

    def __init__(self, message: str, retry_after: int = 30):
        super().__init__(message, retry_after)


@dataclass(frozen=True)
class StoreURL:
    scheme: str  # "file" or "s3"
    bucket: str = ""
    prefix: str = ""  # no leading or trailing slash
    path: Path | None = None  # file://

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def url(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


def parse_store_url(url: str) -> StoreURL:
    """``file:///abs/path`` or ``s3://bucket[/prefix]``; ImproperlyConfigured otherwise."""
    parts = urlsplit(url.strip())
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ImproperlyConfigured(
                f"DYNABENCH_ARTIFACTS_URL {url!r}: a file URL names an absolute folder, file:///srv/models.")
        return StoreURL("file", path=Path(parts.path))
    if parts.scheme == "s3":
        if not parts.netloc or parts.query or parts.fragment:
            raise ImproperlyConfigured(
                f"DYNABENCH_ARTIFACTS_URL {url!r}: an S3 URL is s3://bucket or s3://bucket/prefix.")
        return StoreURL("s3", bucket=parts.netloc, prefix=parts.path.strip("/"))
    raise ImproperlyConfigured(
        f"DYNABENCH_ARTIFACTS_URL {url!r}: the artifact store is a file:/// folder or an s3:// bucket.")


def configured() -> StoreURL:
    return parse_store_url(settings.DYNABENCH_ARTIFACTS_URL or Path(settings.DYNABENCH_MODELS_DIR).absolute().as_uri())


def in_object_storage() -> bool:
    return configured().scheme == "s3"


def cache_dir() -> Path:
    found = getattr(settings, "DYNABENCH_ARTIFACTS_CACHE", None)
    return Path(found) if found else Path(settings.DYNABENCH_MODELS_DIR) / ".store-cache"


# --- where a stored artifact is on this machine -------------------------------------------


def _sha_of(stored: str) -> str:
    sha = stored.rstrip("/").rsplit("/", 1)[-1].lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ml.ArtifactError(f"artifact {stored}: an object-storage artifact is named by its sha256")
    return sha


def local_path(stored: str) -> Path:
    """Where the artifact registered as ``stored`` is (or will be) on this machine,
    without touching disk or network: an S3 one in the local cache, by its sha256; a
    relative path under this process's DYNABENCH_MODELS_DIR; an absolute one as is."""
    if stored.startswith("s3://"):
        return cache_dir() / _sha_of(stored)
    path = Path(stored)
    return path if path.is_absolute() else Path(settings.DYNABENCH_MODELS_DIR) / path


def ensure_local(stored: str, sha256: str) -> Path:
    """``local_path``, downloaded first if it is an S3 artifact not yet in the local
    cache. ``ml.ArtifactError``: missing or not what was registered; ``StoreUnavailable``:
    the store cannot be reached. A local artifact is checked when it is loaded."""
    path = local_path(stored)
    if stored.startswith("s3://") and not (path / METADATA).is_file():
        parts = urlsplit(stored)
        S3Store(parts.netloc).download(parts.path.lstrip("/"), sha256.lower(), path)
    return path


def publish(local_dir: Path, sha256: str) -> str | None:
    """Put a finished artifact where every machine reads it; the value to register.
    File store: None (the directory stays where it is and is registered by its path).
    S3: uploaded under ``<prefix>/artifacts/<sha256>/``, moved into this machine's
    cache, and registered as that URL."""
    where = configured()
    if where.scheme != "s3":
        return None
    S3Store(where.bucket).upload_dir(local_dir, where.key("artifacts", sha256))
    cached = cache_dir() / sha256
    if not cached.exists():  # this machine need not download what it just made
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{sha256}.copy-", dir=cached.parent))
        try:
            shutil.copytree(local_dir, tmp, dirs_exist_ok=True)
            os.replace(tmp, cached)
        except OSError:  # another process put it there first
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if Path(local_dir).absolute().is_relative_to(Path(settings.DYNABENCH_MODELS_DIR).absolute()):
        shutil.rmtree(local_dir, ignore_errors=True)  # the platform's working copy: the store has it now
    return where.url("artifacts", sha256)


def publish_files(paths: list[Path], folder: str) -> list[str]:
    """Upload plain files (a replay's report) under ``<prefix>/<folder>/`` when the
    store is S3; their URLs (none with the file store, where they are already kept)."""
    where = configured()
    if where.scheme != "s3":
        return []
    store = S3Store(where.bucket)
    urls = []
    for path in paths:
        key = where.key(folder, Path(path).name)
        store.upload_file(Path(path), key)
        urls.append(f"s3://{where.bucket}/{key}")
    return urls


# --- S3 ----------------------------------------------------------------------------------------

_clients: dict = {}
_clients_lock = threading.Lock()


def _client():
    """One boto3 S3 client per process (clients are thread-safe; a forked child makes
    its own). Short connect timeouts: an unreachable store is said in seconds."""
    import boto3  # noqa: PLC0415 - boto3 loads only for the S3 store
    from botocore.config import Config  # noqa: PLC0415 - as boto3

    key = (os.getpid(), getattr(settings, "AWS_ENDPOINT_URL_S3", "") or "")
    with _clients_lock:
        if key not in _clients:
            _clients.clear()
            _clients[key] = boto3.session.Session().client(
                "s3", endpoint_url=key[1] or None,
                region_name=os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1",
                config=Config(connect_timeout=settings.ARTIFACTS_CONNECT_TIMEOUT, read_timeout=60,
                              retries={"max_attempts": 3, "mode": "standard"}))
        return _clients[key]


def _safe_name(name: str) -> bool:
    pure = PurePosixPath(name)
    return bool(name) and not pure.is_absolute() and ".." not in pure.parts and "\\" not in name


class S3Store:
    def __init__(self, bucket: str):
        self.bucket = bucket

    def _where(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        """Run one S3 call; a missing object is ``ml.ArtifactError``, anything that
        keeps the store from answering is ``StoreUnavailable``."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - as boto3

        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                raise ml.ArtifactError(f"{self._where(key)} is not in the artifact store") from None
            raise StoreUnavailable(
                f"The artifact store refused to {what} {self._where(key)} ({code}: {error.get('Message', '')}); "
                "nothing was loaded or registered. Try again later.") from None
        except (BotoCoreError, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, ConnectionError | TimeoutError):
                raise  # our own disk, not the store
            raise StoreUnavailable(
                f"The artifact store is unreachable ({type(exc).__name__}: {exc}); nothing was loaded or "
                "registered. Try again later.") from None

    def upload_file(self, path: Path, key: str) -> None:
        self._call("write", key, _client().upload_file, str(path), self.bucket, key)

    def upload_dir(self, local_dir: Path, key: str) -> None:
        """Every file of an artifact under ``key/``, metadata.json last."""
        local_dir = Path(local_dir)
        names = sorted(p.relative_to(local_dir).as_posix() for p in local_dir.rglob("*") if p.is_file())
        for name in [n for n in names if n != METADATA] + [METADATA]:
            self.upload_file(local_dir / name, f"{key}/{name}")

    def download(self, key: str, sha256: str, dest: Path) -> None:
        """The artifact under ``key/`` into ``dest``, only if it is the one registered
        as ``sha256``: its metadata must digest to it (``ml.artifact_sha256``: so no
        name in it is trusted before that), and every file must match its digest."""
        client = _client()
        body = self._call("read", f"{key}/{METADATA}", client.get_object, Bucket=self.bucket,
                          Key=f"{key}/{METADATA}")
        raw = self._call("read", f"{key}/{METADATA}", body["Body"].read)
        try:
            metadata = json.loads(raw.decode("utf-8"))
            files = metadata["files"]
            listed = ml.artifact_sha256(metadata) == sha256 and isinstance(files, dict)
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            listed = False
        if not listed or not all(_safe_name(name) for name in files):
            raise ml.ArtifactError(
                f"{self._where(key)}: its {METADATA} is not the registered artifact's (sha256 {sha256}); "
                "the object was changed or damaged, and nothing was loaded")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.download-", dir=dest.parent))
        try:
            (tmp / METADATA).write_bytes(raw)
            for name in sorted(files):
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                self._call("read", f"{key}/{name}", client.download_file, self.bucket, f"{key}/{name}",
                           str(target))
            try:
                ml.verify_artifact(tmp, sha256)
            except ml.ArtifactError as exc:
                raise ml.ArtifactError(f"{self._where(key)} is not the registered artifact: "
                                       f"{str(exc).split(': ', 1)[-1]}; nothing was loaded") from None
            try:
                os.replace(tmp, dest)
            except OSError:
                if not (dest / METADATA).is_file():  # not a concurrent download that won
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# --- folders of plain files (data releases) --------------------------------------------------


def _folder_name(folder: str) -> str:
    folder = folder.strip("/")
    if not _safe_name(folder):
        raise ValueError(f"not a folder name inside the store: {folder!r}")
    return folder


def store_folder(local_dir: Path, folder: str) -> str:
    """Put a finished folder of plain files (a data release) where every machine reads it,
    under ``<store>/<folder>/``; returns the location to record. File store: moved to
    ``<DYNABENCH_MODELS_DIR>/<folder>`` and recorded as that relative path. S3: every
    file uploaded under ``<prefix>/<folder>/``, the local folder removed, and recorded
    as the folder's URL. A location is written once: one that holds files already is
    refused (``FileExistsError``), so what a record points at never changes."""
    folder, local_dir = _folder_name(folder), Path(local_dir)
    names = sorted(p.relative_to(local_dir).as_posix() for p in local_dir.rglob("*") if p.is_file())
    where = configured()
    if where.scheme != "s3":
        dest = Path(settings.DYNABENCH_MODELS_DIR) / folder
        if dest.exists() and any(dest.iterdir()):
            raise FileExistsError(f"{dest} holds files already; a stored folder is written once")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.rmdir()
        shutil.move(str(local_dir), dest)
        return folder
    store = S3Store(where.bucket)
    prefix = where.key(folder)
    listed = store._call("list", prefix, _client().list_objects_v2, Bucket=where.bucket, Prefix=f"{prefix}/",
                         MaxKeys=1)
    if listed.get("KeyCount"):
        raise FileExistsError(f"{where.url(folder)} holds files already; a stored folder is written once")
    for name in names:
        store.upload_file(local_dir / name, f"{prefix}/{name}")
    shutil.rmtree(local_dir, ignore_errors=True)
    return where.url(folder)


def stored_file_path(location: str, name: str) -> Path:
    """A file of a folder stored by ``store_folder`` on this machine's disk (file store);
    ``ValueError`` for a name outside the folder or a location in object storage."""
    if location.startswith("s3://") or not _safe_name(name):
        raise ValueError(f"{name!r} of {location!r} is not a file on this machine")
    return local_path(location) / name


def stored_file_url(location: str, name: str, *, seconds: int = 600, download_as: str = "") -> str:
    """A time-limited URL to fetch one file of a folder stored in object storage (a
    presigned GET, ``seconds`` long), offered as a download named ``download_as``."""
    if not location.startswith("s3://") or not _safe_name(name):
        raise ValueError(f"{name!r} of {location!r} is not in object storage")
    parts = urlsplit(location)
    key = f"{parts.path.strip('/')}/{name}"
    params = {"Bucket": parts.netloc, "Key": key}
    if download_as:
        params["ResponseContentDisposition"] = f'attachment; filename="{download_as}"'
    return S3Store(parts.netloc)._call("sign", key, _client().generate_presigned_url, "get_object",
                                       Params=params, ExpiresIn=seconds)


def copy_stored_file(location: str, name: str, dest: Path) -> None:
    """Copy one file of a folder stored by ``store_folder`` to ``dest`` (downloaded from
    object storage, or copied from this machine's disk)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not location.startswith("s3://"):
        shutil.copyfile(stored_file_path(location, name), dest)
        return
    if not _safe_name(name):
        raise ValueError(f"{name!r} is not a file of {location!r}")
    parts = urlsplit(location)
    key = f"{parts.path.strip('/')}/{name}"
    S3Store(parts.netloc)._call("read", key, _client().download_file, parts.netloc, key, str(dest))
