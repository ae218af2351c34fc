"""Delta's multi-cluster S3 protocol: commits made mutually exclusive by a DynamoDB table.

Compatible with Delta's ``io.delta.storage.S3DynamoDBLogStore``: same table layout, same entry
life cycle, so Python and JVM writers can share one DynamoDB table and one Delta table.

Table layout (created on first use when missing): hash key ``tablePath`` (S, the table root
URI as written, e.g. ``s3a://bucket/table``), range key ``fileName`` (S, ``N.json``), and the
attributes ``tempPath`` (S, ``.tmp/<fileName>.<uuid>`` relative to ``_delta_log``), ``complete``
(S, ``"true"``/``"false"``) and ``expireTime`` (N, epoch seconds, set when complete; the
table's TTL attribute).

Writing ``N.json`` with ``overwrite=False``:

0. fail with :class:`FileExistsError` if ``N.json`` exists;
1. for a commit ``N > 0``: repair ``N-1`` if its entry is incomplete, else require ``N-1.json``;
   for ``N == 0``: refuse if a complete entry for it exists but the file does not;
2. write the temp file ``T(N)``, then put the entry ``E(N, T(N), complete=false)`` on condition
   that it does not exist: **the linearisation point** (a loser gets :class:`FileExistsError`);
3. copy ``T(N)`` to ``N.json``; 4. mark ``E`` complete with ``expireTime = now + ttl``.

Errors in steps 3-4 are logged and swallowed: the commit is durable once step 2 succeeded, and
any later writer repairs it (Delta's ``fixDeltaLog``) by copying ``T(N)`` when ``N.json`` is
missing and marking the entry complete: a writer of ``N+1`` in step 1, a writer that lost step 2
for ``N`` at once (so it then finds ``N.json``, checks it for conflicts and moves on to ``N+1``),
and :meth:`~S3DynamoDBLogStore.list_from` of the log. Unlike Delta on the JVM, temp files are
deleted once their entry is complete (and by writers that lost step 2).

The conditional put of step 2 may time out after DynamoDB applied it; the SDK's retry then fails
its condition. The entry's ``tempPath`` holds a random UUID, so the writer reads the entry back:
its own temp path means its commit landed. DynamoDB requests have the bounds of
:mod:`logstores.timeouts` (S3 keys); a request without answer or an endpoint that refuses
connections raises :class:`~logstores.errors.RequestTimeoutError` or
:class:`~logstores.errors.EndpointUnreachableError` naming the DynamoDB endpoint and the path.

Configuration, each key with the prefix ``spark.io.delta.storage.S3DynamoDBLogStore.`` or
``io.delta.storage.S3DynamoDBLogStore.`` (both set to different values is an error):
``ddb.tableName`` (``delta_log``), ``ddb.region`` (``us-east-1``), ``ddb.ttl`` (86400 seconds),
``provisionedThroughput.rcu`` / ``.wcu`` (5 / 5, used when creating the table) and ``ddb.endpoint``
(an extension of ours; otherwise boto3's ``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL``).
Credentials: boto3's standard chain (environment, profile, instance role); if the S3A keys
``fs.s3a.access.key`` / ``fs.s3a.secret.key`` are set, the DynamoDB client uses them as well.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from logstores.base import FileStatus
from logstores.conf import hadoop_conf
from logstores.dynamodb_table import (
    ATTR_FILE_NAME,
    ATTR_TABLE_PATH,
    CREATE_TABLE_RCU,
    CREATE_TABLE_WCU,
    DDB_ENDPOINT,
    DDB_REGION,
    DDB_TABLE_NAME,
    DDB_TTL,
    DEFAULT_TTL_SECONDS,
    DELTA_LOG_DIR,
    SPARK_CONF_PREFIX,
    ExternalCommitEntry,
    ensure_table,
    get_param,
    int_param,
    is_delta_log_path,
)
from logstores.errors import (
    AccessDeniedError,
    EndpointUnreachableError,
    LogStoreConfError,
    LogStoreError,
    RequestTimeoutError,
)
from logstores.filesystem import Location, path_lock
from logstores.log_files import delta_file_name, delta_version
from logstores.object_store import TEMP_DIR, check_endpoint_reachable
from logstores.redaction import redact_url, scrub
from logstores.s3 import CREDENTIAL_SETTINGS, S3BaseLogStore, error_code
from logstores.timeouts import endpoint_address

logger = logging.getLogger(__name__)

FIX_RETRIES = 3
_DENIED_CODES = {
    "UnrecognizedClientException",
    "AccessDeniedException",
    "InvalidSignatureException",
    "InvalidClientTokenId",
}


class S3DynamoDBLogStore(S3BaseLogStore):
    """Multi-writer safe S3 store for services without conditional writes (Delta's protocol).

    Mutual exclusion comes from a conditional DynamoDB ``PutItem``; see the module docstring for
    the protocol, the table layout and the configuration keys. Raises
    :class:`~logstores.errors.LogStoreConfError` for conflicting or invalid settings.
    """

    def __init__(self, conf: Mapping[str, str] | None = None) -> None:
        super().__init__(conf)
        settings = hadoop_conf(self.conf)
        self.table_name = str(get_param(settings, DDB_TABLE_NAME, "delta_log"))
        self.region = str(get_param(settings, DDB_REGION, "us-east-1"))
        self.endpoint = get_param(settings, DDB_ENDPOINT, None)
        self.ttl_seconds = int_param(settings, DDB_TTL, DEFAULT_TTL_SECONDS)
        if self.ttl_seconds < 0:
            raise LogStoreConfError(f"Can't use negative `{DDB_TTL}` value of {self.ttl_seconds}")
        self._rcu = int_param(settings, CREATE_TABLE_RCU, 5)
        self._wcu = int_param(settings, CREATE_TABLE_WCU, 5)
        self._credentials = {
            "aws_access_key_id": settings.get("fs.s3a.access.key"),
            "aws_secret_access_key": settings.get("fs.s3a.secret.key"),
            "aws_session_token": settings.get("fs.s3a.session.token"),
        }
        self._client: Any = None
        self._client_lock = threading.Lock()

    # -- DynamoDB ----------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """The boto3 DynamoDB client; the table is created on first use if missing."""
        with self._client_lock:
            if self._client is None:
                bounds = self.request_bounds
                if self.endpoint:
                    check_endpoint_reachable(
                        self.endpoint,
                        "DynamoDB",
                        f"{SPARK_CONF_PREFIX}{DDB_ENDPOINT}",
                        bounds.connect_timeout_s,
                    )
                credentials = self._credentials if self._credentials["aws_access_key_id"] else {}
                config = Config(
                    connect_timeout=bounds.connect_timeout_s,
                    read_timeout=bounds.read_timeout_s,
                    retries={"total_max_attempts": bounds.attempts, "mode": "standard"},
                )
                client = boto3.session.Session().client(
                    "dynamodb",
                    region_name=self.region,
                    endpoint_url=self.endpoint,
                    config=config,
                    **credentials,
                )
                # errors are named by the caller's _dynamodb_errors
                ensure_table(client, self.table_name, self.region, self._rcu, self._wcu)
                self._client = client
            return self._client

    @property
    def dynamodb_address(self) -> str:
        """``host:port`` of the DynamoDB endpoint (the configured one, else the region's)."""
        default = f"dynamodb.{self.region}.amazonaws.com:443"
        client = self._client
        url = self.endpoint or getattr(getattr(client, "meta", None), "endpoint_url", None)
        return endpoint_address(url, default=default)

    @contextlib.contextmanager
    def _dynamodb_errors(self, path: str | None = None) -> Iterator[None]:
        """DynamoDB errors named with the table, region, endpoint and the log file concerned."""
        where = f"DynamoDB table `{self.table_name}` in {self.region}"
        concerning = f" for {path}" if path else ""
        try:
            yield
        except ClientError as exc:
            code, status = error_code(exc)
            if code in _DENIED_CODES or status == 403:
                raise AccessDeniedError(
                    f"access to {where} was denied ({code}){concerning}; check the AWS credentials"
                ) from exc
            if code == "ResourceNotFoundException":
                raise LogStoreError(f"{where} does not exist (was it deleted?)") from exc
            raise
        except NoCredentialsError as exc:
            raise AccessDeniedError(
                f"no AWS credentials to access {where}{concerning}: set {CREDENTIAL_SETTINGS}"
            ) from exc
        except (ReadTimeoutError, ConnectTimeoutError, ConnectionClosedError) as exc:
            raise RequestTimeoutError(
                f"DynamoDB request{concerning} to {self.dynamodb_address} ({where}) got no answer "
                f"({self.request_bounds.describe()}; set delta.logstores.requestTimeoutMs to change): "
                f"{scrub(str(exc))}"
            ) from exc
        except EndpointConnectionError as exc:
            endpoint = redact_url(self.endpoint) if self.endpoint else self.dynamodb_address
            raise EndpointUnreachableError(
                f"cannot reach the DynamoDB endpoint {self.dynamodb_address} ({endpoint}){concerning}: "
                f"{scrub(str(exc))} (set by {SPARK_CONF_PREFIX}{DDB_ENDPOINT})"
            ) from exc

    def put_external_entry(self, entry: ExternalCommitEntry, overwrite: bool) -> None:
        """Put the item; unless ``overwrite``, only if absent (else :class:`FileExistsError`).

        A conditional put whose condition failed is read back: if the stored entry is this very
        one (same temp path, so an earlier attempt of this request was applied and its answer
        lost), the put succeeded.
        """
        request: dict[str, Any] = {"TableName": self.table_name, "Item": entry.to_item()}
        if not overwrite:
            request["ConditionExpression"] = f"attribute_not_exists({ATTR_FILE_NAME})"
        try:
            with self._dynamodb_errors(entry.absolute_file_path):
                self.client.put_item(**request)
        except ClientError as exc:
            if error_code(exc)[0] != "ConditionalCheckFailedException":
                raise
            stored = self.get_external_entry(entry.table_path, entry.file_name)
            if stored is not None and stored.temp_path == entry.temp_path:
                logger.info("the entry of %s had been put by an earlier attempt", entry.absolute_file_path)
                return
            raise FileExistsError(entry.absolute_file_path) from None

    def get_external_entry(self, table_path: str, file_name: str) -> ExternalCommitEntry | None:
        """The entry of ``file_name`` (consistent read), or ``None``."""
        with self._dynamodb_errors(f"{table_path}/{DELTA_LOG_DIR}/{file_name}"):
            response = self.client.get_item(
                TableName=self.table_name,
                Key={ATTR_TABLE_PATH: {"S": table_path}, ATTR_FILE_NAME: {"S": file_name}},
                ConsistentRead=True,
            )
        item = response.get("Item")
        return ExternalCommitEntry.from_item(item) if item else None

    def get_latest_external_entry(self, table_path: str) -> ExternalCommitEntry | None:
        """The entry with the greatest ``fileName`` of the table (consistent query), or ``None``."""
        with self._dynamodb_errors(f"{table_path}/{DELTA_LOG_DIR}"):
            response = self.client.query(
                TableName=self.table_name,
                KeyConditionExpression=f"{ATTR_TABLE_PATH} = :table",
                ExpressionAttributeValues={":table": {"S": table_path}},
                ScanIndexForward=False,
                Limit=1,
                ConsistentRead=True,
            )
        items = response.get("Items") or []
        return ExternalCommitEntry.from_item(items[0]) if items else None

    # -- protocol ----------------------------------------------------------------------------
    def list_from(self, path: str) -> Iterator[FileStatus]:
        """Repair the table's latest entry if incomplete, then list (log paths only)."""
        resolved = self.resolve_path_on_physical_storage(path)
        if is_delta_log_path(resolved):
            table_path = _table_path(resolved)
            entry = self.get_latest_external_entry(table_path)
            if entry is not None and not entry.complete:
                self.fix_delta_log(entry)
        return super().list_from(path)

    def write_bytes(self, path: str, data: bytes, overwrite: bool = False) -> None:
        location = self.locate(path)
        if overwrite:
            self._overwrite(location, data)
            return
        target = location.qualify(location.path)
        try:
            with path_lock(target):
                self._commit(location, target, data)
        except _EntryTakenError:
            self._repair_winner(_table_path(target), location.name, target)  # outside our path lock
            raise FileExistsError(target) from None

    def _commit(self, location: Location, target: str, data: bytes) -> None:
        """Steps 0-4 of the protocol; raises :class:`_EntryTakenError` if another writer holds the entry."""
        if self._object_exists(location):
            raise FileExistsError(target)
        table_path = _table_path(target)
        self._check_previous(location, table_path, target)
        name = location.name
        entry = ExternalCommitEntry(table_path, name, f"{TEMP_DIR}/{name}.{uuid.uuid4()}", complete=False)
        self._overwrite(self.locate(entry.absolute_temp_path), data)
        try:
            self.put_external_entry(entry, overwrite=False)
        except FileExistsError:
            self._delete_quietly(entry.absolute_temp_path)
            raise _EntryTakenError(target) from None
        try:
            self.write_copy_temp_file(entry, target, data)
            self.write_put_complete_entry(entry)
        except Exception as exc:  # noqa: BLE001 - the commit is durable; the next writer or reader repairs it
            logger.info(
                "%s after committing %s: ignoring recoverable error: %s", type(exc).__name__, target, exc
            )
            return
        self._delete_quietly(entry.absolute_temp_path)

    def _check_previous(self, location: Location, table_path: str, target: str) -> None:
        version = delta_version(location.name)
        if version is None:
            return
        if version > 0:
            previous_name = delta_file_name(version - 1)
            previous = self.get_external_entry(table_path, previous_name)
            if previous is not None and not previous.complete:
                self.fix_delta_log(previous)
                return
            previous_path = f"{target.rsplit('/', 1)[0]}/{previous_name}"
            if not self._exists(previous_path):
                raise LogStoreError(
                    f"previous commit {previous_path} doesn't exist on the file system but does in the "
                    "external log store"
                )
            return
        entry = self.get_external_entry(table_path, location.name)
        if entry is not None and entry.complete and not self._exists(target):
            raise LogStoreError(f"Old entries for table {table_path} still exist in the external log store")

    def _repair_winner(self, table_path: str, name: str, target: str) -> None:
        """After losing the entry of ``name``: complete the winner's commit if it is still incomplete.

        The winner may have died before copying its temp file to ``name`` (Delta's ``fixDeltaLog``
        case). Repairing it here means the caller, on its ``FileExistsError``, finds the file and
        checks it for conflicts instead of taking the version for free and losing the entry again.
        """
        winner = self.get_external_entry(table_path, name)
        if winner is None or winner.complete:
            return
        try:
            self.fix_delta_log(winner)
        except Exception as exc:
            raise LogStoreError(
                f"{target} is committed in {self.table_name} by another writer, which did not finish "
                f"writing it, and it could not be repaired from {winner.absolute_temp_path}: {exc}"
            ) from exc

    def fix_delta_log(self, entry: ExternalCommitEntry) -> None:
        """Complete an interrupted commit: copy ``T(N)`` to ``N.json`` if missing, mark complete."""
        if entry.complete:
            return
        with path_lock(entry.absolute_file_path):
            copied = False
            for attempt in range(FIX_RETRIES + 1):
                try:
                    if not copied and not self._exists(entry.absolute_file_path):
                        self.fix_delta_log_copy_temp_file(entry)
                    copied = True
                    self.fix_delta_log_put_complete_entry(entry)
                    logger.info("repaired the commit %s", entry.absolute_file_path)
                    break
                except Exception as exc:
                    logger.info(
                        "repairing %s failed (%s): %s", entry.absolute_file_path, type(exc).__name__, exc
                    )
                    if attempt >= FIX_RETRIES:
                        raise
        self._delete_quietly(entry.absolute_temp_path)

    # Step hooks, one per protocol step, so tests can stop a writer after any of them.
    def write_copy_temp_file(self, entry: ExternalCommitEntry, target: str, data: bytes) -> None:
        """Publish ``N.json`` with the temp file's bytes (still in memory; only we hold the entry)."""
        self._overwrite(self.locate(target), data)

    def write_put_complete_entry(self, entry: ExternalCommitEntry) -> None:
        self.put_external_entry(entry.as_complete(self.ttl_seconds), overwrite=True)

    def fix_delta_log_copy_temp_file(self, entry: ExternalCommitEntry) -> None:
        self._copy(entry.absolute_temp_path, entry.absolute_file_path)

    def fix_delta_log_put_complete_entry(self, entry: ExternalCommitEntry) -> None:
        self.put_external_entry(entry.as_complete(self.ttl_seconds), overwrite=True)

    # -- helpers -----------------------------------------------------------------------------
    def _copy(self, source: str, target: str) -> None:
        """Copy ``source`` to ``target`` unless ``target`` exists (then :class:`FileExistsError`)."""
        data = self.read_bytes(source)
        location = self.locate(target)
        if self._object_exists(location):
            raise FileExistsError(target)
        self._overwrite(location, data)

    def _exists(self, path: str) -> bool:
        return self._object_exists(self.locate(path))

    def _may_delete_temp_object(self, status: FileStatus) -> bool:
        """A temp file is garbage unless an incomplete entry still needs it for a repair."""
        name = status.name
        file_name = name.split(".json.", 1)[0] + ".json" if ".json." in name else None
        if file_name is None:
            return True
        table_path = _table_path(status.path.rsplit("/", 1)[0])
        entry = self.get_external_entry(table_path, file_name)
        return entry is None or entry.complete or not status.path.endswith(entry.temp_path)

    def _delete_quietly(self, path: str) -> None:
        try:
            self.delete(path)
        except (OSError, ClientError) as exc:  # a stray temp file is harmless
            logger.warning("could not delete the temp file %s: %s", path, exc)

    def __repr__(self) -> str:
        return f"{super().__repr__()} with DynamoDB table {self.table_name!r} in {self.region}"


class _EntryTakenError(FileExistsError):
    """Step 2 lost: another writer's entry holds the file name (which may still need a repair)."""


def _table_path(log_file_uri: str) -> str:
    """``s3a://b/t/_delta_log/N.json`` -> ``s3a://b/t`` (the parent of the file's parent)."""
    return log_file_uri.rsplit("/", 2)[0]
