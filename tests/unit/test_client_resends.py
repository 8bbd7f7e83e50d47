"""kafkalite.testing.client_resends: a duplicate is taken for librdkafka's re-send under a
bumped epoch (its issue #4953) only on the whole evidence; any other duplicate stays the
broker's failure in `verify` and in the history checker."""

from __future__ import annotations

import dataclasses
import logging

from kafkalite.log.records import encode_batch
from kafkalite.testing.client_resends import (
    BatchOrigin,
    ClientAccount,
    ClientAccountLog,
    EpochBase,
    EpochBump,
    ResendCheck,
    SkippedSequence,
    batch_origins,
    explain_resend,
    parse_epoch_base,
    parse_epoch_bump,
    parse_skipped_sequence,
)
from kafkalite.testing.history import FinalLog, History, check
from kafkalite.testing.verify import Acked, librdkafka_debug, verify

# librdkafka 2.x's debug lines, as its logger hands them over (facility, client, text).
ERRSEQ = ("ERRSEQ [rdkafka#producer-2] [thrd:127.0.0.1:45013/2]: 127.0.0.1:45013/2: ProduceRequest for chaos [1] "
          "with 2 message(s) failed due to skipped sequence numbers (PID{Id:0,Epoch:0}, base seq 941 > next seq 935) "
          "caused by previous failed request (NOT_LEADER_FOR_PARTITION, actions Refresh,MsgNotPersisted, "
          "base seq 939..940, base msgid 2738, 9ms ago): recovering and retrying")
NEWPID = ("NEWPID [rdkafka#producer-2] [thrd:127.0.0.1:45013/2]: chaos [1] changed PID{Id:0,Epoch:0} -> "
          "PID{Id:0,Epoch:1} with base MsgId 936")
DRAIN = ("DRAIN [rdkafka#producer-2] [thrd:127.0.0.1:45013/2]: Beginning partition drain in state Assigned for "
         "PID{Id:0,Epoch:0} epoch bump for 1 partition(s) with in-flight requests: skipped sequence numbers")
FIRST_PID = ("NEWPID [rdkafka#producer-2] [thrd:127.0.0.1:45013/2]: chaos [1] changed PID{Invalid} -> "
             "PID{Id:0,Epoch:0} with base MsgId 1")

BUMP = SkippedSequence("chaos", 1, 0, 0, refused_seq=941, next_seq=935, failed_error="NOT_LEADER_FOR_PARTITION",
                       failed_first_seq=939, failed_last_seq=940)
BASES = (EpochBase("chaos", 1, 0, 0, 1), EpochBase("chaos", 1, 0, 1, 936))
BEGAN = (EpochBump(0, 0, "skipped sequence numbers"),)
ACCOUNT = ClientAccount((BUMP,), BASES, BEGAN)

# The log of the chaos test's failure: epoch 0 ends at sequence 936 (offsets 935-936 were
# written, then the leader was deposed and answered NOT_LEADER_OR_FOLLOWER); librdkafka sent
# the same messages again in epoch 1, numbered from message id 936 (sequence 935) as 0.
LOG = [
    BatchOrigin(933, 934, 0, 0, 933),
    BatchOrigin(935, 936, 0, 0, 935),
    BatchOrigin(937, 938, 0, 1, 0),
    BatchOrigin(939, 940, 0, 1, 2),
]


def _explain(first: int, second: int, log=None, account: ClientAccount = ACCOUNT, others=None) -> str | None:
    logs = {1: LOG if log is None else log, **(others or {})}
    return explain_resend("chaos", 1, first, second, logs.get, account)


def test_librdkafkas_account_of_its_epochs_is_parsed_and_nothing_else_is():
    assert parse_skipped_sequence(ERRSEQ) == BUMP
    assert parse_epoch_base(NEWPID) == BASES[1]
    assert parse_epoch_base(FIRST_PID) == BASES[0]
    assert parse_epoch_bump(DRAIN) == BEGAN[0]
    assert parse_skipped_sequence(NEWPID) is None and parse_epoch_base(ERRSEQ) is None and parse_epoch_bump(NEWPID) is None
    handler = ClientAccountLog()
    log = logging.Logger("test_client_resends")
    log.addHandler(handler)
    for line in (FIRST_PID, ERRSEQ, DRAIN, NEWPID):
        fac, rest = line.split(" ", 1)
        name, text = rest.split(" ", 1)
        log.log(logging.DEBUG, "%s %s %s", fac, name, text)  # as confluent-kafka calls its logger
    log.log(logging.ERROR, "%s %s %s", "FAIL", "[rdkafka#producer-2]", "Connect failed: Connection refused")
    assert handler.account() == ACCOUNT


def test_the_re_send_of_messages_told_not_written_is_the_clients():
    why = _explain(935, 937)
    assert why is not None and "librdkafka issue #4953" in why and "message id 936" in why
    assert _explain(936, 938) is not None


def test_the_bump_is_the_producers_so_it_explains_a_partition_it_was_not_refused_in():
    """The long chaos run of 2026-11-28: a refusal in partition 1 bumped the producer, and a
    message of partition 5 told NOT_LEADER_OR_FOLLOWER but written was sent again too."""
    p5 = [BatchOrigin(5605, 5605, 0, 0, 5605), BatchOrigin(5606, 5606, 0, 1, 0)]
    account = ClientAccount((BUMP,), BASES + (EpochBase("chaos", 5, 0, 0, 1), EpochBase("chaos", 5, 0, 1, 5606)), BEGAN)
    assert explain_resend("chaos", 5, 5605, 5606, {1: LOG, 5: p5}.get, account) is not None
    assert explain_resend("chaos", 5, 5605, 5606, {5: p5}.get, account) is None  # partition 1's log unknown


def test_anything_short_of_the_whole_evidence_stays_the_brokers():
    same_epoch = LOG[:2] + [BatchOrigin(937, 938, 0, 0, 935)]
    assert _explain(935, 937, same_epoch) is None  # the leader had to drop it
    assert _explain(935, 937, LOG[:2] + [BatchOrigin(937, 938, 7, 1, 0)]) is None  # another producer
    assert _explain(935, 937, LOG[:2] + [BatchOrigin(937, 938, 0, 1, 1)]) is None  # not the same message id
    assert _explain(935, 937, account=ClientAccount((), BASES, BEGAN)) is None  # librdkafka reported no bump
    assert _explain(935, 937, account=ClientAccount((BUMP,), BASES[:1], BEGAN)) is None  # nor the new epoch's base
    other_topic = dataclasses.replace(BUMP, topic="other")
    assert _explain(935, 937, account=ClientAccount((other_topic,), BASES, BEGAN)) is None
    timed_out = dataclasses.replace(BUMP, failed_error="REQUEST_TIMED_OUT")
    assert _explain(935, 937, account=ClientAccount((timed_out,), BASES, BEGAN)) is None  # not what it takes for unwritten
    then_timed_out = ClientAccount((dataclasses.replace(BUMP, failed_error="REQUEST_TIMED_OUT"), BUMP), BASES, BEGAN)
    assert _explain(935, 937, account=then_timed_out) is None
    # the refusals behind the first one name the partition's last error, whatever it was
    draining = ClientAccount((BUMP, dataclasses.replace(BUMP, refused_seq=943, failed_error="_TRANSPORT")), BASES, BEGAN)
    assert _explain(935, 937, account=draining) is not None
    # Found by review: the error an ERRSEQ line names is the partition's last, maybe long ago.
    stale = dataclasses.replace(BUMP, failed_first_seq=100, failed_last_seq=101)
    assert _explain(935, 937, account=ClientAccount((stale,), BASES, BEGAN)) is None
    acked_then = dataclasses.replace(BUMP, next_seq=936, failed_first_seq=939)  # 935 was acknowledged before the bump
    assert _explain(935, 937, account=ClientAccount((acked_then,), BASES, BEGAN)) is None
    # The bump must have begun for the refusal, not for a timeout or a gap.
    assert _explain(935, 937, account=ClientAccount((BUMP,), BASES)) is None
    gap = (EpochBump(0, 0, "message sequence gap"),)
    assert _explain(935, 937, account=ClientAccount((BUMP,), BASES, gap)) is None
    # The leader held sequence 940 in epoch 0, so refusing 941 as out of order was wrong.
    held = LOG[:2] + [BatchOrigin(937, 940, 0, 0, 937), BatchOrigin(941, 942, 0, 1, 0)]
    held_bases = (BASES[0], EpochBase("chaos", 1, 0, 1, 936))
    assert _explain(935, 941, held, ClientAccount((BUMP,), held_bases, BEGAN)) is None


def test_every_refusal_in_the_epoch_must_have_been_right():
    """Found by review: librdkafka logs one ERRSEQ per refused request while it drains; a
    later, right refusal must not excuse a duplicate when the first refusal was wrong."""
    held = LOG[:2] + [BatchOrigin(937, 940, 0, 0, 937), BatchOrigin(941, 942, 0, 1, 0)]
    later = dataclasses.replace(BUMP, refused_seq=943)
    assert _explain(935, 941, held, ClientAccount((later,), BASES, BEGAN)) is not None  # alone it would pass
    assert _explain(935, 941, held, ClientAccount((BUMP, later), BASES, BEGAN)) is None
    assert _explain(935, 941, held, ClientAccount((later, BUMP), BASES, BEGAN)) is None


def test_batch_origins_are_read_from_whole_batches_below_the_end_and_replicas_must_agree(tmp_path):
    d = tmp_path / "chaos-1"
    d.mkdir()
    a = encode_batch([(b"k", b"v-1", ()), (b"k", b"v-2", ())], base_offset=0, producer_id=0, producer_epoch=0, base_sequence=0)
    b = encode_batch([(b"k", b"v-1", ())], base_offset=2, producer_id=0, producer_epoch=1, base_sequence=0)
    c = encode_batch([(b"k", b"v-3", ())], base_offset=3, producer_id=0, producer_epoch=1, base_sequence=1)
    (d / "00000000000000000000.log").write_bytes(a + b + c[: len(c) // 2])  # a torn tail
    assert batch_origins(str(d), 10) == [BatchOrigin(0, 1, 0, 0, 0), BatchOrigin(2, 2, 0, 1, 0)]
    assert batch_origins(str(d), 2) == [BatchOrigin(0, 1, 0, 0, 0)]
    behind = tmp_path / "behind"
    behind.mkdir()
    (behind / "00000000000000000000.log").write_bytes(a)
    other = tmp_path / "other"
    other.mkdir()
    (other / "00000000000000000000.log").write_bytes(
        a + encode_batch([(b"k", b"v-1", ())], base_offset=2, producer_id=0, producer_epoch=0, base_sequence=2))
    account = ClientAccount((SkippedSequence("chaos", 1, 0, 0, 3, 0, "NOT_LEADER_FOR_PARTITION", 2, 2),),
                            (EpochBase("chaos", 1, 0, 0, 1), EpochBase("chaos", 1, 0, 1, 1)), BEGAN)
    agreeing = ResendCheck("chaos", account, {1: [str(tmp_path / "missing"), str(behind), str(d)]}, {1: 3})
    assert agreeing.explain(1, 0, 2) is not None
    assert agreeing.explain(0, 0, 2) is None
    assert ResendCheck("chaos", account, {1: [str(d), str(other)]}, {1: 3}).explain(1, 0, 2) is None


def _check_of(log) -> ResendCheck:
    resends = ResendCheck("chaos", ACCOUNT, {}, {})
    resends._batches[1] = log
    return resends


def test_verify_and_the_history_checker_report_the_clients_re_sends_and_fail_the_rest():
    final = FinalLog({1: [(935, b"v-1"), (936, b"v-2"), (937, b"v-1"), (938, b"v-2")]})
    acked = {b"v-1": Acked(1, 937), b"v-2": Acked(1, 938)}
    resends = _check_of(LOG)
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


def test_a_copy_the_client_was_acknowledged_at_is_never_a_re_send():
    final = FinalLog({1: [(935, b"v-1"), (936, b"v-2"), (937, b"v-1")]})
    resends = _check_of(LOG)
    assert verify("unused:0", "chaos", 2, {b"v-1": Acked(1, 937)}, final, resends.explain).ok
    assert not verify("unused:0", "chaos", 2, {b"v-1": Acked(1, 935)}, final, resends.explain).ok
    for acked_at in (937, 935):
        history = History()
        history.invoke("p", b"v-1", 1)
        history.ok("p", b"v-1", 1, acked_at)
        history.invoke("p", b"v-2", 1)
        history.ok("p", b"v-2", 1, 936)
        assert check(history.events(), final, explain=resends.explain).ok is (acked_at == 937)


def test_the_verifying_producer_always_asks_librdkafka_for_its_epochs():
    assert librdkafka_debug(None, "broker,topic") == "eos"
    assert librdkafka_debug("/tmp/f", None) == "eos,broker,topic"
    assert librdkafka_debug("/tmp/f", "broker, msg") == "eos,broker,msg"


def test_consumers_reading_both_copies_of_a_re_sent_message_break_no_rule():
    """bin/chaos seed 341: the group read both copies; the checker then also reported the
    value read at two offsets and acknowledged at one but read at the other."""
    final = FinalLog({1: [(935, b"v-1"), (936, b"v-2"), (937, b"v-1"), (938, b"v-2")]})
    history = History()
    for v, o in ((b"v-1", 937), (b"v-2", 938)):
        history.invoke("p", v, 1)
        history.ok("p", v, 1, o)
    for o, v in final.partitions[1]:
        history.read("c", v, 1, o)
    checked = check(history.events(), final, explain=_check_of(LOG).explain)
    assert checked.ok, checked.report()
    assert not check(history.events(), final).ok
