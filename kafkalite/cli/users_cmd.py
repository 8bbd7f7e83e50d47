"""`kafkalite users add|list|remove`: SASL/SCRAM users, stored in ZooKeeper as Kafka stores
them (kafka-configs --entity-type users --add-config 'SCRAM-SHA-512=[password=...]').

    kafkalite users add NAME [--password P | --password-file F] [--mechanism M ...] [--iterations N]
    kafkalite users list [--json]
    kafkalite users remove NAME [--mechanism M ...]

`add` stores a salted, iterated credential (never the password) for each mechanism (default
SCRAM-SHA-256 and SCRAM-SHA-512), replacing any the user had; a user's other config keys are
kept. Without --password or --password-file the password is read from stdin (one line).
`remove` deletes the user's credentials (or only the given mechanisms). Brokers read the
credentials at each authentication: no restart. ZooKeeper comes from --zookeeper, else
$KAFKALITE_ZOOKEEPER, else 127.0.0.1:2181.
Exit codes: 0 ok, 1 the operation failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys

from kazoo.exceptions import KazooException, NoAuthError

from kafkalite.cli.admin_client import AdminError, fail
from kafkalite.cli.zk_session import add_zookeeper_argument, resolve_zookeeper, zookeeper
from kafkalite.core.sasl import ITERATIONS_MAX, ITERATIONS_MIN, SALT_BYTES, SCRAM_MECHANISMS, make_credential, user_credentials
from kafkalite.zk.errors import ZkError
from kafkalite.zk.users import alter_user_config, list_users, read_user_config

DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
NO_AUTH = ("ZooKeeper refused: the cluster's znodes have ACLs (bin/cluster up --zk-acl); "
           "set KAFKALITE_ZK_DIGEST_FILE to its digest file")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("users", help="SASL/SCRAM users (credentials in ZooKeeper)")
    usub = p.add_subparsers(dest="users_command", required=True)

    add = usub.add_parser("add", help="create a user or change its password")
    add.add_argument("name")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password", help="the password (visible in the process list: prefer --password-file or stdin)")
    source.add_argument("--password-file", metavar="FILE", help="read the password from the first line of FILE")
    add.add_argument("--mechanism", action="append", choices=sorted(SCRAM_MECHANISMS), default=None,
                     help="SCRAM mechanism to store a credential for (repeatable; default both)")
    add.add_argument("--iterations", type=int, default=ITERATIONS_MIN,
                     help=f"PBKDF2 iterations ({ITERATIONS_MIN}..{ITERATIONS_MAX}, default {ITERATIONS_MIN})")
    add_zookeeper_argument(add)
    add.set_defaults(func=run_add)

    lst = usub.add_parser("list", help="users and the mechanisms they have credentials for")
    lst.add_argument("--json", action="store_true", help='{"users": [{"name", "mechanisms": [...]}]}')
    add_zookeeper_argument(lst)
    lst.set_defaults(func=run_list)

    remove = usub.add_parser("remove", help="delete a user's credentials")
    remove.add_argument("name")
    remove.add_argument("--mechanism", action="append", choices=sorted(SCRAM_MECHANISMS), default=None,
                        help="remove only this mechanism's credential (repeatable; default all)")
    add_zookeeper_argument(remove)
    remove.set_defaults(func=run_remove)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return args.password
    if args.password_file is not None:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise AdminError(f"cannot read --password-file {args.password_file!r}: {e.strerror}") from None
    return sys.stdin.readline().rstrip("\r\n")


def _zookeeper_failure(command: str, e: Exception) -> int:
    """One line for what went wrong on the way to ZooKeeper (no traceback for a user's mistake)."""
    if isinstance(e, NoAuthError):
        return fail(command, NO_AUTH)
    if isinstance(e, KazooException):
        return fail(command, f"ZooKeeper: {type(e).__name__}")
    return fail(command, str(e))


_ZK_ERRORS = (AdminError, ZkError, KazooException)


def run_add(args: argparse.Namespace) -> int:
    if not ITERATIONS_MIN <= args.iterations <= ITERATIONS_MAX:
        return fail("users add", f"--iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX}", 2)
    if not args.name or "\x00" in args.name:
        return fail("users add", "a user name must be non-empty", 2)
    try:
        password = _password(args)
        if not password:
            return fail("users add", "empty password", 2)
        mechanisms = args.mechanism or list(DEFAULT_MECHANISMS)
        credentials = {m: make_credential(m, password, secrets.token_bytes(SALT_BYTES), args.iterations).to_kafka()
                       for m in mechanisms}
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            alter_user_config(zk, args.name, credentials)
    except _ZK_ERRORS as e:
        return _zookeeper_failure("users add", e)
    print(f"user {args.name!r}: credentials for {', '.join(sorted(mechanisms))}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    try:
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            users = list_users(zk.client)
    except _ZK_ERRORS as e:
        return _zookeeper_failure("users list", e)
    rows = [{"name": name, "mechanisms": sorted(user_credentials(config))} for name, config in users.items()]
    rows = [r for r in rows if r["mechanisms"]]
    if args.json:
        print(json.dumps({"users": rows}))
    else:
        for r in rows:
            print(f"{r['name']}\t{','.join(r['mechanisms'])}")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    mechanisms = tuple(args.mechanism or SCRAM_MECHANISMS)
    try:
        with zookeeper(resolve_zookeeper(args.zookeeper)) as zk:
            config = read_user_config(zk.client, args.name)
            if config is None or not set(mechanisms) & set(user_credentials(config)):
                return fail("users remove", f"unknown user {args.name!r} (no {'/'.join(mechanisms)} credentials)")
            alter_user_config(zk, args.name, {}, mechanisms)
    except _ZK_ERRORS as e:
        return _zookeeper_failure("users remove", e)
    print(f"user {args.name!r}: removed {', '.join(sorted(mechanisms))}")
    return 0
