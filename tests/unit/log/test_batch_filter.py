"""Batches rebuilt from the records the cleaner keeps: valid (CRC), same offsets, same
record contents and timestamps, whatever the codec, with or without a delete horizon."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.log import batch_filter
from kafkalite.log.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    HEADER_STRUCT,
    Record,
    decode_header,
    decode_records,
    encode_batch,
    validate_batches,
)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD]

record_lists = st.lists(
    st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=60),
              st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
              st.integers(-10_000, 10_000)),
    min_size=1, max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(record_lists, st.sampled_from(CODECS), st.data(), st.booleans(), st.none() | st.integers(0, 10**13))
def test_a_rebuilt_batch_holds_exactly_the_kept_records(recs, codec, data, log_append_time, horizon):
    base_ts = 1_700_000_000_000
    originals = [Record(100 + 2 * i, base_ts + d, k, v, tuple(h)) for i, (k, v, h, d) in enumerate(recs)]
    batch = encode_batch(originals, base_offset=100, compression=codec, partition_leader_epoch=4, producer_id=3,
                         producer_epoch=1, base_sequence=17, timestamp_type=1 if log_append_time else 0)
    fields = HEADER_STRUCT.unpack_from(batch)
    decoded = decode_records(batch)
    spans = batch_filter.record_spans(batch_filter.record_data(batch), len(originals))
    assert [(s.key, s.is_tombstone, 100 + s.offset_delta) for s in spans] == [(r.key, r.value is None, r.offset) for r in decoded]
    keep = data.draw(st.lists(st.booleans(), min_size=len(spans), max_size=len(spans)))
    if not any(keep):
        keep[-1] = True
    kept_spans = [s for s, k in zip(spans, keep) if k]
    rebuilt = batch_filter.rebuild_batch(fields, batch_filter.record_data(batch), kept_spans, horizon)
    validate_batches(rebuilt, from_client=False)  # framing and CRC
    old, new = decode_header(batch), decode_header(rebuilt)
    assert (new.base_offset, new.last_offset_delta, new.partition_leader_epoch) == (old.base_offset, old.last_offset_delta, 4)
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (3, 1, 17)
    assert (new.compression, new.timestamp_type, new.record_count) == (codec, old.timestamp_type, len(kept_spans))
    assert batch_filter.delete_horizon_ms(HEADER_STRUCT.unpack_from(rebuilt)) == horizon
    assert decode_records(rebuilt) == [r for r, k in zip(decoded, keep) if k]  # same offsets, keys, values, headers, timestamps
    if not log_append_time:
        assert new.max_timestamp == max(r.timestamp for r, k in zip(decoded, keep) if k)
    # And the horizon cleared again: still the same records.
    again = batch_filter.rebuild_batch(HEADER_STRUCT.unpack_from(rebuilt), batch_filter.record_data(rebuilt),
                                       batch_filter.record_spans(batch_filter.record_data(rebuilt), len(kept_spans)), None)
    assert decode_records(again) == decode_records(rebuilt)
    assert batch_filter.delete_horizon_ms(HEADER_STRUCT.unpack_from(again)) is None


@pytest.mark.parametrize("codec", CODECS)
def test_an_empty_batch_keeps_the_header_of_the_batch(codec):
    batch = encode_batch([(b"k", b"v", ())] * 3, base_offset=40, compression=codec, producer_id=9, producer_epoch=2,
                         base_sequence=5, base_timestamp=77)
    empty = batch_filter.empty_batch(HEADER_STRUCT.unpack_from(batch))
    validate_batches(empty, from_client=False)
    h = decode_header(empty)
    assert (h.base_offset, h.last_offset, h.record_count, h.compression) == (40, 42, 0, 0)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.max_timestamp) == (9, 2, 5, 77)
    assert decode_records(empty) == []


def test_records_without_a_key_are_found():
    assert batch_filter.has_record_without_key(encode_batch([(b"k", b"v", ()), (None, b"v", ())], compression=COMPRESSION_GZIP), 2)
    assert not batch_filter.has_record_without_key(encode_batch([(b"k", None, ())]), 1)


def _spans(deltas: list[int]) -> list[batch_filter.RecordSpan]:
    batch = encode_batch([Record(offset=d, timestamp=1, key=b"k%d" % i, value=b"v", headers=()) for i, d in enumerate(deltas)],
                         base_offset=0)
    return batch_filter.record_spans(batch_filter.record_data(batch), len(deltas))


@pytest.mark.parametrize("deltas, last_offset_delta, in_order", [
    ([0, 1, 2], 2, True),
    ([0, 2, 5], 5, True),  # a cleaned batch: gaps where records went
    ([3], 4, True),
    ([0, 0, 2], 2, False),  # two records at one offset
    ([1, 0, 2], 2, False),
    ([0, 1, 7], 2, False),  # past the batch's last offset: inside the next batch
])
def test_record_offset_deltas_must_increase_within_the_batch(deltas, last_offset_delta, in_order):
    assert batch_filter.offset_deltas_in_order(_spans(deltas), last_offset_delta) is in_order
