"""LogStores for Amazon S3 and S3-compatible services (``s3``, ``s3a``, ``s3n``) over s3fs.

* :class:`S3LogStore` (the default): multi-writer safe through S3 conditional writes
  (``PutObject`` with ``If-None-Match: *``). The first put-if-absent into a bucket checks once
  that the service really refuses a second conditional put of the same key; a service that
  ignores or rejects the header raises :class:`~logstores.errors.ConditionalWriteUnsupportedError`.
* :class:`S3SingleDriverLogStore`: Delta's store for services without conditional writes:
  a per-path lock in this process, an existence check, then the write. Safe for one process only.

Both list with ``ListObjectsV2`` starting *after* the requested name (``StartAfter``), so
listing from version N reads one page per 1,000 keys at or after N, not the whole log.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any, NoReturn

import fsspec.asyn
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from fsspec import AbstractFileSystem
from s3fs import S3FileSystem

from logstores.conf import get_delta_conf
from logstores.errors import AccessDeniedError, BucketNotFoundError, ConditionalWriteUnsupportedError
from logstores.filesystem import Location, path_lock
from logstores.object_store import (
    COMMIT_TOKEN_KEY,
    TEMP_DIR,
    AmbiguousWriteError,
    ObjectStoreLogStore,
    StoredObject,
    put_if_absent_verified,
)
from logstores.redaction import redact_url

logger = logging.getLogger(__name__)

VERIFY_CONDITIONAL_WRITES_KEY = "spark.delta.logStore.s3.verifyConditionalWrites"
"""``false`` (also without ``spark.``) skips the one-time check that a bucket enforces
``If-None-Match`` (3 requests per bucket and store)."""

LIST_PAGE_SIZE = 1000
TIMEOUT_ERRORS = (ReadTimeoutError, ConnectTimeoutError, TimeoutError)
"""botocore (and fsspec) exceptions of a request that got no answer in time."""
UNREACHABLE_ERRORS = (EndpointConnectionError,)
_AMBIGUOUS = (ReadTimeoutError, ConnectionClosedError, TimeoutError)
CREDENTIAL_SETTINGS = (
    "fs.s3a.access.key and fs.s3a.secret.key (or the AWS environment variables, profile or instance role)"
)
"""Where S3 credentials come from, named when there are none."""
_DENIED_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
}


def key_before(name: str) -> str | None:
    """The greatest key sorting strictly before every key ``>= name`` (Delta's ``keyBefore``).

    Works on the UTF-8 bytes: a trailing NUL byte is dropped, otherwise the last byte is
    decremented; ``None`` for the empty string.
    """
    data = name.encode("utf-8")
    if not data:
        return None
    data = data[:-1] if data[-1] == 0 else data[:-1] + bytes([data[-1] - 1])
    return data.decode("utf-8", errors="surrogateescape")


def _drop_expect_header(params: dict[str, Any], **_: Any) -> None:
    """Send request bodies at once instead of waiting for ``100 Continue`` first.

    botocore asks for ``Expect: 100-continue`` on ``PutObject`` (and other uploads); aiohttp then
    waits for the interim answer with no timeout at all, so a server that never answers blocks
    the put forever (the read timeout starts only after that wait). Log files are small: sending
    them at once also saves a round trip per put.
    """
    params.get("headers", {}).pop("Expect", None)


async def _client(fs: S3FileSystem, bucket: str | None) -> Any:
    """s3fs's aiobotocore client for ``bucket``, with :func:`_drop_expect_header` registered once."""
    await fs.set_session()
    client = await fs.get_s3(bucket)
    if not getattr(client, "_delta_no_expect", False):
        client.meta.events.register_last("before-call.s3", _drop_expect_header)
        client._delta_no_expect = True
    return client


def error_code(exc: BaseException) -> tuple[str, int]:
    """(code, HTTP status) of a botocore ClientError, also when wrapped by s3fs."""
    for candidate in (exc, exc.__cause__):
        if isinstance(candidate, ClientError):
            error = candidate.response.get("Error", {})
            status = candidate.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            return str(error.get("Code", "")), int(status or 0)
    return "", 0


class S3BaseLogStore(ObjectStoreLogStore):
    """Reading, listing, overwriting and error reporting shared by the S3 stores."""

    service = "S3"
    timeout_service = "s3"
    sdk_errors = (ClientError, OSError, NoCredentialsError, *TIMEOUT_ERRORS, *UNREACHABLE_ERRORS)
    timeout_errors = TIMEOUT_ERRORS
    unreachable_errors = UNREACHABLE_ERRORS
    endpoint_settings = "fs.s3a.endpoint or spark.delta.logStore.<scheme>.options.endpoint_url"
    list_page_size: int = LIST_PAGE_SIZE

    def filesystem_options(self, scheme: str) -> dict[str, Any]:
        """The mapped options, plus botocore's timeouts and attempts from :attr:`request_bounds`."""
        options = super().filesystem_options(scheme)
        bounds = self.request_bounds
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", bounds.connect_timeout_s)
        config.setdefault("read_timeout", bounds.read_timeout_s)
        config.setdefault("retries", {"total_max_attempts": bounds.attempts, "mode": "standard"})
        options["config_kwargs"] = config
        return options

    def new_filesystem(self, scheme: str, options: dict[str, Any]) -> AbstractFileSystem:
        """s3fs with one retry layer: botocore's bounded attempts, not s3fs's five tries around them."""
        fs = super().new_filesystem(scheme, options)
        if isinstance(fs, S3FileSystem):
            fs.retries = 1
        return fs

    def custom_endpoint(self, fs: AbstractFileSystem) -> str | None:
        if not isinstance(fs, S3FileSystem):
            return None
        return fs.endpoint_url or fs.client_kwargs.get("endpoint_url")

    def endpoint_url(self, fs: AbstractFileSystem) -> str | None:
        client = getattr(fs, "_s3", None)
        return self.custom_endpoint(fs) or getattr(getattr(client, "meta", None), "endpoint_url", None)

    # -- errors ------------------------------------------------------------------------------
    def _endpoint_name(self, fs: AbstractFileSystem) -> str:
        custom = self.custom_endpoint(fs)
        return redact_url(custom) if custom else self.endpoint_address(fs)

    def _raise_translated(self, exc: BaseException, location: Location) -> NoReturn:
        """Re-raise ``exc`` as a clear error naming the path, bucket or endpoint."""
        uri = location.qualify(location.path)
        bucket = location.path.split("/", 1)[0]
        code, status = error_code(exc)
        if code == "NoSuchBucket":
            raise BucketNotFoundError.of("S3 bucket", bucket, uri) from exc
        if isinstance(exc, NoCredentialsError):
            raise AccessDeniedError(
                f"no AWS credentials to access {uri} at {self._endpoint_name(location.fs)}: set "
                f"{CREDENTIAL_SETTINGS}"
            ) from exc
        if code in _DENIED_CODES or status == 403 or isinstance(exc, PermissionError):
            raise AccessDeniedError(
                f"access to {uri} was denied by {self._endpoint_name(location.fs)} ({code or status}); "
                "check fs.s3a.access.key, fs.s3a.secret.key and fs.s3a.session.token"
            ) from exc
        if code in ("NoSuchKey", "404") or isinstance(exc, FileNotFoundError):
            raise FileNotFoundError(uri) from exc
        raise exc

    def _already_clear(self, exc: BaseException) -> bool:
        return super()._already_clear(exc) or (isinstance(exc, FileNotFoundError) and not error_code(exc)[0])

    def _call(self, location: Location, method: str, **kwargs: Any) -> Any:
        """One S3 API call through botocore's own retries only (no s3fs retry layer)."""
        fs = location.fs

        async def call() -> Any:
            client = await _client(fs, kwargs.get("Bucket"))
            bound = getattr(client, method)
            return await bound(**fs._get_s3_method_kwargs(bound, **kwargs))

        return fsspec.asyn.sync(fs.loop, call)

    # -- reading -----------------------------------------------------------------------------
    def _get_object(self, location: Location) -> StoredObject:
        """One ``GetObject`` (no HEAD first, unlike s3fs' ``cat_file``): the object's token and bytes."""
        fs = location.fs
        bucket, key, _ = fs.split_path(location.path)

        async def get() -> StoredObject:
            client = await _client(fs, bucket)
            response = await client.get_object(
                **fs._get_s3_method_kwargs(client.get_object, Bucket=bucket, Key=key)
            )
            async with response["Body"] as stream:
                data = await stream.read()
            return StoredObject(response.get("Metadata", {}).get(COMMIT_TOKEN_KEY), data)

        return fsspec.asyn.sync(fs.loop, get)

    def _get_bytes(self, location: Location) -> bytes:
        return self._get_object(location).data

    def _read_back(self, location: Location) -> StoredObject | None:
        try:
            return self._get_object(location)
        except ClientError as exc:
            if error_code(exc)[0] in ("NoSuchKey", "404"):
                return None
            self._raise_translated(exc, location)

    # -- listing -----------------------------------------------------------------------------
    def _list_dir(self, location: Location) -> list[dict[str, Any]]:
        """ListObjectsV2 of the parent prefix starting after the key before ``location``'s name."""
        fs = location.fs
        bucket, key, _ = fs.split_path(location.path)
        prefix = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        request["MaxKeys"] = self.list_page_size
        before = key_before(location.name)
        if before is not None:
            request["StartAfter"] = prefix + before
        entries: list[dict[str, Any]] = []
        with self._translated(location.directory()):
            while True:
                page = fs.call_s3("list_objects_v2", **request)
                for item in page.get("Contents", []):
                    if item["Key"] != prefix:  # a directory marker object
                        entries.append(
                            {
                                "name": f"{bucket}/{item['Key']}",
                                "size": item["Size"],
                                "type": "file",
                                "LastModified": item["LastModified"],
                            }
                        )
                for common in page.get("CommonPrefixes", []):
                    entries.append(
                        {"name": f"{bucket}/{common['Prefix'].rstrip('/')}", "size": 0, "type": "directory"}
                    )
                if not page.get("IsTruncated"):
                    break
                request["ContinuationToken"] = page["NextContinuationToken"]
            if not entries and prefix and not self._prefix_exists(fs, bucket, prefix):
                raise FileNotFoundError(f"No such file or directory: {location.qualify(location.parent)}")
        return entries

    def _object_exists(self, location: Location) -> bool:
        """Whether the object exists: one HEAD request (s3fs' ``exists`` may list as well)."""
        bucket, key, _ = location.fs.split_path(location.path)
        with self._translated(location):
            try:
                self._call(location, "head_object", Bucket=bucket, Key=key)
            except ClientError as exc:
                if error_code(exc)[1] == 404 and error_code(exc)[0] != "NoSuchBucket":
                    return False
                raise
        return True

    def _prefix_exists(self, fs: AbstractFileSystem, bucket: str, prefix: str) -> bool:
        page = fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)
        return bool(page.get("KeyCount") or page.get("Contents"))

    # -- writing -----------------------------------------------------------------------------
    def _overwrite(self, location: Location, data: bytes) -> None:
        bucket, key, _ = location.fs.split_path(location.path)
        with self._translated(location):
            self._call(location, "put_object", Bucket=bucket, Key=key, Body=data)

    def _plain_put_if_absent(self, location: Location, data: bytes) -> None:
        """Existence check then write, under a per-path lock (one process only)."""
        target = location.qualify(location.path)
        with path_lock(target):
            if self._object_exists(location):
                raise FileExistsError(target)
            self._overwrite(location, data)


class S3LogStore(S3BaseLogStore):
    """Multi-writer safe S3 store: put-if-absent is a conditional ``PutObject`` (``If-None-Match: *``).

    Of concurrent writers of one key, on any number of machines, exactly one succeeds; the
    others get :class:`FileExistsError`. Objects appear whole, so partial writes are never
    visible. Ambiguous outcomes are resolved as described in :mod:`logstores.object_store`.
    Raises :class:`~logstores.errors.ConditionalWriteUnsupportedError` when the service does not
    enforce conditional writes (use :class:`S3SingleDriverLogStore` or the DynamoDB store there).
    """

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        self._verified_buckets: set[str] = set()
        self._verify_lock = threading.Lock()

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        bucket, key, _ = location.fs.split_path(location.path)
        self._verify_conditional_writes(location, bucket)
        target = location.qualify(location.path)

        def put_once(token: str) -> None:
            self._conditional_put(location, bucket, key, data, {COMMIT_TOKEN_KEY: token})

        with self._translated(location):
            put_if_absent_verified(target, data, put_once, lambda: self._read_back(location))

    def _conditional_put(
        self, location: Location, bucket: str, key: str, data: bytes, metadata: dict[str, str]
    ) -> None:
        try:
            self._call(
                location, "put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*", Metadata=metadata
            )
        except ClientError as exc:
            code, status = error_code(exc)
            target = location.qualify(location.path)
            if status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise FileExistsError(target) from None
            if status == 501 or code == "NotImplemented" or "if-none-match" in str(exc).lower():
                raise self._unsupported(location, f"the service answered {code or status}") from exc
            if status >= 500:
                raise AmbiguousWriteError(
                    f"{code or status} from {self._endpoint_name(location.fs)}"
                ) from exc
            self._raise_translated(exc, location)
        except _AMBIGUOUS as exc:
            raise AmbiguousWriteError(f"{type(exc).__name__}: {exc}") from exc

    def _unsupported(self, location: Location, reason: str) -> ConditionalWriteUnsupportedError:
        return ConditionalWriteUnsupportedError(
            f"{self._endpoint_name(location.fs)} does not enforce S3 conditional writes "
            f"(If-None-Match) for {location.qualify(location.path)}: {reason}. Use "
            "S3SingleDriverLogStore (one writing process) or S3DynamoDBLogStore (many writers) "
            "through spark.delta.logStore.<scheme>.impl"
        )

    def _verify_conditional_writes(self, location: Location, bucket: str) -> None:
        """Once per bucket: a second conditional put of a probe key must be refused."""
        if bucket in self._verified_buckets:
            return
        if (get_delta_conf(self.conf, VERIFY_CONDITIONAL_WRITES_KEY) or "true").strip().lower() == "false":
            return
        with self._verify_lock:
            if bucket in self._verified_buckets:
                return
            _, key, _ = location.fs.split_path(location.path)
            parent = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
            probe = f"{parent}{TEMP_DIR}/.conditional-write-check.{uuid.uuid4().hex}"
            written = False
            with self._translated(location):
                try:
                    self._conditional_put(location, bucket, probe, b"", {})
                    written = True
                    try:
                        self._conditional_put(location, bucket, probe, b"", {})
                    except FileExistsError:
                        self._verified_buckets.add(bucket)
                        return
                    raise self._unsupported(location, "a second conditional put of the same key succeeded")
                except AmbiguousWriteError as exc:
                    cause = exc.__cause__ or exc
                    if isinstance(cause, TIMEOUT_ERRORS):
                        raise self.timeout_error(location, cause) from exc
                    raise
                finally:
                    if written:  # else left to delete_stale_temp_files: the endpoint may not answer
                        with contextlib.suppress(ClientError, OSError, *TIMEOUT_ERRORS):
                            self._call(location, "delete_object", Bucket=bucket, Key=probe)


class S3SingleDriverLogStore(S3BaseLogStore):
    """Delta's ``S3SingleDriverLogStore``: mutual exclusion only inside this process.

    A process-wide lock per path, an existence check, then a whole-object write. Correct only
    when a single process writes a given table; use :class:`S3LogStore` otherwise.
    """

    def _put_if_absent(self, location: Location, data: bytes) -> None:
        self._plain_put_if_absent(location, data)
