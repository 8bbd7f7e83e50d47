"""Kafka's topic name rules, and the memo of legal names every produce request consults."""

from __future__ import annotations

import pytest

from kafkalite.broker import kafka_apis
from kafkalite.broker.kafka_apis import TOPIC_NAME_LEN_MAX, topic_name_error


@pytest.mark.parametrize("name", ["orders", "a.b_c-D9", "x" * TOPIC_NAME_LEN_MAX])
def test_legal_names_pass_and_pass_again_from_the_memo(name):
    assert topic_name_error(name) is None
    assert name in kafka_apis._LEGAL_TOPIC_NAMES
    assert topic_name_error(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * (TOPIC_NAME_LEN_MAX + 1), "t/1", "abc\n", "\nabc", None, ["t"], b"t"])
def test_illegal_names_are_refused_every_time_and_never_remembered(name):
    for _ in range(2):
        assert topic_name_error(name) is not None
    assert all(type(n) is str for n in kafka_apis._LEGAL_TOPIC_NAMES)
    assert name not in kafka_apis._LEGAL_TOPIC_NAMES if isinstance(name, str) else True


def test_the_memo_stays_bounded(monkeypatch):
    monkeypatch.setattr(kafka_apis, "LEGAL_TOPIC_NAMES_KEPT", 5)
    monkeypatch.setattr(kafka_apis, "_LEGAL_TOPIC_NAMES", set())
    for i in range(23):
        assert topic_name_error(f"t{i}") is None
        assert len(kafka_apis._LEGAL_TOPIC_NAMES) <= 5
    assert topic_name_error("bad name") is not None
