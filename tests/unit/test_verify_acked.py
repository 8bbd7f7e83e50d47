"""kafkalite.testing.verify.verify against a given final log (no cluster): an acknowledgement
without an offset (librdkafka's, for a message a later request proved written) is checked
by partition only; one with an offset must be at it."""

from __future__ import annotations

from kafkalite.testing.history import NO_OFFSET, FinalLog
from kafkalite.testing.verify import Acked, verify


def test_an_acknowledgement_without_an_offset_is_found_by_partition_and_one_with_an_offset_at_it():
    final = FinalLog({0: [(0, b"a"), (1, b"b")], 1: [(0, b"c")]})
    ok = verify("unused:0", "t", 2, {b"a": Acked(0, 0), b"b": Acked(0, NO_OFFSET), b"c": Acked(1, 0)}, final)
    assert ok.ok, ok.problems
    bad = verify("unused:0", "t", 2, {b"b": Acked(1, NO_OFFSET), b"a": Acked(0, 1), b"x": Acked(0, NO_OFFSET)}, final)
    assert not bad.ok
    assert any(p.startswith("MOVED: acknowledged b'b' at 1:-1") for p in bad.problems)
    assert any(p.startswith("MOVED: acknowledged b'a' at 0:1") for p in bad.problems)
    assert any(p.startswith("LOST: acknowledged b'x'") for p in bad.problems)
