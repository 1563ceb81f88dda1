"""The DecisionModel contract, held against every implementation this project ships.

In-process Laya (`LayaModel`) on the embedded tiny checkpoint; the served client
(`ServedLayaModel`) over the reference server and laya-serve 0.4.15, both live on real loopback
sockets, over the fake in both flavours, and over cassettes recorded from the reference server
and replayed with no server at all. Every response a served model receives is held to its
server's spec while the contract runs. Servers start once per session (tests/conftest.py).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from pytest_laya import Spec
from pytest_laya.contract import DecisionModelContract, scripted_laya_model, scripted_served_model
from pytest_laya.fake import FLAVORS, LAYA_SERVE, FakeLayaServer
from pytest_laya.models import LayaModel, ServedLayaModel

laya = pytest.importorskip("laya", reason="needs the reference extra")
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402
from tests.contract.contract_classes import ContractWith  # noqa: E402

#: How many checks the contract has: every one must pass on every implementation.
CONTRACT_TESTS = sum(1 for name in dir(DecisionModelContract) if name.startswith("test_"))


def held_to(spec: Spec):
    """An `on_exchange` that fails the decision on any response that breaks `spec`."""

    def check(exchange) -> None:
        path = urlsplit(exchange.url).path
        violations = spec.violations(exchange.method, path, exchange.status, exchange.headers, exchange.body)
        assert not violations, f"{exchange.method} {path} {exchange.status}: " + "; ".join(map(str, violations))

    return check


@pytest.fixture(scope="module")
def tiny_model():
    """One load of the tiny checkpoint for the module; each test wraps its agent."""
    with LayaModel(embedded_checkpoint_dir(), device="cpu") as model:
        yield model


@pytest.fixture(scope="module")
def laya_serve(laya_serves):
    return laya_serves()


@pytest.fixture(scope="module", params=FLAVORS)
def fake_server(request):
    with FakeLayaServer(flavor=request.param) as server:
        yield server


class OverTinyLaya(ContractWith):
    # The tiny checkpoint leans on option order (docs/server-contract.md, "Behaviour"): no adapter can fix it.
    behaviour_properties = DecisionModelContract.behaviour_properties - {"option_order"}
    scripted = scripted_served_model


class TestLayaModel(OverTinyLaya):
    scripted = scripted_laya_model

    @pytest.fixture
    def decision_model(self, tiny_model):
        model = LayaModel(embedded_checkpoint_dir(), agent=tiny_model.agent)
        yield model
        model.close()


class TestServedLayaModelOverTheReferenceServer(OverTinyLaya):
    @pytest.fixture
    def decision_model(self, laya_reference_server):
        model = ServedLayaModel(laya_reference_server.url, model="tiny", name="served-laya (reference server)",
                                on_exchange=held_to(Spec.target()))
        yield model
        model.close()


class TestServedLayaModelOverLayaServe(OverTinyLaya):
    @pytest.fixture
    def decision_model(self, laya_serve):
        model = ServedLayaModel(laya_serve.url, model="tiny", name="served-laya (laya-serve 0.4.15)",
                                on_exchange=held_to(Spec.current()))
        yield model
        model.close()


class TestServedLayaModelOverTheFake(ContractWith):
    scripted = scripted_served_model

    @pytest.fixture
    def decision_model(self, fake_server):
        spec = Spec.current() if fake_server.flavor == LAYA_SERVE else Spec.target()
        model = ServedLayaModel(fake_server.url, name=f"served-laya (fake, {fake_server.flavor})", on_exchange=held_to(spec))
        yield model
        model.close()


# -- cassettes: recorded from the reference server into tmp_path, then replayed ------------

#: The suite a downstream project would write: the contract over a served model whose every
#: request goes through one cassette per test. Run twice: recording, then replaying.
CASSETTE_CONFTEST = '''
import os
from pathlib import Path

import pytest

from pytest_laya.cassettes import use_cassette
from pytest_laya.models import ServedLayaModel


@pytest.fixture
def cassette_model(request):
    record = os.environ["CONTRACT_CASSETTES"] == "record"
    path = Path(os.environ["CONTRACT_CASSETTE_DIR"]) / (request.node.name + ".yaml")
    url = os.environ["CONTRACT_SERVER_URL"] if record else "http://laya.invalid"
    with use_cassette(path, record=record) as cassette:
        model = ServedLayaModel(url, model="tiny", name="served-laya (cassette)")
        yield model
        model.close()
    assert cassette.outcome == ("written" if record else "replayed")
'''

CASSETTE_SUITE = '''
import pytest

from pytest_laya.contract import DecisionModelContract, scripted_served_model


class TestServedLayaModelOverCassettes(DecisionModelContract):
    # Recorded from the tiny checkpoint, which leans on option order.
    behaviour_properties = DecisionModelContract.behaviour_properties - {"option_order"}

    @pytest.fixture
    def decision_model(self, cassette_model):
        return cassette_model

    @pytest.fixture
    def scripted_decision_model(self):
        return scripted_served_model
'''


def test_the_contract_holds_over_cassettes_recorded_from_the_reference_server(pytester, monkeypatch, tmp_path,
                                                                               laya_reference_server):
    cassettes = tmp_path / "cassettes"
    pytester.makeconftest(CASSETTE_CONFTEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_replayed_contract=CASSETTE_SUITE)
    monkeypatch.setenv("CONTRACT_CASSETTE_DIR", str(cassettes))
    monkeypatch.setenv("CONTRACT_SERVER_URL", laya_reference_server.url)

    monkeypatch.setenv("CONTRACT_CASSETTES", "record")
    recorded = pytester.runpytest("-p", "no:cacheprovider")
    recorded.assert_outcomes(passed=CONTRACT_TESTS - 1, skipped=1)  # option order, opted out
    ordered = (cassettes / "test_one_answer_per_question_in_the_order_asked.yaml").read_text(encoding="utf-8")
    assert "http://laya.invalid/v1/systemone" in ordered and urlsplit(laya_reference_server.url).netloc not in ordered

    monkeypatch.setenv("CONTRACT_CASSETTES", "replay")
    monkeypatch.delenv("CONTRACT_SERVER_URL")
    replayed = pytester.runpytest("-p", "no:cacheprovider")
    # Strict replay: a test that made one request fewer or more than it recorded fails.
    replayed.assert_outcomes(passed=CONTRACT_TESTS - 1, skipped=1)


def test_a_served_model_passes_allow_truncation_to_every_decision():
    import httpx

    from pytest_laya import LayaConfigError
    from pytest_laya.contract import run_coroutine

    body = {"answers": {"q": {"type": "noul", "noul": 0.6, "confidence": 0.2}},
            "usage": {"input_tokens": 512, "output_tokens": 0, "truncated": True},
            "served_by": {"checkpoint": "tiny", "revision": "sha256:0"}}
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    question = {"q": {"type": "noul", "instructions": "Late?"}}
    with ServedLayaModel("http://laya.invalid", transport=transport) as strict:
        with pytest.raises(LayaConfigError) as info:
            strict.decide("A very long state.", question)
        assert info.value.code == "token_window_full"
    with ServedLayaModel("http://laya.invalid", transport=transport, allow_truncation=True) as lenient:
        assert lenient.decide("A very long state.", question).usage.truncated
        assert run_coroutine(lambda: lenient.adecide("A very long state.", question)).usage.truncated
