"""The HTML report (issue 38): one self-contained page, loaded in headless Chromium, showing its
figures with no console error; from one run (--laya-report-html) and from merged shards."""

from __future__ import annotations

import re
import shutil

import pytest

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from tests.helpers.browser import open_page
from tests.helpers.pytester_runs import TEST_DECIDE, run

pytest_plugins = ["pytester"]

# Imported before pytester's in-process runs: a module first imported inside one is dropped from
# sys.modules after it, and a second import of matplotlib mixes two copies of its classes.
pytest.importorskip("matplotlib.figure")
pytest.importorskip("matplotlib.backends.backend_svg")
pytest.importorskip("matplotlib.image")

THREE = "".join(TEST_DECIDE.replace("def test_refund", f"def test_{name}") for name in ("one", "two", "three"))
#: Anything that would make the page fetch something (links inside the page and data: URIs fetch nothing).
FETCHES = re.compile(r"""<link\b|<script\b|<iframe\b|@import|(?:src|href)\s*=\s*(?!["']?(?:#|data:))|url\((?!["']?#)""",
                     re.I)


def _figures(dom: str) -> list[str]:
    return re.findall(r'<figure class="chart" data-figure="([a-z]+)"><svg\b', dom)


def _not_blank(png):
    matplotlib_image = pytest.importorskip("matplotlib.image")
    pixels = matplotlib_image.imread(str(png))
    assert pixels.shape[0] > 500 and pixels.std() > 0.02  # not an empty (one-colour) page


def test_two_shards_merge_into_a_self_contained_page_that_shows_its_figures(pytester, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    pytester.makepyfile(test_a=THREE)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=3)
    shutil.copy(pytester.path / "cassettes/test_a/test_one.yaml", pytester.path / "cassettes/test_a/test_gone.yaml")
    run(pytester, "-k", "one", "--laya-report=s1.json", "--laya-report-html=s1.html").assert_outcomes(passed=1)
    run(pytester, "-k", "not one", "--laya-report=s2.json").assert_outcomes(passed=2)
    assert _figures((pytester.path / "s1.html").read_text()) == ["conformance", "latency"]
    pytester.chdir()
    capsys.readouterr()
    assert main(["report", "merge", "s1.json", "s2.json", "--out", "merged.json", "--html", "merged.html"]) == 0
    page = pytester.path / "merged.html"
    text = page.read_text()
    assert FETCHES.search(text) is None, FETCHES.search(text).group(0)
    assert "default-src 'none'" in text
    shot = tmp_path / "merged.png"
    dom, console = open_page(page, shot, tmp_path / "profile")
    assert console == []
    assert _figures(dom) == ["conformance", "latency"]
    assert "cassettes/test_a/test_gone.yaml" in dom and "1 unused cassette(s)" in dom
    assert "merged from 2 reports: s1.json, s2.json" in dom
    _not_blank(shot)
    shutil.copy(shot, pytester.path.parent / "laya-merged-report.png")  # kept for a look by hand


def test_a_page_with_drift_violations_and_measures_draws_every_figure(tmp_path):
    from pytest_laya.report.html import render_html

    report = {
        "mode": "verify", "servers": {"live http://127.0.0.1:8000": "target"},
        "cassettes": {"played": 0},
        "conformance": [{"server": "live http://127.0.0.1:8000", "spec": spec, "exchanges": 4, "violations": bad,
                         "operations_met": 2 - bad, "operations_seen": 2, "headers_met": 3, "headers_seen": 4}
                        for spec, bad in (("current", 0), ("target", 1))],
        "tests": [{"test": "t.py::test_a", "server": "live http://127.0.0.1:8000", "latency_ms": [12.5, 14.1, 30.2],
                   "violations": ["POST /v1/systemone -> 200 breaks the target spec (1 violation):\n  /served_by <script>"]}],
        "verify": [{"cassette": "c.yaml", "interactions": [{"number": 1, "differences": [
            "body at /answers/q/p (recorded 0.71, now 0.64: differs by 0.07, more than 0.0001)"]}]}],
        "notes": {"behaviour measured": [
            "option order: 2 of 12 reorderings changed the choice (17%) over 4 questions, the reverse order 0 of 4; "
            "largest probability deviation 0.1200 (reported)"]},
        "unused_cassettes": [], "stale_cassettes": [{"cassette": "old.yaml", "reason": "was recorded on 2025-01-01"}],
    }
    page = tmp_path / "report.html"
    page.write_text(render_html(report))
    assert "&lt;script&gt;" in page.read_text()  # a message is text, never markup
    dom, console = open_page(page, tmp_path / "report.png", tmp_path / "profile")
    assert console == []
    assert _figures(dom) == ["conformance", "drift", "measures", "latency"]
    assert "/answers/q/p</code>: recorded 0.71, live 0.64" in dom
    _not_blank(tmp_path / "report.png")


def test_the_html_option_needs_matplotlib_or_says_what_to_install(pytester, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    pytester.makepyfile(test_it=TEST_DECIDE)
    result = run(pytester, "--laya-report-html=r.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--laya-report-html draws its figures with matplotlib: pip install 'pytest-laya[report]'" in result.stderr.str()


def _move_first_noul(node):
    """Change the first ``noul`` probability in a JSON document; True once done."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "noul" and isinstance(value, float):
                node[key] = round(1 - value, 4) if abs(1 - 2 * value) > 0.2 else round((value + 0.5) % 1, 4)
                return True
            if _move_first_noul(value):
                return True
    if isinstance(node, list):
        return any(_move_first_noul(item) for item in node)
    return False


def test_a_verify_run_plots_every_probability_recorded_against_live(pytester, tmp_path):
    import json

    import yaml

    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}").assert_outcomes(passed=1)
        path = pytester.path / "cassettes/test_it/test_refund.yaml"
        data = yaml.safe_load(path.read_text())
        body = data["interactions"][-1]["response"]["body"]
        answer = json.loads(body["string"])
        assert _move_first_noul(answer)
        body["string"] = json.dumps(answer)
        path.write_text(yaml.safe_dump(data))
        result = run(pytester, "--laya-mode=verify", f"--laya-url={fake.url}", "--laya-report-html=verify.html")
    result.assert_outcomes(passed=1, errors=1)  # the drift fails the test at teardown
    page = pytester.path / "verify.html"
    text = page.read_text()
    moved = re.search(r"recorded against live: (\d+) over 1 interactions, (\d+) moved beyond the tolerance", text)
    assert moved is not None and int(moved.group(1)) >= 3 and moved.group(2) == "1"
    dom, console = open_page(page, tmp_path / "verify.png", tmp_path / "profile")
    assert console == []
    assert _figures(dom) == ["conformance", "drift", "latency"]
    _not_blank(tmp_path / "verify.png")


def test_each_exchange_sent_to_a_server_carries_its_latency(pytester):
    pytester.makepyfile(test_it=TEST_DECIDE)
    with FakeLayaServer() as fake:
        run(pytester, "--laya-record", f"--laya-url={fake.url}", "--laya-report=r.json").assert_outcomes(passed=1)
    import json

    (record,) = json.loads((pytester.path / "r.json").read_text())["tests"]
    assert record["latency_ms"] and all(ms > 0 for ms in record["latency_ms"])
