"""The Spark schema of a Delta table, and the Arrow schema its batches are handed to Spark in."""

from __future__ import annotations

import orjson
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from replay.cdc import CDC_COMMIT_TIMESTAMP, CDC_COMMIT_VERSION, CDC_TYPE_COLUMN


def _nullable(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable(data_type.keyType), _nullable(data_type.valueType), True)
    return data_type


def spark_schema(schema_string: str, change_feed: bool) -> StructType:
    """The Spark schema of a Delta ``schemaString`` (all nullable), plus CDC columns if asked."""
    parsed = StructType.fromJson(orjson.loads(schema_string))
    fields = [StructField(f.name, _nullable(f.dataType), True) for f in parsed.fields]
    if change_feed:
        fields += [
            StructField(CDC_TYPE_COLUMN, StringType(), True),
            StructField(CDC_COMMIT_VERSION, LongType(), True),
            StructField(CDC_COMMIT_TIMESTAMP, TimestampType(), True),
        ]
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects the batches of a Python data source in."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
