"""`kafkalite produce` and `kafkalite consume`: lines in, lines out, through confluent-kafka.

    kafkalite produce TOPIC [--acks all|1|0] [--key-separator SEP] [--partition N] < lines
    kafkalite consume TOPIC [--from-beginning | --offset N] [--partition N]
                      [--max-messages N] [--timeout-ms T] [--print-offset] [--print-key]
                      [--client-rack RACK] [--group GROUP]

produce: one message per stdin line (without its newline). With --key-separator the text
before the first SEP is the key and the rest the value; a line without SEP is sent with no
key. Every message has a delivery report; if any fails, the command prints one line
("N of M messages failed: <first error>") and exits 1. Nothing is printed on success.

consume: without --group, reads every partition of the topic (or only --partition) with
assign() and commits nothing. It starts at the end of each partition (new messages only),
at the beginning (--from-beginning) or at offset N of each partition (--offset). With
--group G it subscribes as a member of consumer group G (as kafka-console-consumer --group):
the coordinator assigns it partitions, it starts at G's committed offsets (where there are
none: the end, or the beginning with --from-beginning), and commits the offsets of what it
printed (every 5 s, and synchronously before it leaves the group); --offset and --partition
do not combine with --group. It stops after --max-messages, or when no message arrived for
--timeout-ms: 5000 ms by default, 30000 ms when --max-messages is given (so a script
waiting for N messages gives a producer time), 0 = wait forever (Ctrl-C stops). In a group
the idle time counts from the first assignment; no assignment within 30 s is an error.
With --client-rack the consumer sends its rack (librdkafka's `client.rack`), so brokers
configured with `replica.selector.class=RackAwareReplicaSelector` serve it from a replica in
that rack (KIP-392). Each message is one line: ``[PARTITION:OFFSET<TAB>][KEY<TAB>]VALUE``
(a missing key prints as ``null``). A count goes to stderr at the end, as kafka-console-consumer does.
Exit codes: 0 ok, 1 failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from kafkalite.cli import client_security
from kafkalite.cli.admin_client import (
    AdminClient,
    AdminError,
    add_bootstrap_argument,
    fail,
    int32_arg,
    int64_arg,
    resolve_bootstrap,
)

IDLE_TIMEOUT_MS_DEFAULT = 5000
IDLE_TIMEOUT_MS_WITH_MAX = 30000
MESSAGE_TIMEOUT_MS = 30000  # how long the producer keeps retrying one message
CONSUME_BATCH_MAX = 500
# With --group the idle timeout starts when the coordinator assigns partitions; joining may
# take this long (a coordinator starting up, group.initial.rebalance.delay.ms, a rebalance).
GROUP_JOIN_WAIT_MS_MAX = 30000
GROUP_CLIENT_ID = "kafkalite-consume"
POLL_INTERVAL_S = 0.2
# librdkafka's own log lines stay off stderr: errors reach us through delivery reports
# and message errors, and are printed as one line.
_QUIET = {"log_level": 0}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="send stdin lines to a topic")
    p.add_argument("topic")
    p.add_argument("--acks", choices=["all", "1", "0"], default="all", help="default all")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    p.add_argument("--partition", type=int32_arg, help="send every message to this partition")
    add_bootstrap_argument(p)
    p.set_defaults(func=run_produce)

    c = sub.add_parser("consume", help="print a topic's messages")
    c.add_argument("topic")
    start = c.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", type=int64_arg, metavar="N", help="start at offset N of each partition")
    c.add_argument("--partition", type=int32_arg, help="read only this partition (default: all)")
    c.add_argument("--max-messages", type=int, metavar="N", help="stop after N messages")
    c.add_argument("--timeout-ms", type=int, metavar="T",
                   help="stop when nothing arrived for T ms (default 5000, or 30000 with --max-messages; 0 = never)")
    c.add_argument("--print-offset", action="store_true", help="prefix PARTITION:OFFSET and a tab")
    c.add_argument("--print-key", action="store_true", help="prefix the key and a tab")
    c.add_argument("--client-rack", metavar="RACK", default="", help="this consumer's rack (client.rack): fetch from a replica in it")
    c.add_argument("--group", metavar="GROUP", help="consume as a member of this consumer group, committing offsets")
    add_bootstrap_argument(c)
    c.set_defaults(func=run_consume)


def _partitions(bootstrap: str, topic: str, partition: int | None) -> list[int]:
    """The topic's partitions (or [partition] after checking it exists); AdminError else."""
    with AdminClient(bootstrap) as admin:
        info = admin.metadata([topic]).topics[topic]
    known = [p.partition for p in info.partitions]
    if partition is None:
        return known
    if partition not in known:
        raise AdminError(f"topic {topic!r} has no partition {partition} (partitions 0..{len(known) - 1})")
    return [partition]


# -- produce -------------------------------------------------------------------------------

def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line (without its newline)."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    return (key, value) if sep else (None, line)


def run_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    if args.key_separator == "":
        return fail("produce", "--key-separator must not be empty", 2)
    bootstrap = resolve_bootstrap(args.bootstrap)
    try:
        _partitions(bootstrap, args.topic, args.partition)
    except AdminError as e:
        return fail("produce", str(e))
    separator = args.key_separator.encode() if args.key_separator else None
    failures: list[str] = []
    sent = 0

    def on_delivery(err, msg) -> None:
        if err is not None:
            failures.append(err.str())

    try:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": 5,
                             "enable.idempotence": False, "message.timeout.ms": MESSAGE_TIMEOUT_MS, **_QUIET,
                             **client_security.librdkafka_config()})
    except KafkaException as e:
        return fail("produce", str(e.args[0]))
    extra = {} if args.partition is None else {"partition": args.partition}
    for raw in sys.stdin.buffer:
        key, value = split_line(raw.rstrip(b"\n").rstrip(b"\r"), separator)
        sent += 1
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery, **extra)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
            except KafkaException as e:  # refused before sending (MSG_SIZE_TOO_LARGE: a line over message.max.bytes)
                failures.append(e.args[0].str())
                break
        producer.poll(0)
    undelivered = producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 5)
    failed = len(failures) + undelivered
    if failed:
        reason = failures[0] if failures else "not delivered in time"
        return fail("produce", f"{failed} of {sent} messages failed: {reason}")
    return 0


# -- consume -------------------------------------------------------------------------------

def format_message(msg, print_offset: bool, print_key: bool) -> bytes:
    parts = []
    if print_offset:
        parts.append(f"{msg.partition()}:{msg.offset()}".encode())
    if print_key:
        key = msg.key()
        parts.append(b"null" if key is None else key)
    parts.append(msg.value() or b"")
    return b"\t".join(parts) + b"\n"


def run_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

    problem = _consume_usage_problem(args)
    if problem:
        return fail("consume", problem, 2)
    idle_ms = args.timeout_ms
    if idle_ms is None:
        idle_ms = IDLE_TIMEOUT_MS_DEFAULT if args.max_messages is None else IDLE_TIMEOUT_MS_WITH_MAX
    bootstrap = resolve_bootstrap(args.bootstrap)
    try:
        partitions = _partitions(bootstrap, args.topic, args.partition)
    except AdminError as e:
        return fail("consume", str(e))
    config = {
        "bootstrap.servers": bootstrap, "enable.partition.eof": False,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest", "client.rack": args.client_rack, **_QUIET,
        **client_security.librdkafka_config(),
    }
    if args.group is None:
        config.update({"group.id": "kafkalite-cli-unused", "enable.auto.commit": False, "enable.auto.offset.store": False})
    else:
        # Offsets are stored by us once a message is written out, committed every
        # auto.commit.interval.ms and once more, synchronously, at the end.
        config.update({"group.id": args.group, "client.id": GROUP_CLIENT_ID, "enable.auto.commit": True,
                       "enable.auto.offset.store": False})
    try:
        consumer = Consumer(config)
    except KafkaException as e:
        return fail("consume", str(e.args[0]))
    session = _ConsumeSession(consumer, args, idle_ms)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill PID` leaves the group cleanly, as Ctrl-C does
    try:
        if args.group is None:
            start = OFFSET_BEGINNING if args.from_beginning else args.offset if args.offset is not None else OFFSET_END
            consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
            session.joined_at = time.monotonic()
        else:
            consumer.subscribe([args.topic], on_assign=session.on_assign)
        error = session.run()
        if error is None and args.group is not None:
            error = _commit_final(consumer)
    finally:
        sys.stdout.buffer.flush()
        consumer.close()  # in a group: commits what is stored and leaves (LeaveGroup)
    if error is not None:
        return fail("consume", error)
    print(f"consumed {session.count} messages", file=sys.stderr)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _consume_usage_problem(args: argparse.Namespace) -> str | None:
    if args.max_messages is not None and args.max_messages < 1:
        return "--max-messages must be at least 1"
    if args.offset is not None and args.offset < 0:
        return "--offset must be >= 0"
    if args.timeout_ms is not None and args.timeout_ms < 0:
        return "--timeout-ms must be >= 0"
    if args.group is not None and not args.group.strip():
        return "--group must not be empty"
    if args.group is not None and (args.offset is not None or args.partition is not None):
        # As kafka-console-consumer: the group's coordinator assigns the partitions, and
        # the committed offsets (else --from-beginning or the end) say where to start.
        return "--group cannot be combined with --offset or --partition (reset a group's offsets with `kafkalite groups reset-offsets`)"
    return None


class _ConsumeSession:
    """The consume loop: prints messages, stores their offsets in a group, and stops after
    --max-messages or when nothing arrived for idle_ms since the last message (or since the
    partitions were assigned: a group's join does not count as idle time)."""

    def __init__(self, consumer, args: argparse.Namespace, idle_ms: int):
        self.consumer = consumer
        self.args = args
        self.idle_ms = idle_ms
        self.count = 0
        self.joined_at: float | None = None
        self.started_at = time.monotonic()

    def on_assign(self, consumer, partitions) -> None:
        if self.joined_at is None:
            self.joined_at = time.monotonic()

    def run(self) -> str | None:
        """Consume until done; an error message, or None."""
        from confluent_kafka import KafkaError

        fatal = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
        args, out = self.args, sys.stdout.buffer
        last_message = None
        while args.max_messages is None or self.count < args.max_messages:
            now = time.monotonic()
            if self.joined_at is None:
                if self.idle_ms and (now - self.started_at) * 1000 >= max(self.idle_ms, GROUP_JOIN_WAIT_MS_MAX):
                    return f"no partitions assigned by group {args.group!r} within {max(self.idle_ms, GROUP_JOIN_WAIT_MS_MAX) // 1000} s"
            elif self.idle_ms and (now - (last_message or self.joined_at)) * 1000 >= self.idle_ms:
                return None
            want = CONSUME_BATCH_MAX if args.max_messages is None else min(CONSUME_BATCH_MAX, args.max_messages - self.count)
            consumed: dict[tuple[str, int], int] = {}
            for msg in self.consumer.consume(want, timeout=POLL_INTERVAL_S):
                err = msg.error()
                if err is not None:
                    if err.fatal() or err.code() in fatal:
                        return err.str()
                    continue  # transient (leader moved, broker restarting): librdkafka retries
                out.write(format_message(msg, args.print_offset, args.print_key))
                consumed[(msg.topic(), msg.partition())] = msg.offset()
                self.count += 1
                last_message = time.monotonic()
            out.flush()
            if args.group is not None and consumed:
                self._store(consumed)
        return None

    def _store(self, consumed: dict[tuple[str, int], int]) -> None:
        """Only what was written out counts as consumed: store the next offset of each."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self.consumer.store_offsets(offsets=[TopicPartition(t, p, o + 1) for (t, p), o in consumed.items()])
        except KafkaException:
            pass  # a partition revoked meanwhile: its next owner starts from the last commit


def _commit_final(consumer) -> str | None:
    """Commit the stored offsets now, so the group's offsets are the printed messages'
    when the command returns; None when done (or nothing to commit)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        err = e.args[0]
        if err.code() != KafkaError._NO_OFFSET:
            return f"committing offsets failed: {err.str()}"
    return None
