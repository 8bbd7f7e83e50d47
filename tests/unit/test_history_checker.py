"""The history checker (kafkalite.testing.history, issue 14): a clean history passes, and
each kind of violation is found, named by its rule and shown with its context."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.testing.history import NO_OFFSET, Event, FinalLog, History, check, final_log_from


def _clock():
    counter = itertools.count(1_000_000_000, 1_000_000)
    return lambda: next(counter)


def clean(partitions: int = 2, per_partition: int = 5, consumers: int = 2):
    """A history of `per_partition` acknowledged writes per partition, read by every
    consumer, and the final log that matches it."""
    h = History(clock=_clock())
    log: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    n = 0
    for p in range(partitions):
        for o in range(per_partition):
            v = f"v-{n}".encode()
            n += 1
            h.invoke("producer-1", v)
            h.ok("producer-1", v, p, o)
            log[p].append((o, v))
    for c in range(consumers):
        for p in range(partitions):
            for o, v in log[p]:
                h.read(f"consumer-{c}", v, p, o)
    return h, final_log_from(log)


def rules(verdict) -> set[str]:
    return {v.rule for v in verdict.violations}


def test_a_clean_history_passes_and_is_counted():
    h, final = clean()
    verdict = check(h.events(), final)
    assert verdict.ok, verdict.report()
    assert verdict.counts["acked"] == 10 and verdict.counts["reads"] == 20 and verdict.counts["consumers"] == 2
    assert verdict.counts["lost"] == 0 and verdict.counts["duplicates"] == 0
    assert "history check OK" in verdict.summary()


def test_a_lost_acknowledged_write_is_the_first_violation_with_its_context():
    h, final = clean(consumers=0)
    log = {p: list(rs) for p, rs in final.partitions.items()}
    del log[1][3:]  # partition 1 truncated below two acknowledged records
    verdict = check(h.events(), FinalLog(log))
    assert not verdict.ok
    assert verdict.counts["lost"] == 2
    first = verdict.violations[0]
    assert first.rule == "lost"
    assert "b'v-8' at 1:3" in first.message and "final log ends before it" in first.message
    report = verdict.report()
    assert "history of b'v-8'" in report and "producer-1 ok b'v-8' 1:3   <--" in report
    assert "final log of partition 1 (offsets 0..2) near 3" in report


def test_an_acknowledged_write_found_elsewhere_or_replaced_is_lost():
    h, final = clean(consumers=0)
    log = {p: list(rs) for p, rs in final.partitions.items()}
    log[0][2] = (2, b"v-x")  # another value at the acknowledged offset
    h.invoke("producer-2", b"v-x")
    h.fail("producer-2", b"v-x", "timed out")
    verdict = check(h.events(), FinalLog(log))
    assert [v.rule for v in verdict.violations] == ["lost"]
    assert "b'v-x' is there" in verdict.violations[0].message


def test_a_failed_write_may_be_in_the_log_once_but_not_twice():
    h, final = clean(consumers=0)
    h.invoke("producer-1", b"v-f")
    h.fail("producer-1", b"v-f", "_MSG_TIMED_OUT")
    log = {p: list(rs) for p, rs in final.partitions.items()}
    log[0].append((5, b"v-f"))
    once = check(h.events(), FinalLog(log))
    assert once.ok, once.report()
    assert once.counts["failed"] == 1 and once.counts["failed_present"] == 1
    log[1].append((5, b"v-f"))
    twice = check(h.events(), FinalLog(log))
    assert rules(twice) == {"duplicate"}
    assert "2 times: 0:5, 1:5" in twice.violations[0].message
    # Without idempotence a duplicate is counted, not a violation.
    relaxed = check(h.events(), FinalLog(log), idempotent=False)
    assert relaxed.ok and relaxed.counts["duplicates"] == 1


def test_a_gap_in_the_final_log_and_an_offset_acknowledged_twice_are_offset_violations():
    h, final = clean(consumers=0)
    log = {p: list(rs) for p, rs in final.partitions.items()}
    log[0] = [(o + (o >= 2), v) for o, v in log[0]]  # offsets 0 1 3 4 5
    verdict = check(h.events(), FinalLog(log))
    assert "offsets" in rules(verdict)
    assert any("offset 1 is followed by 3" in v.message for v in verdict.violations)

    h2 = History(clock=_clock())
    for v in (b"a", b"b"):
        h2.invoke("producer-1", v)
        h2.ok("producer-1", v, 0, 0)
    verdict2 = check(h2.events(), final_log_from({0: [(0, b"a")]}))
    assert any(v.rule == "offsets" and "0:0 acknowledged for b'a'" in v.message for v in verdict2.violations)


def test_a_read_of_data_later_truncated_is_found():
    h, final = clean(consumers=0)
    h.invoke("producer-1", b"v-late")
    h.read("consumer-0", b"v-late", 1, 5)  # read from a leader that then lost it
    h.fail("producer-1", b"v-late", "NOT_ENOUGH_REPLICAS")
    verdict = check(h.events(), final)
    assert rules(verdict) == {"read-not-in-log"}
    assert "consumer-0 read b'v-late' at 1:5; in the final log not there" in verdict.violations[0].message


def test_consumers_disagreeing_on_an_offset_or_on_a_values_place_break_the_order():
    h, final = clean(consumers=1)
    h.read("consumer-9", b"v-1", 0, 2)  # v-1 is at 0:1
    verdict = check(h.events(), final)
    assert "order" in rules(verdict)
    assert any("b'v-1' read at 0:1 by consumer-0" in v.message for v in verdict.violations)
    assert any("0:2: consumer-0 read b'v-2'" in v.message for v in verdict.violations)


def test_an_acknowledgement_without_an_offset_needs_the_value_in_its_partition_only():
    """librdkafka's idempotent producer acknowledges a message whose own answer was lost,
    once a later request of the same producer succeeds, without an offset (a 10-minute
    bin/chaos run met one and called it MOVED, then crashed on the None)."""
    h, final = clean(partitions=2, per_partition=3)
    log = {p: list(rs) for p, rs in final.partitions.items()}
    for v, p in ((b"v-late", 1), (b"v-gone", 1), (b"v-wrong", 0)):
        h.invoke("producer-1", v)
        h.ok("producer-1", v, p, NO_OFFSET)
    log[1].append((3, b"v-late"))  # written at an offset nobody reported: fine
    log[1].append((4, b"v-wrong"))  # in another partition than acknowledged: lost
    for c in range(2):  # the consumers read what is there
        for o, v in log[1][3:]:
            h.read(f"consumer-{c}", v, 1, o)
    verdict = check(h.events(), FinalLog(log))
    assert rules(verdict) == {"lost", "offsets"}, verdict.report()  # v-wrong was also read elsewhere
    assert verdict.counts["lost"] == 2
    assert not any("v-late" in v.message for v in verdict.violations)
    assert any("b'v-gone' in partition 1 (no offset reported) is in the final log nowhere" in v.message
               for v in verdict.violations)
    assert any("(no offset reported) is in the final log 1:4" in v.message for v in verdict.violations)


def test_phantoms_and_a_malformed_history_are_reported():
    h, final = clean(consumers=0)
    log = {p: list(rs) for p, rs in final.partitions.items()}
    log[0].append((5, b"ghost"))
    h.ok("producer-3", b"v-nobody", 0, 9)
    h.invoke("producer-1", b"v-0")  # a value invoked twice
    verdict = check(h.events(), FinalLog(log))
    found = rules(verdict)
    assert {"phantom", "malformed", "lost"} <= found
    assert any("b'ghost' is in the final log at 0:5 but was never invoked" in v.message for v in verdict.violations)
    assert any("invoked twice" in v.message for v in verdict.violations)


def test_violations_are_in_history_order_and_counted_beyond_those_kept():
    h = History(clock=_clock())
    for i in range(300):
        v = f"v-{i}".encode()
        h.invoke("producer-1", v)
        h.ok("producer-1", v, 0, i)
    verdict = check(h.events(), final_log_from({0: []}))
    assert verdict.violation_count == 300 and len(verdict.violations) == 200
    assert [v.event for v in verdict.violations] == sorted(v.event for v in verdict.violations)
    assert "v-0" in verdict.violations[0].message


def test_dump_and_load_round_trip(tmp_path):
    h, final = clean()
    h.invoke("producer-1", bytes(range(256)))  # any bytes survive
    h.fail("producer-1", bytes(range(256)), "error with \"quotes\"")
    path = str(tmp_path / "history.jsonl")
    h.dump(path)
    loaded = History.load(path)
    assert loaded == h.events()
    assert check(loaded, final).ok


@st.composite
def _workloads(draw):
    partitions = draw(st.integers(1, 3))
    sizes = [draw(st.integers(0, 6)) for _ in range(partitions)]
    consumers = draw(st.integers(0, 2))
    fault = draw(st.sampled_from(["none", "drop", "swap", "truncate-read", "duplicate", "phantom"]))
    return partitions, sizes, consumers, fault, draw(st.randoms(use_true_random=False))


@settings(max_examples=150, deadline=None)
@given(_workloads())
def test_one_injected_fault_is_always_found_and_a_clean_run_never_flagged(workload):
    partitions, sizes, consumers, fault, rnd = workload
    h = History(clock=_clock())
    log: dict[int, list[tuple[int, bytes]]] = {}
    n = 0
    for p in range(partitions):
        log[p] = []
        for o in range(sizes[p]):
            v = f"v-{n}".encode()
            n += 1
            h.invoke(f"producer-{n % 2}", v)
            h.ok(f"producer-{n % 2}", v, p, o)
            log[p].append((o, v))
    for c in range(consumers):
        for p in range(partitions):
            for o, v in log[p]:
                h.read(f"consumer-{c}", v, p, o)
    nonempty = [p for p in log if log[p]]
    expect = None
    if fault != "none" and nonempty:
        p = rnd.choice(nonempty)
        if fault == "drop":  # the log lost its tail
            log[p].pop()
            expect = "lost"
        elif fault == "swap" and len(log[p]) >= 2:  # two records in the wrong order
            (o1, v1), (o2, v2) = log[p][0], log[p][1]
            log[p][0], log[p][1] = (o1, v2), (o2, v1)
            expect = "lost"
        elif fault == "truncate-read":
            h.invoke("producer-0", b"v-truncated")
            h.read("consumer-x", b"v-truncated", p, len(log[p]))
            expect = "read-not-in-log"
        elif fault == "duplicate":
            log[p].append((len(log[p]), log[p][0][1]))
            expect = "duplicate"
        elif fault == "phantom":
            log[p].append((len(log[p]), b"ghost"))
            expect = "phantom"
    verdict = check(h.events(), final_log_from(log))
    if expect is None:
        assert verdict.ok, verdict.report()
    else:
        assert not verdict.ok and expect in rules(verdict), verdict.report()


def test_event_kinds_are_checked_on_load():
    bad = Event(0, 1, "p", "ok", b"v", 0, 0).to_json().replace('"k":"ok"', '"k":"maybe"')
    try:
        Event.from_json(bad)
    except ValueError as e:
        assert "unknown event kind 'maybe'" in str(e)
    else:
        raise AssertionError("an unknown kind was accepted")


def test_records_of_earlier_runs_are_left_alone_when_told_which_values_are_ours():
    h, final = clean(consumers=0)
    log = {p: [(o + 2, v) for o, v in rs] for p, rs in final.partitions.items()}
    log[0] = [(0, b"old-1"), (1, b"old-2")] + log[0]
    log[1] = [(0, b"old-3"), (1, b"v-0")] + log[1]  # v-0 is ours: an earlier run's is not told apart
    h2 = History(clock=_clock())
    for e in h.events():
        if e.kind == "invoke":
            h2.invoke(e.process, e.value)
        else:
            h2.ok(e.process, e.value, e.partition, e.offset + 2)
    h2.read("consumer-0", b"old-1", 0, 0)
    mine = check(h2.events(), FinalLog(log), ours=lambda v: v.startswith(b"v-"))
    assert rules(mine) == {"duplicate"}, mine.report()
    assert mine.counts["reads"] == 0 and mine.counts["final_records"] == 14
    every = check(h2.events(), FinalLog(log))
    assert {"phantom", "duplicate"} <= rules(every)
