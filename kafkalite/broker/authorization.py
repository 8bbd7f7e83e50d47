"""Authorization of client requests (issue 15): which operation on which resource each API
needs, and the ACL cache every broker keeps in step with ZooKeeper.

The decision itself is kafkalite.core.acl.authorize (pure). This module is its shell:

- `REQUIRED` is the one table of what each API needs (Kafka's KafkaApis checks);
- `AclAuthorizer` holds the cache, loads it from ZooKeeper at start and re-reads a
  pattern whenever a change notification names it (watches only enqueue; the cache is
  changed on the event loop);
- `RequestAuthorizer.handle` wraps KafkaApis: a request that needs something on the whole
  (Cluster, a group) and is refused is answered with the error on every element; a request
  over many topics (or groups) goes to its handler with only the allowed ones, and the
  refused ones are answered TOPIC_AUTHORIZATION_FAILED (or GROUP_...) next to them.

The principal and host come from the connection (client_listener.current_connection):
User:ANONYMOUS until a listener's SASL or TLS authenticates the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kafkalite.aio import cancel_and_wait, spawn
from kafkalite.broker.client_listener import ANONYMOUS, current_connection
from kafkalite.broker.errors import fail
from kafkalite.core.acl import (
    CLUSTER_NAME,
    AclCache,
    AuthorizerConfig,
    Operation,
    ResourcePattern,
    ResourceType,
    authorize,
    authorize_any_topic_write,
    parse_super_users,
)
from kafkalite.protocol.codec import RequestHeader, error_response_body
from kafkalite.protocol.errors import ErrorCode
from kafkalite.protocol.schema import ERROR_ECHO, SELF, ApiKey
from kafkalite.zk.acl_store import EXTENDED_CHANGES, LITERAL_CHANGES, AclStore, decode_change
from kafkalite.zk.errors import ZkError, ZnodeDecodeError

if TYPE_CHECKING:
    from kafkalite.zk import ZkAdapter

log = logging.getLogger(__name__)

PURGE_INTERVAL_S = 60.0
RELOAD_RETRY_S = 1.0
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
O = Operation  # noqa: E741 - short for the table


@dataclasses.dataclass(frozen=True)
class Need:
    """One check: `operation` on a resource of `resource_type`; `scope` says which
    resources: "cluster" (kafka-cluster), "group" (the request's group), "each" (every
    element of the request's echoed array: topics, groups or config resources)."""

    operation: Operation
    resource_type: ResourceType
    scope: str
    note: str = ""


# What each API needs, as Kafka's KafkaApis checks it. Several Needs: all of them, except
# where a note says "or". The README's table is this one.
REQUIRED: dict[ApiKey, tuple[Need, ...]] = {
    ApiKey.API_VERSIONS: (),
    # Authentication itself (Kafka authorizes neither); after it they answer ILLEGAL_SASL_STATE.
    ApiKey.SASL_HANDSHAKE: (),
    ApiKey.SASL_AUTHENTICATE: (),
    ApiKey.PRODUCE: (Need(O.WRITE, T, "each"),),
    ApiKey.FETCH: (Need(O.READ, T, "each", "consumers; followers fetch over the inter-broker RPC"),),
    ApiKey.LIST_OFFSETS: (Need(O.DESCRIBE, T, "each"),),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (Need(O.DESCRIBE, T, "each"),),
    ApiKey.METADATA: (Need(O.DESCRIBE, T, "each", "topics that fail are left out (all topics) or answered "
                                                  "TOPIC_AUTHORIZATION_FAILED (named); auto-creation needs Create on Cluster or the topic"),),
    ApiKey.CREATE_TOPICS: (Need(O.CREATE, T, "each", "or Create on Cluster"),),
    ApiKey.DELETE_TOPICS: (Need(O.DELETE, T, "each"),),
    ApiKey.CREATE_PARTITIONS: (Need(O.ALTER, T, "each"),),
    ApiKey.DESCRIBE_CONFIGS: (Need(O.DESCRIBE_CONFIGS, T, "each", "topics; brokers: DescribeConfigs on Cluster"),),
    ApiKey.ALTER_CONFIGS: (Need(O.ALTER_CONFIGS, T, "each", "topics; brokers and broker defaults: AlterConfigs on Cluster"),),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (Need(O.ALTER_CONFIGS, T, "each", "topics; brokers and broker defaults: AlterConfigs on Cluster"),),
    ApiKey.DELETE_RECORDS: (Need(O.DELETE, T, "each"),),
    ApiKey.DESCRIBE_LOG_DIRS: (Need(O.DESCRIBE, C, "cluster", "v0-1 have no error field: refused, the answer lists no log dirs"),),
    ApiKey.ELECT_LEADERS: (Need(O.ALTER, C, "cluster"),),
    ApiKey.INIT_PRODUCER_ID: (Need(O.IDEMPOTENT_WRITE, C, "cluster", "or Write on any topic (KIP-679)"),),
    ApiKey.FIND_COORDINATOR: (Need(O.DESCRIBE, G, "group"),),
    ApiKey.JOIN_GROUP: (Need(O.READ, G, "group"),),
    ApiKey.SYNC_GROUP: (Need(O.READ, G, "group"),),
    ApiKey.HEARTBEAT: (Need(O.READ, G, "group"),),
    ApiKey.LEAVE_GROUP: (Need(O.READ, G, "group"),),
    ApiKey.OFFSET_COMMIT: (Need(O.READ, G, "group"), Need(O.READ, T, "each")),
    ApiKey.OFFSET_FETCH: (Need(O.DESCRIBE, G, "group"), Need(O.DESCRIBE, T, "each")),
    ApiKey.OFFSET_DELETE: (Need(O.DELETE, G, "group"), Need(O.READ, T, "each")),
    ApiKey.DESCRIBE_GROUPS: (Need(O.DESCRIBE, G, "each"),),
    ApiKey.DELETE_GROUPS: (Need(O.DELETE, G, "each"),),
    ApiKey.LIST_GROUPS: (Need(O.DESCRIBE, C, "cluster", "or else only the groups with Describe on the group"),),
    ApiKey.DESCRIBE_ACLS: (Need(O.DESCRIBE, C, "cluster"),),
    ApiKey.CREATE_ACLS: (Need(O.ALTER, C, "cluster"),),
    ApiKey.DELETE_ACLS: (Need(O.ALTER, C, "cluster"),),
}

_CONFIG_APIS = frozenset({ApiKey.DESCRIBE_CONFIGS, ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS})
_DENIED_CODE = {T: ErrorCode.TOPIC_AUTHORIZATION_FAILED, G: ErrorCode.GROUP_AUTHORIZATION_FAILED,
                C: ErrorCode.CLUSTER_AUTHORIZATION_FAILED}


class AclAuthorizer:
    """The ACL cache of this broker and the decisions made from it."""

    def __init__(self, settings: dict[str, Any]):
        self.config = AuthorizerConfig(super_users=parse_super_users(settings["super.users"]),
                                       allow_everyone_if_no_acl_found=settings["allow.everyone.if.no.acl.found"])
        self.cache = AclCache()
        self.store: AclStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seen: dict[str, set[str]] = {LITERAL_CHANGES: set(), EXTENDED_CHANGES: set()}
        self.reloads = 0
        self._purged_at = 0.0  # time.monotonic() of the last purge of old notifications
        self._tasks: set[asyncio.Task] = set()  # reloads in progress (owned: see close())

    # -- start-up and change notifications ------------------------------------------------
    def start(self, zk: ZkAdapter, loop: asyncio.AbstractEventLoop) -> None:
        """Blocking (run it in an executor): load every ACL, then watch the change paths."""
        self.store = AclStore(zk)
        self._loop = loop
        self.store.ensure_paths()
        for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._seen[parent] = set(zk.get_children(parent) or [])
        acls = self.store.read_all()
        loop.call_soon_threadsafe(self.cache.replace_all, acls)
        log.info("authorizer: %d ACLs on %d resource patterns; super.users %s", sum(len(e) for e in acls.values()), len(acls),
                 sorted(self.config.super_users) or "none")
        for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
            zk.watch_children(parent, lambda children, parent=parent: self._on_changes(parent, children))
        self._purge()

    def _purge(self) -> None:
        """Blocking. Kafka's listener removes notifications older than 15 minutes as it
        handles new ones; so do we, at most once a minute per broker."""
        assert self.store is not None
        self._purged_at = time.monotonic()
        try:
            self.store.purge_changes(int(time.time() * 1000))
        except Exception as e:  # noqa: BLE001 - housekeeping: another broker may purge the same ones
            log.debug("purging old ACL change notifications: %s", e)

    def _on_changes(self, parent: str, children: list[str]) -> None:
        """kazoo's thread: only work out which notifications are new and hand them on."""
        new = sorted(set(children) - self._seen[parent])
        self._seen[parent] = set(children)
        if new and self._loop is not None:
            self._loop.call_soon_threadsafe(lambda: spawn(self._reload_until_done(parent, new), name="acl-reload", owner=self._tasks))

    async def close(self) -> None:
        await cancel_and_wait(list(self._tasks))

    async def _reload_until_done(self, parent: str, names: list[str]) -> None:
        """A notification must not be lost to a ZooKeeper hiccup: the cache would stay
        stale until the next change. On failure, reload everything, until it works."""
        try:
            await self._reload(parent, names)
            return
        except ZkError as e:
            log.warning("reading changed ACLs failed (%s); reloading every ACL", e)
        store = self.store
        assert store is not None
        while True:
            await asyncio.sleep(RELOAD_RETRY_S)
            try:
                self.cache.replace_all(await asyncio.get_running_loop().run_in_executor(None, store.read_all))
                self.reloads += 1
                return
            except ZkError as e:
                log.warning("reloading every ACL failed (%s); retrying", e)

    async def _reload(self, parent: str, names: list[str]) -> None:
        store = self.store
        assert store is not None
        loop = asyncio.get_running_loop()
        patterns: set[ResourcePattern] = set()
        for name in names:
            got = await loop.run_in_executor(None, store.zk.get, f"{parent}/{name}")
            pattern = decode_change(parent, got[0]) if got else None
            if pattern is None and got is not None:
                log.warning("unreadable ACL change notification %s/%s: reloading every ACL", parent, name)
                self.cache.replace_all(await loop.run_in_executor(None, store.read_all))
                self.reloads += 1
                return
            if pattern is not None:
                patterns.add(pattern)
        for pattern in patterns:
            try:
                entries = await loop.run_in_executor(None, store.read, pattern)
            except ZnodeDecodeError as e:
                # Not worth retrying (it is what ZooKeeper holds) and not to be kept stale
                # (a revoked Allow would go on granting): no ACLs for it, then the others.
                log.error("%s; enforcing no ACLs of %s until it is fixed", e, pattern)
                entries = frozenset()
            self.cache.set(pattern, entries)
        self.reloads += 1
        if time.monotonic() - self._purged_at > PURGE_INTERVAL_S:
            await loop.run_in_executor(None, self._purge)

    # -- decisions ------------------------------------------------------------------------
    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        conn = current_connection.get()
        principal, host = (conn.principal, conn.host) if conn is not None else (ANONYMOUS, "")
        ok = authorize(self.cache, self.config, principal, host, operation, resource_type, name)
        if not ok:
            log.debug("denied %s %s on %s %r from %s", principal, operation.name, resource_type.name, name, host)
        return ok

    def allowed_any_topic_write(self) -> bool:
        conn = current_connection.get()
        principal, host = (conn.principal, conn.host) if conn is not None else (ANONYMOUS, "")
        return authorize_any_topic_write(self.cache, self.config, principal, host)


Handler = Callable[[RequestHeader, dict[str, Any]], Awaitable[dict[str, Any] | None]]


def _element_name(api: ApiKey, item: Any) -> str:
    echo = ERROR_ECHO[api]
    request_field = echo.copy[0][1]
    return item if request_field == SELF else item[request_field]


class RequestAuthorizer:
    """Applies REQUIRED to one request around its handler (see the module docstring).
    `topic_exists` and `auto_create_enabled` (the broker's metadata cache and
    auto.create.topics.enable) say which topics a Metadata request would create."""

    def __init__(self, authorizer: AclAuthorizer, *, topic_exists: Callable[[str], bool],
                 auto_create_enabled: Callable[[], bool]):
        self.authz = authorizer
        self.topic_exists = topic_exists
        self.auto_create_enabled = auto_create_enabled

    async def handle(self, header: RequestHeader, body: dict[str, Any], handler: Handler) -> dict[str, Any] | None:
        api = ApiKey(header.api_key)
        allowed = self.authz.allowed
        if api == ApiKey.METADATA:
            return await self._metadata(header, body, handler)
        if api == ApiKey.LIST_GROUPS:
            return await self._list_groups(header, body, handler)
        if api == ApiKey.INIT_PRODUCER_ID:
            if not (allowed(O.IDEMPOTENT_WRITE, C, CLUSTER_NAME) or self.authz.allowed_any_topic_write()):
                raise fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "IdempotentWrite on the cluster (or Write on a topic) is not allowed")
            return await handler(header, body)
        if api == ApiKey.FIND_COORDINATOR and body.get("key_type", 0) != 0:
            return await handler(header, body)  # transaction coordinators: the handler refuses them
        if api == ApiKey.OFFSET_FETCH and body.get("topics") is None:
            return await self._offset_fetch_all(header, body, handler)
        for need in REQUIRED[api]:
            if need.scope == "cluster" and not allowed(need.operation, C, CLUSTER_NAME):
                raise fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{need.operation.name} on the cluster is not allowed")
            if need.scope == "group":
                group = body["key"] if api == ApiKey.FIND_COORDINATOR else body["group_id"]
                if not allowed(need.operation, G, group):
                    raise fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, f"{need.operation.name} on group {group!r} is not allowed")
        each = next((n for n in REQUIRED[api] if n.scope == "each"), None)
        if each is None:
            return await handler(header, body)
        return await self._split(header, body, handler, lambda item: self._element_code(api, each, item))

    def _element_code(self, api: ApiKey, need: Need, item: Any) -> int:
        """0 when the element (a topic, group or config resource) is allowed, else its error."""
        allowed = self.authz.allowed
        if api in _CONFIG_APIS:
            if item["resource_type"] == 4:  # a broker (or the broker defaults): the operation on the cluster
                return 0 if allowed(need.operation, C, CLUSTER_NAME) else int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            if item["resource_type"] != 2:
                return 0  # the handler answers INVALID_REQUEST
        name = item["resource_name"] if api in _CONFIG_APIS else _element_name(api, item)
        if api == ApiKey.CREATE_TOPICS and allowed(O.CREATE, C, CLUSTER_NAME):
            return 0
        if allowed(need.operation, need.resource_type, name):
            return 0
        return int(_DENIED_CODE[need.resource_type])

    async def _split(self, header: RequestHeader, body: dict[str, Any], handler: Handler,
                     code_of: Callable[[Any], int]) -> dict[str, Any] | None:
        """Run the handler on the allowed elements; answer the refused ones with their error."""
        api = ApiKey(header.api_key)
        echo = ERROR_ECHO[api]
        items = body.get(echo.request_field) or []
        codes = [code_of(item) for item in items]
        if not any(codes):
            return await handler(header, body)
        kept = [item for item, code in zip(items, codes, strict=True) if code == 0]
        resp = await handler(header, {**body, echo.request_field: kept})
        if resp is None:
            return None  # acks=0: nothing to tell the producer
        for code in sorted(set(codes) - {0}):
            refused = [item for item, c in zip(items, codes, strict=True) if c == code]
            errors = error_response_body(header, {**body, echo.request_field: refused}, code)
            resp[echo.response_field] = list(resp.get(echo.response_field) or []) + errors[echo.response_field]
        return resp

    async def _metadata(self, header: RequestHeader, body: dict[str, Any], handler: Handler) -> dict[str, Any]:
        allowed = self.authz.allowed
        requested = body.get("topics")
        if requested is None or (header.api_version == 0 and not requested):
            resp = await handler(header, body)
            assert resp is not None
            resp["topics"] = [t for t in resp["topics"] if allowed(O.DESCRIBE, T, t["name"])]
            return resp
        names = [t["name"] for t in requested]
        described = [n for n in names if allowed(O.DESCRIBE, T, n)]
        # Kafka's handleTopicMetadataRequest: when this request would auto-create topics
        # (the client asks, auto.create.topics.enable is on), each topic that does not exist
        # needs Create on the cluster or on itself; one without it is answered
        # TOPIC_AUTHORIZATION_FAILED and the rest are served as asked. Nothing awaits
        # between this look at the metadata cache and the handler's.
        not_creatable: set[str] = set()
        if body.get("allow_auto_topic_creation", True) and self.auto_create_enabled() and not allowed(O.CREATE, C, CLUSTER_NAME):
            not_creatable = {n for n in described if not self.topic_exists(n) and not allowed(O.CREATE, T, n)}
        served = [n for n in described if n not in not_creatable]
        resp = await handler(header, {**body, "topics": [{"name": n} for n in served]})
        assert resp is not None
        denied_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        resp["topics"] = [t for t in resp["topics"] if t["name"] in served] + [
            {"error_code": denied_code, "name": n, "is_internal": False, "partitions": []} for n in names if n not in served]
        return resp

    async def _list_groups(self, header: RequestHeader, body: dict[str, Any], handler: Handler) -> dict[str, Any]:
        resp = await handler(header, body)
        assert resp is not None
        if not self.authz.allowed(O.DESCRIBE, C, CLUSTER_NAME):
            resp["groups"] = [g for g in resp.get("groups", []) if self.authz.allowed(O.DESCRIBE, G, g["group_id"])]
        return resp

    async def _offset_fetch_all(self, header: RequestHeader, body: dict[str, Any], handler: Handler) -> dict[str, Any]:
        """OffsetFetch of every committed topic: Describe on the group, then only the topics
        the principal may Describe (Kafka filters them silently)."""
        if not self.authz.allowed(O.DESCRIBE, G, body["group_id"]):
            raise fail(ErrorCode.GROUP_AUTHORIZATION_FAILED, f"Describe on group {body['group_id']!r} is not allowed")
        resp = await handler(header, body)
        assert resp is not None
        resp["topics"] = [t for t in resp.get("topics", []) if self.authz.allowed(O.DESCRIBE, T, t["name"])]
        return resp
