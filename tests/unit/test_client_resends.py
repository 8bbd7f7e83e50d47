"""kafkalite.testing.client_resends: a duplicate is taken for librdkafka's re-send under a
bumped epoch (its issue #4953) only on the whole evidence; any other duplicate stays the
broker's failure in `verify` and in the history checker."""

from __future__ import annotations

import logging

from kafkalite.log.records import encode_batch
from kafkalite.testing.client_resends import (
    BatchOrigin,
    ResendCheck,
    SkippedSequence,
    SkippedSequenceLog,
    batch_origins,
    explain_resend,
    parse_skipped_sequence,
)
from kafkalite.testing.history import FinalLog, History, check
from kafkalite.testing.verify import Acked, librdkafka_debug, verify

# librdkafka 2.x's ERRSEQ debug line, as its logger hands it over (facility, client, text).
ERRSEQ = ("ERRSEQ [rdkafka#producer-2] [thrd:127.0.0.1:45013/2]: 127.0.0.1:45013/2: ProduceRequest for chaos [1] "
          "with 2 message(s) failed due to skipped sequence numbers (PID{Id:0,Epoch:0}, base seq 941 > next seq 935) "
          "caused by previous failed request (NOT_LEADER_FOR_PARTITION, actions Refresh,MsgNotPersisted, "
          "base seq 939..940, base msgid 2738, 9ms ago): recovering and retrying")

BUMP = SkippedSequence("chaos", 1, 0, 0, refused_seq=941, next_seq=935, failed_error="NOT_LEADER_FOR_PARTITION",
                       failed_first_seq=939, failed_last_seq=940)

# The log of the chaos test's failure: epoch 0 ends at sequence 936 (offsets 935-936 were
# written, then the leader was deposed and answered NOT_LEADER_OR_FOLLOWER); librdkafka sent
# 935.. again in epoch 1 from sequence 0.
LOG = [
    BatchOrigin(933, 934, 0, 0, 933),
    BatchOrigin(935, 936, 0, 0, 935),
    BatchOrigin(937, 938, 0, 1, 0),
    BatchOrigin(939, 940, 0, 1, 2),
]


def test_librdkafkas_account_of_an_epoch_bump_is_parsed_and_nothing_else_is():
    assert parse_skipped_sequence(ERRSEQ) == BUMP
    assert parse_skipped_sequence("DRAIN [rdkafka#producer-2] [thrd:main]: All partitions drained, bumped epoch") is None
    handler = SkippedSequenceLog()
    log = logging.getLogger("test_client_resends")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    try:
        fac, rest = ERRSEQ.split(" ", 1)
        name, text = rest.split(" ", 1)
        log.log(logging.DEBUG, "%s %s %s", fac, name, text)  # as confluent-kafka calls its logger
        log.log(logging.ERROR, "%s %s %s", "FAIL", "[rdkafka#producer-2]", "Connect failed: Connection refused")
    finally:
        log.removeHandler(handler)
    assert handler.skipped == [BUMP]


def test_the_re_send_of_records_told_not_written_is_the_clients():
    why = explain_resend("chaos", 1, 935, 937, LOG, [BUMP])
    assert why is not None and "librdkafka issue #4953" in why and "sequence 941 was refused" in why
    assert explain_resend("chaos", 1, 936, 938, LOG, [BUMP]) is not None


def test_anything_short_of_the_whole_evidence_stays_the_brokers():
    same_epoch = LOG[:2] + [BatchOrigin(937, 938, 0, 0, 935)]
    assert explain_resend("chaos", 1, 935, 937, same_epoch, [BUMP]) is None  # the leader had to drop it
    other_producer = LOG[:2] + [BatchOrigin(937, 938, 7, 1, 0)]
    assert explain_resend("chaos", 1, 935, 937, other_producer, [BUMP]) is None
    assert explain_resend("chaos", 1, 935, 937, LOG, []) is None  # librdkafka said nothing
    assert explain_resend("chaos", 0, 935, 937, LOG, [BUMP]) is None  # it spoke of another partition
    assert explain_resend("other", 1, 935, 937, LOG, [BUMP]) is None
    timed_out = SkippedSequence("chaos", 1, 0, 0, 941, 935, "REQUEST_TIMED_OUT", 939, 940)
    assert explain_resend("chaos", 1, 935, 937, LOG, [timed_out]) is None  # not what it takes for unwritten
    acked_before = SkippedSequence("chaos", 1, 0, 0, 941, 937, "NOT_LEADER_FOR_PARTITION", 939, 940)
    assert explain_resend("chaos", 1, 935, 937, LOG, [acked_before]) is None  # 935 was not among the re-sent
    # The leader held sequence 940 in epoch 0, so refusing 941 as out of order was wrong.
    held = LOG[:2] + [BatchOrigin(937, 940, 0, 0, 937), BatchOrigin(941, 942, 0, 1, 0)]
    assert explain_resend("chaos", 1, 935, 941, held, [BUMP]) is None


def test_batch_origins_are_read_from_whole_batches_below_the_end(tmp_path):
    d = tmp_path / "chaos-1"
    d.mkdir()
    a = encode_batch([(b"k", b"v-1", ()), (b"k", b"v-2", ())], base_offset=0, producer_id=0, producer_epoch=0, base_sequence=0)
    b = encode_batch([(b"k", b"v-1", ())], base_offset=2, producer_id=0, producer_epoch=1, base_sequence=0)
    c = encode_batch([(b"k", b"v-3", ())], base_offset=3, producer_id=0, producer_epoch=1, base_sequence=1)
    (d / "00000000000000000000.log").write_bytes(a + b + c[: len(c) // 2])  # a torn tail
    assert batch_origins(str(d), 10) == [BatchOrigin(0, 1, 0, 0, 0), BatchOrigin(2, 2, 0, 1, 0)]
    assert batch_origins(str(d), 2) == [BatchOrigin(0, 1, 0, 0, 0)]
    skipped = [SkippedSequence("chaos", 1, 0, 0, 3, 0, "NOT_LEADER_FOR_PARTITION", 2, 2)]
    resends = ResendCheck("chaos", skipped, {1: [str(tmp_path / "missing"), str(d)]}, {1: 3})
    assert resends.explain(1, 0, 2) is not None
    assert resends.explain(0, 0, 2) is None


def test_verify_and_the_history_checker_report_the_clients_re_sends_and_fail_the_rest():
    final = FinalLog({1: [(935, b"v-1"), (936, b"v-2"), (937, b"v-1"), (938, b"v-2")]})
    acked = {b"v-1": Acked(1, 937), b"v-2": Acked(1, 938)}
    resends = ResendCheck("chaos", [BUMP], {}, {})
    resends._batches["d"] = LOG
    resends.dirs = {1: ["d"]}
    strict = verify("unused:0", "chaos", 2, acked, final)
    assert not strict.ok and any("appears twice" in p for p in strict.problems)
    lenient = verify("unused:0", "chaos", 2, acked, final, resends.explain)
    assert lenient.ok, lenient.problems
    assert len(lenient.client_resends) == 2 and "re-sent by the client" in lenient.summary()
    # A third copy of v-1 that no re-send accounts for is the broker's again.
    worse = FinalLog({1: final.partitions[1] + [(939, b"v-1")]})
    assert not verify("unused:0", "chaos", 2, acked, worse, resends.explain).ok

    history = History()
    for v, o in ((b"v-1", 937), (b"v-2", 938)):
        history.invoke("p", v, 1)
        history.ok("p", v, 1, o)
    assert not check(history.events(), final).ok
    checked = check(history.events(), final, explain=resends.explain)
    assert checked.ok, checked.report()
    assert checked.counts["client_resends"] == 2 and "client re-send" in checked.report()


def test_every_refusal_in_the_epoch_must_have_been_right():
    """Found by review: librdkafka logs one ERRSEQ per refused request while it drains; a
    later, right refusal must not excuse a duplicate when the first refusal was wrong."""
    held = LOG[:2] + [BatchOrigin(937, 940, 0, 0, 937), BatchOrigin(941, 942, 0, 1, 0)]
    wrong = SkippedSequence("chaos", 1, 0, 0, 941, 935, "NOT_LEADER_FOR_PARTITION", 939, 940)
    later = SkippedSequence("chaos", 1, 0, 0, 943, 935, "NOT_LEADER_FOR_PARTITION", 941, 942)
    assert explain_resend("chaos", 1, 935, 941, held, [later]) is not None  # alone it would pass
    assert explain_resend("chaos", 1, 935, 941, held, [wrong, later]) is None
    assert explain_resend("chaos", 1, 935, 941, held, [later, wrong]) is None


def test_a_copy_the_client_was_acknowledged_at_is_never_a_re_send():
    final = FinalLog({1: [(935, b"v-1"), (936, b"v-2"), (937, b"v-1")]})
    resends = ResendCheck("chaos", [BUMP], {}, {})
    resends._batches["d"] = LOG
    resends.dirs = {1: ["d"]}
    assert verify("unused:0", "chaos", 2, {b"v-1": Acked(1, 937)}, final, resends.explain).ok
    assert not verify("unused:0", "chaos", 2, {b"v-1": Acked(1, 935)}, final, resends.explain).ok
    for acked_at in (937, 935):
        history = History()
        history.invoke("p", b"v-1", 1)
        history.ok("p", b"v-1", 1, acked_at)
        history.invoke("p", b"v-2", 1)
        history.ok("p", b"v-2", 1, 936)
        assert check(history.events(), final, explain=resends.explain).ok is (acked_at == 937)


def test_every_replica_holding_both_copies_must_agree():
    resends = ResendCheck("chaos", [BUMP], {}, {})
    resends._batches.update({"a": LOG, "b": LOG[:2] + [BatchOrigin(937, 938, 0, 0, 935)], "c": LOG[:1]})
    resends.dirs = {1: ["a", "c"]}
    assert resends.explain(1, 935, 937) is not None  # c has not reached the copies: not asked
    resends.dirs = {1: ["a", "b", "c"]}
    assert resends.explain(1, 935, 937) is None
    resends.dirs = {1: ["c"]}
    assert resends.explain(1, 935, 937) is None  # no replica holds them


def test_the_verifying_producer_always_asks_librdkafka_for_its_epoch_bumps():
    assert librdkafka_debug(None, "broker,topic") == "eos"
    assert librdkafka_debug("/tmp/f", None) == "eos,broker,topic"
    assert librdkafka_debug("/tmp/f", "broker, msg") == "eos,broker,msg"
