"""The one way kafkalite makes a kazoo client, with ZooKeeper digest authentication and the
cluster's znode ACLs (issue 15; Kafka's `zookeeper.set.acl`).

Brokers and admin tools (the CLI's --zookeeper commands, the local cluster launcher) build
their clients here, so they all authenticate alike and every znode any of them creates
gets the same ACLs:

- with `zookeeper.set.acl=true` and digest credentials, the session adds the digest
  identity, and znodes are created with ALL for that identity and READ for everyone
  (Kafka's secure default: anyone may look, only the cluster's identity may write);
  sensitive paths (SCRAM credentials under /config/users, /config/brokers, and the key of
  the mock SCRAM salts) get no world READ, as in Kafka;
- with credentials but `zookeeper.set.acl=false`, the session authenticates and creates
  open znodes (Kafka's first step of a migration);
- with neither, today's behaviour: open znodes, no authentication.

Credentials come from `zookeeper.digest.user` + `zookeeper.digest.password`, or from a
file `zookeeper.digest.file` holding one line `user:password` (the KAFKA_OPTS/JAAS-free
replacement for Kafka's JAAS Client section). Existing znodes of a cluster that ran
without ACLs keep their open ACLs: there is no equivalent of Kafka's
zookeeper-security-migration tool.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError
from kazoo.security import ACL, READ_ACL_UNSAFE, make_digest_acl

DIGEST_FILE_ENV = "KAFKALITE_ZK_DIGEST_FILE"  # admin tools: the cluster's credentials file
# /kafkalite/scram_mock_salt_key: whoever reads it can tell unknown SCRAM users from known ones.
SENSITIVE_ROOTS = ("/config/users", "/config/brokers", "/kafkalite/scram_mock_salt_key")
SECURE_ROOT_ATTEMPTS_MAX = 10


@dataclasses.dataclass(frozen=True)
class ZkSecurity:
    user: str = ""
    password: str = ""
    set_acl: bool = False

    @property
    def authenticated(self) -> bool:
        return bool(self.user)

    def acl_for(self, path: str) -> list[ACL] | None:
        """The ACL a new znode at `path` gets (None: kazoo's open default)."""
        if not (self.set_acl and self.authenticated):
            return None
        owner = [make_digest_acl(self.user, self.password, all=True)]
        if any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOTS):
            return owner
        return owner + list(READ_ACL_UNSAFE)


def parse_digest(text: str, where: str) -> tuple[str, str]:
    user, sep, password = text.strip().partition(":")
    if not sep or not user or not password:
        raise ValueError(f"{where}: expected one line user:password")
    return user, password


def security_from(set_acl: bool, user: str, password: str, digest_file: str) -> ZkSecurity:
    """From the broker settings; ValueError naming the problem."""
    if digest_file:
        if user or password:
            raise ValueError("set zookeeper.digest.file or zookeeper.digest.user/password, not both")
        try:
            user, password = parse_digest(Path(digest_file).read_text(), f"zookeeper.digest.file {digest_file}")
        except OSError as e:
            raise ValueError(f"zookeeper.digest.file {digest_file}: {e.strerror or e}") from None
    if bool(user) != bool(password):
        raise ValueError("zookeeper.digest.user and zookeeper.digest.password go together")
    if ":" in user:
        raise ValueError("zookeeper.digest.user cannot contain ':'")
    if set_acl and not user:
        raise ValueError("zookeeper.set.acl=true needs credentials (zookeeper.digest.user/password or zookeeper.digest.file)")
    return ZkSecurity(user, password, set_acl)


def security_from_env() -> ZkSecurity:
    """Admin tools: $KAFKALITE_ZK_DIGEST_FILE names the cluster's credentials; ACLs are set
    whenever credentials are given (a tool must not create open znodes in a secured
    cluster)."""
    path = os.environ.get(DIGEST_FILE_ENV, "")
    if not path:
        return ZkSecurity()
    return security_from(True, "", "", path)


def secure_root(client: KazooClient, security: ZkSecurity) -> bool:
    """Give the session's root (the chroot, or "/" of a ZooKeeper the cluster owns) the
    cluster's ACL if anyone may still write it: top-level znodes (/controller,
    /controller_epoch) can otherwise be deleted by anyone, whatever their own ACLs, since
    deleting needs DELETE on the parent. Kafka creates its chroot with these ACLs; a chroot
    created before, by hand, is fixed here. Whether anything changed."""
    acl = security.acl_for("/")
    if acl is None:
        return False
    for _ in range(SECURE_ROOT_ATTEMPTS_MAX):
        current, stat = client.get_acls("/")
        if all(a.id.scheme != "world" or a.perms == READ_ACL_UNSAFE[0].perms for a in current):
            return False
        try:
            client.set_acls("/", acl, version=stat.aversion)
            return True
        except BadVersionError:
            continue  # another broker of the cluster, starting at the same time, changed it: look again
    raise RuntimeError(f"the ACL of the ZooKeeper root kept changing ({SECURE_ROOT_ATTEMPTS_MAX} attempts)")


def make_client(hosts: str, timeout_s: float, security: ZkSecurity, **kwargs) -> KazooClient:
    """A kazoo client (not started) that authenticates and creates znodes per `security`."""
    auth_data = [("digest", f"{security.user}:{security.password}")] if security.authenticated else None
    acl = security.acl_for("/")
    return KazooClient(hosts=hosts, timeout=timeout_s, auth_data=auth_data, default_acl=acl, **kwargs)
