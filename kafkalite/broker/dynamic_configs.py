"""This broker's dynamic broker configs (issue 16): /config/brokers/<id> and
/config/brokers/<default>, watched, applied live.

What applies live: the log defaults (log.retention.*, log.segment.bytes, log.roll.ms,
log.cleanup.policy, the cleaner's topic defaults, the flush intervals) re-derive the
LogConfig of every local log whose topic does not override them; min.insync.replicas and
message.max.bytes are read at each produce; the two replication throttles go to the
replication quotas, where they win over a reassignment's own rates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kafkalite import dynamic_config as dc
from kafkalite.clock import monotonic_ms
from kafkalite.core.quota import FOLLOWER_RATE, LEADER_RATE
from kafkalite.log.config import LogConfig
from kafkalite.zk import codec, paths
from kafkalite.zk.errors import ZnodeDecodeError

if TYPE_CHECKING:
    from kafkalite.broker.server import Broker

log = logging.getLogger(__name__)


class DynamicBrokerConfigs:
    def __init__(self, broker: Broker, static: Mapping[str, Any], explicit: frozenset[str],
                 log_config_from: Callable[[Mapping[str, Any]], LogConfig]):
        self.broker = broker
        self.layers = dc.BrokerLayers(dict(static), explicit)
        self._log_config_from = log_config_from

    def watch(self) -> None:
        """Data watches on both znodes; kazoo calls back from its thread, the loop applies."""
        call = self.broker.loop.call_soon_threadsafe
        for entity, layer in ((paths.BROKER_DEFAULT_ENTITY, "default"), (str(self.broker.broker_id), "broker")):
            path = paths.config_broker_path(entity)
            self.broker.zk.watch_data(path, lambda data, stat, p=path, w=layer: call(self.on_znode, w, p, data))

    def on_znode(self, layer: str, path: str, data: bytes | None) -> None:
        values = self._read(path, data)
        if layer == "default":
            self.layers = dc.BrokerLayers(self.layers.static, self.layers.explicit, values, self.layers.dynamic_broker)
        else:
            self.layers = dc.BrokerLayers(self.layers.static, self.layers.explicit, self.layers.dynamic_default, values)
        self.apply()

    @staticmethod
    def _read(path: str, data: bytes | None) -> dict[str, str]:
        """The znode's valid configs; a bad one (written by hand) is logged and left out."""
        if data is None:
            return {}
        try:
            raw = codec.decode_entity_config(data, path)
        except ZnodeDecodeError as e:
            log.warning("ignoring %s", e)
            return {}
        out = {}
        for name, value in raw.items():
            try:
                out.update(dc.validate_broker_overrides({name: value}))
            except dc.InvalidConfig as e:
                log.warning("%s: ignoring %s", path, e)
        return out

    def apply(self) -> None:
        b = self.broker
        effective = self.layers.effective()
        for name in dc.DYNAMIC_BROKER_CONFIGS:
            b.settings[name] = effective[name]  # the replica manager reads these at each produce
        rm = b.replica_manager
        base = self._log_config_from(effective)
        rm.log_config = base
        b.logs.config = base
        rm.reapply_log_configs()
        rm.core.quotas.set_broker_rates({LEADER_RATE: effective[LEADER_RATE], FOLLOWER_RATE: effective[FOLLOWER_RATE]}, monotonic_ms())
        b.metadata_updates.notify()
        log.info("dynamic broker configs: default %s, broker %s", dict(self.layers.dynamic_default), dict(self.layers.dynamic_broker))
