"""The CLI's tables and lines print names from the cluster as they are (console_for_tables:
no rich markup, no :emoji: codes): group, member and client ids, config values, brokers'
hosts and racks are chosen by clients and operators, not by the CLI."""

from __future__ import annotations

import argparse

from kafkalite.cli import configs_cmd, groups_cmd
from kafkalite.cli.admin_client import console_for_tables
from kafkalite.cli.group_admin import GroupDescription, GroupMember

ODD = ("[/]g", "[bold]x", ":warning:", "User:[red]eve")


def test_group_description_prints_client_chosen_ids_as_they_are(capsys):
    member = GroupMember(member_id="[bold]m-1", group_instance_id=":warning:", client_id="[/]c", host="/10.0.0.1",
                         assignment=(("orders", 0),))
    group = GroupDescription("[/]g", "Stable", "consumer", "[red]range", (member,), 1)
    groups_cmd._print_description(group, [groups_cmd.PartitionLag("orders", 0, 5, 7, "[bold]m-1")])
    out = capsys.readouterr().out
    for text in ("group [/]g:", "[red]range", "[bold]m-1", ":warning:", "[/]c"):
        assert text in out


def test_console_for_tables_takes_strings_literally(capsys):
    console = console_for_tables()
    for text in ODD:
        console.print(text)
    out = capsys.readouterr().out
    assert out.split() == list(ODD)


def test_configs_table_prints_values_as_they_are(capsys, monkeypatch):
    configs = [{"name": "cleanup.policy", "value": "[/]delete", "source": 1, "read_only": False, "sensitive": False}]

    class Admin:
        def __init__(self, bootstrap):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def describe_configs(self, rtype, name):
            return configs

    monkeypatch.setattr(configs_cmd, "AdminClient", Admin)
    args = argparse.Namespace(topic="orders", broker=None, all=True, json=False, bootstrap="127.0.0.1:1")
    assert configs_cmd.run_describe(args) == 0
    assert "[/]delete" in capsys.readouterr().out
