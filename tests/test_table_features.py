"""The protocol a table's metadata needs: legacy versions and their implied features, table
features, upgrades as Delta's ``Protocol.merge`` makes them, and the property keys Delta knows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.protocol.actions import Protocol
from replay.protocol.table_features import (
    FEATURES,
    InvalidTableFeatureError,
    implied_features,
    merge_protocols,
    metadata_features,
    protocol_with,
    protocol_with_versions,
    supported_features,
    table_feature,
    uses_table_features,
)
from replay.protocol.table_properties import (
    UnknownTablePropertyError,
    changed_properties,
    check_property_keys,
)

LEGACY_WRITER_2 = ["appendOnly", "invariants"]
LEGACY_WRITER_4 = [*LEGACY_WRITER_2, "checkConstraints", "changeDataFeed", "generatedColumns"]
NTZ_SCHEMA = '{"type":"struct","fields":[{"name":"t","type":"timestamp_ntz","nullable":true,"metadata":{}}]}'


def test_legacy_versions_imply_features() -> None:
    assert implied_features(1, 1) == []
    assert implied_features(1, 2) == LEGACY_WRITER_2
    assert implied_features(1, 4) == LEGACY_WRITER_4
    assert implied_features(1, 5) == LEGACY_WRITER_4  # column mapping also needs reader 2
    assert implied_features(2, 5) == [*LEGACY_WRITER_4, "columnMapping"]
    assert implied_features(2, 6) == [*LEGACY_WRITER_4, "columnMapping", "identityColumns"]
    assert implied_features(3, 7) == []
    assert supported_features(Protocol(3, 7, ["deletionVectors"], ["deletionVectors", "appendOnly"])) == [
        "deletionVectors",
        "appendOnly",
    ]


def test_features_a_configuration_needs() -> None:
    assert metadata_features({}, "{}") == []
    assert metadata_features({"delta.enableChangeDataFeed": "true"}, "{}") == ["changeDataFeed"]
    assert metadata_features({"delta.constraints.x": "a > 0", "delta.appendOnly": "true"}, "{}") == [
        "appendOnly",
        "checkConstraints",
    ]
    assert metadata_features({"delta.enableDeletionVectors": "TRUE"}, NTZ_SCHEMA) == [
        "timestampNtz",
        "deletionVectors",
    ]
    assert metadata_features({"delta.enableRowTracking": "true"}, "{}") == ["domainMetadata", "rowTracking"]
    assert metadata_features({"delta.checkpointPolicy": "v2"}, "{}") == ["v2Checkpoint"]
    assert metadata_features({"delta.enableInCommitTimestamps": "false"}, "{}") == []


def test_upgrades_as_delta_makes_them() -> None:
    legacy = Protocol(1, 2)
    assert protocol_with(legacy, []) is legacy
    assert protocol_with(legacy, ["appendOnly"]) is legacy
    assert protocol_with(legacy, ["changeDataFeed"]) == Protocol(1, 4)
    assert protocol_with(legacy, ["checkConstraints"]) == Protocol(1, 3)
    assert protocol_with(legacy, ["deletionVectors"]) == Protocol(
        3, 7, ["deletionVectors"], [*LEGACY_WRITER_2, "deletionVectors"]
    )
    assert protocol_with(Protocol(1, 4), ["inCommitTimestamp"]) == Protocol(
        1, 7, None, [*LEGACY_WRITER_4, "inCommitTimestamp"]
    )
    assert protocol_with(Protocol(2, 5), ["deletionVectors"]) == Protocol(
        3, 7, ["columnMapping", "deletionVectors"], [*LEGACY_WRITER_4, "columnMapping", "deletionVectors"]
    )
    assert protocol_with(Protocol(2, 5), ["inCommitTimestamp"]) == Protocol(
        2, 7, None, [*LEGACY_WRITER_4, "columnMapping", "inCommitTimestamp"]
    )
    # a feature property moves a legacy protocol to table features even for a legacy feature
    assert protocol_with(legacy, ["changeDataFeed"], table_features=True) == Protocol(
        1, 7, None, [*LEGACY_WRITER_2, "changeDataFeed"]
    )
    # dependencies come along; existing lists keep their order
    features = Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
    assert protocol_with(features, ["rowTracking"]) == Protocol(
        3, 7, ["deletionVectors"], ["deletionVectors", "domainMetadata", "rowTracking"]
    )
    assert protocol_with(features, ["checkConstraints"]) == Protocol(
        3, 7, ["deletionVectors"], ["deletionVectors", "checkConstraints"]
    )


def test_explicit_versions() -> None:
    # what Databricks committed for ALTER TABLE SET TBLPROPERTIES (minReaderVersion 3, minWriterVersion 7)
    assert protocol_with_versions(Protocol(1, 2), 3, 7) == Protocol(3, 7, [], LEGACY_WRITER_2)
    assert protocol_with_versions(Protocol(1, 2), None, 7) == Protocol(1, 7, None, LEGACY_WRITER_2)
    assert protocol_with_versions(Protocol(1, 2), None, 4) == Protocol(1, 4)
    assert protocol_with_versions(Protocol(1, 2), None, None) == Protocol(1, 2)
    with pytest.raises(
        InvalidTableFeatureError, match=r"DELTA_INVALID_PROTOCOL_DOWNGRADE.*\(1,4\) to \(1,2\)"
    ):
        protocol_with_versions(Protocol(1, 4), None, 2)
    with pytest.raises(InvalidTableFeatureError, match="minWriterVersion needs to be one of"):
        protocol_with_versions(Protocol(1, 4), None, 8)
    assert merge_protocols(Protocol(1, 2), Protocol(1, 4)) == Protocol(1, 4)
    merged = merge_protocols(Protocol(1, 4), Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
    assert merged == Protocol(3, 7, ["deletionVectors"], [*LEGACY_WRITER_4, "deletionVectors"])


def test_feature_names() -> None:
    assert table_feature("DELETIONVECTORS").name == "deletionVectors"
    assert table_feature("variantType-preview").name == "variantType-preview"
    with pytest.raises(
        InvalidTableFeatureError, match=r"DELTA_UNSUPPORTED_FEATURES_IN_CONFIG.*delta.feature.nope"
    ):
        table_feature("nope")


protocols = st.one_of(
    st.builds(Protocol, st.integers(1, 2), st.integers(1, 6)).filter(
        lambda p: p.min_reader_version == 1 or p.min_writer_version >= 5
    ),
    st.builds(
        lambda names: protocol_with(Protocol(1, 2), names, table_features=True),
        st.lists(st.sampled_from(sorted(FEATURES)), max_size=4),
    ),
)


@settings(max_examples=300, deadline=None)
@given(protocols, st.lists(st.sampled_from(sorted(FEATURES)), max_size=4), st.booleans())
def test_an_upgrade_supports_everything_and_never_downgrades(
    current: Protocol, wanted: list[str], explicit: bool
) -> None:
    upgraded = protocol_with(current, wanted, table_features=explicit)
    have = set(supported_features(upgraded))
    assert set(wanted) <= have
    assert set(supported_features(current)) <= have
    assert upgraded.min_reader_version >= current.min_reader_version
    assert upgraded.min_writer_version >= current.min_writer_version
    assert protocol_with(upgraded, wanted, table_features=explicit) == upgraded  # idempotent
    if uses_table_features(upgraded):
        assert upgraded.writer_features is not None and len(set(upgraded.writer_features)) == len(
            upgraded.writer_features
        )
        readers = [n for n in upgraded.writer_features if FEATURES[n].reader_writer]
        if upgraded.min_reader_version >= 3:
            assert set(upgraded.reader_features or ()) == set(readers)
        else:
            assert upgraded.reader_features is None
            assert all(FEATURES[n].min_reader_version <= upgraded.min_reader_version for n in readers)
    else:
        assert all(FEATURES[n].legacy for n in wanted)


def test_property_keys_as_delta_checks_them() -> None:
    assert check_property_keys({"delta.enablechangedatafeed": "true", "Owner": "me"}) == {
        "delta.enableChangeDataFeed": "true",
        "Owner": "me",
    }
    assert check_property_keys({"delta.Feature.DeletionVectors": "supported"}) == {
        "delta.feature.deletionvectors": "supported"
    }
    assert check_property_keys({"delta.constraints.Pos": "a > 0"}) == {"delta.constraints.Pos": "a > 0"}
    with pytest.raises(UnknownTablePropertyError) as caught:
        check_property_keys({"delta.enableChangeDataFeeds": "true"})
    assert str(caught.value).startswith(
        "[DELTA_UNKNOWN_CONFIGURATION] Unknown configuration was specified: delta.enableChangeDataFeeds\n"
        "To disable this check, set spark.databricks.delta.allowArbitraryProperties.enabled=true"
    )
    assert check_property_keys({"delta.custom": "1"}, allow_arbitrary=True) == {"delta.custom": "1"}
    with pytest.raises(UnknownTablePropertyError, match="DELTA_CANNOT_MODIFY_TABLE_PROPERTY"):
        check_property_keys({"delta.columnMapping.maxColumnId": "5"})


def test_changed_properties_compare_values() -> None:
    current = {"delta.enableChangeDataFeed": "true", "owner": "me"}
    assert changed_properties(current, {"delta.enableChangeDataFeed": "TRUE"}) == []
    assert changed_properties(current, {"delta.appendOnly": "false"}) == []  # the default
    assert changed_properties(current, {"delta.appendOnly": "true", "owner": "you"}) == [
        "delta.appendOnly",
        "owner",
    ]
    assert changed_properties({}, {"delta.checkpointInterval": "10"}) == []
