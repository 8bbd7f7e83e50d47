"""partition.metadata (KIP-516): the topic id of the log in a partition directory, in
Kafka's format (its PartitionMetadataFile):

    version: 0
    topic_id: Fo2k4ddTRzq0Tpo4OwCIlw

A log without the file belongs to a topic created before topic ids, or was never told its
id. The replica manager compares the id with the one a LeaderAndIsr carries: a log of an
earlier topic of the same name is deleted, not adopted (kafkalite.core.replica_manager).
"""

from __future__ import annotations

import logging
import os

from kafkalite.log import checkpoint
from kafkalite.log.errors import LogDirError

log = logging.getLogger(__name__)

FILE_NAME = "partition.metadata"
VERSION = 0


def path_in(dir_path: str) -> str:
    return os.path.join(dir_path, FILE_NAME)


def encode(topic_id: str) -> bytes:
    return f"version: {VERSION}\ntopic_id: {topic_id}\n".encode("ascii")


def read(dir_path: str) -> str | None:
    """The topic id the partition directory's file holds; None without a file. A file we
    cannot parse is reported and read as none (the next LeaderAndIsr with an id rewrites
    it), rather than failing the whole log dir at start-up."""
    path = path_in(dir_path)
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LogDirError(f"cannot read {path}: {e}") from e
    fields = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != str(VERSION) or not fields.get("topic_id"):
        log.warning("%s is not a version %d partition metadata file (%r); its log has no topic id", path, VERSION, data[:100])
        return None
    return fields["topic_id"]


def write(dir_path: str, topic_id: str, *, durable: bool) -> None:
    """Replace the file whole (temp file, rename). `durable`: fsync'd with its directory
    now; else the log's next flush makes it durable (Log.begin_flush)."""
    path = path_in(dir_path)
    if durable:
        checkpoint.write_atomic(path, encode(topic_id))
        return
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode(topic_id))
    os.replace(tmp, path)
