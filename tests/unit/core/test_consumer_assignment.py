"""ConsumerProtocolAssignment decoding (what `kafkalite groups describe` shows per member)."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from kafkalite.core.consumer_protocol import decode_assignment, encode_assignment

topic_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(st.dictionaries(topic_names, st.lists(st.integers(0, 2**31 - 1), max_size=8, unique=True), max_size=5),
       st.one_of(st.none(), st.binary(max_size=16)))
def test_an_encoded_assignment_decodes_to_its_sorted_partitions(partitions, user_data):
    expected = tuple(sorted((t, p) for t, ps in partitions.items() for p in ps))
    assert decode_assignment(encode_assignment(partitions, user_data)) == expected


def test_empty_bytes_are_no_assignment_and_a_later_version_reads_as_its_v0_prefix():
    assert decode_assignment(b"") == ()
    v1 = bytearray(encode_assignment({"t": [2, 0]}))
    v1[0:2] = struct.pack(">h", 3)
    assert decode_assignment(bytes(v1)) == (("t", 0), ("t", 2))


@given(st.binary(max_size=40))
def test_garbage_is_none_or_a_tuple_never_an_exception(data):
    assert decode_assignment(data) is None or isinstance(decode_assignment(data), tuple)


def test_truncated_and_negative_counts_are_none():
    whole = encode_assignment({"topic": [0, 1, 2]})
    assert decode_assignment(whole[:-10]) is None
    assert decode_assignment(struct.pack(">hi", 0, -1)) is None
    assert decode_assignment(struct.pack(">hih", 0, 1, -1)) is None
