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
