"""The deadline and retry rules of docs/client.md, at their edges, on a clock the test moves.

The loopback tests (test_client_faults.py, test_fault_matrix.py) show each rule end to end;
these pin the boundaries a real clock cannot hit exactly: a deadline reached to the tick, a
wait that would use up exactly the time left. `RetryPolicy` is public (a client's `policy=`),
so what it answers is behaviour a caller sees.
"""

from __future__ import annotations

import pytest

from pytest_laya.client import Deadline, Retry, RetryPolicy, TransportFailure


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def deadline(timeout_s: float, *, spent: float = 0.0) -> Deadline:
    clock = Clock()
    d = Deadline(timeout_s, clock=clock)
    clock.now += spent
    return d


def test_a_deadline_counts_from_its_creation_and_expires_on_the_tick():
    clock = Clock()
    d = Deadline(2.0, clock=clock)
    assert (d.remaining(), d.elapsed(), d.expired()) == (2.0, 0.0, False)
    clock.now += 1.5
    assert (d.remaining(), d.elapsed(), d.expired()) == (0.5, 1.5, False)
    clock.now += 0.5
    assert (d.remaining(), d.expired()) == (0.0, True)  # reached is spent: nothing may start now


POLICY = RetryPolicy()


@pytest.mark.parametrize("failure, expected", [
    # A refused connection is usually a server still starting: a short pause first.
    (TransportFailure.REFUSED, Retry(wait_s=0.05, reason="connection_refused")),
    # A dropped one is retried at once: the server is there.
    (TransportFailure.DROPPED, Retry(wait_s=0.0, reason="connection_dropped")),
    # A timeout spent the deadline: never retried.
    (TransportFailure.TIMED_OUT, None),
])
def test_a_first_transport_failure_is_retried_as_documented(failure, expected):
    assert POLICY.after_failure(failure, 1, deadline(1.0)) == expected
    assert POLICY.after_failure(failure, 2, deadline(1.0)) is None  # at most one retry


@pytest.mark.parametrize("left, retried", [(0.25, False), (0.375, True)])
def test_a_refused_connection_is_retried_only_if_time_is_left_after_the_pause(left, retried):
    # Binary fractions, so "the time left equals the pause" holds exactly.
    policy = RetryPolicy(reconnect_pause_s=0.25)
    step = policy.after_failure(TransportFailure.REFUSED, 1, deadline(1.0, spent=1.0 - left))
    assert step == (Retry(wait_s=0.25, reason="connection_refused") if retried else None)


def test_a_dropped_connection_is_not_retried_once_the_deadline_is_reached():
    assert POLICY.after_failure(TransportFailure.DROPPED, 1, deadline(1.0, spent=1.0)) is None


@pytest.mark.parametrize("status", [502, 504])
def test_a_502_or_504_is_retried_at_once_while_time_is_left(status):
    assert POLICY.after_response(status, {}, 1, deadline(1.0, spent=0.9)) == Retry(wait_s=0.0, reason=f"HTTP {status}")
    assert POLICY.after_response(status, {}, 2, deadline(1.0)) is None
    assert POLICY.after_response(status, {}, 1, deadline(1.0, spent=1.0)) is None  # reached: no time for it
    assert POLICY.after_response(status, {}, 1, deadline(1.0, spent=1.5)) is None  # passed


@pytest.mark.parametrize("retry_after, left, expected", [
    ("0", 1.0, Retry(wait_s=0.0, reason="HTTP 503, Retry-After 0s")),
    ("2", 2.5, Retry(wait_s=2.0, reason="HTTP 503, Retry-After 2s")),
    ("2", 2.0, None),  # the wait would use up the deadline: the retry could not run
    ("3", 2.0, None),
    (None, 2.0, None),  # no Retry-After: the server did not say a retry helps
    ("soon", 2.0, None),
])
def test_a_503_is_retried_only_when_its_retry_after_fits_inside_the_deadline(retry_after, left, expected):
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    assert POLICY.after_response(503, headers, 1, deadline(5.0, spent=5.0 - left)) == expected


@pytest.mark.parametrize("status", [200, 400, 401, 404, 413, 422, 429, 500])
def test_any_other_status_is_final(status):
    assert POLICY.after_response(status, {"Retry-After": "0"}, 1, deadline(1.0)) is None
