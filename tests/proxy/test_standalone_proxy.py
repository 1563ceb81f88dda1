"""``python -m pytest_laya proxy``: recorded through, replayed with the upstream gone, with curl as
the client, stopped by SIGTERM; what it prints, writes and never does."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from tests.helpers.leaks import assert_hidden

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")

KEY = "sk-proxy-canary-40d1"
BODY = {"state": "I was charged twice.", "questions": {"refund": {"type": "noul", "instructions": "Refund?"}}}
WAIT_S = 60


@contextlib.contextmanager
def standalone(*args: str):
    """The proxy in its own process: (its URL, its output so far); SIGTERM and its exit checked at the end."""
    process = subprocess.Popen([sys.executable, "-m", "pytest_laya", "proxy", "--port", "0", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        output.append(ready)
        assert " on http://127.0.0.1:" in ready, ready + process.stdout.read()
        yield ready.split(" on ", 1)[1].split(" ", 1)[0], output
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=WAIT_S)
        output.append(rest)
    assert process.returncode == 0, "".join(output)


def curl(url: str, body: dict | None = None, *extra: str) -> tuple[int, dict]:
    args = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", url + "/v1/systemone", "-H",
            "Content-Type: application/json", "-H", f"Authorization: Bearer {KEY}", *extra]
    if body is not None:
        args += ["--data-binary", json.dumps(body)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=WAIT_S, check=True)
    text, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(text) if text.strip().startswith("{") else {"text": text}


def test_curl_records_through_the_proxy_and_replays_with_the_upstream_gone(tmp_path):
    cassettes = tmp_path / "cassettes"
    with FakeLayaServer(api_key=KEY) as fake:
        with standalone("--cassettes", str(cassettes), "--mode", "record", "--upstream", fake.url) as (url, out):
            status, recorded = curl(url, BODY)
            assert status == 200
            saved = cassettes / "proxy.yaml"
            assert saved.is_file()  # written after the exchange, not only at the end
            assert len(yaml.safe_load(saved.read_text())["interactions"]) == 1
    printed = "".join(out)
    assert "conformance (each server's responses, against each spec):" in printed
    assert "0 violations in 1 responses" in printed
    assert_hidden(printed + saved.read_text(), KEY)
    assert list(cassettes.iterdir()) == [saved]  # no temporary file left beside it

    # a second cassette, in a folder below: every cassette under DIR is served
    other = {**BODY, "state": "Where is my parcel?"}
    data = yaml.safe_load(saved.read_text())
    data["interactions"][0]["request"]["body"] = json.dumps(other)
    (cassettes / "team").mkdir()
    (cassettes / "team" / "parcel.yaml").write_text(yaml.safe_dump(data))

    with standalone("--cassettes", str(cassettes)) as (url, out):
        for _ in range(3):  # replayed again and again: a long-running proxy serves any number of runs
            assert curl(url, BODY) == (200, recorded)
        assert curl(url, other) == (200, recorded)
        status, problem = curl(url, {**BODY, "state": "I was charged thrice."})
    assert status == 500 and problem["code"] == "cassette_miss"
    assert "closest recorded request: POST /v1/systemone (interaction 1 of 1) differs in: body at /state" \
        in problem["detail"]
    printed = "".join(out)
    assert "replay on http://127.0.0.1:" in printed and "2 interactions from 2 cassettes" in printed
    assert "0 violations in 4 responses" in printed


class _Redirecting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).seen.append(f"{self.path} {self.headers.get('Authorization')}")
        self.send_response(307)
        self.send_header("Location", f"{self.server.elsewhere}/v1/systemone")  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def served(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_passed_back_never_followed(tmp_path):
    _Redirecting.seen = []
    with served(_Redirecting) as elsewhere, served(_Redirecting) as upstream:
        upstream.elsewhere = f"http://127.0.0.1:{elsewhere.server_address[1]}"  # type: ignore[attr-defined]
        with standalone("--cassettes", str(tmp_path), "--mode", "live", "--upstream",
                        f"http://127.0.0.1:{upstream.server_address[1]}", "--conformance", "report") as (url, _):
            status, _ = curl(url, BODY)
    assert status == 307
    assert _Redirecting.seen == [f"/v1/systemone Bearer {KEY}"]  # the upstream once; the other host never
    assert not list(Path(tmp_path).iterdir())  # live writes nothing


@pytest.mark.parametrize("args, message", [
    (["--mode", "record"], "--mode record needs --upstream URL"),
    (["--upstream", "http://127.0.0.1:1"], "--upstream is for --mode record or live"),
    (["--mode", "live", "--upstream", "ftp://x"], "the upstream must be an http(s) URL"),
    (["--mode", "record", "--upstream", "http://127.0.0.1:1", "--cassette", "../x"], "--cassette is a file name"),
])
def test_usage_errors_say_what_to_do(tmp_path, capsys, args, message):
    assert main(["proxy", "--cassettes", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err


# -- --record: the plugin's record modes (issue 34)

OTHER = {**BODY, "state": "Where is my parcel?"}


def _decisions(server) -> int:
    return sum(1 for r in server.requests if r.path == "/v1/systemone")


def _states(path: Path) -> list[str]:
    return [json.loads(i["request"]["body"])["state"] for i in yaml.safe_load(path.read_text())["interactions"]]


def _record_whole(cassettes: Path, fake) -> tuple[Path, dict]:
    with standalone("--cassettes", str(cassettes), "--mode", "record", "--upstream", fake.url) as (url, _):
        status, answer = curl(url, BODY)
    assert status == 200
    return cassettes / "proxy.yaml", answer


def test_curl_appends_through_the_proxy_and_the_old_interactions_stay_byte_for_byte(tmp_path):
    cassettes = tmp_path / "cassettes"
    with FakeLayaServer(api_key=KEY) as fake:
        saved, recorded = _record_whole(cassettes, fake)
        before, sent = saved.read_bytes(), _decisions(fake)
        with standalone("--cassettes", str(cassettes), "--record=new_episodes", "--upstream", fake.url) as (url, out):
            assert curl(url, BODY) == (200, recorded)  # held: played, the server not reached
            assert _decisions(fake) == sent
            status, _ = curl(url, OTHER)  # lacked: forwarded, and appended at once
            assert status == 200 and _decisions(fake) == sent + 1
            assert _states(saved) == [BODY["state"], OTHER["state"]]
            status, _ = curl(url, OTHER)  # made again: sent again, so the cassette replays it twice
            assert status == 200 and _decisions(fake) == sent + 2
    after = saved.read_bytes()
    head = before[:before.index(b"\nmetadata:")]
    assert after.startswith(head) and _states(saved) == [BODY["state"], OTHER["state"], OTHER["state"]]
    assert yaml.safe_load(after)["metadata"] == yaml.safe_load(before)["metadata"]  # as old as its oldest answer
    printed = "".join(out)
    assert "record (--record=new_episodes) on http://127.0.0.1:" in printed
    assert "appending to" in printed and "(1 interactions held)" in printed
    assert f"cassette {saved}: 2 interaction(s) appended" in printed
    assert_hidden(printed + after.decode(), KEY)
    assert list(cassettes.iterdir()) == [saved]  # written atomically: no temporary file left beside it

    with standalone("--cassettes", str(cassettes)) as (url, _):  # the upstream gone: all three replay
        assert curl(url, BODY) == (200, recorded)
        assert curl(url, OTHER)[0] == 200


def test_appending_nothing_new_leaves_the_cassette_untouched(tmp_path):
    cassettes = tmp_path / "cassettes"
    with FakeLayaServer(api_key=KEY) as fake:
        saved, recorded = _record_whole(cassettes, fake)
        before, stat, sent = saved.read_bytes(), saved.stat(), _decisions(fake)
        with standalone("--cassettes", str(cassettes), "--record=new_episodes", "--upstream", fake.url) as (url, out):
            assert curl(url, BODY) == (200, recorded)
    assert _decisions(fake) == sent
    assert saved.read_bytes() == before and saved.stat().st_mtime_ns == stat.st_mtime_ns
    assert f"cassette {saved}: nothing new recorded, the file untouched" in "".join(out)


def test_appending_answers_of_another_server_is_refused_and_nothing_is_written(tmp_path):
    cassettes = tmp_path / "cassettes"
    with FakeLayaServer(api_key=KEY, model="one") as first:
        saved, _ = _record_whole(cassettes, first)
    before = saved.read_bytes()
    with FakeLayaServer(api_key=KEY, model="two") as other:
        with standalone("--cassettes", str(cassettes), "--record=new_episodes", "--upstream", other.url) as (url, out):
            status, problem = curl(url, OTHER)
            assert curl(url, BODY)[0] == 200  # what the cassette holds still plays
    assert status == 500 and problem["code"] == "cassette_not_appended"
    for said in (problem["detail"], "".join(out)):
        assert "could not append to cassette" in said and "recorded from another server (identity" in said
        assert "Record it again as a whole with --mode record" in said
    assert saved.read_bytes() == before
    assert_hidden("".join(out) + problem["detail"], KEY)


def test_appending_to_a_broken_cassette_records_it_again_whole(tmp_path):
    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    saved = cassettes / "proxy.yaml"
    saved.write_text("interactions: [\n")
    with FakeLayaServer(api_key=KEY) as fake:
        with standalone("--cassettes", str(cassettes), "--record=new_episodes", "--upstream", fake.url) as (url, out):
            assert curl(url, OTHER)[0] == 200
    assert f"replacing {saved}, which cannot be read" in "".join(out)
    assert _states(saved) == [OTHER["state"]]


def test_record_missing_replays_the_cassette_it_finds_and_records_one_it_lacks(tmp_path):
    cassettes = tmp_path / "cassettes"
    with FakeLayaServer(api_key=KEY) as fake:
        with standalone("--cassettes", str(cassettes), "--record=missing", "--upstream", fake.url) as (url, _):
            status, recorded = curl(url, BODY)  # no cassette yet: recorded
        saved = cassettes / "proxy.yaml"
        assert status == 200 and _states(saved) == [BODY["state"]]
        before, sent = saved.read_bytes(), _decisions(fake)
        with standalone("--cassettes", str(cassettes), "--record=missing", "--upstream", fake.url) as (url, out):
            assert curl(url, BODY) == (200, recorded)
            status, problem = curl(url, OTHER)
    assert status == 500 and problem["code"] == "cassette_miss"
    assert _decisions(fake) == sent and saved.read_bytes() == before
    assert f"replaying {saved} (1 interactions; --record=missing records only a cassette that is missing)" \
        in "".join(out)


@pytest.mark.parametrize("args, message", [
    (["--mode", "live", "--upstream", "http://127.0.0.1:1", "--record"], "--record is for --mode record"),
    (["--mode", "replay", "--record=new_episodes"], "--record is for --mode record"),
    (["--record=missing"], "--mode record needs --upstream URL"),  # --record alone means --mode record
])
def test_record_mode_usage_errors_say_what_to_do(tmp_path, capsys, args, message):
    assert main(["proxy", "--cassettes", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_bad_record_mode_names_every_record_mode_and_help_lists_them(tmp_path, capsys):
    from pytest_laya.route.modes import RecordMode

    with pytest.raises(SystemExit):
        main(["proxy", "--cassettes", str(tmp_path), "--record=sometimes"])
    err = capsys.readouterr().err
    assert "'sometimes' is not a record mode: use one of --record (refresh every selected test)" in err
    for mode in RecordMode:
        assert f"{mode.flag_of('--record')} ({mode.does})" in err
    with pytest.raises(SystemExit):
        main(["proxy", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for mode in RecordMode:
        assert f"{mode.flag_of('--record')} to {mode.does}" in shown
