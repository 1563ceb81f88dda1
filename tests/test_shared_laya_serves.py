"""The xdist workers share one laya-serve per configuration (tests/helpers/servers.py,
`SharedLayaServes`): the first asks starts it, the last to finish stops it, and the controller
stops what a worker that died left. A sleeping process stands in for laya-serve here, but in
the last test, which looks at the environment of the suite's own keyed one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import servers
from tests.helpers.servers import LAYA_SERVE_KEY, SharedLayaServes


@pytest.fixture
def stand_ins(monkeypatch):
    """Each start spawns a sleeping python instead of laya-serve; the processes, for the test."""
    started: list[subprocess.Popen] = []

    def start(self, jev_strict, api_key):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        started.append(proc)
        return {"port": 40000 + len(started), "pid": proc.pid, "start": servers._start_time(proc.pid), "users": []}

    monkeypatch.setattr(SharedLayaServes, "_start", start)
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_workers_share_a_configuration_and_the_last_one_stops_it(tmp_path, stand_ins):
    gw0, gw1 = SharedLayaServes(tmp_path, "gw0"), SharedLayaServes(tmp_path, "gw1")
    assert gw0(api_key="k").url == gw1(api_key="k").url
    assert len(stand_ins) == 1
    gw0.close()
    assert stand_ins[0].poll() is None, "stopped while the other worker still uses it"
    gw1.close()
    assert stand_ins[0].wait(timeout=30) is not None


def test_each_configuration_is_its_own_server(tmp_path, stand_ins):
    gw0 = SharedLayaServes(tmp_path, "gw0")
    urls = {gw0().url, gw0(jev_strict=True).url, gw0(api_key="k").url, gw0(api_key="other").url}
    assert len(urls) == len(stand_ins) == 4
    gw0.close()
    assert all(proc.wait(timeout=30) is not None for proc in stand_ins)


def test_a_server_gone_from_the_registry_is_started_again(tmp_path, stand_ins):
    gw0, gw1 = SharedLayaServes(tmp_path, "gw0"), SharedLayaServes(tmp_path, "gw1")
    gw0()
    stand_ins[0].kill()
    stand_ins[0].wait()
    assert gw1().url != gw0().url and len(stand_ins) == 2


def test_the_controller_stops_what_a_dead_worker_left(tmp_path, stand_ins):
    SharedLayaServes(tmp_path, "gw0")()  # never closed: its worker died
    assert SharedLayaServes.stop_leftovers(tmp_path) == [stand_ins[0].pid]
    assert stand_ins[0].wait(timeout=30) is not None
    assert SharedLayaServes.stop_leftovers(tmp_path) == []


def test_the_registry_holds_no_api_key(tmp_path, stand_ins):
    SharedLayaServes(tmp_path, "gw0")(api_key="sk-registry-canary")
    assert "sk-registry-canary" not in (tmp_path / SharedLayaServes.REGISTRY).read_text()


def _environment_of_the_process_serving(port: int) -> dict[str, str]:
    for entry in Path("/proc").iterdir():
        try:
            raw = (entry / "environ").read_bytes()
        except OSError:  # not a process, gone, or not ours
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if env.get("LAYA_PORT") == str(port) and "LAYA_EXTRA_MODELS" in env:
            return env
    raise AssertionError(f"no laya-serve process serves port {port}")


def test_the_shared_laya_serves_wait_for_work_without_spinning(laya_serves):
    # libgomp's threads otherwise spin between parallel regions and take the cores from the
    # tests sending the requests (QUIET_OPENMP in tests/helpers/servers.py).
    pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
    port = urlsplit(laya_serves(api_key=LAYA_SERVE_KEY).url).port
    assert _environment_of_the_process_serving(port).get("OMP_WAIT_POLICY") == "PASSIVE"
