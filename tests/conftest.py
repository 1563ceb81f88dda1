"""Project-wide test settings, and the servers every module shares (one of each per process)."""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.metadata
import os
import sys

import _pytest.pytester
import pytest

# The suite starts about 150 Python processes (xdist workers, inner pytest runs and their workers,
# servers), and pytest rewrites every module of the kit (a pytest11 plugin) and of the tests in
# each. Where PYTHONDONTWRITEBYTECODE is set (some CI images, this project's machines), each of
# them compiled and rewrote it all from source again: about 0.4 s of CPU per inner pytest start
# and 3 s per worker's collection. This process and every one it starts write bytecode (into
# __pycache__, ignored by git), as without that variable. Not under mutmut
# (scripts/mutation_test.py), which asks for none on purpose.
if "mutmut" not in sys.modules and "MUTANT_UNDER_TEST" not in os.environ:
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# pytester's in-process runs drop the modules first imported inside them, so modules that must
# exist once per process are imported here, before any inner run can be the first to:
# - PyYAML: its C loader cannot be imported a second time (a later load fails on "the tag None");
# - vcrpy: the kit builds its vcrpy classes once per process, on first use. Built inside an
#   inner run, they subclass that run's copy of vcr, which the run then drops, and a later
#   `from vcr... import CassetteNotFoundError` gets a second copy their `except` does not catch
#   (a recording test after tests/contract/test_contract_models.py failed on it).
# - schemathesis's report writers: its plugin imports them at every session's end, so each
#   in-process inner run imported them anew (about 35 ms of CPU a run).
import schemathesis.reporting.html.writer  # noqa: F401
import schemathesis.reporting.junitxml  # noqa: F401
import vcr.patch  # noqa: F401
import vcr.persisters.filesystem  # noqa: F401
import vcr.serializers.yamlserializer  # noqa: F401
import vcr.stubs.httpx_stubs  # noqa: F401
import vcr.stubs.requests_stubs  # noqa: F401
import vcr.stubs.urllib3_stubs  # noqa: F401
import yaml  # noqa: F401

import tests.helpers.properties  # noqa: F401 - LAYA_PROPERTIES is checked at the start of the run

# Modules the kit and xdist import lazily inside an inner run, and no test module imports: each
# in-process run imported them anew and dropped them (pytest_laya.specs.answer_check in about
# half of them; 0.06-0.1 s of CPU a fake-mode run in all). Imported once here, they are kept.
for _lazy in ("pytest_laya.specs.answer_check", "pytest_laya.client.unmocked", "pytest_laya.cassettes.provenance",
              "pytest_laya.plugin.split", "pytest_laya.fake.in_memory", "pytest_laya.suites.check_command",
              "vcr.stubs.aiohttp_stubs", "xdist.dsession"):
    importlib.import_module(_lazy)
from tests.helpers.servers import LAYA_SERVE_KEY, LayaServes, SharedLayaServes, reference_server

#: Packages pytester's in-process runs keep once imported, rather than drop: torch registers its
#: operator libraries once per process, so a module of theirs imported again (transformers'
#: modeling code, first imported inside an inner run that loaded laya) fails with "Only a single
#: TORCH_LIBRARY can be used to register the namespace c10d_functional", and every later laya
#: load in the process with it. numpy's core and the Rust extensions laya's loading uses
#: (tokenizers, safetensors) refuse to load twice ("cannot load module more than once per
#: process"), so a laya load after an inner run that first imported them failed the same way.
KEPT_ACROSS_INNER_RUNS = ("torch", "transformers", "numpy", "tokenizers", "safetensors")


class _SysModulesSnapshotKeepingTorch(_pytest.pytester.SysModulesSnapshot):
    def __init__(self, preserve=None):
        def keep(name):
            return name.partition(".")[0] in KEPT_ACROSS_INNER_RUNS or (preserve is not None and preserve(name))

        super().__init__(preserve=keep)


_pytest.pytester.SysModulesSnapshot = _SysModulesSnapshotKeepingTorch

pytest_plugins = ["pytester"]


class _DistributionReadOnce(importlib.metadata.Distribution):
    """An installed distribution whose metadata files are read and parsed once per process."""

    def __init__(self, dist: importlib.metadata.Distribution) -> None:
        self._dist = dist

    @functools.cache  # noqa: B019 - one per distribution, kept for the process on purpose
    def read_text(self, filename):
        return self._dist.read_text(filename)

    def locate_file(self, path):
        return self._dist.locate_file(path)

    @functools.cached_property
    def files(self):
        return self._dist.files

    @functools.cached_property
    def entry_points(self):
        return self._dist.entry_points


_DISTRIBUTIONS: dict[tuple[str, ...], list[_DistributionReadOnce]] = {}
_discover_distributions = importlib.metadata.distributions


def _distributions_read_once(**kwargs):
    """Every pytester run in process walks every installed distribution's entry points and files
    twice (pluggy's plugin loading, pytest's marking plugins for rewrite): about 0.15 s of CPU a
    run, by the hundred. Nothing installs into this environment while the suite runs, so the
    distributions on the same sys.path are read once (an unchanged sys.path is the key)."""
    if kwargs:
        return _discover_distributions(**kwargs)
    key = tuple(sys.path)
    if key not in _DISTRIBUTIONS:
        _DISTRIBUTIONS[key] = [_DistributionReadOnce(dist) for dist in _discover_distributions()]
    return iter(_DISTRIBUTIONS[key])


importlib.metadata.distributions = _distributions_read_once


@pytest.fixture(autouse=True)
def _pytester_projects_write_no_bytecode(request):
    """A test may rewrite a pytester project's module between two runs, within one second and at
    the same size, which a cached .pyc (checked by the source's mtime in seconds and its size)
    would not notice: a pytester test's runs, in process or not, write no bytecode (they still
    read the kit's, which the workers wrote)."""
    if "pytester" not in request.fixturenames:
        yield
        return
    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    yield


@pytest.fixture
def proxy_from(monkeypatch):
    """Sets HTTP_PROXY to the URL given, every other proxy variable (either case) unset: a
    NO_PROXY of the machine's own would otherwise keep the proxy out of the test."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return lambda url: monkeypatch.setenv("HTTP_PROXY", url)


@pytest.fixture(scope="session")
def laya_serves(request, tmp_path_factory):
    """`laya_serves(jev_strict=..., api_key=...)`: the shared laya-serve of that configuration (one
    per run: under xdist the workers share it, `SharedLayaServes`)."""
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    if worker is None:
        serves = LayaServes()
    else:
        # The workers' basetemps are popen-gwN under the controller's, which is the same for all.
        serves = SharedLayaServes(tmp_path_factory.getbasetemp().parent, worker)
    yield serves
    serves.close()


@pytest.fixture(scope="session")
def keyed_reference_server():
    """The reference server on the tiny checkpoint, keyed with `LAYA_SERVE_KEY`, one per process:
    the modules that need a keyed one share it, as they share the plugin's `laya_reference_server`
    for an open one (a start is 3-5 s of CPU, mostly its checkpoint's load and checks)."""
    pytest.importorskip("laya", reason="needs the reference extra: pip install -e '.[reference]'")
    from pytest_laya_reference.settings import ServerSettings

    with reference_server(ServerSettings(api_key=LAYA_SERVE_KEY)) as thread:
        yield thread


#: The slowest tests (10 s and more in CI's --durations), longest first. They run first: under
#: --dist worksteal an idle worker takes tests only from the end of another's queue, never the
#: one it is running, so one of these starting in the last minute kept a single worker busy while
#: the others had nothing left (a shuffled order puts them anywhere). At the front, the first
#: worker runs them one after another and the others take the rest of its share from its end.
SLOWEST_FIRST = (
    "tests/cassettes/test_shipped_cassettes.py::test_verify_passes_against_the_reference_and_laya_serve_servers",
    "tests/contract/test_server_contract.py::test_check_without_a_spec_holds_laya_serve_to_the_current_spec_listing_only_target_gaps",
    "tests/reference_server/test_hostile_input.py::test_memory_returns_near_its_level_after_rounds_of_large_requests",
    "tests/cassettes/test_shipped_cassettes.py::test_re_recording_the_reference_cassettes_changes_nothing",
    "tests/specs/test_schema_compiler.py::test_recorded_bodies_and_their_mutations_agree_on_their_own_schemas",
    "tests/integration/test_downstream_example.py::test_the_downstream_example_passes_from_the_wheel_in_a_fresh_environment",
)


@pytest.hookimpl(trylast=True)  # after pytest-random-order has shuffled them
def pytest_collection_modifyitems(items):
    """The tests of `SLOWEST_FIRST` (every parameter of each) go first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    slowest = [item for item in items if item.nodeid.partition("[")[0] in rank]
    if slowest:
        slowest.sort(key=lambda item: rank[item.nodeid.partition("[")[0]])
        chosen = set(map(id, slowest))
        items[:] = slowest + [item for item in items if id(item) not in chosen]


def pytest_collection_finish(session):
    """Freeze what collection loaded, so the full collections that tests run walk only what they
    created since.

    Collection imports torch, transformers, laya, hypothesis and every test module: a full
    collection over them took about 140 ms. pytest's unraisable-exception plugin runs one twice
    at the end of every in-process inner run, and laya's `Router.unload` one whenever an
    in-process reference server stops: 5% of a py-spy profile of the suite, and a tenth of the CPU
    of tests/plugin/test_plugin.py, test_record_modes.py and test_reference_engine.py.
    """
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session):
    """The xdist controller stops any shared laya-serve its workers left (a worker that crashed or
    was interrupted before its session end); normally there is none."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    SharedLayaServes.stop_leftovers(config._tmp_path_factory.getbasetemp())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    # CI installs every extra, so a test skipped for a missing one means a missing install
    # step: fail it there rather than let the check silently not run.
    # A contract class that opts out of a behaviour property (behaviour_properties) is told so as a
    # skip, by design: that is a choice, not a missing install.
    opted_out = "(behaviour_properties)" in str(report.longrepr)
    if os.environ.get("CI") and report.skipped and call.when in ("setup", "call") and not opted_out:
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where everything must run: {report.longrepr}"
    return report
