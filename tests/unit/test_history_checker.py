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
    fault = draw(st.sampled_from(["none", "drop", "swap", "truncate-read", "duplicate", "phantom", "skip-read"]))
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
    skipped = None
    if fault == "skip-read" and consumers and any(len(log[p]) >= 3 for p in log):  # consumer-0 misses one record
        skipped = rnd.choice([(p, o) for p in log for o, _v in log[p][1:-1]])
    for c in range(consumers):
        for p in range(partitions):
            for o, v in log[p]:
                if skipped is None or (c, p, o) != (0, *skipped):
                    h.read(f"consumer-{c}", v, p, o)
    nonempty = [p for p in log if log[p]]
    expect = "position" if skipped else None
    if fault not in ("none", "skip-read") and nonempty:
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


def _group_history(per_partition: int = 10):
    """One partition of `per_partition` acknowledged writes, assigned to consumer-0, which
    reads nothing yet."""
    h = History(clock=_clock())
    log = []
    for o in range(per_partition):
        v = f"v-{o}".encode()
        h.invoke("producer-1", v)
        h.ok("producer-1", v, 0, o)
        log.append((o, v))
    h.assign("consumer-0", 0)
    return h, final_log_from({0: log})


def _reads(h: History, consumer: str, offsets) -> None:
    for o in offsets:
        h.read(consumer, f"v-{o}".encode(), 0, o)


def test_acknowledged_records_no_consumer_read_are_unread_with_their_offsets_and_count():
    """A member jumping from offset 9 to 50 leaves 40 acknowledged records unread by anyone:
    each read matched the final log, and the highest offset consumed was the highest
    acknowledged, so this passed before."""
    h, final = _group_history(100)
    _reads(h, "consumer-0", [*range(0, 10), *range(50, 100)])
    verdict = check(h.events(), final)
    assert not verdict.ok
    assert verdict.counts["unread"] == 40
    unread = next(v for v in verdict.violations if v.rule == "unread")
    assert unread.message == ("partition 0: 40 records of the final log between the consumers' lowest read there, 0, and "
                              "the highest acknowledged offset 99 were read by no consumer: offsets 10..49")
    assert any("the read below the first gap: #" in line and "read b'v-9' 0:9" in line for line in unread.context)
    assert any("the read above it: #" in line and "read b'v-50' 0:50" in line for line in unread.context)
    assert "40 unread" in verdict.summary()
    position = next(v for v in verdict.violations if v.rule == "position")
    assert "consumer-0 read 0:50 after 0:9" in position.message and "skipped 40 records of the final log (10..49)" in position.message


def test_a_partition_of_a_group_that_nobody_read_is_unread_from_its_start():
    h, final = _group_history(5)
    verdict = check(h.events(), final)
    assert rules(verdict) == {"unread"}
    assert verdict.violations[0].message == ("partition 0: no consumer read it: 5 records of the final log up to the highest "
                                             "acknowledged offset 4 were never read: offsets 0..4")
    # Without a group (no assignment recorded) a partition nobody read is nobody's to read.
    h2, final2 = clean(consumers=0)
    assert check(h2.events(), final2).ok


def test_a_consumer_reordering_or_going_back_without_a_rebalance_breaks_its_position():
    h, final = _group_history(10)
    _reads(h, "consumer-0", [0, 1, 2, 5, 3, 4, 6, 7, 8, 9])  # every offset read, once, at its value
    reordered = check(h.events(), final)
    assert rules(reordered) == {"position"}, reordered.report()
    messages = [v.message for v in reordered.violations]
    assert any("read 0:5 after 0:2" in m and "skipped 2 records of the final log (3..4)" in m for m in messages)
    assert any("read 0:3 after 0:5" in m and "went back 3 offsets" in m for m in messages)

    h2, final2 = _group_history(10)
    _reads(h2, "consumer-0", [0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 7, 8, 9])
    back = check(h2.events(), final2)
    assert rules(back) == {"position"} and back.violation_count == 1, back.report()
    assert "consumer-0 read 0:2 after 0:5 (#" in back.violations[0].message


def test_a_rebalance_may_repeat_records_from_the_committed_offset_and_move_the_partition():
    h, final = _group_history(10)
    _reads(h, "consumer-0", range(0, 6))
    h.revoke("consumer-0", 0)
    h.assign("consumer-1", 0)
    _reads(h, "consumer-1", range(4, 8))  # from the commit, 4: 4 and 5 again
    h.revoke("consumer-1", 0)
    h.assign("consumer-0", 0)
    _reads(h, "consumer-0", range(7, 10))
    verdict = check(h.events(), final)
    assert verdict.ok, verdict.report()
    assert verdict.counts["unread"] == 0 and verdict.counts["consumers"] == 2


def test_offsets_absent_from_the_final_log_or_not_ours_may_be_skipped():
    h = History(clock=_clock())
    log = [(0, b"old-0"), (1, b"old-1")]
    for o in (2, 3, 5, 6):  # 4 is not in the final log (a control record, say)
        h.invoke("producer-1", f"v-{o}".encode())
        h.ok("producer-1", f"v-{o}".encode(), 0, o)
        log.append((o, f"v-{o}".encode()))
    log.insert(4, (4, b"old-4"))  # not ours: held to nothing
    h.assign("consumer-0", 0)
    for o in (2, 3, 5, 6):
        h.read("consumer-0", f"v-{o}".encode(), 0, o)
    ours = check(h.events(), FinalLog({0: log}), ours=lambda v: v.startswith(b"v-"))
    assert ours.ok, ours.report()
    without_4 = [r for r in log if r[0] != 4]
    verdict = check(h.events(), FinalLog({0: without_4}), ours=lambda v: v.startswith(b"v-"))
    assert rules(verdict) == {"offsets"}, verdict.report()  # the gap itself; the reads are fine


def test_membership_events_round_trip_and_read_plainly(tmp_path):
    h, _final = _group_history(1)
    h.revoke("consumer-0", 0)
    path = str(tmp_path / "history.jsonl")
    h.dump(path)
    loaded = History.load(path)
    assert loaded == h.events()
    assert loaded[-2].describe().endswith("consumer-0 assign p0")
    assert loaded[-1].describe().endswith("consumer-0 revoke p0")


def test_invocations_never_answered_once_the_producers_are_done_are_a_violation():
    h, final = clean(consumers=0)
    for v in (b"v-a", b"v-b"):
        h.invoke("producer-2", v)
    verdict = check(h.events(), final)
    assert rules(verdict) == {"unanswered"}
    assert verdict.violations[0].message == "producer-2: 2 values invoked were never acknowledged nor failed: b'v-a', b'v-b'"
    assert "history of b'v-a'" in verdict.report()
    cut_short = check(h.events(), final, producers_done=False)
    assert cut_short.ok and cut_short.counts["unanswered"] == 2
