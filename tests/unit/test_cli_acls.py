"""`kafkalite acls` option parsing (kafkalite.cli.acls_cmd.spec_from_args): pure."""

from __future__ import annotations

import argparse

import pytest

from kafkalite.cli import acls_cmd
from kafkalite.core.acl import InvalidAclError, Operation, PatternType, Permission, ResourceType


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    acls_cmd.add_parser(sub)
    return parser.parse_args(["acls", *argv])


def test_add_builds_one_binding_per_operation():
    args = parse("add", "--allow", "--principal", "User:alice", "--operation", "read", "--operation", "Describe-Configs",
                 "--operation", "read", "--topic", "orders-", "--prefixed")
    spec = acls_cmd.spec_from_args(args, for_add=True)
    assert spec == acls_cmd.AclSpec(ResourceType.TOPIC, "orders-", PatternType.PREFIXED, "User:alice", "*",
                                    (Operation.READ, Operation.DESCRIBE_CONFIGS), Permission.ALLOW)


def test_list_filters_default_to_any_and_match_is_explicit():
    spec = acls_cmd.spec_from_args(parse("list"), for_add=False)
    assert (spec.resource_type, spec.name, spec.pattern_type, spec.operations, spec.permission) == (
        ResourceType.ANY, None, PatternType.ANY, (Operation.ANY,), Permission.ANY)
    assert acls_cmd.spec_from_args(parse("list", "--topic", "t"), for_add=False).pattern_type == PatternType.LITERAL
    assert acls_cmd.spec_from_args(parse("list", "--topic", "t", "--match"), for_add=False).pattern_type == PatternType.MATCH
    assert acls_cmd.spec_from_args(parse("list", "--cluster", "--deny"), for_add=False).name == "kafka-cluster"


@pytest.mark.parametrize("argv, why", [
    (("add", "--principal", "User:a", "--operation", "Read", "--topic", "t"), "--allow, --deny"),
    (("add", "--allow", "--deny", "--principal", "User:a", "--operation", "Read", "--topic", "t"), "--allow, --deny"),
    (("add", "--allow", "--operation", "Read", "--topic", "t"), "--principal"),
    (("add", "--allow", "--principal", "User:a", "--topic", "t"), "--operation"),
    (("add", "--allow", "--principal", "User:a", "--operation", "Read"), "name the resource"),
    (("add", "--allow", "--principal", "User:a", "--operation", "Read", "--topic", "t", "--group", "g"), "at most one"),
    (("add", "--allow", "--principal", "alice", "--operation", "Read", "--topic", "t"), "Type:name"),
    (("add", "--allow", "--principal", "User:a", "--operation", "Reed", "--topic", "t"), "unknown operation"),
    (("add", "--allow", "--principal", "User:a", "--operation", "Alter", "--cluster", "--prefixed"), "no prefixed"),
    (("list", "--topic", "t", "--prefixed", "--match"), "exclude"),
])
def test_bad_options_are_named(argv, why):
    with pytest.raises(InvalidAclError, match=why):
        acls_cmd.spec_from_args(parse(*argv), for_add=argv[0] == "add")


def test_list_prints_stored_names_and_principals_as_they_are(capsys):
    # As rich markup, "User:[red]eve" printed as "User:eve" and a group named "[/]g" raised
    # MarkupError (a traceback instead of the table).
    rows = [{"resource_type": "Group", "pattern_type": "LITERAL", "name": "[/]g", "principal": "User:[red]eve",
             "host": ":warning:", "operation": "Read", "permission": "Deny"}]
    acls_cmd._print_table(rows, "1 ACL")
    out = capsys.readouterr().out
    for text in ("[/]g", "User:[red]eve", ":warning:", "Deny"):
        assert text in out
