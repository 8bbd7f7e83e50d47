"""Znode paths follow DESIGN.md section 2 exactly."""

from __future__ import annotations

import pytest

from kafkalite.zk import paths


def test_paths_match_the_design_table():
    assert paths.controller_path() == "/controller"
    assert paths.controller_epoch_path() == "/controller_epoch"
    assert paths.brokers_ids_path() == "/brokers/ids"
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.topics_path() == "/brokers/topics"
    assert paths.topic_path("t") == "/brokers/topics/t"
    assert paths.partitions_path("t") == "/brokers/topics/t/partitions"
    assert paths.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.admin_delete_topic_path("t") == "/admin/delete_topics/t"
    assert paths.admin_reassignment_path("t", 1) == "/admin/partitions_reassigned/t/1"
    assert paths.admin_partition_add_path("t", 1) == "/admin/partitions_add/t/1"
    assert paths.admin_partition_remove_path("t", 1) == "/admin/partitions_remove/t/1"
    assert paths.admin_reassign_partitions_path() == "/admin/reassign_partitions"
    assert paths.ADMIN_REASSIGN_PARTITIONS not in paths.PERSISTENT_PARENTS
    assert paths.preferred_replica_election_path() == "/admin/preferred_replica_election"
    assert paths.producer_id_block_path() == "/latest_producer_id_block"


@pytest.mark.parametrize("topic", ["", "a/b", ".", ".."])
def test_topic_names_that_would_escape_their_znode_are_refused(topic):
    with pytest.raises(ValueError):
        paths.topic_path(topic)


@pytest.mark.parametrize("partition", [-1, True, "0"])
def test_partitions_must_be_non_negative_ints(partition):
    with pytest.raises(ValueError):
        paths.partition_state_path("t", partition)


@pytest.mark.parametrize("entity", ["²", "x", "-1"])
def test_broker_config_entities_are_ascii_ids_or_the_default(entity):
    assert paths.config_broker_path("<default>") == "/config/brokers/<default>"
    assert paths.config_broker_path("7") == "/config/brokers/7"
    with pytest.raises(ValueError, match="neither an id"):
        paths.config_broker_path(entity)
