"""Store resolution: create_log_store, DelegatingLogStore and class-name loading (Delta's
DelegatingLogStoreSuite, LogStoreProviderSuite and Kernel's LogStoreProviderSuite)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import logstores
from logstores import (
    DelegatingLogStore,
    HDFSLogStore,
    LocalLogStore,
    LogStoreConfError,
    MemoryLogStore,
    create_log_store,
    explain_log_store,
    load_log_store_class,
    log_store_scheme_conf_key,
)
from tests.custom_stores import CustomLogStore

CUSTOM = "tests.custom_stores.CustomLogStore"
CLOUD_DEFAULTS = {
    "s3": "S3LogStore",
    "s3a": "S3LogStore",
    "s3n": "S3LogStore",
    "abfs": "AzureLogStore",
    "abfss": "AzureLogStore",
    "adl": "AzureLogStore",
    "wasb": "AzureLogStore",
    "wasbs": "AzureLogStore",
    "gs": "GCSLogStore",
}


def test_scheme_conf_key() -> None:
    assert log_store_scheme_conf_key("s3a") == "spark.delta.logStore.s3a.impl"


def test_without_conf_the_delegating_store_is_used() -> None:
    assert type(create_log_store()) is DelegatingLogStore
    assert type(create_log_store({})) is DelegatingLogStore


@pytest.mark.parametrize(("scheme", "class_name"), sorted(CLOUD_DEFAULTS.items()))
def test_cloud_scheme_defaults(scheme: str, class_name: str) -> None:
    store = DelegatingLogStore({}).get_delegate(f"{scheme}://dummy/path")
    assert type(store).__name__ == class_name
    assert type(store) is getattr(logstores, class_name)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/tmp/table/_delta_log/0.json", LocalLogStore),
        ("relative/table", LocalLogStore),
        ("file:///tmp/table", LocalLogStore),
        ("FILE:///tmp/table", LocalLogStore),
        ("memory://table", MemoryLogStore),
        ("hdfs://namenode/table", HDFSLogStore),
        ("fake://dummy", HDFSLogStore),
    ],
)
def test_other_scheme_defaults(path: str, expected: type) -> None:
    assert type(DelegatingLogStore({}).get_delegate(path)) is expected


def test_delegates_are_cached_per_scheme() -> None:
    store = DelegatingLogStore({})
    first = store.get_delegate("memory://a/x")
    assert store.get_delegate("memory://b/y") is first
    assert store.get_delegate("MEMORY://c/z") is first
    assert store.get_delegate("file:///tmp/x") is not first


def test_every_call_is_routed_by_scheme(tmp_path: Path) -> None:
    store = create_log_store({"spark.delta.logStore.memory.impl": CUSTOM})
    store.write("memory://routed/_delta_log/0", ["m"])
    assert store.read("memory://routed/_delta_log/0") == ["m"]
    assert [s.name for s in store.list_from("memory://routed/_delta_log/0")] == ["0"]
    assert type(store.get_delegate("memory://routed")) is CustomLogStore  # type: ignore[attr-defined]
    local = tmp_path / "0"
    store.write(str(local), ["l"])
    assert local.read_text() == "l\n"
    assert store.is_partial_write_visible(str(local)) is False
    assert store.resolve_path_on_physical_storage(str(local)) == f"file://{local}"


JVM_AND_ALIASES = [
    ("io.delta.storage.S3SingleDriverLogStore", "S3SingleDriverLogStore"),
    ("org.apache.spark.sql.delta.storage.S3SingleDriverLogStore", "S3SingleDriverLogStore"),
    ("io.delta.storage.S3DynamoDBLogStore", "S3DynamoDBLogStore"),
    ("io.delta.storage.HDFSLogStore", "HDFSLogStore"),
    ("org.apache.spark.sql.delta.storage.HDFSLogStore", "HDFSLogStore"),
    ("io.delta.storage.LocalLogStore", "LocalLogStore"),
    ("org.apache.spark.sql.delta.storage.LocalLogStore", "LocalLogStore"),
    ("io.delta.storage.AzureLogStore", "AzureLogStore"),
    ("org.apache.spark.sql.delta.storage.AzureLogStore", "AzureLogStore"),
    ("io.delta.storage.GCSLogStore", "GCSLogStore"),
    ("local", "LocalLogStore"),
    ("memory", "MemoryLogStore"),
    ("hdfs", "HDFSLogStore"),
    ("s3", "S3LogStore"),
    ("s3-single-driver", "S3SingleDriverLogStore"),
    ("s3-dynamodb", "S3DynamoDBLogStore"),
    ("gcs", "GCSLogStore"),
    ("azure", "AzureLogStore"),
    ("logstores.local.LocalLogStore", "LocalLogStore"),
    ("logstores.local:LocalLogStore", "LocalLogStore"),
    (CUSTOM, "CustomLogStore"),
]


@pytest.mark.parametrize(("class_name", "expected"), JVM_AND_ALIASES)
@pytest.mark.parametrize("scheme", ["s3", "s3a", "s3n", "abfs", "abfss", "adl", "wasb", "wasbs", "fake"])
@pytest.mark.parametrize("spelling", ["prefixed", "unprefixed", "both"])
def test_scheme_key_chooses_the_store(scheme: str, class_name: str, expected: str, spelling: str) -> None:
    key = log_store_scheme_conf_key(scheme)
    conf = {
        "prefixed": {key: class_name},
        "unprefixed": {key.removeprefix("spark."): class_name},
        "both": {key: class_name, key.removeprefix("spark."): class_name},
    }[spelling]
    store = create_log_store(conf)
    assert type(store) is DelegatingLogStore
    assert type(store.get_delegate(f"{scheme}://dummy")).__name__ == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize("spelling", ["prefixed", "unprefixed", "both"])
@pytest.mark.parametrize("path", ["fake://dummy", "s3a://bucket/table"])
def test_class_key_chooses_the_store(spelling: str, path: str) -> None:
    conf = {
        "prefixed": {"spark.delta.logStore.class": CUSTOM},
        "unprefixed": {"delta.logStore.class": CUSTOM},
        "both": {"spark.delta.logStore.class": CUSTOM, "delta.logStore.class": CUSTOM},
    }[spelling]
    store = create_log_store(conf)
    assert type(store) is CustomLogStore
    assert store.conf == conf
    assert explain_log_store(path, conf).store_class is CustomLogStore


@pytest.mark.parametrize(
    "class_name",
    ["org.apache.spark.sql.delta.storage.DelegatingLogStore", "logstores.delegating.DelegatingLogStore"],
)
def test_naming_the_delegating_store_as_class_gives_delegation(class_name: str) -> None:
    store = create_log_store({"spark.delta.logStore.class": class_name})
    assert type(store) is DelegatingLogStore


@pytest.mark.parametrize("class_key", ["spark.delta.logStore.class", "delta.logStore.class"])
@pytest.mark.parametrize("scheme_key", ["spark.delta.logStore.s3a.impl", "delta.logStore.s3a.impl"])
def test_class_and_scheme_keys_cannot_be_mixed(class_key: str, scheme_key: str) -> None:
    conf = {class_key: CUSTOM, scheme_key: CUSTOM}
    with pytest.raises(LogStoreConfError) as error:
        create_log_store(conf)
    assert str(error.value) == (
        f"[DELTA_INVALID_LOGSTORE_CONF] (`{class_key}`) and (`{scheme_key}`) cannot be set at the "
        "same time. Please set only one group of them."
    )


def test_inconsistent_scheme_keys() -> None:
    conf = {"delta.logStore.s3a.impl": "hdfs", "spark.delta.logStore.s3a.impl": CUSTOM}
    with pytest.raises(LogStoreConfError) as error:
        create_log_store(conf)
    assert str(error.value) == (
        f"[DELTA_INCONSISTENT_LOGSTORE_CONFS] (delta.logStore.s3a.impl = hdfs, "
        f"spark.delta.logStore.s3a.impl = {CUSTOM}) cannot be set to different values. Please only "
        "set one of them, or set them to the same value."
    )


def test_inconsistent_class_keys() -> None:
    conf = {"delta.logStore.class": "local", "spark.delta.logStore.class": "memory"}
    with pytest.raises(
        LogStoreConfError, match=r"\(delta.logStore.class = local, spark.delta.logStore.class"
    ):
        create_log_store(conf)


def test_a_class_that_is_not_a_log_store() -> None:
    conf = {"spark.delta.logStore.fake.impl": "tests.custom_stores.NotAStore"}
    with pytest.raises(LogStoreConfError) as error:
        DelegatingLogStore(conf).get_delegate("fake://x")
    assert str(error.value) == (
        "Can not use tests.custom_stores.NotAStore as a LogStore (spark.delta.logStore.fake.impl = "
        "tests.custom_stores.NotAStore): it is not a subclass of logstores.LogStore"
    )
    with pytest.raises(LogStoreConfError, match=r"builtins\.str"):
        create_log_store({"spark.delta.logStore.class": "builtins.str"})


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_module.Store", "there is no Python module no_such_module"),
        ("tests.custom_stores.Missing", "module tests.custom_stores has no attribute 'Missing'"),
        ("NoDots", "it is not an alias, a Delta class name or a plugin"),
        ("io.delta.storage.UnknownLogStore", "there is no Python module io.delta.storage"),
    ],
)
def test_classes_that_cannot_be_loaded(name: str, message: str) -> None:
    with pytest.raises(LogStoreConfError, match=message) as error:
        create_log_store({"delta.logStore.class": name})
    assert f"'{name}' for key delta.logStore.class" in str(error.value)


def test_missing_optional_package_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # makes "import s3fs" fail
    monkeypatch.delitem(sys.modules, "logstores.s3", raising=False)
    with pytest.raises(LogStoreConfError) as error:
        DelegatingLogStore({}).get_delegate("s3a://bucket/table")
    assert "pip install 'delta-logstores[s3]'" in str(error.value)
    assert "logstores.s3" in str(error.value)


def test_explain_names_the_deciding_key_or_default() -> None:
    assert explain_log_store("/tmp/t").reason == "default for scheme 'file'"
    assert explain_log_store("hdfs://nn/t").reason == "default for other schemes ('hdfs')"
    choice = explain_log_store(
        "s3a://b/t", {"delta.logStore.s3a.impl": "io.delta.storage.S3DynamoDBLogStore"}
    )
    assert choice.class_name == "logstores.s3_dynamodb.S3DynamoDBLogStore"
    assert choice.reason == "delta.logStore.s3a.impl = io.delta.storage.S3DynamoDBLogStore"
    assert explain_log_store("gs://b/t").reason == "default for scheme 'gs'"


def test_load_by_class_name_gives_the_class() -> None:
    assert load_log_store_class("io.delta.storage.LocalLogStore") is LocalLogStore
    assert load_log_store_class("memory") is MemoryLogStore


def test_entry_point_plugins(tmp_path: Path) -> None:
    """A third-party distribution registers a store under the ``delta_logstores`` group."""
    (tmp_path / "acme_store.py").write_text(
        "from logstores import MemoryLogStore\nclass AcmeLogStore(MemoryLogStore):\n    pass\n"
    )
    dist_info = tmp_path / "acme_store-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-store\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[delta_logstores]\nacme = acme_store:AcmeLogStore\n")
    script = textwrap.dedent(
        """
        import sys
        from logstores import create_log_store
        store = create_log_store({"spark.delta.logStore.acme.impl": "acme"})
        print(type(store.get_delegate("acme://bucket/t")).__name__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "AcmeLogStore"
    missing = script.replace('"acme"})', '"no-such-plugin"})')
    result = subprocess.run(
        [sys.executable, "-c", missing],
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "entry-point group 'delta_logstores' was searched and holds 'acme'" in result.stderr


def test_pyspark_is_not_imported_for_plain_mappings() -> None:
    script = (
        "import sys, logstores\n"
        "logstores.create_log_store({'spark.delta.logStore.class': 'local'})\n"
        "print('pyspark' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_pyspark_spark_conf_without_a_session() -> None:
    from pyspark import SparkConf

    conf = SparkConf(loadDefaults=False).set("spark.delta.logStore.memory.impl", CUSTOM)
    store = create_log_store(conf)
    assert type(store.get_delegate("memory://x")) is CustomLogStore  # type: ignore[attr-defined]


@pytest.mark.spark
def test_spark_session_and_runtime_conf(spark: object) -> None:
    spark.conf.set("spark.delta.logStore.fake.impl", CUSTOM)  # type: ignore[attr-defined]
    try:
        for conf in (spark, spark.conf):  # type: ignore[attr-defined]
            store = create_log_store(conf)
            assert type(store.get_delegate("fake://x")) is CustomLogStore  # type: ignore[attr-defined]
        assert type(create_log_store(spark.sparkContext.getConf())) is DelegatingLogStore  # type: ignore[attr-defined]
    finally:
        spark.conf.unset("spark.delta.logStore.fake.impl")  # type: ignore[attr-defined]


@pytest.mark.parametrize("key", ["spark.delta.logStore.file.impl", "delta.logStore.file.impl"])
@pytest.mark.parametrize("path", ["/tmp/table/_delta_log/x", "relative/table", "file:///tmp/table"])
def test_a_bare_local_path_is_a_file_path(key: str, path: str) -> None:
    conf = {key: CUSTOM}
    store = create_log_store(conf)
    assert type(store.get_delegate(path)).__name__ == "CustomLogStore"  # type: ignore[attr-defined]
    assert explain_log_store(path, conf).reason == f"{key} = {CUSTOM}"
    with pytest.raises(LogStoreConfError, match=f"'no.such.StoreClass' for key {key}"):
        create_log_store({key: "no.such.StoreClass"})
    with pytest.raises(LogStoreConfError, match=f"'no.such.StoreClass' for key {key}"):
        DelegatingLogStore({key: "no.such.StoreClass"}).write(f"{path}/0.json", ["x"])
    with pytest.raises(LogStoreConfError, match=f"'no.such.StoreClass' for key {key}"):
        explain_log_store(path, {key: "no.such.StoreClass"})


def test_bare_and_file_paths_share_one_delegate(tmp_path: Path) -> None:
    store = create_log_store({})
    assert store.get_delegate(str(tmp_path)) is store.get_delegate(f"file://{tmp_path}")  # type: ignore[attr-defined]


# -- schemes fsspec does not know ------------------------------------------------------------------
def test_a_scheme_fsspec_does_not_know_is_named_with_how_to_register_it() -> None:
    store = create_log_store({})
    with pytest.raises(LogStoreConfError) as caught:
        store.read("acme://bucket/t/_delta_log/00000000000000000000.json")
    message = str(caught.value)
    assert message.startswith(
        "No filesystem is registered for the URI scheme 'acme' (path acme://bucket/t/_delta_log/"
    )
    assert "fsspec.register_implementation('acme', " in message
    assert "entry-point group 'fsspec.specs'" in message
    assert "Spark's Python workers find it too" in message
    assert "spark.delta.logStore.acme.impl" in message  # a log store needs no fsspec filesystem
    with pytest.raises(LogStoreConfError, match=r"scheme 'acme'.*data files are always read and written"):
        logstores.open_filesystem("acme://bucket/t/part-00000.parquet")


ACME_FILESYSTEM = """
from fsspec.implementations.memory import MemoryFileSystem


def acme_filesystem(scheme):
    class AcmeFileSystem(MemoryFileSystem):  # fsspec's in-memory files under another scheme
        protocol = scheme

        @classmethod
        def _strip_protocol(cls, path):
            return super()._strip_protocol(path.removeprefix(f"{scheme}://"))

    return AcmeFileSystem


AcmeFileSystem = acme_filesystem("acmefs")
"""


def test_a_registered_filesystem_serves_the_scheme() -> None:
    import uuid

    import fsspec

    namespace: dict[str, Any] = {}
    exec(ACME_FILESYSTEM, namespace)
    scheme = f"acme{uuid.uuid4().hex[:8]}"
    fsspec.register_implementation(scheme, namespace["acme_filesystem"](scheme))
    store = create_log_store({})
    store.create_directories(f"{scheme}://bucket/t/_delta_log")
    target = f"{scheme}://bucket/t/_delta_log/00000000000000000000.json"
    store.write(target, ["{}"])
    assert store.read(target) == ["{}"]
    assert [status.path for status in store.list_from(target)] == [target]


def test_a_filesystem_from_the_fsspec_specs_entry_point_serves_the_scheme(tmp_path: Path) -> None:
    """What the error recommends for Spark's workers: a package's ``fsspec.specs`` entry point."""
    (tmp_path / "acme_fs.py").write_text(ACME_FILESYSTEM)
    dist_info = tmp_path / "acme_fs-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-fs\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[fsspec.specs]\nacmefs = acme_fs:AcmeFileSystem\n")
    script = (
        "from logstores import create_log_store\n"
        "store = create_log_store({})\n"
        "store.create_directories('acmefs://bucket/t/_delta_log')\n"
        "store.write('acmefs://bucket/t/_delta_log/00000000000000000000.json', ['{}'])\n"
        "print(store.read('acmefs://bucket/t/_delta_log/00000000000000000000.json'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['{}']"


@pytest.mark.parametrize(
    "uri",
    ["/tmp/t/part 1.parquet", "file:///tmp/t/part-1.parquet", "file:/tmp/t/x", "local:///tmp/t/x", "rel/x"],
)
def test_local_path_is_the_path_open_filesystem_gives_for_local_files(uri: str) -> None:
    fs, path = logstores.open_filesystem(uri)
    assert logstores.local_path(uri) == path
    assert fs.protocol[0] in ("file", "local")


@pytest.mark.parametrize(
    "uri", ["s3a://bucket/t/x.parquet", "memory://t/x.parquet", "gs://b/x", "abfss://c@a/x"]
)
def test_local_path_is_none_for_other_filesystems(uri: str) -> None:
    assert logstores.local_path(uri) is None
