"""Switching a test's requests through the run's `Switchboard`: its Laya routes, pytest-recording's
cassette or the network for other hosts, --laya-block-network's refusals, and the spec check of
answers other mock libraries give; and the test's cassette settings (`laya_vcr_config`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_laya.plugin.markers import blocks_network
from pytest_laya.plugin.mocked_answers import MockedAnswerCheck
from pytest_laya.plugin.run import LayaRun

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.cassettes.config import CassetteConfig
    from pytest_laya.intercept.laya_route import LayaRoute

__all__ = ["FromVcrConfig", "outer_cassette", "routed", "vcr_config"]


def vcr_config(request: pytest.FixtureRequest) -> CassetteConfig:
    """The test's `laya_vcr_config` (or pytest-recording's ``vcr_config``), read and checked."""
    from pytest_laya.cassettes.config import CassetteConfig

    value = request.getfixturevalue("laya_vcr_config")
    lenient = isinstance(value, FromVcrConfig)
    try:
        return CassetteConfig.from_mapping(value, where="vcr_config" if lenient else "laya_vcr_config",
                                           lenient=lenient)
    except ValueError as exc:
        raise pytest.UsageError(f"{request.node.nodeid}: {exc}") from None


class FromVcrConfig(dict[str, Any]):
    """pytest-recording's ``vcr_config``, handed over by the default `laya_vcr_config`."""


@contextlib.contextmanager
def routed(request: pytest.FixtureRequest, run: LayaRun, laya: list[LayaRoute], config: CassetteConfig,
           refused: list[BaseException] | None = None) -> Iterator[None]:
    """The test's requests through the run's switchboard: `laya` for its Laya servers, pytest-recording's
    cassette or the network for other hosts, and --laya-block-network's refusals (kept in `refused`),
    each showing its request through the project's filters and the kit's secret scrubbing."""
    from pytest_laya.cassettes.scrub import Scrubber

    scrubber = Scrubber(run.api_key, learn=True, config=config)
    refused = refused if refused is not None else []
    if "httpx_mock" in request.fixturenames:  # pytest-httpx patches first, so its answers pass the switchboard
        request.getfixturevalue("httpx_mock")
    with run.switchboard().active(laya, outer=outer_cassette(request), block_network=blocks_network(request.node, run),
                                  allowed_hosts=config.allowed_hosts, ignored_hosts=config.ignore_hosts,
                                  shown=lambda sent: scrubber.shown_target(sent.uri, sent.headers), refused=refused,
                                  mocked=MockedAnswerCheck(run, refused)):
        yield


def outer_cassette(request: pytest.FixtureRequest) -> Any:
    """pytest-recording's cassette, when the test is marked ``@pytest.mark.vcr``: other hosts go there."""
    if request.node.get_closest_marker("vcr") is None or not request.config.pluginmanager.has_plugin("recording"):
        return None
    try:
        return request.getfixturevalue("vcr")
    except pytest.FixtureLookupError:
        return None
