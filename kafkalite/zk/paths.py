"""Every znode path kafkalite uses (DESIGN.md section 2). Nothing else builds paths.

Topic names reaching here have been validated by the caller (Kafka's rule: [a-zA-Z0-9._-],
at most 249 characters); the checks below only stop a name that would escape its parent
znode, which would be a programmer error.
"""

from __future__ import annotations

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKERS_IDS = "/brokers/ids"
BROKERS_TOPICS = "/brokers/topics"
ADMIN = "/admin"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
ADMIN_PARTITIONS_REASSIGNED = "/admin/partitions_reassigned"
ADMIN_PARTITIONS_ADD = "/admin/partitions_add"
ADMIN_PARTITIONS_REMOVE = "/admin/partitions_remove"
ADMIN_PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
# Kafka 2.x's single reassignment znode: {"version":1,"partitions":[...],"throttle":{...}}.
# Not a persistent parent: its existence means "a reassignment is in progress".
ADMIN_REASSIGN_PARTITIONS = "/admin/reassign_partitions"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
# Issue 14 (KIP-112): /log_dir_failures/<broker id>, ephemeral, written by a broker whose log
# dir failed: {"version":1,"broker_epoch":E,"log_dirs":[...],"partitions":[[topic,p],...]}.
# Kafka 2.x sends a sequential /log_dir_event_notification and learns the partitions from
# LeaderAndIsr answers; an ephemeral per broker carries the partitions itself and lives
# exactly as long as the registration whose replicas are offline.
LOG_DIR_FAILURES = "/log_dir_failures"
# Issue 16, Kafka 2.x's dynamic configs: /config/topics/<topic>, /config/brokers/<id> and
# /config/brokers/<default> hold {"version":1,"config":{...}}; each change is announced by a
# sequential /config/changes/config_change_NNNNNNNNNN {"version":2,"entity_path":"topics/t"}.
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
BROKER_DEFAULT_ENTITY = "<default>"

# Persistent parents that must exist before watches are set on them.
PERSISTENT_PARENTS = (
    BROKERS_IDS,
    BROKERS_TOPICS,
    ADMIN_DELETE_TOPICS,
    ADMIN_PARTITIONS_REASSIGNED,
    ADMIN_PARTITIONS_ADD,
    ADMIN_PARTITIONS_REMOVE,
    LOG_DIR_FAILURES,
    CONFIG_TOPICS,
    CONFIG_BROKERS,
    CONFIG_CHANGES,
)


def _topic(topic: str) -> str:
    if not topic or "/" in topic or topic in (".", ".."):
        raise ValueError(f"topic name {topic!r} cannot be a znode name")
    return topic


def _partition(partition: int) -> str:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition {partition!r} must be a non-negative int")
    return str(partition)


def _broker(broker_id: int) -> str:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise ValueError(f"broker id {broker_id!r} must be a non-negative int")
    return str(broker_id)


def log_dir_failures_path() -> str:
    return LOG_DIR_FAILURES


def log_dir_failure_path(broker_id: int) -> str:
    return f"{LOG_DIR_FAILURES}/{_broker(broker_id)}"


def controller_path() -> str:
    return CONTROLLER


def controller_epoch_path() -> str:
    return CONTROLLER_EPOCH


def brokers_ids_path() -> str:
    return BROKERS_IDS


def broker_path(broker_id: int) -> str:
    return f"{BROKERS_IDS}/{_broker(broker_id)}"


def topics_path() -> str:
    return BROKERS_TOPICS


def topic_path(topic: str) -> str:
    return f"{BROKERS_TOPICS}/{_topic(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{_partition(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def admin_delete_topics_path() -> str:
    return ADMIN_DELETE_TOPICS


def admin_delete_topic_path(topic: str) -> str:
    return f"{ADMIN_DELETE_TOPICS}/{_topic(topic)}"


def admin_reassignments_path() -> str:
    return ADMIN_PARTITIONS_REASSIGNED


def admin_reassignment_topic_path(topic: str) -> str:
    return f"{ADMIN_PARTITIONS_REASSIGNED}/{_topic(topic)}"


def admin_reassignment_path(topic: str, partition: int) -> str:
    return f"{admin_reassignment_topic_path(topic)}/{_partition(partition)}"


def admin_partitions_add_path() -> str:
    return ADMIN_PARTITIONS_ADD


def admin_partition_add_path(topic: str, partition: int) -> str:
    return f"{ADMIN_PARTITIONS_ADD}/{_topic(topic)}/{_partition(partition)}"


def admin_partitions_remove_path() -> str:
    return ADMIN_PARTITIONS_REMOVE


def admin_partition_remove_path(topic: str, partition: int) -> str:
    return f"{ADMIN_PARTITIONS_REMOVE}/{_topic(topic)}/{_partition(partition)}"


def admin_partition_requests_path(kind: str) -> str:
    """/admin/partitions_add (kind "add") or /admin/partitions_remove ("remove")."""
    if kind not in ("add", "remove"):
        raise ValueError(f"partition request kind {kind!r} must be 'add' or 'remove'")
    return ADMIN_PARTITIONS_ADD if kind == "add" else ADMIN_PARTITIONS_REMOVE


def admin_partition_requests_topic_path(kind: str, topic: str) -> str:
    return f"{admin_partition_requests_path(kind)}/{_topic(topic)}"


def admin_partition_request_path(kind: str, topic: str, partition: int) -> str:
    return f"{admin_partition_requests_topic_path(kind, topic)}/{_partition(partition)}"


def admin_reassign_partitions_path() -> str:
    return ADMIN_REASSIGN_PARTITIONS


def preferred_replica_election_path() -> str:
    return ADMIN_PREFERRED_REPLICA_ELECTION


def producer_id_block_path() -> str:
    return LATEST_PRODUCER_ID_BLOCK


def last_component(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def config_topic_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{_topic(topic)}"


def config_broker_path(entity: str) -> str:
    """`entity`: a broker id ("1") or BROKER_DEFAULT_ENTITY."""
    if entity != BROKER_DEFAULT_ENTITY and not (entity.isascii() and entity.isdigit()):
        raise ValueError(f"broker config entity {entity!r} is neither an id nor {BROKER_DEFAULT_ENTITY}")
    return f"{CONFIG_BROKERS}/{entity}"


def config_changes_path() -> str:
    return CONFIG_CHANGES


def config_change_prefix() -> str:
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"


def config_change_path(name: str) -> str:
    assert name.startswith(CONFIG_CHANGE_PREFIX), name
    return f"{CONFIG_CHANGES}/{name}"


# Issue 15: SCRAM credentials, as Kafka stores them: /config/users/<sanitized name> holds
# {"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,..."}}, announced under
# /config/changes with the entity path "users/<sanitized name>".
CONFIG_USERS = "/config/users"


def sanitize_user(name: str) -> str:
    """Kafka's Sanitizer: the user name URL-encoded (UTF-8), so any name is one znode name."""
    from urllib.parse import quote

    if not name:
        raise ValueError("an empty user name cannot be a znode name")
    return quote(name, safe="").replace("~", "%7E")


def desanitize_user(znode_name: str) -> str:
    from urllib.parse import unquote

    return unquote(znode_name)


# The key of the mock salts unknown SCRAM users are shown (kafkalite.core.sasl): 32 random
# bytes, hex, made once by the first broker with a SASL listener and read by every broker at
# start-up, so an unknown name gets the same salt from every broker and listener, before and
# after restarts, as a real user's stored salt. Private like the credentials (security.py).
SCRAM_MOCK_SALT_KEY = "/kafkalite/scram_mock_salt_key"


def config_users_path() -> str:
    return CONFIG_USERS


def config_user_path(name: str) -> str:
    return f"{CONFIG_USERS}/{sanitize_user(name)}"
