"""The controller's process watch verdicts (kafkalite.core.process_watch)."""

from __future__ import annotations

from kafkalite.core.process_watch import NOT_REGISTERED, PingAnswer, ProcessWatchState, Verdict


def test_refused_is_evidence_and_a_timeout_is_not():
    w = ProcessWatchState(1, 10)
    assert w.judge("refused") is Verdict.GONE
    assert w.judge("timeout") is Verdict.UNKNOWN


def test_the_process_is_recognised_by_its_incarnation_once_it_answered_as_the_registration():
    w = ProcessWatchState(1, 10)
    assert w.judge(PingAnswer(1, NOT_REGISTERED, "a")) is Verdict.UNKNOWN  # had not stored its epoch yet
    assert w.judge(PingAnswer(1, 10, "a")) is Verdict.ALIVE
    assert w.incarnation == "a"
    assert w.judge(PingAnswer(1, 10, "a")) is Verdict.ALIVE
    assert w.judge(PingAnswer(1, NOT_REGISTERED, "b")) is Verdict.GONE  # restarted on its address, not registered yet
    assert w.judge(PingAnswer(1, 11, "b")) is Verdict.GONE


def test_another_registration_or_broker_on_the_address_is_evidence():
    assert ProcessWatchState(1, 10).judge(PingAnswer(1, 11, "b")) is Verdict.GONE
    assert ProcessWatchState(1, 10).judge(PingAnswer(2, 20, "c")) is Verdict.GONE


def test_an_answer_with_an_older_epoch_is_the_registration_s_own_process_catching_up():
    """A broker whose ZooKeeper session expired registers again (a new epoch) and, until it
    has stored that epoch, answers a Ping with its previous one: no evidence. Once it answers
    as the new registration it is recognised, and only then can another answer be judged."""
    w = ProcessWatchState(2, 8589934613)
    assert w.judge(PingAnswer(2, 4294967341, "p")) is Verdict.UNKNOWN
    assert w.incarnation is None
    assert w.judge(PingAnswer(2, 8589934613, "p")) is Verdict.ALIVE
    assert w.incarnation == "p"
    assert w.judge(PingAnswer(2, 4294967341, "q")) is Verdict.GONE  # another process on the address, once recognised
    assert ProcessWatchState(2, 10).judge(PingAnswer(2, 12, "r")) is Verdict.GONE  # a later registration
