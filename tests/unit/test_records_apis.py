"""DescribeLogDirs' answer from a snapshot of the log dirs, DeleteRecords' request parsing,
and the `kafkalite log-dirs` summary built from the brokers' answers."""

from __future__ import annotations

from kafkalite.broker.records_apis import ReplicaOnDisk, describe_log_dirs, parse_delete_records
from kafkalite.cli.records_cmd import human_bytes, summarize
from kafkalite.protocol.errors import ErrorCode

REPLICAS = {
    "/d1": [ReplicaOnDisk("b", 0, 300, 0), ReplicaOnDisk("a", 1, 200, 4), ReplicaOnDisk("a", 0, 100, 0)],
    "/d2": [ReplicaOnDisk("c", 0, 50, 0)],
}


def test_every_dir_and_replica_when_no_topic_is_named():
    results = describe_log_dirs(["/d1", "/d2", "/d3"], [], REPLICAS, None)
    assert results == [
        {"error_code": 0, "log_dir": "/d1", "topics": [
            {"name": "a", "partitions": [
                {"partition_index": 0, "partition_size": 100, "offset_lag": 0, "is_future_key": False},
                {"partition_index": 1, "partition_size": 200, "offset_lag": 4, "is_future_key": False}]},
            {"name": "b", "partitions": [{"partition_index": 0, "partition_size": 300, "offset_lag": 0, "is_future_key": False}]}]},
        {"error_code": 0, "log_dir": "/d2", "topics": [
            {"name": "c", "partitions": [{"partition_index": 0, "partition_size": 50, "offset_lag": 0, "is_future_key": False}]}]},
        {"error_code": 0, "log_dir": "/d3", "topics": []},
    ]


def test_named_topics_and_partitions_only_and_offline_dirs_report_a_storage_error():
    results = describe_log_dirs(["/d1", "/d2"], ["/d2"], REPLICAS, [{"topic": "a", "partitions": [1]}, {"topic": "zz", "partitions": [0]}])
    assert results == [
        {"error_code": 0, "log_dir": "/d1", "topics": [
            {"name": "a", "partitions": [{"partition_index": 1, "partition_size": 200, "offset_lag": 4, "is_future_key": False}]}]},
        {"error_code": int(ErrorCode.KAFKA_STORAGE_ERROR), "log_dir": "/d2", "topics": []},
    ]


def test_delete_records_parsing_refuses_a_partition_named_twice():
    topics = [{"name": "a", "partitions": [{"partition_index": 0, "offset": 5}, {"partition_index": 1, "offset": -1}]},
              {"name": "a", "partitions": [{"partition_index": 0, "offset": 9}]}]
    offsets, duplicates = parse_delete_records(topics)
    assert offsets == {("a", 1): -1}
    assert duplicates == [("a", 0)]


def test_log_dirs_summary_sums_per_dir_broker_and_cluster_and_names_silent_brokers():
    answer = {"results": [
        {"error_code": 0, "log_dir": "/x", "topics": [{"name": "t", "partitions": [
            {"partition_index": 1, "partition_size": 30, "offset_lag": 2, "is_future_key": False},
            {"partition_index": 0, "partition_size": 10, "offset_lag": 0, "is_future_key": False}]}]},
        {"error_code": int(ErrorCode.KAFKA_STORAGE_ERROR), "log_dir": "/bad", "topics": []}]}
    brokers = [{"id": 2, "host": "h", "port": 2}, {"id": 1, "host": "h", "port": 1}]
    doc = summarize(brokers, {1: answer})
    assert doc["size"] == 40
    one, two = doc["brokers"]
    assert (one["id"], one["size"], one["error"]) == (1, 40, None)
    assert [(d["path"], d["size"], d["error"]) for d in one["log_dirs"]] == [("/bad", 0, "KAFKA_STORAGE_ERROR"), ("/x", 40, None)]
    assert [p["partition"] for p in one["log_dirs"][1]["partitions"]] == [0, 1]
    assert (two["id"], two["error"], two["log_dirs"]) == (2, "no answer", [])


def test_human_bytes():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(5 << 30) == "5.0 GiB"
    assert human_bytes(3 << 40) == "3072.0 GiB"
