"""Actions, file names, schemas, checkpoint instances and the _last_checkpoint checksum."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logstores.base import FileStatus
from replay.log.checkpoint_instances import (
    CheckpointFormat,
    CheckpointInstance,
    complete_checkpoints,
    latest_complete_checkpoint,
)
from replay.log.last_checkpoint import LastCheckpointInfo, last_checkpoint_checksum
from replay.protocol import filenames
from replay.protocol.actions import (
    AddCDCFile,
    AddFile,
    CommitInfo,
    DeletionVectorDescriptor,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    parse_action,
    parse_actions,
)
from replay.protocol.arrow_actions import map_dicts
from replay.protocol.paths import canonicalize_path, file_key, normalize_path_key, resolve_path
from replay.protocol.schema import parse_schema

ADD_LINE = (
    '{"add":{"path":"a%20b/part-1.parquet","partitionValues":{"p":"x"},"size":10,"modificationTime":5,'
    '"dataChange":true,"stats":"{\\"numRecords\\":3}","futureField":{"k":1},'
    '"deletionVector":{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":4,'
    '"sizeInBytes":40,"cardinality":6,"maxRowIndex":9}}}'
)


def test_add_round_trip_keeps_unknown_fields() -> None:
    add = parse_action(ADD_LINE)
    assert isinstance(add, AddFile)
    assert add.path == "a%20b/part-1.parquet"
    assert add.partition_values == {"p": "x"}
    assert add.data_change is True
    assert add.num_records == 3
    assert add.extra == {"futureField": {"k": 1}}
    assert add.deletion_vector is not None and add.deletion_vector.extra == {"maxRowIndex": 9}
    assert orjson.loads(add.json()) == orjson.loads(ADD_LINE)
    assert add.to_dict() == orjson.loads(ADD_LINE)


def test_unknown_action_kinds_and_blank_lines_are_skipped() -> None:
    assert parse_action('{"some_new_action":{"a":1}}') is None
    assert parse_action("   ") is None
    actions = parse_actions(['{"txn":{"appId":"a","version":3}}', "", '{"x":{}}', '{"commitInfo":{"k":1}}'])
    assert actions == [SetTransaction("a", 3), CommitInfo({"k": 1})]


def test_malformed_lines_raise_value_error() -> None:
    with pytest.raises(ValueError, match="malformed JSON"):
        parse_action('{"add":{"path":')
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_action("[1, 2]")
    with pytest.raises(ValueError, match="'add' action is not a JSON object"):
        parse_action('{"add": 5}')


def test_metadata_schema_and_arrow_schema() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {"name": "d", "type": "decimal(12,3)", "nullable": True, "metadata": {}},
            {
                "name": "m",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": "integer",
                    "valueContainsNull": True,
                },
                "nullable": True,
                "metadata": {"delta.columnMapping.physicalName": "col-1", "delta.columnMapping.id": 3},
            },
            {
                "name": "a",
                "type": {"type": "array", "elementType": "timestamp_ntz", "containsNull": False},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    line = orjson.dumps(
        {
            "metaData": {
                "id": "t1",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": orjson.dumps(schema).decode(),
                "partitionColumns": ["d"],
                "configuration": {"delta.columnMapping.mode": "Name"},
                "createdTime": 7,
            }
        }
    ).decode()
    metadata = parse_action(line)
    assert isinstance(metadata, Metadata)
    assert metadata.column_mapping_mode == "name"
    assert metadata.schema.field("m").physical_name == "col-1"
    assert metadata.schema.field("m").field_id == 3
    assert metadata.arrow_schema == pa.schema(
        [
            pa.field("id", pa.int64(), False),
            pa.field("d", pa.decimal128(12, 3)),
            pa.field("m", pa.map_(pa.string(), pa.int32())),
            pa.field("a", pa.list_(pa.field("element", pa.timestamp("us"), False))),
        ]
    )
    physical = metadata.schema.to_arrow(physical=True)
    assert physical.field("col-1").metadata == {b"PARQUET:field_id": b"3"}
    assert parse_schema(metadata.schema.to_json()) == metadata.schema
    with pytest.raises(KeyError, match="no field 'zzz'"):
        metadata.schema.field("zzz")


def test_other_actions_parse_to_snake_case() -> None:
    protocol = parse_action('{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["x"]}}')
    assert protocol == Protocol(3, 7, ["x"], None)
    remove = parse_action('{"remove":{"path":"p","deletionTimestamp":9,"dataChange":false}}')
    assert remove == RemoveFile(path="p", deletion_timestamp=9, data_change=False)
    cdc = parse_action('{"cdc":{"path":"c","partitionValues":{},"size":1,"dataChange":false}}')
    assert cdc == AddCDCFile(path="c", partition_values={}, size=1)
    domain = parse_action('{"domainMetadata":{"domain":"d","configuration":"{}","removed":true}}')
    assert domain == DomainMetadata("d", "{}", True)
    info = parse_action('{"commitInfo":{"timestamp":5,"operation":"WRITE","inCommitTimestamp":6}}')
    assert isinstance(info, CommitInfo)
    assert (info.timestamp, info.operation, info.in_commit_timestamp) == (5, "WRITE", 6)


def test_file_keys_use_dv_id_and_normalised_escapes() -> None:
    dv = DeletionVectorDescriptor("u", "abc", 4, 10, 2)
    assert dv.unique_id == "uabc@4"
    assert DeletionVectorDescriptor("i", "xyz", None, 10, 2).unique_id == "ixyz"
    assert AddFile(path="a%2fb", deletion_vector=dv).unique_key == ("a%2Fb", "uabc@4")
    assert RemoveFile(path="a%2Fb").unique_key == ("a%2Fb", None)
    assert normalize_path_key("a%20b%3a") == "a%20b%3A"
    assert canonicalize_path("/some//path/") == "file:/some/path"
    assert canonicalize_path("file:///some/path") == "file:/some/path"
    assert canonicalize_path("file:/some/path") == "file:/some/path"
    assert canonicalize_path("s3://b/k") == "s3://b/k"
    assert file_key("/x/y", None) == file_key("file:///x/y", None) == ("file:/x/y", None)


def test_resolve_path() -> None:
    assert resolve_path("file:///t", "p=a%20b/f.parquet") == "file:///t/p=a b/f.parquet"
    assert resolve_path("s3://bucket/t/", "x%2520y") == "s3://bucket/t/x%20y"
    assert resolve_path("s3://bucket/t", "s3://other/k%20z") == "s3://other/k z"
    assert resolve_path("file:///t", "file:/abs/x%20y") == "file:///abs/x y"
    assert resolve_path("s3://bucket/t", "/abs/f") == "s3://bucket/abs/f"
    assert resolve_path("/t", "/abs/f%21") == "/abs/f!"


# -- file names (FileNamesSuite) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["/a/_delta_log/123.json", "/a/123.json", "/a/_delta_log/_staged_commits/123.uuid.json"],
)
def test_is_delta_file(name: str) -> None:
    assert filenames.is_delta_file(name)
    assert filenames.delta_version(name) == 123


@pytest.mark.parametrize(
    "name",
    [
        "123ajson",
        "123.jso",
        "123a.json",
        "a123.json",
        "/a/123.uuid.json",
        "/a/_delta_log/123.uuid.json",
        "/a/_delta_log/_staged_commits/123.uuid1.uuid2.json",
    ],
)
def test_is_not_delta_file(name: str) -> None:
    assert not filenames.is_delta_file(name)


def test_checkpoint_names() -> None:
    assert filenames.is_checkpoint_file("123.checkpoint.parquet")
    assert filenames.is_checkpoint_file("123.checkpoint.0000000001.0000000087.parquet")
    assert not filenames.is_checkpoint_file("123.json")
    assert filenames.checkpoint_version("00000000000000000151.checkpoint.parquet") == 151
    assert filenames.checkpoint_version("999.checkpoint.0000000090.0000000099.parquet") == 999
    assert filenames.listing_prefix("/a", 1234) == "/a/00000000000000001234."
    assert filenames.checkpoint_files_multipart("/a", 1, 2) == [
        "/a/00000000000000000001.checkpoint.0000000001.0000000002.parquet",
        "/a/00000000000000000001.checkpoint.0000000002.0000000002.parquet",
    ]
    assert filenames.num_checkpoint_parts("1.checkpoint.parquet") is None
    assert filenames.num_checkpoint_parts("1.checkpoint.0000000078.0000000092.parquet") == 92
    assert filenames.delta_file("/t/_delta_log/", 5) == "/t/_delta_log/00000000000000000005.json"
    assert filenames.compacted_delta_versions("00000000000000000003.00000000000000000008.compacted.json") == (
        3,
        8,
    )
    assert filenames.file_version("00000000000000000003.00000000000000000008.compacted.json") == 8
    with pytest.raises(ValueError, match=r"Unexpected file type found in transaction log: foo\.txt"):
        filenames.file_version("foo.txt")


def test_checkpoint_instance_order() -> None:
    single1 = CheckpointInstance(1)
    assert single1 < CheckpointInstance(2)
    assert single1 < CheckpointInstance(1, CheckpointFormat.WITH_PARTS, 2)
    assert CheckpointInstance(2, CheckpointFormat.WITH_PARTS, 4) < CheckpointInstance(
        3, CheckpointFormat.WITH_PARTS, 2
    )
    assert CheckpointInstance(2, CheckpointFormat.WITH_PARTS, 4) < CheckpointInstance(
        2, CheckpointFormat.V2, 1, "u"
    )
    v2 = CheckpointInstance.from_name("00000000000000000002.checkpoint.80a083e8-7026.json")
    assert v2 == CheckpointInstance(
        2, CheckpointFormat.V2, 1, "00000000000000000002.checkpoint.80a083e8-7026.json"
    )


def _status(name: str, size: int = 20) -> FileStatus:
    return FileStatus(f"file:///t/_delta_log/{name}", size, 0)


def test_latest_complete_checkpoint_ignores_empty_and_incomplete() -> None:
    files = [_status(filenames.checkpoint_file_single("", 100).lstrip("/"))]
    files.append(_status(filenames.checkpoint_file_single("", 200).lstrip("/"), size=0))
    four_parts = [p.lstrip("/") for p in filenames.checkpoint_files_multipart("", 300, 4)]
    files += [_status(name) for name in four_parts[:3]]
    found = latest_complete_checkpoint(files)
    assert found is not None and found[0] == CheckpointInstance(100)
    files.append(_status(four_parts[3]))
    found = latest_complete_checkpoint(files)
    assert found is not None and found[0] == CheckpointInstance(300, CheckpointFormat.WITH_PARTS, 4)
    assert [s.name for s in found[1]] == four_parts
    assert latest_complete_checkpoint(files, before=found[0]) is not None
    assert latest_complete_checkpoint(files, before=found[0])[0] == CheckpointInstance(100)
    assert latest_complete_checkpoint(files, not_later_than=99) is None
    assert set(complete_checkpoints(files)) == {CheckpointInstance(100), found[0]}


# -- _last_checkpoint ----------------------------------------------------------------------------


def test_last_checkpoint_checksum_matches_protocol_example() -> None:
    text = (
        '{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": ["v3", [1, 2], '
        '{"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}'
    )
    assert last_checkpoint_checksum(orjson.loads(text)) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_last_checkpoint_serialisation_matches_delta() -> None:
    schema = {
        "type": "struct",
        "fields": [{"name": "c1", "type": "integer", "nullable": False, "metadata": {}}],
    }
    info = LastCheckpointInfo(1, 2, 3, size_in_bytes=20, num_of_add_files=2, checkpoint_schema=schema)
    expected = (
        '{"version":1,"size":2,"parts":3,"sizeInBytes":20,"numOfAddFiles":2,"checkpointSchema":{"type":"struct",'
        '"fields":[{"name":"c1","type":"integer","nullable":false,"metadata":{}}]},'
        '"checksum":"524d4e2226f3c3f923df4ee42dae347e"}'
    )
    assert info.to_json() == expected
    parsed = LastCheckpointInfo.from_json(expected)
    assert parsed.checksum == "524d4e2226f3c3f923df4ee42dae347e"
    assert parsed.format == CheckpointFormat.WITH_PARTS
    assert LastCheckpointInfo(1, 2).to_json(with_checksum=False) == '{"version":1,"size":2}'
    with pytest.raises(ValueError, match="no integer 'version'"):
        LastCheckpointInfo.from_json("{}")
    with pytest.raises(ValueError, match="invalid JSON"):
        LastCheckpointInfo.from_json("")


def test_nested_types_convert_to_arrow() -> None:
    from replay.protocol.schema import parse_schema

    schema = parse_schema(
        '{"type":"struct","fields":['
        '{"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]},'
        '"nullable":true,"metadata":{}},'
        '{"name":"a","type":{"type":"array","elementType":{"type":"struct","fields":[]},"containsNull":false},'
        '"nullable":true,"metadata":{}},'
        '{"name":"m","type":{"type":"map","keyType":"string","valueType":{"type":"array","elementType":"date",'
        '"containsNull":true},"valueContainsNull":true},"nullable":false,"metadata":{}}]}'
    )
    assert schema.to_arrow() == pa.schema(
        [
            pa.field("s", pa.struct([pa.field("x", pa.int64())])),
            pa.field("a", pa.list_(pa.field("element", pa.struct([]), False))),
            pa.field("m", pa.map_(pa.string(), pa.list_(pa.field("element", pa.date32()))), False),
        ]
    )


MAP_ROWS = st.lists(
    st.none() | st.dictionaries(st.text(max_size=3), st.none() | st.text(max_size=3), max_size=3), max_size=12
)


@settings(max_examples=200, deadline=None)
@given(MAP_ROWS, MAP_ROWS, st.integers(0, 12))
def test_map_columns_convert_as_pyarrow_converts_them(first: list, second: list, start: int) -> None:
    string_map = pa.map_(pa.string(), pa.string())
    column = pa.chunked_array(
        [pa.array(first, string_map), pa.array(second, string_map).slice(min(start, len(second)))],
        string_map,
    )
    assert map_dicts(column) == column.to_pylist(maps_as_pydicts="lossy")


@pytest.mark.parametrize(
    ("schema_string", "message"),
    [
        (None, "has no schemaString"),
        ("{not json", "schemaString of table t1 is invalid"),
        ('{"type": "struct", "fields": [{"name": "a"}]}', "schemaString of table t1 is invalid"),
        ('"integer"', "must be a struct"),
    ],
)
def test_a_table_schema_that_cannot_be_read_is_a_typed_error(schema_string: str | None, message: str) -> None:
    from replay import DeltaError, InvalidTableSchemaError

    metadata = Metadata(id="t1", schema_string=schema_string)
    with pytest.raises(InvalidTableSchemaError, match=message) as raised:
        _ = metadata.schema
    assert isinstance(raised.value, DeltaError) and isinstance(raised.value, ValueError)
    assert "t1" in str(raised.value).splitlines()[0]
