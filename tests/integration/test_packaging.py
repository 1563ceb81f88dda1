"""What a user gets from `pip install pytest-laya`: light imports, the plugin, the specs in the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "laya", "uvicorn")


def test_import_and_validation_load_no_heavy_module():
    # A fresh interpreter: this test process may already have imported laya for other tests.
    code = (
        "import sys, pytest_laya\n"
        "from pytest_laya import Spec, ServedLayaClient, Decision\n"
        "Spec.current(); Spec.target()\n"
        "import pytest_laya.plugin, pytest_laya.faults, pytest_laya.servers.laya_serve, pytest_laya.suites.server, pytest_laya.__main__\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_pytest11_entry_point_names_the_plugin():
    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("laya") == "pytest_laya.plugin"


def test_pytest_lists_the_laya_options(pytester):
    result = pytester.runpytest("-p", "no:asyncio", "--help")
    result.stdout.fnmatch_lines(["*--laya-mode=*", "*--laya-url=*", "*--laya-api-key=*"])


def test_an_unknown_mode_is_a_usage_error(pytester):
    result = pytester.runpytest("-p", "no:asyncio", "--laya-mode=replya")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--laya-mode: invalid choice: 'replya'*"])


def test_the_wheel_ships_both_specs_and_the_tiny_checkpoint(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("pytest_laya-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pytest_laya/specs/documents/laya-systemone.current.openapi.yaml",
            "pytest_laya/specs/documents/laya-systemone.openapi.yaml",
            "pytest_laya_reference/checkpoints/tiny/model.safetensors",
            "pytest_laya/suites/server.py", "pytest_laya/__main__.py"} <= names
    assert not any(n.startswith(("tests/", ".venv/")) for n in names)
