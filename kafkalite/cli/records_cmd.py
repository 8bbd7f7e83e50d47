"""`kafkalite records delete` and `kafkalite log-dirs`: DeleteRecords and DescribeLogDirs.

    kafkalite records delete --topic T --partition P --before OFFSET
    kafkalite log-dirs [--json]

`records delete` moves the partition's log start to OFFSET (-1: the high watermark), as
Kafka's kafka-delete-records does: the records below it can no longer be read and the
segments wholly below it are deleted on every replica. It asks the partition's leader and
prints the new low watermark (the least log start over the in-sync replicas, which the
broker waits for). `log-dirs` asks every broker (DescribeLogDirs) and prints the bytes on
disk per broker, log dir and partition, with totals; a follower's offset lag is how far it
was behind the leader's log end at its last fetch. With --json:
{"brokers": [{"id", "host", "port", "size", "log_dirs": [{"path", "error", "size",
"partitions": [{"topic", "partition", "size", "offset_lag", "is_future"}]}]}], "size"}.
Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kafkalite.cli.admin_client import (
    AdminClient,
    AdminError,
    add_bootstrap_argument,
    console_for_tables,
    error_name,
    fail,
    int32_arg,
    int64_arg,
    resolve_bootstrap,
)
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ApiKey

DELETE_RECORDS_VERSION = 1
DESCRIBE_LOG_DIRS_VERSION = 1
LIST_OFFSETS_VERSION = 1
NOT_LEADER_RETRIES = 5  # the leader moved between Metadata and DeleteRecords: ask Metadata again
NOT_LEADER_BACKOFF_S = 0.5


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("records", help="delete records below an offset (DeleteRecords)")
    rsub = p.add_subparsers(dest="records_command", required=True)
    delete = rsub.add_parser("delete", help="move a partition's log start up: records below it are deleted")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--partition", type=int32_arg, required=True)
    delete.add_argument("--before", type=int64_arg, required=True, metavar="OFFSET",
                        help="the new log start; records below it go (-1: the high watermark, i.e. everything readable)")
    delete.add_argument("--timeout-ms", type=int32_arg, default=30_000,
                        help="how long the leader waits for the in-sync replicas to follow (default 30000)")
    add_bootstrap_argument(delete)
    delete.set_defaults(func=run_delete)

    dirs = sub.add_parser("log-dirs", help="bytes on disk per broker, log dir and partition (DescribeLogDirs)")
    dirs.add_argument("--json", action="store_true", help="machine-readable output")
    add_bootstrap_argument(dirs)
    dirs.set_defaults(func=run_log_dirs)


# -- records delete ------------------------------------------------------------------------

def run_delete(args: argparse.Namespace) -> int:
    if args.partition < 0:
        return fail("records delete", f"--partition must be at least 0, got {args.partition}", 2)
    if args.before < -1:
        return fail("records delete", f"--before must be an offset (or -1 for the high watermark), got {args.before}", 2)
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            low = delete_records(admin, args.topic, args.partition, args.before, args.timeout_ms)
    except AdminError as e:
        return fail("records delete", str(e))
    print(f"{args.topic}-{args.partition}: low watermark {low}")
    return 0


def delete_records(admin: AdminClient, topic: str, partition: int, before: int, timeout_ms: int) -> int:
    """DeleteRecords to the partition's leader; the new low watermark, or AdminError with a
    one-line reason."""
    for attempt in range(NOT_LEADER_RETRIES):
        host, port = _leader_address(admin, topic, partition)
        body = {"topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": before}]}],
                "timeout_ms": timeout_ms}
        response = admin.request_broker(host, port, ApiKey.DELETE_RECORDS, DELETE_RECORDS_VERSION, body)
        result = response["topics"][0]["partitions"][0]
        code = result["error_code"]
        if code == 0:
            return int(result["low_watermark"])
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and attempt + 1 < NOT_LEADER_RETRIES:
            time.sleep(NOT_LEADER_BACKOFF_S)
            continue
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            hw = _high_watermark(admin, host, port, topic, partition)
            raise AdminError(f"{topic}-{partition}: offset {before} is above the high watermark"
                             f"{'' if hw is None else f' {hw}'} (OFFSET_OUT_OF_RANGE)")
        if code == ErrorCode.POLICY_VIOLATION:
            raise AdminError(f"{topic}-{partition}: records cannot be deleted from a topic with cleanup.policy=compact "
                             "(POLICY_VIOLATION)")
        if code == ErrorCode.REQUEST_TIMED_OUT:
            raise AdminError(f"{topic}-{partition}: the log start moved on the leader, but not every in-sync replica "
                             f"followed within {timeout_ms} ms (low watermark {result['low_watermark']})")
        raise AdminError(f"{topic}-{partition}: {error_name(code)}")
    raise AssertionError("unreachable: the last attempt returns or raises")


def _leader_address(admin: AdminClient, topic: str, partition: int) -> tuple[str, int]:
    meta = admin.metadata([topic])
    info = meta.topics[topic]
    found = next((p for p in info.partitions if p.partition == partition), None)
    if found is None:
        raise AdminError(f"topic {topic!r} has no partition {partition} (it has {len(info.partitions)})")
    leader = meta.broker(found.leader)
    if leader is None:
        raise AdminError(f"{topic}-{partition} has no leader now (offline); try again when it has one")
    return leader.host, leader.port


def _high_watermark(admin: AdminClient, host: str, port: int, topic: str, partition: int) -> int | None:
    body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]}
    try:
        response = admin.request_broker(host, port, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
    except AdminError:
        return None
    p = response["topics"][0]["partitions"][0]
    return int(p["offset"]) if p["error_code"] == 0 else None


# -- log-dirs ------------------------------------------------------------------------------

def summarize(brokers: list[dict[str, Any]], answers: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The --json document from Metadata's brokers ({id, host, port}) and each broker's
    DescribeLogDirs response (a missing one: that broker did not answer): sizes summed per
    dir, per broker and overall."""
    out = []
    for b in sorted(brokers, key=lambda b: b["id"]):
        answer = answers.get(b["id"])
        entry: dict[str, Any] = {**b, "error": None, "size": 0, "log_dirs": []}
        if answer is None:
            entry["error"] = "no answer"
            out.append(entry)
            continue
        for r in sorted(answer["results"], key=lambda r: r["log_dir"]):
            parts = sorted(({"topic": t["name"], "partition": p["partition_index"], "size": p["partition_size"],
                             "offset_lag": p["offset_lag"], "is_future": p["is_future_key"]}
                            for t in r["topics"] for p in t["partitions"]), key=lambda p: (p["topic"], p["partition"]))
            size = sum(p["size"] for p in parts)
            entry["log_dirs"].append({"path": r["log_dir"], "error": None if r["error_code"] == 0 else error_name(r["error_code"]),
                                      "size": size, "partitions": parts})
            entry["size"] += size
        out.append(entry)
    return {"brokers": out, "size": sum(b["size"] for b in out)}


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; exact bytes below 1 KiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def run_log_dirs(args: argparse.Namespace) -> int:
    try:
        with AdminClient(resolve_bootstrap(args.bootstrap)) as admin:
            meta = admin.metadata()
            brokers = [{"id": b.id, "host": b.host, "port": b.port} for b in meta.brokers]
            answers = {}
            for b in meta.brokers:
                try:
                    answers[b.id] = admin.request_broker(b.host, b.port, ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION,
                                                         {"topics": None})
                except AdminError:
                    pass  # reported as "no answer" for that broker
    except AdminError as e:
        return fail("log-dirs", str(e))
    doc = summarize(brokers, answers)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_table(doc)
    silent = [b["id"] for b in doc["brokers"] if b["error"]]
    if silent:
        return fail("log-dirs", f"no answer from broker{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))}")
    return 0


def _print_table(doc: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    console = console_for_tables()
    table = Table("broker", "log dir", "topic", "partition", "size", "bytes", "offset lag", "status")
    for b in doc["brokers"]:
        if b["error"]:
            table.add_row(str(b["id"]), "-", "-", "-", "-", "-", "-", Text(b["error"].upper(), style="red"))
            continue
        for d in b["log_dirs"]:
            status = Text(d["error"], style="red") if d["error"] else "ok"
            for p in d["partitions"]:
                table.add_row(str(b["id"]), d["path"], p["topic"], str(p["partition"]), human_bytes(p["size"]), str(p["size"]),
                              str(p["offset_lag"]), status)
            table.add_row(str(b["id"]), d["path"], Text("dir total", style="bold"), "", human_bytes(d["size"]), str(d["size"]), "", status,
                          end_section=True)
        table.add_row(str(b["id"]), "", Text("broker total", style="bold"), "", human_bytes(b["size"]), str(b["size"]), "", "", end_section=True)
    table.add_row("", "", Text("total", style="bold"), "", human_bytes(doc["size"]), str(doc["size"]), "", "")
    console.print(table)
