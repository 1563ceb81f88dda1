"""docs/fake.md's downstream example ("A complete downstream example") runs as written, with pytester."""

from __future__ import annotations

import re
from pathlib import Path

import httpcore  # noqa: F401
import httpx  # noqa: F401
import hypothesis  # noqa: F401
import vcr  # noqa: F401
import yaml  # noqa: F401

# pytester's in-process runs drop modules first imported inside them: import what the example's
# run uses here, so there is one copy of each class.
import pytest_laya.fake  # noqa: F401
import pytest_laya.specs  # noqa: F401
import pytest_laya.strategies  # noqa: F401

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "fake.md"


def example_files() -> dict[str, str]:
    """The python blocks of the example section whose first line is ``# <file name>.py``."""
    section = DOC.read_text(encoding="utf-8").split("### A complete downstream example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    files = {}
    for block in blocks:
        first, _, rest = block.partition("\n")
        match = re.fullmatch(r"# (\w+\.py)", first.strip())
        if match:
            files[match.group(1)] = rest
    return files


def test_the_documented_router_example_passes(pytester):
    files = example_files()
    assert sorted(files) == ["support_router.py", "test_support_router.py"]
    for name, text in files.items():
        pytester.makepyfile(**{name[:-3]: text})
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4)


def test_the_example_fails_when_a_branch_breaks(pytester):
    files = example_files()
    broken = files["support_router.py"].replace('answers["refund"]["noul"] > 0.8', 'answers["refund"]["noul"] > 0.95')
    pytester.makepyfile(support_router=broken, test_support_router=files["test_support_router.py"])
    result = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*test_a_refund_request_opens_a_ticket*"])
