"""A cassette saved again and again as it grows (the standalone recording proxy saves after every
exchange): each save renders only what is new, and the bytes are those of a whole render."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import httpx
import pytest
from vcr import serialize
from vcr.serializers import yamlserializer

from pytest_laya.cassettes import handle as handle_module
from pytest_laya.cassettes.rendering import GrowingCassetteText, _Parsed, render, render_appended
from pytest_laya.fake import FakeLayaServer

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in (ROOT / "cassettes").rglob("*.yaml")) + sorted((ROOT / "examples").rglob("*.yaml"))


def _parsed(path: Path) -> tuple[list, list, dict | None]:
    requests, responses, *metadata = serialize.deserialize("", _Parsed(yamlserializer.deserialize(path.read_text())))
    return requests, responses, metadata[0] if metadata else None


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_prefix_of_a_shipped_cassette_renders_as_a_whole_dump(path):
    requests, responses, metadata = _parsed(path)
    growing = GrowingCassetteText()
    for n in range(1, len(requests) + 1):
        assert growing.render(requests[:n], responses[:n], metadata) == render(requests[:n], responses[:n], metadata)
    old = yamlserializer.deserialize(path.read_text())
    appended = GrowingCassetteText()
    for n in range(len(requests) + 1):
        assert appended.render_appended(old, requests[:n], responses[:n], metadata) == \
            render_appended(old, requests[:n], responses[:n], metadata)


def _interactions(path: Path) -> tuple[list, list, dict | None]:
    requests, responses, metadata = _parsed(path)
    assert len(requests) >= 1
    return [copy.deepcopy(requests[0]) for _ in range(3)], [copy.deepcopy(responses[0]) for _ in range(3)], metadata


def test_an_object_two_interactions_share_is_rendered_as_a_whole_dump_anchors_it():
    requests, responses, metadata = _interactions(SHIPPED[0])
    shared = {"x-shared": ["one"]}
    responses[0]["headers"] = responses[2]["headers"] = shared
    growing = GrowingCassetteText()
    for n in (1, 2, 3):
        text = growing.render(requests[:n], responses[:n], metadata)
        assert text == render(requests[:n], responses[:n], metadata)
    assert b"&id001" in text  # the whole dump's anchor, which per-interaction text could not have


def test_an_anchor_inside_one_interaction_and_a_replaced_interaction_render_as_a_whole_dump():
    requests, responses, metadata = _interactions(SHIPPED[0])
    growing = GrowingCassetteText()
    assert growing.render(requests[:2], responses[:2], metadata) == render(requests[:2], responses[:2], metadata)
    responses[1] = copy.deepcopy(responses[1])
    responses[1]["status"] = {"code": 201, "message": "Created"}  # another interaction at place 2
    assert growing.render(requests[:2], responses[:2], metadata) == render(requests[:2], responses[:2], metadata)
    inner = ["same"]
    responses[2]["headers"] = {"a": inner, "b": inner}  # the new interaction holds one list twice
    text = growing.render(requests, responses, metadata)
    assert text == render(requests, responses, metadata) and b"&id001" in text


BODY = {"state": "I was charged twice for order {n}.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}


def test_the_recording_proxy_renders_each_interaction_once_and_writes_a_whole_dumps_bytes(tmp_path, monkeypatch):
    from pytest_laya.plugin.proxy_command import _settle_mode, _Standalone
    from pytest_laya.proxy import ProxyServer

    rendered: list[int] = []
    whole_dump = yamlserializer.serialize

    def counting(data):
        rendered.append(len(data.get("interactions", ())))
        return whole_dump(data)

    parsed_for_date: list[Path] = []
    recorded_date = handle_module.recorded_date

    def counting_date(path):
        parsed_for_date.append(path)
        return recorded_date(path)

    monkeypatch.setattr(yamlserializer, "serialize", counting)
    monkeypatch.setattr(handle_module, "recorded_date", counting_date)
    exchanges = 30
    with FakeLayaServer() as fake:
        options = argparse.Namespace(mode="record", record=None, upstream=fake.url, cassettes=str(tmp_path),
                                     cassette="proxy", spec="auto", conformance="enforce", port=0, host="127.0.0.1")
        assert _settle_mode(options) is None
        standalone = _Standalone(options)
        try:
            with ProxyServer(target=standalone) as proxy, httpx.Client(base_url=proxy.url) as client:
                for n in range(exchanges):
                    body = {**BODY, "state": BODY["state"].format(n=n)}
                    assert client.post("/v1/systemone", json=body).status_code == 200
                    assert len(yamlserializer.deserialize((tmp_path / "proxy.yaml").read_text())["interactions"]) \
                        == n + 1  # saved after every exchange
        finally:
            standalone.close()
    # Rendered whole twice (the first two saves), then one new interaction per save; whole each
    # time, it would be 1 + 2 + ... + 30 = 465.
    assert sum(rendered) <= 2 * exchanges, rendered
    assert len(parsed_for_date) <= 1  # the date of the file it wrote itself is not parsed again
    saved = tmp_path / "proxy.yaml"
    requests, responses, metadata = _parsed(saved)
    monkeypatch.setattr(yamlserializer, "serialize", whole_dump)
    assert saved.read_bytes() == render(requests, responses, metadata)
    assert [json.loads(r.body)["state"] for r in requests] == [BODY["state"].format(n=n) for n in range(exchanges)]
