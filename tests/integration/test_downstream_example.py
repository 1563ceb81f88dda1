"""examples/downstream, installed from the built wheel into a fresh virtual environment, passes in replay.

This is what a downstream project meets: only `pip install pytest-laya` (no torch, no laya, no
checkout of this repository). A spec left out of the wheel, a module not packaged, a fixture
or entry point not exported, or a dependency not declared fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "downstream"


def _run(*cmd: str | os.PathLike[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_downstream_example_passes_from_the_wheel_in_a_fresh_environment(tmp_path):
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                 tmp_path / "dist", ROOT)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("pytest_laya-*.whl")

    project = tmp_path / "downstream"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info"))
    # Without a pip of its own (ensurepip costs ~3 s of CPU): this pip installs into it (`--python`).
    venv.create(tmp_path / "venv", with_pip=False, system_site_packages=False)
    python = tmp_path / "venv" / "bin" / "python"
    pip = (sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check")
    installed = _run(*pip, "install", "-q", wheel, project)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    listed = _run(*pip, "list", "--format=freeze").stdout.lower()
    assert "pytest-laya==" in listed and "acme-triage==" in listed
    assert not any(line.startswith(("torch==", "laya==", "transformers==")) for line in listed.splitlines())

    result = _run(python, "-m", "pytest", "-p", "no:cacheprovider", cwd=project)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "mode: replay" in result.stdout
    final = result.stdout.strip().splitlines()[-1]
    # Nothing failed or errored; the one skip is the option-order check the example opts out of.
    assert re.fullmatch(r"=+ \d+ passed, 1 skipped in [\d.]+s =+", final), final
    assert "cassettes: 17 played" in result.stdout


def test_the_shipped_cassettes_are_what_the_documented_re_record_command_writes(tmp_path, laya_reference_server):
    # examples/downstream/README.md's re-record command, against the reference server on the tiny
    # checkpoint: every shipped cassette must come back unchanged, or the example ships stale ones.
    project = tmp_path / "downstream"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.egg-info"))
    before = {p.relative_to(project): p.read_bytes() for p in (project / "tests" / "cassettes").rglob("*.yaml")}
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    command = "python -m pytest --laya-record --laya-url http://127.0.0.1:8765 --laya-spec target"
    assert command in readme
    args = command.split()[1:]
    args[args.index("http://127.0.0.1:8765")] = laya_reference_server.url
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, *args, "-p", "no:cacheprovider"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"cassettes: {len(before)} unchanged (file untouched)" in done.stdout, done.stdout[-3000:]
    after = {p.relative_to(project): p.read_bytes() for p in (project / "tests" / "cassettes").rglob("*.yaml")}
    assert after == before
