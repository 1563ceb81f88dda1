"""laya-serve 0.4.15 with LAYA_JEV_STRICT=1, live on the tiny checkpoint: the client and the
plugin's `laya_client` decide through it, every response meeting the current spec."""

from __future__ import annotations

import httpcore  # noqa: F401  (one copy of the network stack across pytester's inner runs)
import pytest

from pytest_laya import Noul, ServedLayaClient, Spec
from pytest_laya.servers.laya_serve import LayaServeProcess

laya = pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402

STATE = "I was charged twice for my order. Please refund the duplicate today."
QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which team should handle this?",
                   "criteria": {"billing": "Charges and refunds", "technical": "Software problems"}},
    "urgency": {"type": "score", "instructions": "How urgent is the request?",
                "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}


#: The clients' deadline: the shared laya-serve's decisions took over the default 5 s on a 2-core
#: box under a load of 24; the deadline is not what these tests check.
GENEROUS_S = 60


@pytest.fixture(scope="module")
def strict(laya_serves):
    return laya_serves(jev_strict=True)


def test_the_served_client_decides_through_a_strict_laya_serve(strict):
    seen = []
    with ServedLayaClient(strict.url, model="tiny", on_exchange=seen.append, timeout_s=GENEROUS_S) as client:
        decision = client.decide(STATE, QUESTIONS)
    assert list(decision.answers) == list(QUESTIONS)
    assert decision["refund"] == Noul(p=decision["refund"].p, confidence=None)  # strict: no noul confidence
    assert decision["department"].confidence is not None and decision.provenance.routing is None
    for x in seen:
        assert Spec.current().violations(x.method, x.path, x.status, x.headers, x.body) == [], x.path


def test_laya_client_decisions_against_a_strict_laya_serve_succeed(pytester, strict, monkeypatch):
    monkeypatch.setenv("LAYA_SERVED_TIMEOUT_S", str(GENEROUS_S))  # laya_client's deadline
    pytester.makepyfile(test_strict=f'''
QUESTIONS = {QUESTIONS!r}

def test_decide(laya_client):
    decision = laya_client.decide({STATE!r}, QUESTIONS)
    assert decision["refund"].confidence is None and 0 <= decision["refund"].p <= 1
    assert decision["urgency"].confidence is not None


async def test_decide_async(async_laya_client):
    decision = await async_laya_client.decide({STATE!r}, QUESTIONS)
    assert list(decision.answers) == list(QUESTIONS)
''')
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--laya-mode=live", f"--laya-url={strict.url}", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*live {strict.url}*current  operations */*, 0 violations in * responses"])


def test_strict_mode_is_owned_by_the_launcher():
    assert LayaServeProcess(embedded_checkpoint_dir(), jev_strict=True)._environment()["LAYA_JEV_STRICT"] == "1"
    assert "LAYA_JEV_STRICT" not in LayaServeProcess(embedded_checkpoint_dir())._environment()
    with pytest.raises(ValueError, match="LAYA_JEV_STRICT"):
        LayaServeProcess(embedded_checkpoint_dir(), extra_env={"LAYA_JEV_STRICT": "1"})
