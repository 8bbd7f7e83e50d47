"""The leader's record of when batches were appended (kafkalite_replication_catch_up_seconds)."""

from kafkalite.broker.replication_timing import APPEND_TIMES_MAX, AppendTimes, scheduler_seconds


def test_a_fetch_covering_several_batches_times_the_oldest_it_newly_covers():
    times = AppendTimes()
    times.appended(10, 1.0)
    times.appended(20, 2.0)
    times.appended(30, 3.0)
    assert times.oldest_covered(10, 30) == 2.0
    assert times.oldest_covered(0, 10) == 1.0
    assert times.oldest_covered(15, 30) == 2.0  # the batch ending at 20 is only now whole


def test_a_fetch_that_covers_no_new_batch_times_nothing():
    times = AppendTimes()
    times.appended(10, 1.0)
    assert times.oldest_covered(10, 10) is None
    assert times.oldest_covered(0, 5) is None  # mid-batch
    assert times.oldest_covered(10, 12) is None  # past every known batch


def test_a_smaller_end_offset_after_truncation_starts_afresh():
    times = AppendTimes()
    times.appended(10, 1.0)
    times.appended(20, 2.0)
    times.appended(15, 5.0)
    assert times.oldest_covered(0, 20) == 5.0


def test_only_the_latest_batches_are_remembered():
    times = AppendTimes()
    for i in range(1, 2 * APPEND_TIMES_MAX + 1):
        times.appended(i, float(i))
    assert times.oldest_covered(0, 1) is None
    assert times.oldest_covered(2 * APPEND_TIMES_MAX - 1, 2 * APPEND_TIMES_MAX) == float(2 * APPEND_TIMES_MAX)


def test_scheduler_seconds_are_non_negative_where_the_kernel_tells():
    sched = scheduler_seconds()
    if sched is not None:
        run_s, wait_s = sched
        assert run_s >= 0
        assert wait_s >= 0
