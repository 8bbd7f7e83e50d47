"""ZooKeeper adapter: paths, znode codecs, conditional and batched writes, pipelined reads
(DESIGN.md section 2). kazoo stays inside this package; callers see typed errors."""

from kafkalite.zk.client import ControllerElection, ZkAdapter

__all__ = ["ControllerElection", "ZkAdapter"]
