"""The DynamoDB table of Delta's S3 multi-cluster protocol: its settings, items and creation.

Shared with Delta's ``io.delta.storage.S3DynamoDBLogStore``: hash key ``tablePath``, range key
``fileName``, attributes ``tempPath``, ``complete`` and ``expireTime`` (the TTL attribute), one
:class:`ExternalCommitEntry` per item; the settings under both of Delta's prefixes
(:func:`get_param`); the table created on first use (:func:`ensure_table`). The commit protocol
itself is :mod:`logstores.s3_dynamodb`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from logstores.conf import get_delta_conf
from logstores.errors import LogStoreConfError

logger = logging.getLogger(__name__)

SPARK_CONF_PREFIX = "spark.io.delta.storage.S3DynamoDBLogStore."
BASE_CONF_PREFIX = "io.delta.storage.S3DynamoDBLogStore."
DDB_TABLE_NAME = "ddb.tableName"
DDB_REGION = "ddb.region"
DDB_ENDPOINT = "ddb.endpoint"
DDB_TTL = "ddb.ttl"
CREATE_TABLE_RCU = "provisionedThroughput.rcu"
CREATE_TABLE_WCU = "provisionedThroughput.wcu"
DEFAULT_TTL_SECONDS = 86_400
TABLE_CREATION_POLLS = 20

ATTR_TABLE_PATH = "tablePath"
ATTR_FILE_NAME = "fileName"
ATTR_TEMP_PATH = "tempPath"
ATTR_COMPLETE = "complete"
ATTR_EXPIRE_TIME = "expireTime"
DELTA_LOG_DIR = "_delta_log"


def _different_values(spark_key: str, spark_value: str, base_key: str, base_value: str) -> str:
    return (
        f"Configuration properties `{spark_key}={spark_value}` and `{base_key}={base_value}` "
        "have different values. Please set only one."
    )


def get_param(conf: Mapping[str, str], name: str, default: str | None) -> str | None:
    """A setting read under both prefixes, as Delta's ``getParam``.

    Raises :class:`LogStoreConfError` with Delta's message when both are set differently.
    """
    value = get_delta_conf(conf, BASE_CONF_PREFIX + name, _different_values)
    return value if value is not None else default


def int_param(conf: Mapping[str, str], name: str, default: int) -> int:
    """An integer setting read with :func:`get_param`; :class:`LogStoreConfError` when it is not one."""
    value = get_param(conf, name, str(default))
    try:
        return int(str(value).strip())
    except ValueError:
        raise LogStoreConfError(f"{SPARK_CONF_PREFIX}{name} must be an integer, got {value!r}") from None


def is_delta_log_path(path: str) -> bool:
    """Whether a segment of ``path`` is exactly ``_delta_log`` (Delta's ``isDeltaLogPath``)."""
    return DELTA_LOG_DIR in path.split("/")


@dataclass(frozen=True, slots=True)
class ExternalCommitEntry:
    """One DynamoDB item: the state of the commit of ``file_name`` in the table ``table_path``."""

    table_path: str
    file_name: str
    temp_path: str
    complete: bool
    expire_time: int | None = None

    @property
    def absolute_file_path(self) -> str:
        return f"{self.table_path}/{DELTA_LOG_DIR}/{self.file_name}"

    @property
    def absolute_temp_path(self) -> str:
        return f"{self.table_path}/{DELTA_LOG_DIR}/{self.temp_path}"

    def as_complete(self, ttl_seconds: int) -> ExternalCommitEntry:
        return replace(self, complete=True, expire_time=int(time.time()) + ttl_seconds)

    def to_item(self) -> dict[str, dict[str, str]]:
        item = {
            ATTR_TABLE_PATH: {"S": self.table_path},
            ATTR_FILE_NAME: {"S": self.file_name},
            ATTR_TEMP_PATH: {"S": self.temp_path},
            ATTR_COMPLETE: {"S": "true" if self.complete else "false"},
        }
        if self.expire_time is not None:
            item[ATTR_EXPIRE_TIME] = {"N": str(self.expire_time)}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Mapping[str, str]]) -> ExternalCommitEntry:
        expire = item.get(ATTR_EXPIRE_TIME)
        return cls(
            table_path=item[ATTR_TABLE_PATH]["S"],
            file_name=item[ATTR_FILE_NAME]["S"],
            temp_path=item[ATTR_TEMP_PATH]["S"],
            complete=item[ATTR_COMPLETE]["S"].lower() == "true",
            expire_time=int(expire["N"]) if expire else None,
        )


def ensure_table(client: Any, table_name: str, region: str, rcu: int, wcu: int) -> None:
    """Create the table ``table_name`` if missing (``rcu``/``wcu`` provisioned) and wait (up to 20 s)
    until it is ACTIVE; TTL on ``expireTime`` is enabled on a table created here."""
    created = False
    for _ in range(TABLE_CREATION_POLLS):
        try:
            status = client.describe_table(TableName=table_name)["Table"]["TableStatus"]
        except client.exceptions.ResourceNotFoundException:
            status = "CREATING"
            logger.info(
                "DynamoDB table `%s` in region `%s` does not exist; creating it with %d RCUs and %d WCUs",
                table_name,
                region,
                rcu,
                wcu,
            )
            try:
                client.create_table(
                    TableName=table_name,
                    AttributeDefinitions=[
                        {"AttributeName": ATTR_TABLE_PATH, "AttributeType": "S"},
                        {"AttributeName": ATTR_FILE_NAME, "AttributeType": "S"},
                    ],
                    KeySchema=[
                        {"AttributeName": ATTR_TABLE_PATH, "KeyType": "HASH"},
                        {"AttributeName": ATTR_FILE_NAME, "KeyType": "RANGE"},
                    ],
                    ProvisionedThroughput={
                        "ReadCapacityUnits": rcu,
                        "WriteCapacityUnits": wcu,
                    },
                )
                created = True
            except client.exceptions.ResourceInUseException:
                pass  # created concurrently by another process
            continue
        if status == "ACTIVE":
            if created:
                enable_ttl(client, table_name)
            return
        if status != "CREATING":
            logger.error("DynamoDB table `%s` has status %s", table_name, status)
            return
        time.sleep(1)


def enable_ttl(client: Any, table_name: str) -> None:
    """Turn on DynamoDB's TTL on ``expireTime`` (a warning only when it fails: TTL is housekeeping)."""
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": ATTR_EXPIRE_TIME},
        )
    except ClientError as exc:  # TTL is housekeeping only
        logger.warning("could not enable TTL on DynamoDB table `%s`: %s", table_name, exc)
