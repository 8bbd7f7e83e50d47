"""The one declarative schema table for the Kafka client protocol.

Every message kafkalite speaks is described here and nowhere else; ``codec`` compiles this
table into per-(api, version) encoders and decoders. Field names are the snake_case of the
names in Apache Kafka's message JSON (``clients/src/main/resources/common/message``), in the
same order, with the same types, versions, nullable versions and defaults, restricted to the
versions we serve (DESIGN.md section 4b). Tagged fields are left out: we never emit them
(librdkafka before 2.2 mis-reads them) and skip them when reading flexible requests.

Field types: ``bool int8 int16 int32 int64 string bytes records``, ``[]<primitive>`` (array
of a primitive), ``[]`` with ``fields`` (array of structs). ``records`` is raw bytes passed
through untouched: the log layer owns RecordBatch v2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47


REQUEST = "request"
RESPONSE = "response"

PRIMITIVE_TYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "string", "bytes", "records"})
VERSION_MAX = 0x7FFF

_UNSET = object()


def _parse_versions(text: str) -> tuple[int, int]:
    """'3+' -> (3, VERSION_MAX); '2-4' -> (2, 4)."""
    if text.endswith("+"):
        return int(text[:-1]), VERSION_MAX
    low, _, high = text.partition("-")
    return int(low), int(high or low)


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    versions: tuple[int, int]
    nullable: tuple[int, int] | None
    default: object
    fields: tuple[Field, ...]

    def present_in(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """For arrays: the primitive element type, or '' for an array of structs."""
        return self.type[2:]

    def default_value(self) -> object:
        """A fresh default (lists are never shared between bodies)."""
        if self.default is not _UNSET:
            return self.default
        if self.is_array:
            return []
        return _TYPE_DEFAULTS[self.type]


# Kafka's defaults for fields whose JSON gives none. A records field defaults to the empty
# record set (what Kafka brokers send for "no data"), not to null.
_TYPE_DEFAULTS: dict[str, object] = {
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0,
    "string": "", "bytes": b"", "records": b"",
}


def F(name: str, type: str, versions: str, nullable: str | None = None,
      default: object = _UNSET, fields: tuple[Field, ...] = ()) -> Field:
    assert type in PRIMITIVE_TYPES or type == "[]" or type[2:] in PRIMITIVE_TYPES, type
    assert (type == "[]") == bool(fields), f"{name}: struct arrays need fields"
    return Field(name, type, _parse_versions(versions),
                 _parse_versions(nullable) if nullable else None, default, fields)


@dataclass(frozen=True)
class Message:
    min_version: int
    max_version: int
    flexible: int | None  # first flexible version, or None
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version >= self.flexible


def _message(min_version: int, max_version: int, flexible: str | None,
             fields: tuple[Field, ...]) -> Message:
    first_flexible = _parse_versions(flexible)[0] if flexible else None
    return Message(min_version, max_version, first_flexible, fields)


# (api key, REQUEST | RESPONSE) -> message. Transcribed from Apache Kafka's JSON schemas.
SCHEMAS: dict[tuple[ApiKey, str], Message] = {
    (ApiKey.PRODUCE, REQUEST): _message(3, 8, flexible=None, fields=(
        F('transactional_id', 'string', '3+', nullable='3+', default=None),
        F('acks', 'int16', '3+'),
        F('timeout_ms', 'int32', '3+'),
        F('topic_data', '[]', '3+', fields=(
            F('name', 'string', '3+'),
            F('partition_data', '[]', '3+', fields=(
                F('index', 'int32', '3+'),
                F('records', 'records', '3+', nullable='3+'),
            )),
        )),
    )),
    (ApiKey.PRODUCE, RESPONSE): _message(3, 8, flexible=None, fields=(
        F('responses', '[]', '3+', fields=(
            F('name', 'string', '3+'),
            F('partition_responses', '[]', '3+', fields=(
                F('index', 'int32', '3+'),
                F('error_code', 'int16', '3+'),
                F('base_offset', 'int64', '3+'),
                F('log_append_time_ms', 'int64', '3+', default=-1),
                F('log_start_offset', 'int64', '5+', default=-1),
                F('record_errors', '[]', '8+', fields=(
                    F('batch_index', 'int32', '8+'),
                    F('batch_index_error_message', 'string', '8+', nullable='8+', default=None),
                )),
                F('error_message', 'string', '8+', nullable='8+', default=None),
            )),
        )),
        F('throttle_time_ms', 'int32', '3+', default=0),
    )),
    (ApiKey.FETCH, REQUEST): _message(4, 11, flexible=None, fields=(
        F('replica_id', 'int32', '4+', default=-1),
        F('max_wait_ms', 'int32', '4+'),
        F('min_bytes', 'int32', '4+'),
        F('max_bytes', 'int32', '4+', default=2147483647),
        F('isolation_level', 'int8', '4+', default=0),
        F('session_id', 'int32', '7+', default=0),
        F('session_epoch', 'int32', '7+', default=-1),
        F('topics', '[]', '4+', fields=(
            F('topic', 'string', '4+'),
            F('partitions', '[]', '4+', fields=(
                F('partition', 'int32', '4+'),
                F('current_leader_epoch', 'int32', '9+', default=-1),
                F('fetch_offset', 'int64', '4+'),
                F('log_start_offset', 'int64', '5+', default=-1),
                F('partition_max_bytes', 'int32', '4+'),
            )),
        )),
        F('forgotten_topics_data', '[]', '7+', fields=(
            F('topic', 'string', '7+'),
            F('partitions', '[]int32', '7+'),
        )),
        F('rack_id', 'string', '11+', default=''),
    )),
    (ApiKey.FETCH, RESPONSE): _message(4, 11, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '4+'),
        F('error_code', 'int16', '7+'),
        F('session_id', 'int32', '7+', default=0),
        F('responses', '[]', '4+', fields=(
            F('topic', 'string', '4+'),
            F('partitions', '[]', '4+', fields=(
                F('partition_index', 'int32', '4+'),
                F('error_code', 'int16', '4+'),
                F('high_watermark', 'int64', '4+'),
                F('last_stable_offset', 'int64', '4+', default=-1),
                F('log_start_offset', 'int64', '5+', default=-1),
                F('aborted_transactions', '[]', '4+', nullable='4+', fields=(
                    F('producer_id', 'int64', '4+'),
                    F('first_offset', 'int64', '4+'),
                )),
                F('preferred_read_replica', 'int32', '11+', default=-1),
                F('records', 'records', '4+', nullable='4+'),
            )),
        )),
    )),
    (ApiKey.LIST_OFFSETS, REQUEST): _message(1, 5, flexible=None, fields=(
        F('replica_id', 'int32', '1+'),
        F('isolation_level', 'int8', '2+'),
        F('topics', '[]', '1+', fields=(
            F('name', 'string', '1+'),
            F('partitions', '[]', '1+', fields=(
                F('partition_index', 'int32', '1+'),
                F('current_leader_epoch', 'int32', '4+', default=-1),
                F('timestamp', 'int64', '1+'),
            )),
        )),
    )),
    (ApiKey.LIST_OFFSETS, RESPONSE): _message(1, 5, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '2+'),
        F('topics', '[]', '1+', fields=(
            F('name', 'string', '1+'),
            F('partitions', '[]', '1+', fields=(
                F('partition_index', 'int32', '1+'),
                F('error_code', 'int16', '1+'),
                F('timestamp', 'int64', '1+', default=-1),
                F('offset', 'int64', '1+', default=-1),
                F('leader_epoch', 'int32', '4+', default=-1),
            )),
        )),
    )),
    (ApiKey.METADATA, REQUEST): _message(0, 9, flexible='9+', fields=(
        F('topics', '[]', '0+', nullable='1+', fields=(
            F('name', 'string', '0+'),
        )),
        F('allow_auto_topic_creation', 'bool', '4+', default=True),
        F('include_cluster_authorized_operations', 'bool', '8+'),
        F('include_topic_authorized_operations', 'bool', '8+'),
    )),
    (ApiKey.METADATA, RESPONSE): _message(0, 9, flexible='9+', fields=(
        F('throttle_time_ms', 'int32', '3+'),
        F('brokers', '[]', '0+', fields=(
            F('node_id', 'int32', '0+'),
            F('host', 'string', '0+'),
            F('port', 'int32', '0+'),
            F('rack', 'string', '1+', nullable='1+', default=None),
        )),
        F('cluster_id', 'string', '2+', nullable='2+', default=None),
        F('controller_id', 'int32', '1+', default=-1),
        F('topics', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('name', 'string', '0+'),
            F('is_internal', 'bool', '1+', default=False),
            F('partitions', '[]', '0+', fields=(
                F('error_code', 'int16', '0+'),
                F('partition_index', 'int32', '0+'),
                F('leader_id', 'int32', '0+'),
                F('leader_epoch', 'int32', '7+', default=-1),
                F('replica_nodes', '[]int32', '0+'),
                F('isr_nodes', '[]int32', '0+'),
                F('offline_replicas', '[]int32', '5+'),
            )),
            F('topic_authorized_operations', 'int32', '8+', default=-2147483648),
        )),
        F('cluster_authorized_operations', 'int32', '8+', default=-2147483648),
    )),
    (ApiKey.OFFSET_COMMIT, REQUEST): _message(0, 7, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('generation_id_or_member_epoch', 'int32', '1+', default=-1),
        F('member_id', 'string', '1+'),
        F('group_instance_id', 'string', '7+', nullable='7+', default=None),
        F('retention_time_ms', 'int64', '2-4', default=-1),
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
                F('committed_offset', 'int64', '0+'),
                F('committed_leader_epoch', 'int32', '6+', default=-1),
                F('commit_timestamp', 'int64', '1-1', default=-1),
                F('committed_metadata', 'string', '0+', nullable='0+'),
            )),
        )),
    )),
    (ApiKey.OFFSET_COMMIT, RESPONSE): _message(0, 7, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '3+'),
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
                F('error_code', 'int16', '0+'),
            )),
        )),
    )),
    (ApiKey.OFFSET_FETCH, REQUEST): _message(0, 5, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('topics', '[]', '0+', nullable='2+', fields=(
            F('name', 'string', '0+'),
            F('partition_indexes', '[]int32', '0+'),
        )),
    )),
    (ApiKey.OFFSET_FETCH, RESPONSE): _message(0, 5, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '3+'),
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
                F('committed_offset', 'int64', '0+'),
                F('committed_leader_epoch', 'int32', '5+', default=-1),
                F('metadata', 'string', '0+', nullable='0+'),
                F('error_code', 'int16', '0+'),
            )),
        )),
        F('error_code', 'int16', '2+', default=0),
    )),
    (ApiKey.FIND_COORDINATOR, REQUEST): _message(0, 2, flexible=None, fields=(
        F('key', 'string', '0+'),
        F('key_type', 'int8', '1+', default=0),
    )),
    (ApiKey.FIND_COORDINATOR, RESPONSE): _message(0, 2, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '0+'),
        F('error_message', 'string', '1+', nullable='1+'),
        F('node_id', 'int32', '0+'),
        F('host', 'string', '0+'),
        F('port', 'int32', '0+'),
    )),
    (ApiKey.JOIN_GROUP, REQUEST): _message(0, 5, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('session_timeout_ms', 'int32', '0+'),
        F('rebalance_timeout_ms', 'int32', '1+', default=-1),
        F('member_id', 'string', '0+'),
        F('group_instance_id', 'string', '5+', nullable='5+', default=None),
        F('protocol_type', 'string', '0+'),
        F('protocols', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('metadata', 'bytes', '0+'),
        )),
    )),
    (ApiKey.JOIN_GROUP, RESPONSE): _message(0, 5, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '2+'),
        F('error_code', 'int16', '0+'),
        F('generation_id', 'int32', '0+', default=-1),
        F('protocol_name', 'string', '0+'),
        F('leader', 'string', '0+'),
        F('member_id', 'string', '0+'),
        F('members', '[]', '0+', fields=(
            F('member_id', 'string', '0+'),
            F('group_instance_id', 'string', '5+', nullable='5+', default=None),
            F('metadata', 'bytes', '0+'),
        )),
    )),
    (ApiKey.HEARTBEAT, REQUEST): _message(0, 3, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('generation_id', 'int32', '0+'),
        F('member_id', 'string', '0+'),
        F('group_instance_id', 'string', '3+', nullable='3+', default=None),
    )),
    (ApiKey.HEARTBEAT, RESPONSE): _message(0, 3, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '0+'),
    )),
    (ApiKey.LEAVE_GROUP, REQUEST): _message(0, 3, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('member_id', 'string', '0-2'),
        F('members', '[]', '3+', fields=(
            F('member_id', 'string', '3+'),
            F('group_instance_id', 'string', '3+', nullable='3+', default=None),
        )),
    )),
    (ApiKey.LEAVE_GROUP, RESPONSE): _message(0, 3, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '0+'),
        F('members', '[]', '3+', fields=(
            F('member_id', 'string', '3+'),
            F('group_instance_id', 'string', '3+', nullable='3+'),
            F('error_code', 'int16', '3+'),
        )),
    )),
    (ApiKey.SYNC_GROUP, REQUEST): _message(0, 3, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('generation_id', 'int32', '0+'),
        F('member_id', 'string', '0+'),
        F('group_instance_id', 'string', '3+', nullable='3+', default=None),
        F('assignments', '[]', '0+', fields=(
            F('member_id', 'string', '0+'),
            F('assignment', 'bytes', '0+'),
        )),
    )),
    (ApiKey.SYNC_GROUP, RESPONSE): _message(0, 3, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '0+'),
        F('assignment', 'bytes', '0+'),
    )),
    (ApiKey.DESCRIBE_GROUPS, REQUEST): _message(0, 4, flexible=None, fields=(
        F('groups', '[]string', '0+'),
        F('include_authorized_operations', 'bool', '3+'),
    )),
    (ApiKey.DESCRIBE_GROUPS, RESPONSE): _message(0, 4, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('groups', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('group_id', 'string', '0+'),
            F('group_state', 'string', '0+'),
            F('protocol_type', 'string', '0+'),
            F('protocol_data', 'string', '0+'),
            F('members', '[]', '0+', fields=(
                F('member_id', 'string', '0+'),
                F('group_instance_id', 'string', '4+', nullable='4+', default=None),
                F('client_id', 'string', '0+'),
                F('client_host', 'string', '0+'),
                F('member_metadata', 'bytes', '0+'),
                F('member_assignment', 'bytes', '0+'),
            )),
            F('authorized_operations', 'int32', '3+', default=-2147483648),
        )),
    )),
    (ApiKey.LIST_GROUPS, REQUEST): _message(0, 2, flexible=None, fields=(
    )),
    (ApiKey.LIST_GROUPS, RESPONSE): _message(0, 2, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('error_code', 'int16', '0+'),
        F('groups', '[]', '0+', fields=(
            F('group_id', 'string', '0+'),
            F('protocol_type', 'string', '0+'),
        )),
    )),
    (ApiKey.DELETE_GROUPS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('groups_names', '[]string', '0+'),
    )),
    (ApiKey.DELETE_GROUPS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('results', '[]', '0+', fields=(
            F('group_id', 'string', '0+'),
            F('error_code', 'int16', '0+'),
        )),
    )),
    (ApiKey.OFFSET_DELETE, REQUEST): _message(0, 0, flexible=None, fields=(
        F('group_id', 'string', '0+'),
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
            )),
        )),
    )),
    (ApiKey.OFFSET_DELETE, RESPONSE): _message(0, 0, flexible=None, fields=(
        F('error_code', 'int16', '0+'),
        F('throttle_time_ms', 'int32', '0+'),
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
                F('error_code', 'int16', '0+'),
            )),
        )),
    )),
    (ApiKey.API_VERSIONS, REQUEST): _message(0, 3, flexible='3+', fields=(
        F('client_software_name', 'string', '3+'),
        F('client_software_version', 'string', '3+'),
    )),
    (ApiKey.API_VERSIONS, RESPONSE): _message(0, 3, flexible='3+', fields=(
        F('error_code', 'int16', '0+'),
        F('api_keys', '[]', '0+', fields=(
            F('api_key', 'int16', '0+'),
            F('min_version', 'int16', '0+'),
            F('max_version', 'int16', '0+'),
        )),
        F('throttle_time_ms', 'int32', '1+'),
    )),
    (ApiKey.SASL_HANDSHAKE, REQUEST): _message(0, 1, flexible=None, fields=(
        F('mechanism', 'string', '0+'),
    )),
    (ApiKey.SASL_HANDSHAKE, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('error_code', 'int16', '0+'),
        F('mechanisms', '[]string', '0+'),
    )),
    (ApiKey.SASL_AUTHENTICATE, REQUEST): _message(0, 1, flexible=None, fields=(
        F('auth_bytes', 'bytes', '0+'),
    )),
    (ApiKey.SASL_AUTHENTICATE, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('error_code', 'int16', '0+'),
        F('error_message', 'string', '0+', nullable='0+'),
        F('auth_bytes', 'bytes', '0+'),
        F('session_lifetime_ms', 'int64', '1+', default=0),
    )),
    (ApiKey.CREATE_TOPICS, REQUEST): _message(2, 4, flexible=None, fields=(
        F('topics', '[]', '2+', fields=(
            F('name', 'string', '2+'),
            F('num_partitions', 'int32', '2+'),
            F('replication_factor', 'int16', '2+'),
            F('assignments', '[]', '2+', fields=(
                F('partition_index', 'int32', '2+'),
                F('broker_ids', '[]int32', '2+'),
            )),
            F('configs', '[]', '2+', fields=(
                F('name', 'string', '2+'),
                F('value', 'string', '2+', nullable='2+'),
            )),
        )),
        F('timeout_ms', 'int32', '2+', default=60000),
        F('validate_only', 'bool', '2+', default=False),
    )),
    (ApiKey.CREATE_TOPICS, RESPONSE): _message(2, 4, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '2+'),
        F('topics', '[]', '2+', fields=(
            F('name', 'string', '2+'),
            F('error_code', 'int16', '2+'),
            F('error_message', 'string', '2+', nullable='2+'),
        )),
    )),
    (ApiKey.DELETE_TOPICS, REQUEST): _message(1, 3, flexible=None, fields=(
        F('topic_names', '[]string', '1+'),
        F('timeout_ms', 'int32', '1+'),
    )),
    (ApiKey.DELETE_TOPICS, RESPONSE): _message(1, 3, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '1+'),
        F('responses', '[]', '1+', fields=(
            F('name', 'string', '1+'),
            F('error_code', 'int16', '1+'),
        )),
    )),
    (ApiKey.INIT_PRODUCER_ID, REQUEST): _message(0, 1, flexible=None, fields=(
        F('transactional_id', 'string', '0+', nullable='0+'),
        F('transaction_timeout_ms', 'int32', '0+'),
    )),
    (ApiKey.INIT_PRODUCER_ID, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('error_code', 'int16', '0+'),
        F('producer_id', 'int64', '0+', default=-1),
        F('producer_epoch', 'int16', '0+'),
    )),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, REQUEST): _message(0, 3, flexible=None, fields=(
        F('replica_id', 'int32', '3+', default=-2),
        F('topics', '[]', '0+', fields=(
            F('topic', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition', 'int32', '0+'),
                F('current_leader_epoch', 'int32', '2+', default=-1),
                F('leader_epoch', 'int32', '0+'),
            )),
        )),
    )),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, RESPONSE): _message(0, 3, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '2+'),
        F('topics', '[]', '0+', fields=(
            F('topic', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('error_code', 'int16', '0+'),
                F('partition', 'int32', '0+'),
                F('leader_epoch', 'int32', '1+', default=-1),
                F('end_offset', 'int64', '0+', default=-1),
            )),
        )),
    )),
    (ApiKey.DESCRIBE_CONFIGS, REQUEST): _message(0, 2, flexible=None, fields=(
        F('resources', '[]', '0+', fields=(
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
            F('configuration_keys', '[]string', '0+', nullable='0+'),
        )),
        F('include_synonyms', 'bool', '1+', default=False),
    )),
    (ApiKey.DESCRIBE_CONFIGS, RESPONSE): _message(0, 2, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('results', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
            F('configs', '[]', '0+', fields=(
                F('name', 'string', '0+'),
                F('value', 'string', '0+', nullable='0+'),
                F('read_only', 'bool', '0+'),
                F('is_default', 'bool', '0-0'),
                F('config_source', 'int8', '1+', default=-1),
                F('is_sensitive', 'bool', '0+'),
                F('synonyms', '[]', '1+', fields=(
                    F('name', 'string', '1+'),
                    F('value', 'string', '1+', nullable='1+'),
                    F('source', 'int8', '1+'),
                )),
            )),
        )),
    )),
    (ApiKey.ALTER_CONFIGS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('resources', '[]', '0+', fields=(
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
            F('configs', '[]', '0+', fields=(
                F('name', 'string', '0+'),
                F('value', 'string', '0+', nullable='0+'),
            )),
        )),
        F('validate_only', 'bool', '0+'),
    )),
    (ApiKey.ALTER_CONFIGS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('responses', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
        )),
    )),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, REQUEST): _message(0, 0, flexible=None, fields=(
        F('resources', '[]', '0+', fields=(
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
            F('configs', '[]', '0+', fields=(
                F('name', 'string', '0+'),
                F('config_operation', 'int8', '0+'),
                F('value', 'string', '0+', nullable='0+'),
            )),
        )),
        F('validate_only', 'bool', '0+'),
    )),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, RESPONSE): _message(0, 0, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('responses', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
        )),
    )),
    (ApiKey.CREATE_PARTITIONS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('count', 'int32', '0+'),
            F('assignments', '[]', '0+', nullable='0+', fields=(
                F('broker_ids', '[]int32', '0+'),
            )),
        )),
        F('timeout_ms', 'int32', '0+'),
        F('validate_only', 'bool', '0+'),
    )),
    (ApiKey.CREATE_PARTITIONS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('results', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
        )),
    )),
    (ApiKey.ELECT_LEADERS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('election_type', 'int8', '1+'),
        F('topic_partitions', '[]', '0+', nullable='0+', fields=(
            F('topic', 'string', '0+'),
            F('partition_id', '[]int32', '0+'),
        )),
        F('timeout_ms', 'int32', '0+', default=60000),
    )),
    (ApiKey.ELECT_LEADERS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('error_code', 'int16', '1+'),
        F('replica_election_results', '[]', '0+', fields=(
            F('topic', 'string', '0+'),
            F('partition_result', '[]', '0+', fields=(
                F('partition_id', 'int32', '0+'),
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
            )),
        )),
    )),
    (ApiKey.DELETE_RECORDS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
                F('offset', 'int64', '0+'),
            )),
        )),
        F('timeout_ms', 'int32', '0+'),
    )),
    (ApiKey.DELETE_RECORDS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('topics', '[]', '0+', fields=(
            F('name', 'string', '0+'),
            F('partitions', '[]', '0+', fields=(
                F('partition_index', 'int32', '0+'),
                F('low_watermark', 'int64', '0+'),
                F('error_code', 'int16', '0+'),
            )),
        )),
    )),
    (ApiKey.DESCRIBE_LOG_DIRS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('topics', '[]', '0+', nullable='0+', fields=(
            F('topic', 'string', '0+'),
            F('partitions', '[]int32', '0+'),
        )),
    )),
    (ApiKey.DESCRIBE_LOG_DIRS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('results', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('log_dir', 'string', '0+'),
            F('topics', '[]', '0+', fields=(
                F('name', 'string', '0+'),
                F('partitions', '[]', '0+', fields=(
                    F('partition_index', 'int32', '0+'),
                    F('partition_size', 'int64', '0+'),
                    F('offset_lag', 'int64', '0+'),
                    F('is_future_key', 'bool', '0+'),
                )),
            )),
        )),
    )),
    # ACLs (issue 15): v0 has no pattern type (always LITERAL); v2+ are flexible.
    (ApiKey.DESCRIBE_ACLS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('resource_type_filter', 'int8', '0+'),
        F('resource_name_filter', 'string', '0+', nullable='0+'),
        F('pattern_type_filter', 'int8', '1+', default=3),
        F('principal_filter', 'string', '0+', nullable='0+'),
        F('host_filter', 'string', '0+', nullable='0+'),
        F('operation', 'int8', '0+'),
        F('permission_type', 'int8', '0+'),
    )),
    (ApiKey.DESCRIBE_ACLS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('error_code', 'int16', '0+'),
        F('error_message', 'string', '0+', nullable='0+'),
        F('resources', '[]', '0+', fields=(
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
            F('pattern_type', 'int8', '1+', default=3),
            F('acls', '[]', '0+', fields=(
                F('principal', 'string', '0+'),
                F('host', 'string', '0+'),
                F('operation', 'int8', '0+'),
                F('permission_type', 'int8', '0+'),
            )),
        )),
    )),
    (ApiKey.CREATE_ACLS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('creations', '[]', '0+', fields=(
            F('resource_type', 'int8', '0+'),
            F('resource_name', 'string', '0+'),
            F('resource_pattern_type', 'int8', '1+', default=3),
            F('principal', 'string', '0+'),
            F('host', 'string', '0+'),
            F('operation', 'int8', '0+'),
            F('permission_type', 'int8', '0+'),
        )),
    )),
    (ApiKey.CREATE_ACLS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('results', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
        )),
    )),
    (ApiKey.DELETE_ACLS, REQUEST): _message(0, 1, flexible=None, fields=(
        F('filters', '[]', '0+', fields=(
            F('resource_type_filter', 'int8', '0+'),
            F('resource_name_filter', 'string', '0+', nullable='0+'),
            F('pattern_type_filter', 'int8', '1+', default=3),
            F('principal_filter', 'string', '0+', nullable='0+'),
            F('host_filter', 'string', '0+', nullable='0+'),
            F('operation', 'int8', '0+'),
            F('permission_type', 'int8', '0+'),
        )),
    )),
    (ApiKey.DELETE_ACLS, RESPONSE): _message(0, 1, flexible=None, fields=(
        F('throttle_time_ms', 'int32', '0+'),
        F('filter_results', '[]', '0+', fields=(
            F('error_code', 'int16', '0+'),
            F('error_message', 'string', '0+', nullable='0+'),
            F('matching_acls', '[]', '0+', fields=(
                F('error_code', 'int16', '0+'),
                F('error_message', 'string', '0+', nullable='0+'),
                F('resource_type', 'int8', '0+'),
                F('resource_name', 'string', '0+'),
                F('pattern_type', 'int8', '1+', default=3),
                F('principal', 'string', '0+'),
                F('host', 'string', '0+'),
                F('operation', 'int8', '0+'),
                F('permission_type', 'int8', '0+'),
            )),
        )),
    )),
}

# The versions we serve per API: the range advertised in ApiVersions responses.
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    api: (message.min_version, message.max_version)
    for (api, kind), message in SCHEMAS.items()
    if kind == REQUEST
}


@dataclass(frozen=True)
class Echo:
    """How an error response mirrors a request array (see codec.error_response).

    ``copy`` maps response element field -> request element field; ``SELF`` means the
    request element itself (for arrays of primitives such as DeleteTopics topic_names).
    """

    request_field: str
    response_field: str
    copy: tuple[tuple[str, str], ...]
    child: Echo | None = None


SELF = ""

# Which request arrays an error response echoes so the client can match each error to its
# topic/partition. APIs absent here carry only top-level error codes.
ERROR_ECHO: dict[ApiKey, Echo] = {
    ApiKey.PRODUCE: Echo("topic_data", "responses", (("name", "name"),),
                         Echo("partition_data", "partition_responses", (("index", "index"),))),
    ApiKey.FETCH: Echo("topics", "responses", (("topic", "topic"),),
                       Echo("partitions", "partitions", (("partition_index", "partition"),))),
    ApiKey.LIST_OFFSETS: Echo("topics", "topics", (("name", "name"),),
                              Echo("partitions", "partitions",
                                   (("partition_index", "partition_index"),))),
    ApiKey.METADATA: Echo("topics", "topics", (("name", "name"),)),
    ApiKey.CREATE_TOPICS: Echo("topics", "topics", (("name", "name"),)),
    ApiKey.DELETE_TOPICS: Echo("topic_names", "responses", (("name", SELF),)),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Echo("topics", "topics", (("topic", "topic"),),
                                         Echo("partitions", "partitions",
                                              (("partition", "partition"),))),
    ApiKey.LEAVE_GROUP: Echo("members", "members", (("member_id", "member_id"),
                                                    ("group_instance_id", "group_instance_id"))),
    ApiKey.OFFSET_COMMIT: Echo("topics", "topics", (("name", "name"),),
                               Echo("partitions", "partitions",
                                    (("partition_index", "partition_index"),))),
    ApiKey.OFFSET_FETCH: Echo("topics", "topics", (("name", "name"),),
                              Echo("partition_indexes", "partitions",
                                   (("partition_index", SELF),))),
    # OffsetDelete: Kafka answers the topics it may not Read per partition (29) next to the rest.
    ApiKey.OFFSET_DELETE: Echo("topics", "topics", (("name", "name"),),
                               Echo("partitions", "partitions",
                                    (("partition_index", "partition_index"),))),
    ApiKey.DESCRIBE_GROUPS: Echo("groups", "groups", (("group_id", SELF),)),
    ApiKey.DELETE_GROUPS: Echo("groups_names", "results", (("group_id", SELF),)),
    ApiKey.DESCRIBE_CONFIGS: Echo("resources", "results",
                                  (("resource_type", "resource_type"),
                                   ("resource_name", "resource_name"))),
    ApiKey.ALTER_CONFIGS: Echo("resources", "responses",
                               (("resource_type", "resource_type"), ("resource_name", "resource_name"))),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Echo("resources", "responses",
                                           (("resource_type", "resource_type"), ("resource_name", "resource_name"))),
    ApiKey.CREATE_PARTITIONS: Echo("topics", "results", (("name", "name"),)),
    ApiKey.CREATE_ACLS: Echo("creations", "results", ()),
    ApiKey.DELETE_ACLS: Echo("filters", "filter_results", ()),
    ApiKey.ELECT_LEADERS: Echo("topic_partitions", "replica_election_results", (("topic", "topic"),),
                               Echo("partition_id", "partition_result", (("partition_id", SELF),))),
    ApiKey.DELETE_RECORDS: Echo("topics", "topics", (("name", "name"),),
                                Echo("partitions", "partitions", (("partition_index", "partition_index"),))),
}
