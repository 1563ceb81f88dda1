"""A 404 to a path the spec lacks and a 405 to another method are held to the spec's own answer
for them (`x-unrouted`), whatever client asked (issue 31); before, the plugin left them unchecked."""

from __future__ import annotations

import pytest

from pytest_laya.faults import Respond, ScriptedServer
from tests.helpers.pytester_runs import run

pytest_plugins = ["pytester"]

PROBE = """
import httpx


def test_probe(laya_url):
    assert httpx.get(laya_url + "/metrics").status_code == 404
"""


@pytest.mark.parametrize(("body", "content_type", "outcome"), [
    (b'{"detail": "Not Found"}', "application/json", "passed"),
    (b"<h1>Not Found</h1>", "text/html", "failed"),
    (b'{"error": "not found"}', "application/json", "failed"),
])
def test_a_404_to_a_path_the_spec_lacks_is_held_to_its_problem_shape(pytester, body, content_type, outcome):
    pytester.makepyfile(test_it=PROBE)
    with ScriptedServer(default=Respond(404, body, headers={"Content-Type": content_type})) as server:
        result = run(pytester, "--laya-mode=live", f"--laya-url={server.url}")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "failed":
        result.stdout.fnmatch_lines(["*SpecViolationError: GET /metrics -> 404 breaks the current spec*"])
    else:
        assert "not checked" not in result.stdout.str()
