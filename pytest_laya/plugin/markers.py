"""``@pytest.mark.laya``: its options, checked once so that a typo fails the run at start-up."""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["MARKER_HELP", "MARKER_OPTIONS", "SERVERS", "marker_options"]

SERVERS = ("fake", "reference", "live")
MARKER_OPTIONS = ("cassette", "server", "strict", "caught_errors")
CAUGHT_ERRORS = ("fail", "ignore")
MARKER_HELP = ("laya(cassette=None, server=None, strict=None, caught_errors='fail'): pytest-laya options for one "
               "test: the cassette file name, the server (fake, reference or live), strict unused-interaction "
               "checking, and whether a cassette miss or spec violation the test's code caught still fails it "
               "(fail) or not (ignore, for a test that asserts the error itself).")


def marker_options(node: pytest.Item) -> dict[str, Any]:
    """The closest ``laya`` marker's options, or a `pytest.UsageError` naming the test and the fix."""
    marker = node.get_closest_marker("laya")
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya takes keyword options only ({', '.join(MARKER_OPTIONS)})")
    unknown = sorted(set(marker.kwargs) - set(MARKER_OPTIONS))
    if unknown:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya has no option {', '.join(map(repr, unknown))}; "
                                f"use {', '.join(MARKER_OPTIONS)}")
    server = marker.kwargs.get("server")
    if server is not None and server not in SERVERS:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(server={server!r}): use one of {', '.join(SERVERS)}")
    caught = marker.kwargs.get("caught_errors")
    if caught is not None and caught not in CAUGHT_ERRORS:
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(caught_errors={caught!r}): use 'fail' (the default) "
                                f"or 'ignore'")
    return dict(marker.kwargs)
