"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (issue 16).

The decisions (resolution with sources and synonyms, validation, SET/DELETE/APPEND/SUBTRACT)
are kafkalite.dynamic_config's; this module reads and writes ZooKeeper's /config znodes
and waits until this broker applies what it wrote. Topic configs are read from ZooKeeper
(as Kafka's describe does), so any broker answers with what was last written; broker
configs from this broker's own layers (kafkalite.broker.dynamic_configs).

Every resource of a request is validated before any is written; a resource with an
unknown name, a read-only config or a bad value gets INVALID_CONFIG with a message and is
left as it was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite import dynamic_config as dc
from kafkalite.broker.errors import OPERATING_ERRORS, error_code_for, fail
from kafkalite.protocol.errors import ErrorCode
from kafkalite.zk import paths
from kafkalite.zk.errors import ZkError

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)

APPLIED_WAIT_S = 5.0  # an alteration's answer waits this long for this broker to apply it


@dataclasses.dataclass(frozen=True)
class _Planned:
    """One validated resource alteration: the znode to write and its whole new config."""

    resource_type: int
    resource_name: str
    path: str
    entity: str  # the /config/changes entity path
    config: dict[str, str]


class ConfigApis:
    def __init__(self, broker: Broker, topic_error: Callable[[Any], str | None]):
        self.broker = broker
        self.topic_error = topic_error

    async def _zk(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -- DescribeConfigs ----------------------------------------------------------------
    async def describe_configs(self, version: int, body: dict) -> dict:
        results = []
        for r in body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            try:
                entries = dc.select(await self._describe(rtype, name), r.get("configuration_keys"))
                code, message = 0, None
            except OPERATING_ERRORS as e:
                entries, code, message = [], error_code_for(e), str(e)
            except ZkError as e:
                entries, code, message = [], int(ErrorCode.REQUEST_TIMED_OUT), f"ZooKeeper: {e}"
            synonyms = version >= 1 and bool(body.get("include_synonyms"))
            results.append({"error_code": code, "error_message": message, "resource_type": rtype, "resource_name": name,
                            "configs": [_wire_entry(e, synonyms) for e in entries]})
        return {"throttle_time_ms": 0, "results": results}

    async def _describe(self, rtype: int, name: str) -> list[dc.ConfigEntry]:
        layers = self.broker.dynamic_configs.layers
        if rtype == dc.ResourceType.TOPIC:
            return dc.describe_topic(layers, await self._topic_overrides(name))
        if rtype == dc.ResourceType.BROKER:
            if name == "":
                return dc.describe_broker(layers, defaults_only=True)
            if name != str(self.broker.broker_id):
                raise fail(ErrorCode.INVALID_REQUEST, f"broker {name!r}: ask that broker itself; this is broker "
                                    f"{self.broker.broker_id} (or use \"\" for the cluster-wide defaults)")
            return dc.describe_broker(layers)
        raise fail(ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not served (2 topic, 4 broker)")

    async def _topic_overrides(self, topic: str) -> dict[str, str]:
        err = self.topic_error(topic)
        if err is not None:
            raise fail(ErrorCode.INVALID_TOPIC_EXCEPTION, err)
        found = await self._zk(self.broker.zk.get_topic_assignment, topic)
        if found is None:
            raise fail(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}")
        return dict(found[0].config)

    async def _broker_overrides(self, name: str) -> tuple[str, dict[str, str]]:
        if name == "":
            entity = paths.BROKER_DEFAULT_ENTITY
        elif name.isascii() and name.isdigit():  # "²" is a digit to isdigit() but not to int()
            entity = str(int(name))
        else:
            raise fail(ErrorCode.INVALID_REQUEST, f"broker {name!r} is neither a broker id nor \"\" (the cluster-wide defaults)")
        return entity, await self._zk(self.broker.zk.get_entity_config, paths.config_broker_path(entity)) or {}

    # -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------------
    async def alter_configs(self, body: dict, *, incremental: bool) -> dict:
        planned: list[_Planned | None] = []
        results: list[tuple[int, str | None]] = []
        keys = [(r["resource_type"], r["resource_name"]) for r in body["resources"]]
        for r, key in zip(body["resources"], keys):
            if keys.count(key) > 1:  # as Kafka: a resource twice in one request is refused each time
                planned.append(None)
                results.append((int(ErrorCode.INVALID_REQUEST), f"{_resource_label(r)}: appears more than once in the request"))
                continue
            try:
                planned.append(await self._plan(r, incremental))
                results.append((0, None))
            except OPERATING_ERRORS as e:
                planned.append(None)
                results.append((error_code_for(e), f"{_resource_label(r)}: {e}"))
            except ZkError as e:
                planned.append(None)
                results.append((int(ErrorCode.REQUEST_TIMED_OUT), f"ZooKeeper: {e}"))
        if not body.get("validate_only"):
            written = []
            for i, plan in enumerate(planned):
                if plan is None:
                    continue
                try:
                    await self._zk(lambda p=plan: self.broker.zk.set_entity_config(p.path, p.config, notify=p.entity))
                    log.info("config of %s set to %s", plan.entity, plan.config)
                    written.append(plan)
                except ZkError as e:
                    results[i] = (int(ErrorCode.REQUEST_TIMED_OUT), f"ZooKeeper: {e}")
            await self._wait_applied(written)
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": code, "error_message": message, "resource_type": r["resource_type"], "resource_name": r["resource_name"]}
            for r, (code, message) in zip(body["resources"], results)]}

    async def _plan(self, r: dict, incremental: bool) -> _Planned:
        rtype, name = r["resource_type"], r["resource_name"]
        alterations = dc.parse_alterations(r.get("configs") or [], incremental=incremental)
        if rtype in (dc.ResourceType.TOPIC, dc.ResourceType.BROKER):
            dc.check_deletions(dc.ResourceType(rtype), alterations)
        layers = self.broker.dynamic_configs.layers
        if rtype == dc.ResourceType.TOPIC:
            current = await self._topic_overrides(name)
            wanted = (dc.apply_incremental(current, alterations, dc.topic_effective_values(layers, current)) if incremental
                      else dc.replace_all(alterations))
            return _Planned(rtype, name, paths.config_topic_path(name), f"topics/{name}", dc.validate_topic_overrides(wanted))
        if rtype == dc.ResourceType.BROKER:
            entity, current = await self._broker_overrides(name)
            wanted = (dc.apply_incremental(current, alterations, dc.broker_effective_values(layers)) if incremental
                      else dc.replace_all(alterations))
            return _Planned(rtype, name, paths.config_broker_path(entity), f"brokers/{entity}", dc.validate_broker_overrides(wanted))
        raise fail(ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not served (2 topic, 4 broker)")

    async def _wait_applied(self, plans: list[_Planned]) -> None:
        """Until this broker applies what was written (its cache from the controller's
        UpdateMetadata, its broker layers from its watches), at most APPLIED_WAIT_S."""
        cache, own = self.broker.metadata_cache, self.broker.dynamic_configs

        def applied() -> bool:
            for p in plans:
                if p.resource_type == dc.ResourceType.TOPIC and p.resource_name in cache.topics:
                    if cache.topic_configs.get(p.resource_name, {}) != p.config:
                        return False
                elif p.resource_type == dc.ResourceType.BROKER:
                    if p.resource_name == "" and dict(own.layers.dynamic_default) != p.config:
                        return False
                    if p.resource_name == str(self.broker.broker_id) and dict(own.layers.dynamic_broker) != p.config:
                        return False
            return True

        if plans and not await self.broker.metadata_updates.wait_until(applied, APPLIED_WAIT_S):
            log.info("alteration not yet applied here after %.0f s: %s", APPLIED_WAIT_S, [p.entity for p in plans])


def _resource_label(r: dict) -> str:
    kind = {dc.ResourceType.TOPIC: "topic", dc.ResourceType.BROKER: "broker"}.get(r["resource_type"], "resource")
    name = r["resource_name"] if r["resource_name"] != "" else "<default>"
    return f"{kind} {name}"


def _wire_entry(e: dc.ConfigEntry, synonyms: bool) -> dict[str, Any]:
    return {"name": e.name, "value": e.value, "read_only": e.read_only, "is_default": e.is_default,
            "config_source": int(e.source), "is_sensitive": e.sensitive,
            "synonyms": [{"name": s.name, "value": s.value, "source": int(s.source)} for s in e.synonyms] if synonyms else []}
