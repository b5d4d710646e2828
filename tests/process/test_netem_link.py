"""The netem stand-in between the simulated hosts (tests/e2e/netem_link.py), measured from inside the hosts'
namespaces with plain TCP: it delays every frame by the set time in each direction, drops frames at the set
rate, and a link taken down drops everything until it is up again."""

import json
import subprocess
import sys
import time
import uuid

import pytest

from tests.e2e.simulated_hosts import ADDRESSES, Netem, SimulatedHosts, require_namespaces
from tests.helpers import REPO

PORT = 5001


@pytest.fixture
def make_hosts(tmp_path):
    made = []

    def make(netem):
        require_namespaces()
        made.append(SimulatedHosts(uuid.uuid4().hex[:6], netem=netem, stats=tmp_path / "link.json"))
        server = made[-1].start_probe("b", ["serve", ADDRESSES["b"], str(PORT)])
        assert server.stdout.readline().strip() == "ready"
        return made[-1]

    yield make
    for hosts in made:
        hosts.close()


def probe(hosts, *args, timeout=60):
    """The figures of `link_probe connect` run on host a against host b's server."""
    result = subprocess.run(["ip", "netns", "exec", hosts.ns["a"], sys.executable, "-m", "tests.e2e.link_probe",
                             "connect", ADDRESSES["b"], str(PORT), *args], capture_output=True, text=True,
                            timeout=timeout, cwd=REPO)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def counts(hosts, tmp_path):
    hosts.stop_forwarder()
    return json.loads((tmp_path / "link.json").read_text())


def test_every_frame_is_delayed_each_way_and_bulk_data_flows(make_hosts, tmp_path):
    hosts = make_hosts(Netem(delay_ms=25))
    figures = probe(hosts, "--count", "5", "--bytes", str(6_400_000))
    print(f"25 ms each way: {figures}")
    # A connect is one round trip: at least twice the one-way delay.
    assert all(ms is not None and ms >= 50 for ms in figures["connect_ms"]), figures
    assert figures["send_secs"] is not None, figures  # an all-reduce's worth of data crosses the link
    assert sum(c["lost"] for c in counts(hosts, tmp_path).values()) == 0


def test_frames_are_dropped_at_the_set_rate(make_hosts, tmp_path):
    hosts = make_hosts(Netem(loss=1.0))
    assert probe(hosts, "--count", "1", "--timeout", "2")["connect_ms"] == [None]
    link = counts(hosts, tmp_path)
    assert link["a->b"]["lost"] > 0 and link["a->b"]["frames"] == 0, link


def test_a_link_taken_down_drops_everything_until_it_is_up_again(make_hosts, tmp_path):
    hosts = make_hosts(Netem())
    hosts.link("b", up=False)
    assert probe(hosts, "--count", "1", "--timeout", "2")["connect_ms"] == [None]
    hosts.link("b", up=True)
    # The kernel restores the link's route a moment after `ip link set up` (under load the first connect can
    # come too early and fail at once): wait, with a bound, for one connect, then every later one gets through.
    deadline = time.monotonic() + 15
    while None in probe(hosts, "--count", "1", "--timeout", "2")["connect_ms"]:
        assert time.monotonic() < deadline, "no connect got through within 15 s of the link coming up"
        time.sleep(0.2)
    assert None not in probe(hosts, "--count", "2")["connect_ms"]
