"""Deletion vectors: Z85, descriptor paths, the roaring bitmap format and every integrity check."""

from __future__ import annotations

import re
import shutil
import struct
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.cdc import table_changes
from replay.data.deletion_vector_writer import DeletionVectorWriter, remove_rows
from replay.data.deletion_vectors import (
    Z85_ALPHABET,
    CorruptDeletionVectorError,
    DeletionVectorError,
    DeletionVectorNotFoundError,
    decode_inline,
    decode_uuid,
    dv_file_path,
    encode_uuid,
    frame_for_file,
    read_deletion_vector,
    z85_decode,
    z85_decode_bytes,
    z85_encode,
)
from replay.data.roaring_bitmap import NATIVE_MAGIC, PORTABLE_MAGIC, deserialize_bitmap, serialize_bitmap
from replay.delta_log import DeltaLog
from replay.protocol.actions import DeletionVectorDescriptor
from replay.txn.write import write_table

DAT_DV_UUID = "8aebe228-b96c-4831-b0b6-22882eb9a3d3"
CHECKSUM_MESSAGE = r"at offset 1 fails its checksum \(stored 0x817940f8, computed 0x81794007\)"


def dat_descriptor(**changes: object) -> DeletionVectorDescriptor:
    """The descriptor of dat/deletion_vectors (rows 0, 2, 3, 4 of its only file are deleted)."""
    values = {
        "storage_type": "u",
        "path_or_inline_dv": "ITfmIXOK!>U^L:if1E+a",
        "offset": 1,
        "size_in_bytes": 40,
        "cardinality": 4,
        **changes,
    }
    return DeletionVectorDescriptor(**values)  # type: ignore[arg-type]


def inline(values: list[int] | np.ndarray) -> DeletionVectorDescriptor:
    data = serialize_bitmap(values)
    return DeletionVectorDescriptor("i", z85_encode(data), None, len(data), len(np.unique(values)))


def test_z85_matches_the_specification_test_vector() -> None:
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(raw) == "HelloWorld"
    assert z85_decode("HelloWorld") == raw


def test_z85_rejects_bad_length_and_characters() -> None:
    with pytest.raises(CorruptDeletionVectorError, match="multiple of 5, got 4"):
        z85_decode("abcd")
    with pytest.raises(CorruptDeletionVectorError, match="invalid Z85 character"):
        z85_decode("abc d")


def test_uuid_descriptor_names_the_dv_file_of_the_golden_table(golden_root: Path) -> None:
    table = golden_root / "dat/deletion_vectors/delta"
    assert str(decode_uuid("ITfmIXOK!>U^L:if1E+a")) == DAT_DV_UUID
    assert dv_file_path(dat_descriptor(), str(table)) == f"{table}/deletion_vector_{DAT_DV_UUID}.bin"
    assert Path(dv_file_path(dat_descriptor(), str(table)) or "").is_file()
    assert encode_uuid(uuid.UUID(DAT_DV_UUID)) == "ITfmIXOK!>U^L:if1E+a"


def test_uuid_descriptor_with_a_random_prefix_uses_a_subdirectory() -> None:
    descriptor = dat_descriptor(path_or_inline_dv="ab" + "ITfmIXOK!>U^L:if1E+a")
    assert dv_file_path(descriptor, "s3://bucket/t/") == f"s3://bucket/t/ab/deletion_vector_{DAT_DV_UUID}.bin"


def test_unknown_storage_type_is_refused() -> None:
    with pytest.raises(DeletionVectorError, match="Unknown deletion vector storage type 'x'"):
        dv_file_path(dat_descriptor(storage_type="x"), "/t")


def test_reads_the_golden_dv_file(golden_root: Path) -> None:
    rows = read_deletion_vector(dat_descriptor(), str(golden_root / "dat/deletion_vectors/delta"))
    assert rows.dtype == np.uint64
    assert rows.tolist() == [0, 2, 3, 4]


def test_reads_a_run_container(golden_root: Path) -> None:
    table = golden_root / "kernel-rs/compacted-log-files-table/delta"
    descriptors = [
        DeletionVectorDescriptor.from_dict(entry["add"]["deletionVector"])
        for entry in _log_entries(table)
        if "add" in entry and (entry["add"].get("deletionVector") or {}).get("sizeInBytes") == 35
    ]
    assert descriptors, "the table has a DV stored with a run container"
    rows = read_deletion_vector(descriptors[0], str(table))
    assert rows.tolist() == [0, 1, 2, 3, 4, 6]


def _log_entries(table: Path) -> list[dict]:
    import orjson

    entries = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        if commit.name.count(".") == 1:
            entries += [orjson.loads(line) for line in commit.read_bytes().splitlines() if line.strip()]
    return entries


def test_roundtrip_covers_array_bitmap_containers_and_high_keys() -> None:
    values = np.concatenate(
        [
            np.arange(0, 10_000, 2, dtype=np.uint64),  # 5000 values in container 0: a bitmap container
            np.array([70_000, 70_001], dtype=np.uint64),  # container 1: an array container
            np.array([(5 << 32) + 7, (5 << 32) + 65_536 * 3], dtype=np.uint64),  # another 32-bit bitmap
        ]
    )
    decoded = deserialize_bitmap(serialize_bitmap(values))
    assert decoded.tolist() == values.tolist()


def test_native_format_uses_implicit_keys() -> None:
    portable = serialize_bitmap([1, 2, 3])
    roaring32 = portable[16:]  # skip magic, count and the key of the single bitmap
    sized = struct.pack("<i", len(roaring32)) + roaring32  # Delta's Native: each bitmap after its length
    native = struct.pack("<ii", NATIVE_MAGIC, 2) + sized + sized
    assert deserialize_bitmap(native).tolist() == [1, 2, 3, (1 << 32) + 1, (1 << 32) + 2, (1 << 32) + 3]


def test_bad_magic_number_is_reported() -> None:
    with pytest.raises(CorruptDeletionVectorError, match="Unexpected RoaringBitmapArray magic number 42"):
        deserialize_bitmap(struct.pack("<iq", 42, 0))


def test_truncated_bitmap_is_reported() -> None:
    data = serialize_bitmap([1, 2, 3])
    with pytest.raises(CorruptDeletionVectorError, match="truncated or malformed"):
        deserialize_bitmap(data[:-3])


def test_inline_descriptor() -> None:
    assert decode_inline(inline([9, 3, 5])).tolist() == [3, 5, 9]


# Delta's Base85Codec, transcribed block by block (Codec.scala / kernel's Base85Codec.java): the
# references the vectorised codec is checked against.
def delta_encode_bytes(data: bytes) -> str:
    """``Base85Codec.encodeBytes``: unaligned input padded with zero bytes to ``((n + 4) / 4) * 4``."""
    aligned = data if len(data) % 4 == 0 else data + bytes(((len(data) + 4) // 4) * 4 - len(data))
    out = []
    for start in range(0, len(aligned), 4):
        value = int.from_bytes(aligned[start : start + 4], "big")
        for power in (85**4, 85**3, 85**2, 85, 1):
            out.append(Z85_ALPHABET[value // power % 85])
    return "".join(out)


def delta_decode_bytes(text: str, output_length: int) -> bytes:
    """``Base85Codec.decodeBytes``: each 5 characters summed in a long, stored with ``toInt``."""
    blocks = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start : start + 5]:
            value = value * 85 + Z85_ALPHABET.index(char)
        blocks += (value & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(blocks[:output_length])


def portable_with_run_cookie(values: list[int], as_runs: bool) -> bytes:
    """A portable RoaringBitmapArray whose one 32-bit bitmap uses the run cookie (odd sizes).

    ``as_runs`` stores ``values`` (consecutive) as one run, else as an array container.
    """
    header = struct.pack("<iqI", PORTABLE_MAGIC, 1, 0)
    cookie = struct.pack("<I", 12347)  # SERIAL_COOKIE, one container
    flags = bytes([1 if as_runs else 0])
    keys = struct.pack("<HH", 0, len(values) - 1)
    if as_runs:
        body = struct.pack("<HHH", 1, values[0], len(values) - 1)
    else:
        body = struct.pack(f"<{len(values)}H", *values)
    return header + cookie + flags + keys + body


def inline_payloads() -> dict[int, tuple[bytes, list[int]]]:
    """Serialised bitmaps of every size modulo 4, with their row indexes."""
    payloads = {}
    for rows, data in [
        ([3, 5], serialize_bitmap([3, 5])),  # 32 + 2 * 2 bytes
        ([7], serialize_bitmap([7])),  # 32 + 2 bytes
        ([1, 4], portable_with_run_cookie([1, 4], as_runs=False)),  # 25 + 2 * 2 bytes
        ([10, 11, 12], portable_with_run_cookie([10, 11, 12], as_runs=True)),  # 27 + 4 bytes
    ]:
        payloads[len(data) % 4] = (data, rows)
    assert sorted(payloads) == [0, 1, 2, 3]
    return payloads


@pytest.mark.parametrize("remainder", [0, 1, 2, 3])
def test_inline_dvs_of_every_size_as_delta_writes_them(remainder: int) -> None:
    data, rows = inline_payloads()[remainder]
    text = delta_encode_bytes(data)
    assert z85_encode(data) == text
    assert z85_decode(text)[: len(data)] == delta_decode_bytes(text, len(data)) == data
    descriptor = DeletionVectorDescriptor("i", text, None, len(data), len(rows))
    assert decode_inline(descriptor).tolist() == rows


@pytest.mark.parametrize("remainder", [0, 1, 2, 3])
def test_inline_dv_padding_is_never_decoded_as_data(remainder: int) -> None:
    """What follows ``sizeInBytes`` is padding: Delta decodes it in 32-bit blocks and drops it.

    A writer that pads the text with the highest digit (a whole ``#####`` group, above 2**32)
    or whose last group wraps past 2**32 still gives Delta's bytes.
    """
    data, rows = inline_payloads()[remainder]
    text = delta_encode_bytes(data) + "#####"
    assert delta_decode_bytes(text, len(data)) == data
    assert decode_inline(DeletionVectorDescriptor("i", text, None, len(data), len(rows))).tolist() == rows
    # a last group whose value is the padded block + 2**32: Java's toInt wraps it back
    last = int.from_bytes(data[-(len(data) % 4 or 4) :].ljust(4, b"\0"), "big")
    if last + 2**32 < 85**5:
        wrapped = delta_encode_bytes(data)[:-5] + "".join(
            Z85_ALPHABET[(last + 2**32) // power % 85] for power in (85**4, 85**3, 85**2, 85, 1)
        )
        assert (
            decode_inline(DeletionVectorDescriptor("i", wrapped, None, len(data), len(rows))).tolist() == rows
        )


def test_z85_decoding_is_delta_block_arithmetic() -> None:
    rng = np.random.default_rng(7)
    text = "".join(Z85_ALPHABET[i] for i in rng.integers(0, 85, 5 * 200))
    assert z85_decode(text) == delta_decode_bytes(text, 4 * 200)
    assert z85_decode("#####") == (85**5 - 1 - 2**32).to_bytes(4, "big")


def test_inline_cardinality_mismatch() -> None:
    descriptor = inline([1, 2])
    wrong = DeletionVectorDescriptor("i", descriptor.path_or_inline_dv, None, descriptor.size_in_bytes, 3)
    with pytest.raises(CorruptDeletionVectorError, match="holds 2 rows, descriptor cardinality is 3"):
        decode_inline(wrong)


def _copy_dv(golden_root: Path, tmp_path: Path) -> Path:
    source = golden_root / f"dat/deletion_vectors/delta/deletion_vector_{DAT_DV_UUID}.bin"
    target = tmp_path / f"deletion_vector_{DAT_DV_UUID}.bin"
    shutil.copy(source, target)
    return target


def test_checksum_mismatch_is_reported(golden_root: Path, tmp_path: Path) -> None:
    dv_file = _copy_dv(golden_root, tmp_path)
    data = bytearray(dv_file.read_bytes())
    data[-1] ^= 0xFF
    dv_file.write_bytes(bytes(data))
    with pytest.raises(
        CorruptDeletionVectorError,
        match=CHECKSUM_MESSAGE,
    ):
        read_deletion_vector(dat_descriptor(), str(tmp_path))


def test_size_mismatch_is_reported(golden_root: Path, tmp_path: Path) -> None:
    _copy_dv(golden_root, tmp_path)
    with pytest.raises(CorruptDeletionVectorError, match="at offset 1 has size 40, descriptor says 36"):
        read_deletion_vector(dat_descriptor(size_in_bytes=36), str(tmp_path))


def test_truncated_file_is_reported(golden_root: Path, tmp_path: Path) -> None:
    dv_file = _copy_dv(golden_root, tmp_path)
    dv_file.write_bytes(dv_file.read_bytes()[:30])
    with pytest.raises(CorruptDeletionVectorError, match="is truncated: 29 bytes, expected 48"):
        read_deletion_vector(dat_descriptor(), str(tmp_path))


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    expected = f"{tmp_path}/deletion_vector_{DAT_DV_UUID}.bin"
    with pytest.raises(DeletionVectorNotFoundError, match=f"Deletion vector file {expected} does not exist"):
        read_deletion_vector(dat_descriptor(), str(tmp_path))


def test_absolute_path_descriptor_is_url_decoded(tmp_path: Path) -> None:
    folder = tmp_path / "with space"
    folder.mkdir()
    (folder / "my dv.bin").write_bytes(b"\x01" + frame_for_file(serialize_bitmap([4, 8])))
    uri = f"file://{folder}/my%20dv.bin".replace("with space", "with%20space")
    descriptor = DeletionVectorDescriptor("p", uri, 1, len(serialize_bitmap([4, 8])), 2)
    assert read_deletion_vector(descriptor, "/unused").tolist() == [4, 8]


# -- inline DVs written with the Rust z85 crate ------------------------------------------------------
def crate_encode(data: bytes) -> str:
    """The Rust ``z85`` crate's ``encode`` (3.x), transcribed: whole 4-byte blocks as Z85; the last
    ``n`` (1-3) bytes as the number they form, in 5 digits whose first ``4 - n`` (zeros) are '#'."""
    whole = len(data) - len(data) % 4
    text = delta_encode_bytes(data[:whole])
    tail = data[whole:]
    if tail:
        value = int.from_bytes(tail, "big")
        digits = "".join(Z85_ALPHABET[value // power % 85] for power in (85**4, 85**3, 85**2, 85, 1))
        missing = 4 - len(tail)
        assert digits[:missing] == "0" * missing
        text += "#" * missing + digits[missing:]
    return text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_both_z85_paddings_decode_to_the_same_bytes(data: bytes) -> None:
    for text in (z85_encode(data), delta_encode_bytes(data), crate_encode(data)):
        assert len(text) % 5 == 0
        assert z85_decode_bytes(text, len(data)) == data


@pytest.mark.parametrize("remainder", [1, 2, 3])
def test_inline_dv_written_with_the_z85_crate(remainder: int) -> None:
    data, rows = inline_payloads()[remainder]
    text = crate_encode(data)
    assert text[-5] == "#" and text != z85_encode(data)
    assert delta_decode_bytes(text, len(data)) != data  # Delta's block arithmetic misreads the tail
    assert decode_inline(DeletionVectorDescriptor("i", text, None, len(data), len(rows))).tolist() == rows


# -- a DV must only mark rows the data file has ---------------------------------------------------------
def _table_with_dv_past_the_end(tmp_path: Path) -> tuple[DeltaLog, str, str]:
    """A 10-row file whose DV (written with no row count to check against) marks rows 3 and 10."""
    uri = str(tmp_path / "t")
    data = pa.table({"id": pa.array(range(10), pa.int64())})
    write_table(
        uri, data, configuration={"delta.enableDeletionVectors": "true", "delta.enableChangeDataFeed": "true"}
    )
    delta_log = DeltaLog.for_table(uri)
    (file,) = delta_log.update().files()
    with DeletionVectorWriter(uri) as writer:
        descriptor = writer.add([3, 10])
    delta_log.commit(list(remove_rows(file, descriptor)), operation="DELETE")
    dv_path = dv_file_path(descriptor, uri)
    assert dv_path is not None
    return delta_log, f"{uri}/{file.path}", dv_path


def test_a_dv_row_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    delta_log, data_file, dv_path = _table_with_dv_past_the_end(tmp_path)
    message = (
        r"\[DELTA_DELETION_VECTOR_INVALID_ROW_INDEX\] Deletion vector integrity check failed\. Encountered "
        rf"an invalid row index: deletion vector (file://)?{re.escape(dv_path)} at offset 1 marks row 10 of "
        rf"data file (file://)?{re.escape(data_file)}, which has 10 rows"
    )
    with pytest.raises(CorruptDeletionVectorError, match=message):
        delta_log.update().to_arrow()
    with pytest.raises(CorruptDeletionVectorError, match=message):  # the change feed's DV diff
        table_changes(delta_log, starting_version=1)
