"""``@pytest.mark.laya``: its options, checked once so that a typo fails the run at start-up.

``answers=`` pins the fake's answers for one test (`pytest_laya.fake.pins`): it makes the test's
server the fake in every mode, and `pin_marker_answers` applies it to each fake the test gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from pytest_laya.fake import FakeLaya
    from pytest_laya.fake.pins import Pin
    from pytest_laya.plugin.run import LayaRun

__all__ = ["MARKER_HELP", "MARKER_OPTIONS", "SERVERS", "blocks_network", "check_test_pins", "marker_options",
           "pin_marker_answers", "track_test_pin"]

SERVERS = ("fake", "reference", "live")
MARKER_OPTIONS = ("cassette", "server", "strict", "answers", "caught_errors", "block_network")
CAUGHT_ERRORS = ("fail", "ignore")
MARKER_HELP = ("laya(cassette=None, server=None, strict=None, answers=None, caught_errors='fail', block_network=None): "
               "pytest-laya "
               "options for one test: the cassette file name, the server (fake, reference or live), strict "
               "unused-interaction checking, answers pinned on the fake ({'team': 'billing', 'refund': 0.91}; "
               "implies server='fake'), and whether a cassette miss or spec violation the test's code caught "
               "still fails it (fail) or not (ignore, for a test that asserts the error itself), and whether requests to other "
               "hosts are refused with NetworkBlocked (as --laya-block-network, for this test).")

#: The marker's pins on every fake this test got (the session's and its own `laya_fake_server`).
_MARKER_PINS = pytest.StashKey[list["Pin"]]()


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
    block = marker.kwargs.get("block_network")
    if block is not None and not isinstance(block, bool):
        raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(block_network={block!r}): use True or False")
    options = dict(marker.kwargs)
    if options.get("answers") is not None:
        from pytest_laya.fake.pins import PinError, check_answers

        if server not in (None, "fake"):
            raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(answers=...) pins the fake's answers, so it "
                                    f"cannot apply to server={server!r}; drop one of them")
        try:
            check_answers(options["answers"])
        except PinError as exc:
            raise pytest.UsageError(f"{node.nodeid}: @pytest.mark.laya(answers=...): {exc.summary}") from None
        options["server"] = "fake"
    return options


def blocks_network(node: pytest.Item, run: LayaRun) -> bool:
    """Whether this test refuses other hosts: the marker's ``block_network=``, else --laya-block-network."""
    block = marker_options(node).get("block_network")
    return run.block_network if block is None else bool(block)


def pin_marker_answers(request: pytest.FixtureRequest, laya: FakeLaya, run: LayaRun) -> None:
    """Pin the marker's ``answers=`` on `laya` for this test; at its teardown, fail on their errors
    (and, strict and passed, when no fake ever used them), then remove them."""
    answers = marker_options(request.node).get("answers")
    if answers is None:
        return
    track_test_pin(request, run, laya.pin(answers, where=f"@pytest.mark.laya(answers=...) on {request.node.nodeid}"))


def track_test_pin(request: pytest.FixtureRequest, run: LayaRun, pin: Pin) -> None:
    """Check `pin` (the marker's, or `laya_server.decide()`'s on the session's fake) at the test's
    teardown, as the marker's are checked, then remove it."""
    pins = request.node.stash.get(_MARKER_PINS, None)
    if pins is None:
        pins = request.node.stash[_MARKER_PINS] = []
        request.node.addfinalizer(lambda: _finish_marker_pins(request, run, pins))
    pins.append(pin)


def _finish_marker_pins(request: pytest.FixtureRequest, run: LayaRun, pins: list[Pin]) -> None:
    try:
        errors = list(dict.fromkeys(error for pin in pins for error in pin._take_errors()))
        if (not errors and _checks_unused(request, run) and not any(pin.used or pin.errors for pin in pins)
                and all(pin._take_unused() for pin in pins)):
            errors = [f"{pins[0]!r} was never used: no decision request asked any of its questions"]
        if errors:
            pytest.fail("pinned answers went wrong:\n" + "\n".join(f"  - {e}" for e in errors), pytrace=False)
    finally:
        for pin in pins:
            pin.remove()


def _checks_unused(request: pytest.FixtureRequest, run: LayaRun) -> bool:
    from pytest_laya.plugin.run import FAILED

    return bool(marker_options(request.node).get("strict", run.strict)) and not request.node.stash.get(FAILED, False)


def check_test_pins(request: pytest.FixtureRequest, run: LayaRun, laya: FakeLaya) -> None:
    """`laya_fake_server`'s teardown: its own pins' errors and (strict, passed) unused pins fail the test."""
    from pytest_laya.fake.pins import PinError

    try:
        laya.check_pins(unused=_checks_unused(request, run), exclude=request.node.stash.get(_MARKER_PINS, []))
    except PinError as exc:
        message = exc.summary
    else:
        return
    pytest.fail(message, pytrace=False)
