"""LogStore for Google Cloud Storage (``gs``) over gcsfs.

Put-if-absent is an upload with ``ifGenerationMatch=0``: GCS refuses it with 412 when the object
exists, so of concurrent writers exactly one succeeds, on any number of machines. Uploads are
all-or-nothing, so partial writes are never visible. Listing from a name uses the JSON API's
``startOffset``, reading only the keys at or after it.

**Upload paths.** An object smaller than :data:`RESUMABLE_CHUNK_BYTES` (gcsfs's own threshold)
is created by one multipart upload carrying the precondition. A larger one takes a resumable
upload, run here rather than by gcsfs's ``pipe_file``: GCS takes the precondition on the request
that opens the session and evaluates it when the upload completes (it may refuse the initiation
already), so the 412 may answer the initiation or the final chunk; either is
:class:`FileExistsError`. gcsfs would cancel the
session after that 412 and let a failed cancel replace it; here a session that ended in a 412 is
left alone, and one that failed otherwise is cancelled on a best-effort basis.

**Bounded requests.** gcsfs sends its requests with ``timeout=requests_timeout``, ``None`` by
default, which aiohttp takes as no timeout at all (no connect, read or total limit), and its
retry decorator only runs once a request *fails*. A request whose answer never comes (a stalled
server, a lost packet on a dead connection) therefore blocks its caller, and with it fsspec's
``sync``, forever. This store gives every request aiohttp connect and read timeouts from the
store's :class:`~logstores.timeouts.RequestBounds`, and retries with those bounds
(:class:`BoundedGCSFileSystem`) instead of gcsfs's fixed six tries over about 30 s of backoff.

**gcsfs's JSON-API filesystem, always.** ``gcsfs.GCSFileSystem`` is chosen once, when gcsfs is
first imported: unless ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` is ``false`` at that moment, it is
gcsfs's experimental extended class, which asks the Storage Control API over gRPC for each
bucket's layout (zonal, hierarchical) before using it; against an emulator that call waits about
a minute for its timeout. The store builds on ``gcsfs.core.GCSFileSystem``, the JSON-API class,
whatever the variable says and whoever imported gcsfs first, and leaves the process environment
alone. Everything the store does (conditional uploads, ``startOffset`` listings) is JSON API, as
before this choice was made per store: hierarchical-namespace buckets are served like any
other bucket, and gcsfs's gRPC paths for zonal (Rapid storage) buckets are never taken.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, NoReturn

import aiohttp
import requests
from fsspec import AbstractFileSystem
from fsspec.asyn import sync
from gcsfs.checkers import get_consistency_checker
from gcsfs.core import GCSFileSystem, initiate_upload, upload_chunk
from gcsfs.retry import HttpError, is_retriable

from logstores.errors import AccessDeniedError, BucketNotFoundError
from logstores.filesystem import Location
from logstores.object_store import (
    COMMIT_TOKEN_KEY,
    AmbiguousWriteError,
    ObjectStoreLogStore,
    StoredObject,
    put_if_absent_verified,
)
from logstores.timeouts import RequestBounds

LIST_PAGE_SIZE = 1000
RESUMABLE_CHUNK_BYTES = 50 * 2**20
"""Objects of at least this size are uploaded resumably, in chunks of this size (gcsfs's
``pipe_file`` threshold; GCS wants every chunk but the last to be a multiple of 256 KiB)."""
CONTENT_TYPE = "application/octet-stream"
_DEFAULT_ENDPOINT_SUFFIX = ".googleapis.com"
_AMBIGUOUS = (
    asyncio.TimeoutError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    requests.exceptions.ProxyError,  # gcsfs's translation of a 502
)

RequestFunction = Callable[..., Coroutine[Any, Any, Any]]
_SINGLE_REQUEST: RequestFunction = getattr(GCSFileSystem._request, "__wrapped__", GCSFileSystem._request)
"""gcsfs's request without its retry decorator (the decorated one if gcsfs ever drops ``__wrapped__``)."""


class BoundedGCSFileSystem(GCSFileSystem):
    """gcsfs whose requests are retried within ``request_bounds``: its attempts and backoff.

    Only the retry policy differs from gcsfs: the errors retried are gcsfs's own retriable ones
    (5xx, 408, 429, connection errors, timeouts), never a 404.
    """

    def __init__(self, *args: Any, request_bounds: RequestBounds, **kwargs: Any) -> None:
        super().__init__(*args, request_bounds=request_bounds, **kwargs)
        self.request_bounds = request_bounds

    async def _request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        retry = 0
        while True:
            try:
                return await _SINGLE_REQUEST(self, method, path, *args, **kwargs)
            except Exception as exc:
                retry += 1
                if retry >= self.request_bounds.attempts or not _retriable(exc):
                    raise
            await asyncio.sleep(self.request_bounds.backoff(retry))


def _retriable(exc: Exception) -> bool:
    if isinstance(exc, HttpError) and exc.code == 404:
        return False
    return is_retriable(exc) or isinstance(exc, asyncio.TimeoutError)


async def create_resumably(
    fs: GCSFileSystem, path: str, data: bytes, metadata: dict[str, str], chunk_bytes: int
) -> None:
    """Create ``path`` with ``data`` by a resumable upload, only if it does not exist.

    ``ifGenerationMatch=0`` goes with the initiation, where GCS takes preconditions for the
    session; GCS evaluates it when the final chunk completes the upload (and may refuse the
    initiation already). A 412 from either is
    gcsfs's :class:`FileExistsError`, raised as it is (that session is over); any other failure
    cancels the session, best effort, and is raised unchanged.
    """
    bucket, key, _ = fs.split_path(path)
    session = await initiate_upload(fs, bucket, key, CONTENT_TYPE, metadata, mode="create")
    checker = get_consistency_checker(fs.consistency)
    view = memoryview(data)
    response = None
    try:
        for offset in range(0, len(data), chunk_bytes):
            chunk = view[offset : offset + chunk_bytes]
            response = await upload_chunk(fs, session, chunk, offset, len(data), CONTENT_TYPE)
            checker.update(chunk)
    except FileExistsError:
        raise
    except Exception:
        with contextlib.suppress(Exception):
            await fs._call("DELETE", session)
        raise
    checker.validate_json_response(response)
    fs.invalidate_cache(path)


class GCSLogStore(ObjectStoreLogStore):
    """Multi-writer safe GCS store: put-if-absent is an ``ifGenerationMatch=0`` upload.

    A 412 means :class:`FileExistsError` for ``overwrite=False``; overwrites are unconditional.
    Ambiguous outcomes are resolved as described in :mod:`logstores.object_store`.
    """

    service = "GCS"
    timeout_service = "gcs"
    sdk_errors = (OSError, HttpError, aiohttp.ClientError, ValueError, asyncio.TimeoutError)
    timeout_errors = (asyncio.TimeoutError,)
    unreachable_errors = (aiohttp.ClientConnectorError,)
    endpoint_settings = (
        "fs.gs.storage.root.url, STORAGE_EMULATOR_HOST or spark.delta.logStore.gs.options.endpoint_url"
    )
    list_page_size: int = LIST_PAGE_SIZE
    resumable_chunk_bytes: int = RESUMABLE_CHUNK_BYTES

    def filesystem_options(self, scheme: str) -> dict[str, Any]:
        """The mapped options, plus aiohttp connect and read timeouts from :attr:`request_bounds`."""
        options = super().filesystem_options(scheme)
        bounds = self.request_bounds
        options.setdefault(
            "requests_timeout",
            aiohttp.ClientTimeout(
                total=None, sock_connect=bounds.connect_timeout_s, sock_read=bounds.read_timeout_s
            ),
        )
        return options

    def new_filesystem(self, scheme: str, options: dict[str, Any]) -> AbstractFileSystem:
        return BoundedGCSFileSystem(request_bounds=self.request_bounds, **options)

    def custom_endpoint(self, fs: AbstractFileSystem) -> str | None:
        if not isinstance(fs, GCSFileSystem):
            return None
        location = str(fs._location)
        return location if location and not location.rstrip("/").endswith(_DEFAULT_ENDPOINT_SUFFIX) else None

    def endpoint_url(self, fs: AbstractFileSystem) -> str | None:
        return str(getattr(fs, "_location", "") or "") or None

    # -- errors ------------------------------------------------------------------------------
    def _raise_translated(self, exc: BaseException, location: Location) -> NoReturn:
        uri = location.qualify(location.path)
        message = str(exc)
        denied = getattr(exc, "code", 0) in (401, 403) or message.startswith("Forbidden")
        if denied or isinstance(exc, PermissionError):
            reason = message.splitlines()[-1] if message else type(exc).__name__
            raise AccessDeniedError(
                f"access to {uri} was denied ({reason}); "
                "check fs.gs.auth.service.account.json.keyfile or the storage option token"
            ) from exc
        raise exc

    def _already_clear(self, exc: BaseException) -> bool:
        return super()._already_clear(exc) or isinstance(exc, FileNotFoundError)

    def _missing_bucket(self, location: Location) -> BucketNotFoundError | None:
        bucket = location.path.split("/", 1)[0]
        with contextlib.suppress(OSError, HttpError, ValueError, asyncio.TimeoutError):
            if location.fs.exists(bucket):
                return None
        return BucketNotFoundError.of("GCS bucket", bucket, location.qualify(location.path))

    # -- reading -----------------------------------------------------------------------------
    def _read_back(self, location: Location) -> StoredObject | None:
        try:
            info = location.fs.info(location.path)
            data = location.fs.cat_file(location.path)
        except FileNotFoundError:
            return None
        return StoredObject((info.get("metadata") or {}).get(COMMIT_TOKEN_KEY), data)

    # -- listing -----------------------------------------------------------------------------
    def _list_dir(self, location: Location) -> list[dict[str, Any]]:
        """Objects and sub-prefixes of the parent prefix from ``startOffset = <prefix><name>``."""
        fs = location.fs
        bucket, _, key = location.path.partition("/")
        prefix = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        params: dict[str, Any] = {"prefix": prefix, "delimiter": "/", "maxResults": self.list_page_size}
        if location.name:
            params["startOffset"] = prefix + location.name
        entries: list[dict[str, Any]] = []
        with self._bucket_checked(location.directory()):
            while True:
                page = fs.call("GET", "b/{}/o", bucket, json_out=True, **params)
                for item in page.get("items", []):
                    if item["name"] != prefix:
                        entries.append(fs._process_object(bucket, item))
                for common in page.get("prefixes", []):
                    entries.append({"name": f"{bucket}/{common.rstrip('/')}", "size": 0, "type": "directory"})
                token = page.get("nextPageToken")
                if not token:
                    break
                params["pageToken"] = token
            if not entries and prefix:
                probe = fs.call("GET", "b/{}/o", bucket, json_out=True, prefix=prefix, maxResults=1)
                if not probe.get("items") and not probe.get("prefixes"):
                    raise FileNotFoundError(f"No such file or directory: {location.qualify(location.parent)}")
        return entries

    # -- writing -----------------------------------------------------------------------------
    def _put_if_absent(self, location: Location, data: bytes) -> None:
        target = location.qualify(location.path)

        def put_once(token: str) -> None:
            try:
                self._create(location, data, {COMMIT_TOKEN_KEY: token})
            except FileExistsError:
                raise FileExistsError(target) from None
            except HttpError as exc:
                if (exc.code or 0) >= 500:
                    raise AmbiguousWriteError(f"HTTP {exc.code} from GCS: {exc}") from exc
                raise
            except _AMBIGUOUS as exc:
                raise AmbiguousWriteError(f"{type(exc).__name__}: {exc}") from exc

        with self._bucket_checked(location):
            put_if_absent_verified(target, data, put_once, lambda: self._read_back(location))

    def _create(self, location: Location, data: bytes, metadata: dict[str, str]) -> None:
        """One conditional upload (``ifGenerationMatch=0``) on the path its size calls for."""
        fs = location.fs
        if len(data) < self.resumable_chunk_bytes:
            fs.pipe_file(location.path, data, mode="create", metadata=metadata)  # one multipart upload
        else:
            assert isinstance(fs, GCSFileSystem)
            sync(fs.loop, create_resumably, fs, location.path, data, metadata, self.resumable_chunk_bytes)

    def _overwrite(self, location: Location, data: bytes) -> None:
        with self._bucket_checked(location):
            location.fs.pipe_file(location.path, data, chunksize=self.resumable_chunk_bytes)

    @contextlib.contextmanager
    def _bucket_checked(self, location: Location) -> Iterator[None]:
        """Errors translated, and a 404 from a missing bucket reported as such."""
        try:
            with self._translated(location):
                yield
        except FileNotFoundError as exc:
            if "No such file or directory" in str(exc):
                raise
            raise self._missing_bucket(location) or FileNotFoundError(
                location.qualify(location.path)
            ) from None
