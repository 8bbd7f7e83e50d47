"""kafkalite.testing.netns runs `ip` and `iptables`: a machine without them gets a
NetnsError that names the packages, not a bare "[Errno 2]"."""

from __future__ import annotations

import pytest

from kafkalite.testing import netns


def test_a_missing_command_names_the_packages_to_install():
    with pytest.raises(netns.NetnsError, match=r"kafkalite-no-such-tool: command not found.*apt-get install iproute2 iptables"):
        netns._run(["kafkalite-no-such-tool", "-V"])


def test_a_failing_command_says_what_it_printed():
    with pytest.raises(netns.NetnsError, match=r"failed \(2\): boom"):
        netns._run(["sh", "-c", "echo boom >&2; exit 2"])
