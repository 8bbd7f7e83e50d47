"""SCRAM users in ZooKeeper, in Kafka's layout (kafka-configs --entity-type users): read by
brokers when a client authenticates, written by `kafkalite users`.

The value of /config/users/<name> is {"version":1,"config":{KEY: VALUE}}; the SCRAM keys are
the mechanism names. Other keys (Kafka's quotas) are kept untouched when credentials change.
Every change is announced with a /config/changes notification, as Kafka's tools do, so a
Kafka broker sharing the ensemble would see it too; kafkalite brokers read the user's znode at
each authentication, so a change applies to the next connection without a restart.
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from kafkalite.zk import codec, paths
from kafkalite.zk.client import ZkAdapter
from kafkalite.zk.errors import ZkError, ZnodeDecodeError, ZnodeExistsError, ZnodeNotFoundError

USER_CONFIG_VERSION = 1


def encode_user_config(config: dict[str, str]) -> bytes:
    return json.dumps({"version": USER_CONFIG_VERSION, "config": dict(sorted(config.items()))}, separators=(",", ":")).encode()


def decode_user_config(data: bytes | None, path: str) -> dict[str, str]:
    try:
        value: Any = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ZnodeDecodeError(path, f"not JSON ({e})") from None
    config = value.get("config") if isinstance(value, dict) else None
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        raise ZnodeDecodeError(path, f"expected {{\"version\":1,\"config\":{{name: string}}}}, got {value!r:.200}")
    return dict(config)


def read_user_config(kazoo: Any, name: str) -> dict[str, str] | None:
    """The user's config map, or None if the user has no znode."""
    path = paths.config_user_path(name)
    try:
        data, _ = kazoo.get(path)
    except NoNodeError:
        return None
    return decode_user_config(data, path)


def list_users(kazoo: Any) -> dict[str, dict[str, str]]:
    """Every user with a config znode -> its config map (unreadable znodes are skipped)."""
    try:
        children = kazoo.get_children(paths.config_users_path())
    except NoNodeError:
        return {}
    out: dict[str, dict[str, str]] = {}
    for child in sorted(children):
        name = paths.desanitize_user(child)
        try:
            config = read_user_config(kazoo, name)
        except ZnodeDecodeError:
            continue
        if config is not None:
            out[name] = config
    return out


def _notify(zk: ZkAdapter, name: str) -> None:
    zk.ensure_path(paths.config_changes_path())
    entity = f"users/{paths.sanitize_user(name)}"
    zk.client.create(paths.config_change_prefix(), codec.encode_config_change(entity), sequence=True)


def alter_user_config(zk: ZkAdapter, name: str, set_keys: dict[str, str], delete_keys: tuple[str, ...] = ()) -> dict[str, str]:
    """Set and delete keys of a user's config (conditional on the znode version, retried on
    a concurrent change); the user's znode is deleted when nothing is left. Returns the new map.
    A new znode is created through the adapter, so on a cluster with ZooKeeper ACLs it gets
    the private ACL of sensitive paths (kafkalite.zk.security)."""
    kazoo = zk.client
    path = paths.config_user_path(name)
    for _ in range(10):
        try:
            data, stat = kazoo.get(path)
            config, version = decode_user_config(data, path), stat.version
        except NoNodeError:
            config, version = {}, -1
        new = {k: v for k, v in config.items() if k not in delete_keys}
        new.update(set_keys)
        try:
            if version < 0:
                if not new:
                    return new
                zk.create(path, encode_user_config(new), makepath=True)
            elif new:
                kazoo.set(path, encode_user_config(new), version=version)
            else:
                kazoo.delete(path, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError, ZnodeExistsError, ZnodeNotFoundError):
            continue  # someone else changed it meanwhile: re-read and re-decide
        _notify(zk, name)
        return new
    raise ZkError(f"{path} kept changing under 10 attempts to update it")


SCRAM_MOCK_SALT_KEY_BYTES_MIN = 16


def scram_mock_salt_key(zk: ZkAdapter, new_key: bytes) -> bytes:
    """The cluster's key for the mock salts of unknown SCRAM users (paths.SCRAM_MOCK_SALT_KEY):
    the stored one, or `new_key` (random, from the caller) stored now if there is none yet.
    Brokers starting together may race: the first creation wins and all read it back.
    ZnodeDecodeError if the znode is not the hex of at least 16 bytes."""
    assert len(new_key) >= SCRAM_MOCK_SALT_KEY_BYTES_MIN
    path = paths.SCRAM_MOCK_SALT_KEY
    got = zk.get(path)
    if got is None:
        try:
            zk.create(path, new_key.hex().encode(), makepath=True)
        except ZnodeExistsError:
            pass  # another broker stored its key first: use that one
        got = zk.get(path)
        if got is None:
            raise ZnodeNotFoundError(path)  # deleted right after it was created: start again
    try:
        key = bytes.fromhex(got[0].decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ZnodeDecodeError(path, "not hex") from None
    if len(key) < SCRAM_MOCK_SALT_KEY_BYTES_MIN:
        raise ZnodeDecodeError(path, f"a key of {len(key)} bytes, fewer than {SCRAM_MOCK_SALT_KEY_BYTES_MIN}")
    return key
