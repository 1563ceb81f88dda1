"""The router's five tests in pytest-laya's one-handle style (``laya_server``)."""
import httpx
import pytest
from router import QUESTIONS, Router

from pytest_laya import NetworkBlocked

TICKET = "I was charged twice this month and my card is now maxed out. Refund me today!"


def test_happy_path(laya_url_env):
    assert Router().route(TICKET) == {"queue": "sales", "escalate": False, "reason": "laya"}


@pytest.mark.laya(answers={"team": "tech", "urgent": 0.95})
def test_forced_branch(laya_url_env):
    assert Router().route(TICKET) == {"queue": "tech", "escalate": True, "reason": "laya"}


def test_what_was_sent(laya_url_env):
    Router().route(TICKET)
    laya_url_env.calls.assert_called_once_with(state=TICKET, questions=QUESTIONS)


def test_server_errors(laya_url_env):
    laya_url_env.fail(503, retry_after=1).timeout()
    slept = []
    assert Router(sleep=slept.append).route(TICKET) == {"queue": "triage", "escalate": True, "reason": "ReadTimeout"}
    assert slept == [1.0] and [c.outcome for c in laya_url_env.calls] == ["503", "timeout"]


@pytest.mark.laya(block_network=True)
def test_offline():
    with pytest.raises(NetworkBlocked):
        httpx.get("http://api.example.com/v1/anything")
