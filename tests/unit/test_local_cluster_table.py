"""`bin/cluster up|status` prints the whole broker table when stdout is not a terminal."""

from __future__ import annotations

from kafkalite.cli.local_cluster import _table


def test_broker_table_is_not_cut_when_stdout_is_a_pipe(capsys):
    status = {
        "zookeeper": {"connect": "127.0.0.1:2181", "pid": 4242, "alive": True},
        "brokers": [{"id": i, "pid": 100 + i, "host": "127.0.0.1", "port": 9091 + i, "inter_broker_port": 9191 + i,
                     "admin_port": 9291 + i, "rack": f"rack-{i}", "alive": True, "registered": True, "controller": i == 1}
                    for i in (1, 2, 3)],
    }
    _table(status)
    out = capsys.readouterr().out
    assert "…" not in out
    for word in ("inter-broker", "registered", "controller", "127.0.0.1:9092", "127.0.0.1:9094", "rack-3"):
        assert word in out
