"""`kafkalite produce` and `kafkalite consume`: lines in, lines out, through confluent-kafka.

    kafkalite produce TOPIC [--acks all|1|0] [--key-separator SEP] [--partition N] < lines
    kafkalite consume TOPIC [--from-beginning | --offset N] [--partition N]
                      [--max-messages N] [--timeout-ms T] [--print-offset] [--print-key]
                      [--client-rack RACK]

produce: one message per stdin line (without its newline). With --key-separator the text
before the first SEP is the key and the rest the value; a line without SEP is sent with no
key. Every message has a delivery report; if any fails, the command prints one line
("N of M messages failed: <first error>") and exits 1. Nothing is printed on success.

consume: reads every partition of the topic (or only --partition) with assign(), never
subscribe(): consumer groups do not exist yet, so no offsets are committed. It starts at
the end of each partition (new messages only), at the beginning (--from-beginning) or at
offset N of each partition (--offset). It stops after --max-messages, or when no message
arrived for --timeout-ms: 5000 ms by default, 30000 ms when --max-messages is given (so a
script waiting for N messages gives a producer time), 0 = wait forever (Ctrl-C stops).
With --client-rack the consumer sends its rack (librdkafka's `client.rack`), so brokers
configured with `replica.selector.class=RackAwareReplicaSelector` serve it from a replica in
that rack (KIP-392). Each message is one line: ``[PARTITION:OFFSET<TAB>][KEY<TAB>]VALUE``
(a missing key prints as ``null``). A count goes to stderr at the end, as kafka-console-consumer does.
Exit codes: 0 ok, 1 failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time

from kafkalite.cli.admin_client import (
    AdminClient,
    AdminError,
    add_bootstrap_argument,
    fail,
    resolve_bootstrap,
)

IDLE_TIMEOUT_MS_DEFAULT = 5000
IDLE_TIMEOUT_MS_WITH_MAX = 30000
MESSAGE_TIMEOUT_MS = 30000  # how long the producer keeps retrying one message
CONSUME_BATCH_MAX = 500
POLL_INTERVAL_S = 0.2
# librdkafka's own log lines stay off stderr: errors reach us through delivery reports
# and message errors, and are printed as one line.
_QUIET = {"log_level": 0}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("produce", help="send stdin lines to a topic")
    p.add_argument("topic")
    p.add_argument("--acks", choices=["all", "1", "0"], default="all", help="default all")
    p.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    p.add_argument("--partition", type=int, help="send every message to this partition")
    add_bootstrap_argument(p)
    p.set_defaults(func=run_produce)

    c = sub.add_parser("consume", help="print a topic's messages")
    c.add_argument("topic")
    start = c.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", type=int, metavar="N", help="start at offset N of each partition")
    c.add_argument("--partition", type=int, help="read only this partition (default: all)")
    c.add_argument("--max-messages", type=int, metavar="N", help="stop after N messages")
    c.add_argument("--timeout-ms", type=int, metavar="T",
                   help="stop when nothing arrived for T ms (default 5000, or 30000 with --max-messages; 0 = never)")
    c.add_argument("--print-offset", action="store_true", help="prefix PARTITION:OFFSET and a tab")
    c.add_argument("--print-key", action="store_true", help="prefix the key and a tab")
    c.add_argument("--client-rack", metavar="RACK", default="", help="this consumer's rack (client.rack): fetch from a replica in it")
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
                             "enable.idempotence": False, "message.timeout.ms": MESSAGE_TIMEOUT_MS, **_QUIET})
    except KafkaException as e:
        return fail("produce", str(e.args[0]))
    extra = {} if args.partition is None else {"partition": args.partition}
    for raw in sys.stdin.buffer:
        key, value = split_line(raw.rstrip(b"\n").rstrip(b"\r"), separator)
        while True:
            try:
                producer.produce(args.topic, value=value, key=key, on_delivery=on_delivery, **extra)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        sent += 1
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
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

    if args.max_messages is not None and args.max_messages < 1:
        return fail("consume", "--max-messages must be at least 1", 2)
    if args.offset is not None and args.offset < 0:
        return fail("consume", "--offset must be >= 0", 2)
    if args.timeout_ms is not None and args.timeout_ms < 0:
        return fail("consume", "--timeout-ms must be >= 0", 2)
    idle_ms = args.timeout_ms
    if idle_ms is None:
        idle_ms = IDLE_TIMEOUT_MS_DEFAULT if args.max_messages is None else IDLE_TIMEOUT_MS_WITH_MAX
    bootstrap = resolve_bootstrap(args.bootstrap)
    try:
        partitions = _partitions(bootstrap, args.topic, args.partition)
    except AdminError as e:
        return fail("consume", str(e))
    if args.from_beginning:
        start = OFFSET_BEGINNING
    elif args.offset is not None:
        start = args.offset
    else:
        start = OFFSET_END
    try:
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "kafkalite-cli-unused", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": False,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest", "client.rack": args.client_rack, **_QUIET,
        })
    except KafkaException as e:
        return fail("consume", str(e.args[0]))
    fatal = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
    count = 0
    out = sys.stdout.buffer
    try:
        consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
        last_message = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            if idle_ms and (time.monotonic() - last_message) * 1000 >= idle_ms:
                break
            want = CONSUME_BATCH_MAX if args.max_messages is None else min(CONSUME_BATCH_MAX, args.max_messages - count)
            for msg in consumer.consume(want, timeout=POLL_INTERVAL_S):
                err = msg.error()
                if err is not None:
                    if err.fatal() or err.code() in fatal:
                        return fail("consume", err.str())
                    continue  # transient (leader moved, broker restarting): librdkafka retries
                out.write(format_message(msg, args.print_offset, args.print_key))
                count += 1
                last_message = time.monotonic()
            out.flush()
    finally:
        out.flush()
        consumer.close()
    print(f"consumed {count} messages", file=sys.stderr)
    return 0
