"""The python examples of README.md and docs/{client,plugin,fake}.md run as written.

Every ```python block of those pages either runs here, as a script against the reference server
the quickstart starts (its ``http://127.0.0.1:8000`` replaced by the URL of the one this test
starts), or says on the line before it how it runs or why it cannot run standalone:
``<!-- example: runs in tests/... -->`` or ``<!-- example: not run (why) -->``. A new block
without either is run; one that fails fails this test, naming its page and line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpcore  # noqa: F401 - one copy of each, before pytester's in-process runs
import httpx  # noqa: F401
import pytest

from pytest_laya.fake import FakeLayaServer
from tests.helpers.pytester_runs import run

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/client.md", "docs/plugin.md", "docs/fake.md")
QUICKSTART_URL = "http://127.0.0.1:8000"

pytest_plugins = ["pytester"]


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    text: str
    #: What the ``<!-- example: ... -->`` comment before it says, or None.
    note: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def python_blocks(page: str) -> list[Block]:
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    blocks = []
    for number, line in enumerate(lines):
        if line.strip() != "```python":
            continue
        end = next(i for i in range(number + 1, len(lines)) if lines[i].strip() == "```")
        before = next((lines[i] for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        note = re.fullmatch(r"<!-- example: (.+?) -->", before.strip())
        blocks.append(Block(page, number + 1, "\n".join(lines[number + 1:end]) + "\n", note.group(1) if note else None))
    return blocks


BLOCKS = [block for page in PAGES for block in python_blocks(page)]
SCRIPTS = [block for block in BLOCKS if block.note is None]


def test_every_block_runs_or_says_why_not():
    for block in BLOCKS:
        if block.note is None:
            continue
        assert re.fullmatch(r"not run \(.+\)|runs in (tests/\S+?\.py)\b.*", block.note), block.where
        named = re.match(r"runs in (tests/\S+?\.py)", block.note)
        if named:
            test_file = ROOT / named.group(1).rstrip(",")
            assert test_file.is_file(), f"{block.where} names {test_file}, which does not exist"
            assert block.page.split("/")[-1] in test_file.read_text(encoding="utf-8"), \
                f"{test_file} does not run {block.page}'s example"
    assert len(SCRIPTS) >= 3  # README's, client.md's and fake.md's first, at least


@pytest.mark.parametrize("block", SCRIPTS, ids=[block.where for block in SCRIPTS])
def test_a_script_example_runs_against_the_quickstarts_server(block, laya_reference_server):
    script = block.text.replace(QUICKSTART_URL, laya_reference_server.url)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, f"{block.where} fails as written:\n{done.stderr[-3000:]}"


def plugin_example() -> str:
    [block] = [b for b in python_blocks("docs/plugin.md") if b.note and "test_docs_examples.py" in b.note]
    first, _, rest = block.text.partition("\n")
    assert first == "# test_triage.py"
    return rest


def test_the_plugin_pages_example_runs_unchanged_in_every_mode(pytester, monkeypatch):
    # docs/plugin.md: "A test written once runs unchanged in every mode" -- its own example, in
    # each mode its page lists (a fake stands for the live server).
    monkeypatch.delenv("LAYA_SERVED_URL", raising=False)
    pytester.makepyfile(test_triage=plugin_example())
    run(pytester, "--laya-mode=fake").assert_outcomes(passed=2)
    with FakeLayaServer() as live:
        run(pytester, "--laya-record", f"--laya-url={live.url}").assert_outcomes(passed=2)
        run(pytester, "--laya-mode=live", f"--laya-url={live.url}").assert_outcomes(passed=2)
        run(pytester, "--laya-mode=verify", f"--laya-url={live.url}").assert_outcomes(passed=2)
    run(pytester).assert_outcomes(passed=2)  # replay, no server
