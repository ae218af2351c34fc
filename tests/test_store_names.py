"""Store names in the configuration: every key checked at once, when the store is created, with
the close matches of a name that resolves to nothing and what to install for a missing module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logstores import LogStoreConfError, check_log_store_conf, create_log_store, explain_log_store
from logstores.close_names import close_matches
from logstores.registry import _OUR_NAMES, JVM_CLASS_NAMES, KNOWN_LOG_STORES, canonical_alias

S3A_KEY = "spark.delta.logStore.s3a.impl"


def conf_error(conf: dict[str, str]) -> str:
    """The message of the error ``create_log_store(conf)`` raises (before any path is used)."""
    with pytest.raises(LogStoreConfError) as caught:
        create_log_store(conf)
    return str(caught.value)


def test_a_misspelled_delta_class_names_the_key_and_the_right_class() -> None:
    message = conf_error({S3A_KEY: "io.delta.storage.S3SingleDriverLogStor"})
    assert message.startswith(
        "Unknown LogStore class 'io.delta.storage.S3SingleDriverLogStor' for key "
        "spark.delta.logStore.s3a.impl. Did you mean io.delta.storage.S3SingleDriverLogStore?"
    )
    assert "not a package" not in message  # Python's import error about the stdlib 'io' is gone


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("s3-single", "s3-single-driver"),
        ("gsc", "gcs"),
        ("S3-DynamoDB", "s3-dynamodb"),
        ("org.apache.spark.sql.delta.storage.HDFSLogStor", "org.apache.spark.sql.delta.storage.HDFSLogStore"),
        ("logstores.s3_dynamodb:S3DynamoDBLogStor", "logstores.s3_dynamodb.S3DynamoDBLogStore"),
    ],
)
def test_close_matches_come_from_aliases_delta_names_and_python_paths(name: str, suggestion: str) -> None:
    message = conf_error({"delta.logStore.class": name})
    assert " for key delta.logStore.class" in message
    assert f"Did you mean {suggestion}?" in message


def test_a_python_path_to_an_existing_module_without_the_class() -> None:
    message = conf_error({S3A_KEY: "tests.custom_stores.CustomLogStor"})
    assert message.startswith(
        "LogStore class 'tests.custom_stores.CustomLogStor' for key spark.delta.logStore.s3a.impl not "
        "found: module tests.custom_stores has no attribute 'CustomLogStor'. Did you mean "
        "tests.custom_stores.CustomLogStore?"
    )
    assert "LogStore classes in tests.custom_stores: CustomLogStore" in message


def test_a_name_close_to_nothing_says_how_stores_are_named() -> None:
    message = conf_error({"spark.delta.logStore.oss.impl": "acme_storage.OssLogStore"})
    assert message.startswith(
        "Unknown LogStore class 'acme_storage.OssLogStore' for key spark.delta.logStore.oss.impl: "
        "there is no Python module acme_storage. A LogStore is named by an alias (azure, delegating, "
        "gcs, hdfs, local, memory, s3, s3-dynamodb, s3-single-driver), a Delta class name"
    )
    assert "entry-point group 'delta_logstores' was searched" in message
    assert "Did you mean" not in message


def test_a_module_missing_a_dependency_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme_sdk_store.py").write_text("import acme_cloud_sdk.client\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = conf_error({"spark.delta.logStore.acme.impl": "acme_sdk_store.AcmeLogStore"})
    assert message == (
        "LogStore class 'acme_sdk_store.AcmeLogStore' for key spark.delta.logStore.acme.impl cannot be "
        "loaded: its module acme_sdk_store needs the module 'acme_cloud_sdk', which is not installed; "
        "install the distribution that provides the Python module 'acme_cloud_sdk'"
    )


@pytest.mark.parametrize("name", ["io.delta.storage.S3DynamoDBLogStore", "s3-single-driver", "s3"])
def test_a_built_in_store_missing_its_extra_fails_at_creation(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # makes "import s3fs" fail
    for module in ("logstores.s3", "logstores.s3_dynamodb"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    message = conf_error({S3A_KEY: name})
    assert message.startswith(f"LogStore class '{name}' for key {S3A_KEY} cannot be loaded")
    assert message.endswith("which is not installed; pip install 'delta-logstores[s3]'")


def test_a_module_that_fails_to_import_for_another_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acme_half_store.py").write_text("from os import no_such_name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = conf_error({"spark.delta.logStore.acme.impl": "acme_half_store.AcmeLogStore"})
    assert message.startswith(
        "LogStore class 'acme_half_store.AcmeLogStore' for key spark.delta.logStore.acme.impl cannot be "
        "loaded: importing its module acme_half_store failed (cannot import name 'no_such_name'"
    )


def test_every_bad_key_is_reported_at_once() -> None:
    conf = {
        S3A_KEY: "io.delta.storage.S3SingleDriverLogStor",
        "delta.logStore.gs.impl": "gsc",
        "spark.delta.logStore.file.impl": "local",  # fine
        "spark.delta.logStore.fake.impl": "tests.custom_stores.NotAStore",
        "delta.logStore.fake.impl": "tests.custom_stores.NotAStore",  # same key, other spelling
        "spark.delta.logStore.memory.impl": "tests.custom_stores.CustomLogStore",  # fine
    }
    message = conf_error(conf)
    first, *details = message.splitlines()
    assert first == (
        "3 LogStore settings name no usable class: spark.delta.logStore.fake.impl = "
        "tests.custom_stores.NotAStore; delta.logStore.gs.impl = gsc; spark.delta.logStore.s3a.impl = "
        "io.delta.storage.S3SingleDriverLogStor"
    )
    assert len(details) == 3
    assert details[0].startswith("- Can not use tests.custom_stores.NotAStore as a LogStore")
    assert details[1] == "- Unknown LogStore class 'gsc' for key delta.logStore.gs.impl. Did you mean gcs?"
    assert details[2].startswith("- Unknown LogStore class 'io.delta.storage.S3SingleDriverLogStor'")
    with pytest.raises(LogStoreConfError) as checked:
        check_log_store_conf(conf)
    assert str(checked.value) == message
    with pytest.raises(LogStoreConfError) as explained:  # `deltalog store` reports them as well
        explain_log_store("/tmp/t", conf)
    assert str(explained.value) == message


def test_a_bad_class_key_fails_at_creation() -> None:
    message = conf_error({"spark.delta.logStore.class": "io.delta.storage.LocalLogStor"})
    assert message.startswith(
        "Unknown LogStore class 'io.delta.storage.LocalLogStor' for key spark.delta.logStore.class. "
        "Did you mean io.delta.storage.LocalLogStore?"
    )


def test_delta_errors_come_before_the_names_are_checked() -> None:
    conf = {"spark.delta.logStore.class": "nonsense", "spark.delta.logStore.s3a.impl": "nonsense"}
    assert conf_error(conf).startswith("[DELTA_INVALID_LOGSTORE_CONF]")


def test_good_settings_pass_and_options_keys_are_not_names() -> None:
    conf = {
        S3A_KEY: "io.delta.storage.S3DynamoDBLogStore",
        "spark.delta.logStore.gs.impl": "gcs",
        "spark.delta.logStore.gs.options.endpoint_url": "http://127.0.0.1:1",
        "spark.delta.logStore.s3.verifyConditionalWrites": "false",
    }
    check_log_store_conf(conf)
    create_log_store(conf)


def test_a_misspelled_plugin_name_suggests_the_installed_plugin(tmp_path: Path) -> None:
    (tmp_path / "acme_store.py").write_text(
        "from logstores import MemoryLogStore\nclass AcmeLogStore(MemoryLogStore):\n    pass\n"
    )
    dist_info = tmp_path / "acme_store-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-store\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text("[delta_logstores]\nacme-lock = acme_store:AcmeLogStore\n")
    script = (
        "from logstores import create_log_store\n"
        "create_log_store({'spark.delta.logStore.acme.impl': 'acme-lok'})"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        "LogStoreConfError: Unknown LogStore class 'acme-lok' for key spark.delta.logStore.acme.impl. "
        "Did you mean acme-lock?"
    ) in result.stderr


@given(
    name=st.sampled_from(sorted(JVM_CLASS_NAMES)),
    position=st.integers(min_value=0, max_value=200),
    kind=st.sampled_from(["delete", "double", "swap"]),
)
def test_one_typo_in_a_delta_class_name_suggests_that_store_first(
    name: str, position: int, kind: str
) -> None:
    start = name.rindex(".") + 1  # a typo in the class part: the package part is shared by many
    index = start + position % (len(name) - start - 1)
    if kind == "delete":
        typo = name[:index] + name[index + 1 :]
    elif kind == "double":
        typo = name[:index] + name[index] + name[index:]
    else:
        typo = name[:index] + name[index + 1] + name[index] + name[index + 2 :]
    if typo == name or canonical_alias(typo) is not None:
        return
    with pytest.raises(LogStoreConfError) as caught:
        check_log_store_conf({"delta.logStore.class": typo})
    first_match = str(caught.value).split("Did you mean ", 1)[1].split("?", 1)[0]
    assert canonical_alias(first_match) == canonical_alias(name)


def test_known_aliases_are_listed_in_the_naming_help() -> None:
    message = conf_error({S3A_KEY: "zzz"})
    assert f"({', '.join(sorted(KNOWN_LOG_STORES))})" in message


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("io.delta.storage.S3LogStore", "logstores.s3.S3LogStore"),  # no such Delta class: ours
        ("io.delta.storage.GCSLogStre", "io.delta.storage.GCSLogStore"),  # a typo in the suffix
        ("io.delta.storage.HDFSogStore", "io.delta.storage.HDFSLogStore"),
        ("S3DynamoDBLogStore", "io.delta.storage.S3DynamoDBLogStore"),  # the package left out
        ("io.delta.storag.AzureLogStore", "io.delta.storage.AzureLogStore"),  # a typo in the package
        ("S3", "s3"),
    ],
)
def test_close_matches_rank_the_intended_store_first(name: str, first: str) -> None:
    candidates = [*KNOWN_LOG_STORES, *JVM_CLASS_NAMES, *_OUR_NAMES]
    assert close_matches(name, candidates)[0] == first


@pytest.mark.parametrize(
    "name", ["acme_storage.OssLogStore", "com.acme.MyLogStore", "io.delta.storage.MinioLogStore", "xyz"]
)
def test_close_matches_do_not_offer_a_store_that_only_shares_the_suffix(name: str) -> None:
    assert close_matches(name, [*KNOWN_LOG_STORES, *JVM_CLASS_NAMES, *_OUR_NAMES]) == []


# -- Spark: register(spark) checks the session's store settings ------------------------------------
@pytest.mark.spark
def test_register_fails_for_a_bad_store_setting_before_any_load(spark: object) -> None:
    from replay.spark import register

    key = "spark.delta.logStore.s3a.impl"
    spark.conf.set(key, "io.delta.storage.S3SingleDriverLogStor")  # type: ignore[attr-defined]
    try:
        with pytest.raises(LogStoreConfError) as caught:
            register(spark)  # type: ignore[arg-type]
    finally:
        spark.conf.unset(key)  # type: ignore[attr-defined]
    assert str(caught.value).startswith(
        "Unknown LogStore class 'io.delta.storage.S3SingleDriverLogStor' for key "
        "spark.delta.logStore.s3a.impl. Did you mean io.delta.storage.S3SingleDriverLogStore?"
    )
