"""The shipped tiny checkpoint is what the generator makes, and laya loads it offline.

These tests need the reference extra (torch, transformers, tokenizers, laya); they are skipped
without it. Loading must make no network connection and must not touch the shipped files.
"""

from __future__ import annotations

import os

# Before anything imports huggingface_hub: it reads these once, at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pathlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_laya_reference import tiny_checkpoint

pytest.importorskip("torch")
pytest.importorskip("laya")

STATE_BILLING = "I was charged twice for my order. Please refund the duplicate today."
STATE_TECHNICAL = "The app crashes every time I open it since yesterday's update."
DEPARTMENT = {
    "department": {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {
            "billing": "Charges and refunds",
            "technical": "Software problems",
            "shipping": "Deliveries and returns",
        },
    }
}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any outgoing connection: the checkpoint must load with no hub and no network."""

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError("network connection attempted to %r" % (address,))

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.fixture(scope="module")
def shipped() -> pathlib.Path:
    return tiny_checkpoint.embedded_checkpoint_dir()


@pytest.fixture(scope="module")
def agent(shipped: pathlib.Path) -> Iterator[Any]:
    import laya

    before = tiny_checkpoint.file_digests(shipped)
    loaded = laya.load(str(shipped), device="cpu")
    # Asserted here too, so a load that rewrites the tokenizer config fails even when only one
    # prediction test is selected.
    assert tiny_checkpoint.file_digests(shipped) == before, "loading modified the shipped checkpoint"
    yield loaded


def _department(agent: Any, state: str) -> dict[str, float]:
    return agent.system_one(state, DEPARTMENT)["answers"]["department"]["probabilities"]


@pytest.mark.usefixtures("no_network")
def test_shipped_bytes_equal_a_fresh_generate(shipped: pathlib.Path, tmp_path: pathlib.Path) -> None:
    fresh = tiny_checkpoint.generate(tmp_path / "tiny")
    want, got = tiny_checkpoint.file_digests(shipped), tiny_checkpoint.file_digests(fresh)
    assert sorted(got) == sorted(want), "file list differs: shipped %s, generated %s" % (
        sorted(want), sorted(got))
    for name in sorted(want):
        assert got[name] == want[name], (
            "%s differs from a fresh generate(); regenerate with "
            "`python -m pytest_laya_reference.tiny_checkpoint --out DIR` and review" % name)


def test_generated_files_are_world_readable(tmp_path: pathlib.Path) -> None:
    fresh = tiny_checkpoint.generate(tmp_path / "tiny")
    modes = {p.relative_to(fresh).as_posix(): p.stat().st_mode & 0o777
             for p in fresh.rglob("*") if p.is_file()}
    assert modes and all(mode == 0o644 for mode in modes.values()), modes


def test_generate_refuses_a_non_empty_directory(tmp_path: pathlib.Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        tiny_checkpoint.generate(tmp_path)


def test_differences_name_each_differing_file(shipped: pathlib.Path, tmp_path: pathlib.Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(shipped, copy)
    (copy / "rl_agent_config.json").write_text("{}")
    (copy / "encoder" / "config.json").unlink()
    lines = tiny_checkpoint.differences(shipped, copy)
    assert [line.split(":")[0] for line in lines] == ["encoder/config.json", "rl_agent_config.json"]


def test_layout_is_what_laya_reads(shipped: pathlib.Path) -> None:
    import json

    names = set(tiny_checkpoint.file_digests(shipped))
    assert {"rl_agent_config.json", "model.safetensors", "encoder/config.json",
            "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"} <= names
    tok_cfg = json.loads((shipped / "tokenizer" / "tokenizer_config.json").read_text())
    assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    size = sum((shipped / n).stat().st_size for n in names)
    assert size < 1_000_000, "tiny checkpoint grew to %d bytes" % size


@pytest.mark.usefixtures("no_network")
def test_predictions_are_non_uniform_and_move_with_the_state(agent: Any) -> None:
    billing = _department(agent, STATE_BILLING)
    technical = _department(agent, STATE_TECHNICAL)
    assert set(billing) == {"billing", "technical", "shipping"}
    assert len(set(billing.values())) > 1, billing
    assert billing != technical
    assert sum(billing.values()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.usefixtures("no_network")
def test_non_english_states_tokenise_into_pieces(agent: Any) -> None:
    german = "Ich wurde für meine Bestellung zweimal belastet."
    tokens = agent.tok.tokenize(german)
    assert "[UNK]" not in tokens
    assert len(tokens) < len(german.encode("utf-8")) / 1.5, tokens


@pytest.mark.usefixtures("no_network")
def test_outputs_are_identical_across_calls(agent: Any) -> None:
    questions = dict(DEPARTMENT)
    questions["urgency"] = {"type": "score", "instructions": "How urgent is the request?",
                            "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"]}
    questions["refund"] = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
    assert agent.system_one(STATE_BILLING, questions) == agent.system_one(STATE_BILLING, questions)


@pytest.mark.usefixtures("no_network")
def test_a_fresh_load_leaves_the_shipped_directory_unchanged(shipped: pathlib.Path) -> None:
    import laya

    before = tiny_checkpoint.file_digests(shipped)
    stats_before = {p: p.stat().st_mtime_ns for p in shipped.rglob("*")}
    laya.load(str(shipped), device="cpu").system_one(STATE_BILLING, DEPARTMENT)
    assert tiny_checkpoint.file_digests(shipped) == before
    assert {p: p.stat().st_mtime_ns for p in shipped.rglob("*")} == stats_before
