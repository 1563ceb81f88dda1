"""`LayaModel`: laya in this process behaves like a served Laya, and says what it is.

The contract itself runs in tests/contract/test_contract_models.py; this file covers what is particular to
the in-process model: loading and its errors, identity, the wire form of labels, truncation,
the worker thread behind `adecide`, and what closing releases.
"""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import threading

import pytest

from pytest_laya import DecisionModel, LayaCallError, LayaConfigError, LayaModel
from pytest_laya.contract import scripted_laya_model

laya = pytest.importorskip("laya", reason="needs the reference extra")
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402

TINY = embedded_checkpoint_dir()
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": "Bugs"}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "refund": {"type": "noul", "instructions": "Refund?"},
}
STATE = "I was charged twice for my order. Please refund the duplicate today."


@pytest.fixture(scope="module")
def tiny():
    with LayaModel(TINY, device="cpu") as model:
        yield model


def test_identity_is_the_checkpoint_and_the_digest_of_its_weights(tiny):
    digest = hashlib.sha256((TINY / "model.safetensors").read_bytes()).hexdigest()
    assert tiny.model == f"tiny@sha256:{digest}"
    decision = tiny.decide(STATE, QUESTIONS)
    assert decision.model == tiny.model
    served_by = decision.provenance.served_by
    assert (served_by.device, served_by.weights_dtype, served_by.source) == ("cpu", "float32", "in_process")
    assert decision.provenance.url == "in-process:tiny" and "infer" in decision.provenance.server_timing
    assert isinstance(tiny, DecisionModel) and tiny.name == "laya-in-process"


def test_answers_are_laya_predict_read_through_the_answer_rules(tiny):
    raw = tiny.agent.predict(STATE, QUESTIONS)
    decision = tiny.decide(STATE, QUESTIONS)
    assert list(decision.answers) == list(QUESTIONS)
    assert decision["team"].key == raw["answers"]["team"]["choice"]
    assert dict(decision["team"].probabilities) == raw["answers"]["team"]["probabilities"]
    assert decision["urgency"].expected == raw["answers"]["urgency"]["score"]
    assert decision["refund"].p == raw["answers"]["refund"]["noul"]
    assert decision.usage.input_tokens == raw["usage"]["input_tokens"]


def test_option_keys_are_spelled_as_a_server_spells_them(tiny):
    # laya in process would answer a Python key 1 as 1; JSON, and so every server, spells it "1".
    questions = {"n": {"type": "choice", "instructions": "How many?", "criteria": {1: "one", 2: "two", 3: "three"}}}
    decision = tiny.decide(STATE, questions)
    assert set(decision["n"].probabilities) == {"1", "2", "3"} and decision["n"].key in {"1", "2", "3"}


def test_a_truncated_input_is_a_config_error_unless_allowed(tiny):
    long_state = "The parcel never arrived and nobody answers my emails. " * 200
    with pytest.raises(LayaConfigError) as info:
        tiny.decide(long_state, QUESTIONS)
    assert info.value.code == "token_window_full" and "allow_truncation=True" in str(info.value)
    lenient = LayaModel(TINY, agent=tiny.agent, allow_truncation=True)
    assert lenient.decide(long_state, QUESTIONS).usage.truncated


def test_laya_refusals_and_failures_are_call_errors():
    class Refusing:
        def predict(self, state, questions):
            raise ValueError("question 'q': laya says no")

    class Failing:
        def predict(self, state, questions):
            raise RuntimeError("CUDA exploded")

    with pytest.raises(LayaCallError) as refused:
        LayaModel("stub", agent=Refusing()).decide(STATE, QUESTIONS)
    assert refused.value.code == "rejected" and "laya says no" in str(refused.value)
    with pytest.raises(LayaCallError) as failed:
        LayaModel("stub", agent=Failing()).decide(STATE, QUESTIONS)
    assert failed.value.code == "inference_failed" and "CUDA exploded" in str(failed.value)


def test_a_state_with_no_json_form_is_a_config_error(tiny):
    with pytest.raises(LayaConfigError) as info:
        tiny.decide({"when": object()}, QUESTIONS)
    assert info.value.code == "bad_setting"


def test_adecide_predicts_on_a_worker_thread_while_the_loop_keeps_running():
    loop_ran = threading.Event()
    seen: dict[str, object] = {}

    class Waiting:
        def predict(self, state, questions):
            seen["thread"] = threading.get_ident()
            # Only a loop that is still free can set this; on the loop's own thread it never comes.
            seen["loop_ran"] = loop_ran.wait(timeout=10)
            return {"answers": {"refund": {"type": "noul", "noul": 0.9, "confidence": 0.8}},
                    "usage": {"input_tokens": 3, "output_tokens": 0}}

    model = LayaModel("stub", agent=Waiting())

    async def main():
        async def meanwhile():
            await asyncio.sleep(0.01)
            loop_ran.set()

        decision, _ = await asyncio.gather(model.adecide(STATE, {"refund": QUESTIONS["refund"]}), meanwhile())
        return decision, threading.get_ident()

    decision, loop_thread = asyncio.run(main())
    assert seen["loop_ran"] is True and seen["thread"] != loop_thread
    assert decision["refund"].p == 0.9


def test_close_is_idempotent_and_only_unloads_an_agent_it_loaded(tiny):
    borrowed = LayaModel(TINY, agent=tiny.agent)
    borrowed.close()
    borrowed.close()
    with pytest.raises(LayaConfigError) as info:
        borrowed.decide(STATE, QUESTIONS)
    assert info.value.code == "closed"
    assert tiny.decide(STATE, QUESTIONS)  # the shared agent still answers

    own = LayaModel(TINY, device="cpu")
    agent = own.agent
    own.close()
    own.close()
    assert own.agent is None and agent.model is None  # laya's Agent dropped its weights


def test_checkpoints_that_cannot_load_are_one_config_error(tmp_path):
    with pytest.raises(LayaConfigError) as missing:
        LayaModel(tmp_path / "no-such-checkpoint")
    assert missing.value.code == "bad_checkpoint" and "no checkpoint directory" in str(missing.value)
    with pytest.raises(LayaConfigError) as empty:
        LayaModel(tmp_path)
    assert empty.value.code == "bad_checkpoint" and "rl_agent_config.json" in str(empty.value)


def test_without_the_reference_extra_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "laya", None)  # what `import laya` sees when it is not installed
    with pytest.raises(LayaConfigError) as info:
        LayaModel(TINY)
    assert info.value.code == "missing_extra" and "pip install 'pytest-laya[reference]'" in str(info.value)


def test_a_scripted_model_needs_neither_laya_nor_torch():
    code = (
        "import sys\n"
        "from pytest_laya import LayaModel, ServedLayaModel, DecisionModel, DecisionModelContract\n"
        "from pytest_laya.contract import scripted_laya_model\n"
        "m = scripted_laya_model({'q': {'type': 'noul', 'noul': 0.25, 'confidence': 0.5}})\n"
        "assert m.decide('s', {'q': {'type': 'noul', 'instructions': 'x?'}})['q'].p == 0.25\n"
        "print([n for n in ('torch', 'transformers', 'laya', 'uvicorn') if n in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert scripted_laya_model({}).model == "scripted@scripted"
