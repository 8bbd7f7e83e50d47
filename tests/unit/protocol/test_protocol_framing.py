"""FrameDecoder: split, merged, oversized and negative frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.protocol.errors import FrameTooLargeError, InvalidRequestError
from kafkalite.protocol.framing import FrameDecoder


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=40), max_size=12), data=st.data())
def test_any_split_of_a_stream_yields_the_same_frames(payloads, data):
    stream = b"".join(_framed(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder(64)
    frames = []
    start = 0
    for cut in cuts + [len(stream)]:
        decoder.feed(stream[start:cut])
        start = cut
        frames.extend(_drain(decoder))
    assert frames == payloads
    assert decoder.buffered_bytes == 0


def test_byte_at_a_time_and_merged():
    decoder = FrameDecoder(100)
    stream = _framed(b"hello") + _framed(b"") + _framed(b"world")
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i:i + 1])
        got.extend(_drain(decoder))
    assert got == [b"hello", b"", b"world"]
    decoder.feed(stream * 3)
    assert _drain(decoder) == [b"hello", b"", b"world"] * 3


def test_oversized_and_negative_length_raise_typed_error():
    decoder = FrameDecoder(10)
    decoder.feed(struct.pack(">i", 11))
    with pytest.raises(FrameTooLargeError) as caught:
        decoder.next_frame()
    assert (caught.value.size, caught.value.max_frame_bytes) == (11, 10)
    assert isinstance(caught.value, InvalidRequestError)

    decoder = FrameDecoder(10)
    decoder.feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_exactly_max_is_accepted_and_partial_prefix_waits():
    decoder = FrameDecoder(4)
    decoder.feed(b"\x00\x00")
    assert decoder.next_frame() is None
    decoder.feed(b"\x00\x04abc")
    assert decoder.next_frame() is None
    decoder.feed(b"d")
    assert decoder.next_frame() == b"abcd"


def test_many_small_frames_and_one_huge_frame_stay_linear():
    decoder = FrameDecoder(64 << 20)
    decoder.feed(_framed(b"x" * 10) * 100_000)
    assert len(_drain(decoder)) == 100_000
    huge = b"y" * (32 << 20)
    framed = _framed(huge)
    for i in range(0, len(framed), 1 << 16):
        decoder.feed(framed[i:i + (1 << 16)])
        if i + (1 << 16) < len(framed):
            assert decoder.next_frame() is None
    assert decoder.next_frame() == huge
