"""Znode ACLs on a real ZooKeeper (kafkalite.zk.security): what the cluster's identity
creates is world-readable and only its own to change; sensitive paths are not even
readable by others; a world-writable chroot is secured, once, by whichever broker is
first."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError

from kafkalite.zk import ZkAdapter
from kafkalite.zk.security import ZkSecurity, secure_root

SECURITY = ZkSecurity("kafka", "pw-for-tests", set_acl=True)


def test_znodes_get_the_clusters_acl_and_sensitive_ones_stay_private(zk_client_factory):
    owner = zk_client_factory(auth_data=[("digest", "kafka:pw-for-tests")], default_acl=SECURITY.acl_for("/"))
    stranger = zk_client_factory()
    zk = ZkAdapter(owner, security=SECURITY)
    zk.ensure_base_paths()
    zk.create("/brokers/topics/t", b"{}")
    zk.create("/config/users/alice", b"scram", makepath=True)  # sensitive: the adapter picks the private ACL
    acl, _ = stranger.get_acls("/brokers/topics/t")
    assert sorted(a.id.scheme for a in acl) == ["digest", "world"]
    assert stranger.get("/brokers/topics/t")[0] == b"{}"
    with pytest.raises(NoAuthError):
        stranger.set("/brokers/topics/t", b"x")
    with pytest.raises(NoAuthError):
        stranger.get("/config/users/alice")
    assert owner.get("/config/users/alice")[0] == b"scram"

    assert secure_root(owner, SECURITY)  # the test's chroot was created open
    assert not secure_root(owner, SECURITY)  # once is enough
    with pytest.raises(NoAuthError):
        stranger.create("/controller_epoch", b"{}")
