"""How the suite spreads over pytest-xdist workers: one SparkSession for the whole run."""

from __future__ import annotations

import pytest


def _group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return None if marker is None else str(marker.args[0] if marker.args else marker.kwargs.get("name"))


def test_every_test_of_the_shared_session_runs_in_the_spark_group(request: pytest.FixtureRequest) -> None:
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not installed: the run is serial")
    items = request.session.items
    shared = [item for item in items if "spark" in getattr(item, "fixturenames", ())]
    if not shared:
        pytest.skip("no Spark test was collected in this run (the check needs the whole suite)")
    assert [item.nodeid for item in shared if _group(item) != "spark"] == []
    own = [item for item in items if item.get_closest_marker("own_spark")]
    assert [item.nodeid for item in own if "spark" in getattr(item, "fixturenames", ())] == []
    assert [item.nodeid for item in own if _group(item) is not None] == []
    shared_ids = {item.nodeid for item in shared}
    unshared = [i for i in items if i.nodeid not in shared_ids and not i.get_closest_marker("spark")]
    assert [item.nodeid for item in unshared if _group(item) is not None] == []
