"""The binary part of the LogStore contract is safe for stores that implement only text.

A third-party store may implement only Delta's text methods. Its inherited ``read_bytes``,
``open_input`` and ``write_bytes`` must serve log text files byte for byte and refuse binary
files (Parquet checkpoints) loudly, before writing anything.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from logstores import BinaryAccessUnsupportedError, LocalLogStore
from logstores.base import encode_actions, split_lines
from replay import DeltaLog, write_table
from tests.custom_stores import TextOnlyLogStore

LOG = "mem://table/_delta_log"


def parquet_bytes() -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"x": [1, 2, 3]}), buffer)
    return buffer.getvalue()


def test_text_files_round_trip_exactly() -> None:
    store = TextOnlyLogStore()
    data = b'{"commitInfo":{}}\n{"add":{"path":"a b.parquet"}}\n'
    store.write_bytes(f"{LOG}/00000000000000000000.json", data)
    assert store.read_bytes(f"{LOG}/00000000000000000000.json") == data
    assert store.open_input(f"{LOG}/00000000000000000000.json").read() == data


@pytest.mark.parametrize(
    "data",
    [parquet_bytes(), b"no final newline", b"  padded line  \n", b"carriage\r\nreturn\n", b"\xff\xfe\n"],
)
def test_binary_or_inexact_data_is_refused_before_writing(data: bytes) -> None:
    store = TextOnlyLogStore()
    path = f"{LOG}/00000000000000000010.checkpoint.parquet"
    with pytest.raises(
        BinaryAccessUnsupportedError, match=r"TextOnlyLogStore cannot write .*checkpoint.parquet"
    ):
        store.write_bytes(path, data)
    assert store.files == {}


def test_reading_a_binary_file_is_refused() -> None:
    store = TextOnlyLogStore()
    store.raw[f"{LOG}/x"] = parquet_bytes()
    with pytest.raises(BinaryAccessUnsupportedError, match="Override read_bytes, open_input and write_bytes"):
        store.read_bytes(f"{LOG}/x")


def test_split_lines_is_the_inverse_of_encode_actions() -> None:
    lines = ['{"a":1}', '{"b":"x\\u2028y"}', "", '{"c":3}']
    assert split_lines(encode_actions(lines)) == lines
    assert split_lines(b"") == []


def test_checkpoint_through_a_text_only_store_fails_cleanly(tmp_path: pytest.TempPathFactory) -> None:
    path = str(tmp_path)
    write_table(path, pa.table({"id": [1, 2]}))
    store = TextOnlyLogStore()
    local = LocalLogStore()
    log_dir = f"file://{path}/_delta_log"
    for status in local.list_from(f"{log_dir}/00000000000000000000."):
        if not status.is_dir:
            store.write(status.path, local.read(status.path))
    log = DeltaLog(path, store=store)
    assert log.snapshot().num_files == 1
    with pytest.raises(BinaryAccessUnsupportedError):
        log.checkpoint()
    assert not any(name.endswith(".parquet") or "_last_checkpoint" in name for name in store.files)
