"""The pure parts of `kafkalite groups reset-offsets`: --topic specs, --to-datetime, clamping."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kafkalite.cli.groups_reset import clamp, parse_datetime_ms, parse_topic_spec


def test_topic_specs_name_a_topic_or_some_of_its_partitions():
    assert parse_topic_spec("orders") == ("orders", None)
    assert parse_topic_spec("orders:2,0,2") == ("orders", [0, 2])
    for bad in ("", ":1", "orders:", "orders:x", "orders:-1", "orders:1,,a", "orders:²"):
        with pytest.raises(ValueError, match="bad --topic"):
            parse_topic_spec(bad)


def test_datetimes_are_iso_8601_with_or_without_a_zone():
    assert parse_datetime_ms("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_datetime_ms("2024-05-01T14:00:00.250+02:00") == 1714564800250
    naive = "2024-05-01T12:00:00"  # local time, as Kafka reads it
    assert parse_datetime_ms(naive) == int(datetime.fromisoformat(naive).timestamp() * 1000)
    assert parse_datetime_ms("2024-05-01") == int(datetime(2024, 5, 1).timestamp() * 1000)
    assert parse_datetime_ms(datetime(2030, 1, 1, tzinfo=UTC).isoformat()) == 1893456000000
    for bad in ("yesterday", "2024-13-01T00:00:00Z", "", "12:00"):
        with pytest.raises(ValueError, match="bad --to-datetime"):
            parse_datetime_ms(bad)


def test_an_offset_is_clamped_to_the_log_as_kafka_does():
    assert clamp(5, 10, 20) == 10
    assert clamp(15, 10, 20) == 15
    assert clamp(25, 10, 20) == 20
    assert clamp(0, 0, 0) == 0


class _FakeGroupAdmin:
    """A group 'g' (Empty) with committed offsets on topic t's partitions 0..2; the logs
    of t-0..2 run from 10 to 100. Records what --execute commits."""

    log_start, log_end = 10, 100

    def __init__(self, committed):
        self.committed = committed
        self.commits = []

    def __call__(self, bootstrap):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def metadata(self):
        from kafkalite.cli.admin_client import ClusterMetadata, PartitionInfo, TopicInfo

        parts = [PartitionInfo(p, 1, 0, [1], [1], [], 0) for p in range(3)]
        return ClusterMetadata("c", 1, [], {"t": TopicInfo("t", parts)})

    def describe_group(self, group):
        from types import SimpleNamespace

        return SimpleNamespace(state="Empty", members=[], inactive=True)

    def committed_offsets(self, group):
        return dict(self.committed)

    def list_offsets(self, tps, timestamp):
        from kafkalite.cli.group_admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

        assert timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP)
        return {tp: self.log_start if timestamp == EARLIEST_TIMESTAMP else self.log_end for tp in tps}

    def commit_offsets(self, group, offsets):
        self.commits.append(dict(offsets))


def _reset(monkeypatch, capsys, admin, *argv):
    import json

    from kafkalite.cli import groups_reset
    from kafkalite.cli.main import main

    monkeypatch.setattr(groups_reset, "GroupAdminClient", admin)
    rc = main(["groups", "reset-offsets", "g", *argv, "--json", "--bootstrap", "127.0.0.1:1"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


@pytest.mark.parametrize("shift, expected", [
    ("5", [55, 25, 100]),     # committed + N; past the log end goes to the log end
    ("-30", [20, 10, 68]),    # committed - N; below the log start goes to the log start
    ("0", [50, 20, 98]),
])
def test_shift_by_moves_the_committed_offsets_clamped_to_the_log_as_kafka_does(monkeypatch, capsys, shift, expected):
    admin = _FakeGroupAdmin({("t", 0): 50, ("t", 1): 20, ("t", 2): 98})
    rc, out, err = _reset(monkeypatch, capsys, admin, "--topic", "t", "--shift-by", shift)
    assert rc == 0, err
    assert [(e["partition"], e["current_offset"], e["new_offset"]) for e in out["partitions"]] == [
        (0, 50, expected[0]), (1, 20, expected[1]), (2, 98, expected[2])]
    assert out["executed"] is False and admin.commits == []  # a dry run by default
    rc, out, err = _reset(monkeypatch, capsys, admin, "--topic", "t", "--shift-by", shift, "--execute")
    assert rc == 0, err
    assert admin.commits == [{("t", 0): expected[0], ("t", 1): expected[1], ("t", 2): expected[2]}]


def test_shift_by_refuses_a_partition_without_a_committed_offset_as_kafka_does(monkeypatch, capsys):
    admin = _FakeGroupAdmin({("t", 1): 20})
    rc, _, err = _reset(monkeypatch, capsys, admin, "--topic", "t", "--shift-by", "-1", "--execute")
    assert rc == 1
    assert err.strip() == ("kafkalite groups reset-offsets: cannot shift the offset of t-0 (and 1 other partition): group 'g' "
                           "has no committed offset there; give it one with --to-earliest, --to-latest, --to-offset or --to-datetime")
    assert admin.commits == []
    rc, out, err = _reset(monkeypatch, capsys, admin, "--topic", "t:1", "--shift-by", "-1")  # only the committed one
    assert rc == 0, err
    assert [(e["partition"], e["current_offset"], e["new_offset"]) for e in out["partitions"]] == [(1, 20, 19)]
