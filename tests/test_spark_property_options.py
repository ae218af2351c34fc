"""A Spark write whose ``delta.*`` option would change an existing table's property fails naming it
(Delta would ignore it silently); the same value is fine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay import DeltaLog
from replay.spark import register

pytestmark = pytest.mark.spark


@pytest.fixture
def deltalog(spark: Any) -> Iterator[Any]:
    register(spark)
    yield spark


def test_a_property_option_on_an_append_to_an_existing_table(deltalog: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    frame = deltalog.createDataFrame([(1, "a")], "id long, p string").coalesce(1)
    frame.write.format("deltalog").mode("append").save(path)
    with pytest.raises(
        Exception, match=r"Cannot change table property delta\.enableChangeDataFeed"
    ) as caught:
        frame.write.format("deltalog").mode("append").option("delta.enableChangeDataFeed", "true").save(path)
    assert "alter.set_table_properties" in str(caught.value)
    log = DeltaLog.for_table(path)
    assert log.latest_version() == 0 and log.update().metadata.configuration == {}
    frame.write.format("deltalog").mode("append").option("delta.appendOnly", "false").save(path)
    assert log.latest_version() == 1
