"""LayaServeProcess starts laya's own server on the tiny checkpoint, and stops it.

Needs laya[serve] (skipped without it). Every server binds 127.0.0.1 and is stopped by the test.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import time

import httpx
import pytest

from pytest_laya.servers.laya_serve import LayaServeProcess
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir

needs_laya = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("laya", "fastapi", "uvicorn")),
    reason="needs laya[serve] (the reference extra)")

API_KEY = "test-key-not-a-secret-0000"
CHOICE = {
    "model": "tiny",
    "state": "I was charged twice for my order. Please refund the duplicate today.",
    "questions": {
        "department": {
            "type": "choice",
            "instructions": "Which team should handle this?",
            "criteria": {"billing": "Charges and refunds", "technical": "Software problems"},
        }
    },
}


def test_importing_the_launcher_imports_no_heavy_library() -> None:
    code = ("import sys, pytest_laya.servers.laya_serve; "
            "print(','.join(m for m in ('torch', 'transformers', 'laya') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(pathlib.Path(__file__).resolve().parents[2]))
    assert out.stdout.strip() == ""


@needs_laya
def test_serves_health_and_a_choice_with_its_key_enforced_and_never_logged_then_stops() -> None:
    # One process for both (a start is seconds of CPU): a keyed server serves and stops as an open one does.
    server = LayaServeProcess(embedded_checkpoint_dir(), api_key=API_KEY)
    with server:
        assert server.url.startswith("http://127.0.0.1:")
        auth = {"Authorization": "Bearer " + API_KEY}
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200  # liveness needs no key
        health = httpx.get(server.url + "/health", timeout=10, headers=auth)
        assert health.status_code == 200
        assert health.json()["loaded"] == ["tiny"]
        denied = httpx.post(server.url + "/v1/systemone", json=CHOICE, timeout=30)
        assert denied.status_code == 401
        answer = httpx.post(server.url + "/v1/systemone", json=CHOICE, timeout=30, headers=auth)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body["answers"]["department"]["probabilities"]) == {"billing", "technical"}
        assert body["routing"]["model"] == "tiny"
        proc = server._proc
        assert proc is not None and proc.poll() is None
    assert proc.poll() is not None, "stop() left the server running"
    assert not server.running
    server.stop()  # idempotent
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url + "/health", timeout=2)
    assert "Uvicorn running on http://127.0.0.1:" in server.log
    assert API_KEY not in server.log
    assert API_KEY not in repr(server)


@needs_laya
def test_a_bad_checkpoint_fails_quickly_with_the_log_tail(tmp_path: pathlib.Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "rl_agent_config.json").write_text("{not json")
    started = time.monotonic()
    with pytest.raises(RuntimeError) as excinfo:
        LayaServeProcess(broken, api_key=API_KEY, startup_timeout_s=60).start()
    assert time.monotonic() - started < 30
    message = str(excinfo.value)
    assert "exited with status" in message and str(broken) in message
    assert "Traceback" in message or "Error" in message, message
    assert API_KEY not in message


def test_a_missing_checkpoint_dir_fails_before_starting(tmp_path: pathlib.Path) -> None:
    with pytest.raises(RuntimeError, match="does not exist"):
        LayaServeProcess(tmp_path / "nope").start()


def test_owned_variables_cannot_be_overridden() -> None:
    with pytest.raises(ValueError, match="LAYA_HOST"):
        LayaServeProcess(embedded_checkpoint_dir(), extra_env={"LAYA_HOST": "0.0.0.0"})


