"""Switching a test's requests through the run's `Switchboard`: its Laya routes, pytest-recording's
cassette or the network for other hosts, --laya-block-network's refusals, and the spec check of
answers other mock libraries give; and the test's cassette settings (`laya_vcr_config`)."""

from __future__ import annotations

import contextlib
import functools
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

    if _only_defaults(request):
        return _empty_config()
    value = request.getfixturevalue("laya_vcr_config")
    lenient = isinstance(value, FromVcrConfig)
    try:
        return CassetteConfig.from_mapping(value, where="vcr_config" if lenient else "laya_vcr_config",
                                           lenient=lenient)
    except ValueError as exc:
        raise pytest.UsageError(f"{request.node.nodeid}: {exc}") from None


#: Whether the tests under a node (a module, a class) see only the default `laya_vcr_config` and ``vcr_config``.
_DEFAULTS = pytest.StashKey[bool]()
#: The modules whose fixtures give ``{}``: this plugin's and pytest-recording's ``vcr_config``, this `laya_vcr_config`.
_DEFAULT_MODULES = {"laya_vcr_config": ("pytest_laya.plugin",), "vcr_config": ("pytest_laya.plugin", "pytest_recording.plugin")}


def _only_defaults(request: pytest.FixtureRequest) -> bool:
    """Whether the test's settings are the defaults' ``{}`` (no project overrides either fixture, and
    the test does not ask for one): then they are known without running two function fixtures per test."""
    if "laya_vcr_config" in request.fixturenames or "vcr_config" in request.fixturenames:
        return False
    node = request.node.parent or request.node  # fixtures are visible per module and class, never per function
    known = node.stash.get(_DEFAULTS, None)
    if known is None:
        manager = request.node.session._fixturemanager
        defs = {name: manager.getfixturedefs(name, request.node) for name in _DEFAULT_MODULES}
        known = node.stash[_DEFAULTS] = all(
            bool(found) and getattr(found[-1].func, "__module__", None) in _DEFAULT_MODULES[name]
            for name, found in defs.items())
    return bool(known)


@functools.cache
def _empty_config() -> CassetteConfig:
    from pytest_laya.cassettes.config import CassetteConfig

    return CassetteConfig.from_mapping(FromVcrConfig(), where="vcr_config", lenient=True)


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
