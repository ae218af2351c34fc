"""LogStore for Azure Blob Storage and ADLS Gen2 (``abfs``, ``abfss``, ``wasb``, ``wasbs``) over adlfs.

Put-if-absent is a blob upload with ``If-None-Match: *``: the service refuses it when the blob
exists, so of concurrent writers exactly one succeeds, on any number of machines. Block blob
uploads are committed whole, so partial writes are never visible. Listing is one List Blobs
request per page of the parent prefix, starting at the name (``startFrom``) where the service
supports it. The account comes from the configuration
(``fs.azure.account.key.<account>...`` or a connection string); ``container@account.host``
URIs keep their authority in every path this store returns.

Every request has the connect and read timeouts and the attempts of the store's
:class:`~logstores.timeouts.RequestBounds` (the SDK's defaults are 300 s timeouts and retries
that wait 15 s and more); see :meth:`AzureLogStore.new_filesystem`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

import fsspec.asyn
from adlfs import AzureBlobFileSystem
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceRequestTimeoutError,
    ServiceResponseError,
    ServiceResponseTimeoutError,
)
from azure.storage.blob import BlobProperties
from azure.storage.blob.aio import BlobPrefix, ExponentialRetry
from fsspec import AbstractFileSystem

from logstores.errors import AccessDeniedError, BucketNotFoundError, LogStoreError
from logstores.filesystem import Location, uri_scheme
from logstores.object_store import (
    AmbiguousWriteError,
    ObjectStoreLogStore,
    StoredObject,
    put_if_absent_verified,
)
from logstores.timeouts import RequestBounds

logger = logging.getLogger(__name__)

AZURE_COMMIT_TOKEN_KEY = "delta_commit_token"
"""Blob metadata names must be C# identifiers, hence underscores."""
LIST_PAGE_SIZE = 5000
"""Entries per List Blobs request (the service's maximum)."""


@dataclass(frozen=True, slots=True)
class AzureLocation(Location):
    """A location whose URIs keep the ``@account.host`` part of the authority."""

    authority_suffix: str = ""

    def qualify(self, fs_path: str) -> str:
        container, _, key = fs_path.lstrip("/").partition("/")
        return f"{self.scheme}://{container}{self.authority_suffix}/{key}"


def _container_missing(exc: BaseException) -> bool:
    """Whether ``exc`` or an error it was raised from (adlfs hides the SDK's) says ContainerNotFound."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if "ContainerNotFound" in (str(getattr(seen, "error_code", "") or "") + str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class BoundedRetry(ExponentialRetry):
    """The Blob SDK's retry policy with the attempts and backoff of :class:`RequestBounds`."""

    def __init__(self, bounds: RequestBounds) -> None:
        super().__init__(retry_total=bounds.attempts - 1, random_jitter_range=0)
        self.bounds = bounds

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        return self.bounds.backoff(max(int(settings.get("count", 1)), 1))


class AzureLogStore(ObjectStoreLogStore):
    """Multi-writer safe Azure store: put-if-absent is an ``If-None-Match: *`` upload.

    The conditional upload is sent once per attempt (no SDK retries); ambiguous outcomes are
    resolved as described in :mod:`logstores.object_store`.
    """

    service = "Azure Blob Storage"
    timeout_service = "azure"
    sdk_errors = (HttpResponseError, ServiceRequestError, ServiceResponseError, OSError)
    timeout_errors = (ServiceRequestTimeoutError, ServiceResponseTimeoutError, TimeoutError)
    unreachable_errors = (ServiceRequestError,)
    endpoint_settings = "the connection string or account settings (spark.delta.logStore.<scheme>.options.*)"

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        self._start_from_supported = True

    def filesystem_options(self, scheme: str) -> dict[str, Any]:
        """The mapped options, plus adlfs' connect and read timeouts from :attr:`request_bounds`."""
        options = super().filesystem_options(scheme)
        options.setdefault("connection_timeout", self.request_bounds.connect_timeout_s)
        options.setdefault("read_timeout", self.request_bounds.read_timeout_s)
        return options

    def new_filesystem(self, scheme: str, options: dict[str, Any]) -> AbstractFileSystem:
        """adlfs whose service client has the bounded timeouts and retry policy on every request.

        adlfs passes its timeouts to uploads and downloads only and leaves the SDK's retry policy
        as it is, so the client it built is rebuilt on the same URL and credential with both.
        """
        fs = super().new_filesystem(scheme, options)
        if isinstance(fs, AzureBlobFileSystem) and not getattr(fs, "_bounded_by_logstore", False):
            client = fs.service_client
            fs.service_client = type(client)(
                client.url,
                credential=client.credential,
                connection_timeout=options["connection_timeout"],
                read_timeout=options["read_timeout"],
                retry_policy=BoundedRetry(self.request_bounds),
            )
            fs._bounded_by_logstore = True
        return fs

    def custom_endpoint(self, fs: AbstractFileSystem) -> str | None:
        if not isinstance(fs, AzureBlobFileSystem):
            return None
        url = str(fs.service_client.url or "").rstrip("/")
        return url if url and not urlsplit(url).netloc.endswith(".core.windows.net") else None

    def filesystem(self, path: str) -> AbstractFileSystem:
        if uri_scheme(path) == "adl":
            raise LogStoreError(
                f"AzureLogStore serves Blob Storage and ADLS Gen2 (abfs, abfss, wasb, wasbs), not {path}: "
                "ADLS Gen1 (adl://) has been retired by Microsoft"
            )
        return super().filesystem(path)

    def locate(self, path: str) -> Location:
        location = super().locate(path)
        netloc = urlsplit(path).netloc if "://" in path else ""
        if "@" not in netloc:
            return location
        return AzureLocation(location.fs, location.path, location.scheme, netloc[netloc.index("@") :])

    # -- errors ------------------------------------------------------------------------------
    def _raise_translated(self, exc: BaseException, location: Location) -> NoReturn:
        uri = location.qualify(location.path)
        container = location.path.split("/", 1)[0]
        code = str(getattr(exc, "error_code", "") or "")
        if _container_missing(exc):
            raise BucketNotFoundError.of("Azure container", container, uri) from exc
        if (
            isinstance(exc, ClientAuthenticationError | PermissionError)
            or getattr(exc, "status_code", 0) == 403
        ):
            raise AccessDeniedError(
                f"access to {uri} was denied ({code or type(exc).__name__}); check the account key, SAS "
                "token or connection string"
            ) from exc
        if isinstance(exc, ResourceNotFoundError):
            raise FileNotFoundError(uri) from exc
        raise exc

    def _already_clear(self, exc: BaseException) -> bool:
        return super()._already_clear(exc) or (
            isinstance(exc, FileNotFoundError) and not _container_missing(exc)
        )

    def _blob_call(self, location: Location, action: Any) -> Any:
        """Run ``await action(blob_client)`` on the filesystem's event loop."""
        fs = location.fs
        container, blob, _ = fs.split_path(location.path)

        async def call() -> Any:
            async with fs.service_client.get_blob_client(container=container, blob=blob) as client:
                return await action(client)

        return fsspec.asyn.sync(fs.loop, call)

    # -- reading -----------------------------------------------------------------------------
    def _read_back(self, location: Location) -> StoredObject | None:
        async def download(client: Any) -> StoredObject:
            downloader = await client.download_blob()
            metadata = downloader.properties.metadata or {}
            return StoredObject(metadata.get(AZURE_COMMIT_TOKEN_KEY), await downloader.readall())

        try:
            return self._blob_call(location, download)
        except ResourceNotFoundError:
            return None

    # -- listing -----------------------------------------------------------------------------
    list_page_size: int = LIST_PAGE_SIZE

    def _list_dir(self, location: Location) -> list[dict[str, Any]]:
        """List Blobs of the parent prefix with ``/`` as delimiter, from ``startFrom = <prefix><name>``.

        One request per page of :attr:`list_page_size` entries. A service that does not know
        ``startFrom`` lists the whole prefix (the names before are dropped by :meth:`list_from`).
        Only an empty listing costs a second request: whether the directory exists at all.
        """
        fs = location.fs
        container, key, _ = fs.split_path(location.path)
        prefix = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        options: dict[str, Any] = {"results_per_page": self.list_page_size}
        if location.name and self._start_from_supported:
            options["start_from"] = prefix + location.name

        async def list_entries(options: dict[str, Any]) -> list[dict[str, Any]]:
            async with fs.service_client.get_container_client(container) as client:
                items = client.walk_blobs(
                    name_starts_with=prefix, include=["metadata"], delimiter="/", **options
                )
                return [
                    entry async for item in items if (entry := _entry(container, prefix, item)) is not None
                ]

        with self._translated(location.directory()):
            try:
                entries = fsspec.asyn.sync(fs.loop, list_entries, options)
            except HttpResponseError as exc:
                if "start_from" not in options or exc.status_code != 400 or _container_missing(exc):
                    raise
                logger.info(
                    "%s does not accept startFrom (%s); listing whole prefixes",
                    self.endpoint_address(fs),
                    getattr(exc, "error_code", None) or exc.status_code,
                )
                self._start_from_supported = False
                del options["start_from"]
                entries = fsspec.asyn.sync(fs.loop, list_entries, options)
            if not entries and prefix and not fs.isdir(location.parent):
                raise FileNotFoundError(f"No such file or directory: {location.qualify(location.parent)}")
        return entries

    # -- writing -----------------------------------------------------------------------------
    def _put_if_absent(self, location: Location, data: bytes) -> None:
        target = location.qualify(location.path)

        def put_once(token: str) -> None:
            async def upload(client: Any) -> None:
                metadata = {"is_directory": "false", AZURE_COMMIT_TOKEN_KEY: token}
                await client.upload_blob(data, overwrite=False, metadata=metadata, retry_total=0)

            try:
                self._blob_call(location, upload)
            except (ResourceExistsError, ResourceModifiedError):
                raise FileExistsError(target) from None
            except ServiceResponseError as exc:
                raise AmbiguousWriteError(f"{type(exc).__name__}: {exc}") from exc
            except HttpResponseError as exc:
                if (exc.status_code or 0) >= 500:
                    raise AmbiguousWriteError(f"HTTP {exc.status_code} from Azure: {exc.reason}") from exc
                raise

        with self._translated(location):
            put_if_absent_verified(target, data, put_once, lambda: self._read_back(location))
        location.fs.invalidate_cache(location.parent)

    def _overwrite(self, location: Location, data: bytes) -> None:
        with self._translated(location):
            location.fs.pipe_file(location.path, data, overwrite=True)


def _entry(container: str, prefix: str, item: BlobProperties | BlobPrefix) -> dict[str, Any] | None:
    """An fsspec ``info`` dict of one listed blob or sub-prefix; ``None`` for the directory's own marker."""
    name = item.name.rstrip("/")
    if name == prefix.rstrip("/"):
        return None
    if isinstance(item, BlobPrefix):
        return {"name": f"{container}/{name}", "size": 0, "type": "directory"}
    metadata = {key.lower(): value for key, value in (item.metadata or {}).items()}
    is_dir = metadata.get("is_directory") == "true" or metadata.get("hdi_isfolder") == "true"
    return {
        "name": f"{container}/{name}",
        "size": 0 if is_dir else item.size,
        "type": "directory" if is_dir else "file",
        "last_modified": item.last_modified,
    }
