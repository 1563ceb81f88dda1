"""Cassette files the file system makes hard: FIFOs, devices, huge files, names too long, paths
that cannot be written, and broken files, each one `CassetteError` naming the file and what to do.

The tests run as root, where a read-only directory does not stop a write; an unwritable path is
provoked instead with a path component that is a file (ENOTDIR), a name over the file system's
limit (ENAMETOOLONG), and, for EACCES and ENOSPC, `tempfile.mkstemp` and `os.fsync` made to fail
as a read-only directory and a full disk make them fail.
"""

from __future__ import annotations

import errno
import os
import tempfile
import threading
from pathlib import Path

import pytest

from pytest_laya import ServedLayaClient
from pytest_laya.cassettes import CassetteError, disk, use_cassette
from pytest_laya.cassettes.disk import REPAIR, atomic_write
from pytest_laya.cassettes.persist import read_cassette
from pytest_laya.fake import FakeLayaServer

STATE = "I was charged twice for my order."
QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("recorded") / "good.yaml"
    with FakeLayaServer() as server, use_cassette(path, record=True):
        with ServedLayaClient(server.url) as client:
            client.decide(STATE, QUESTIONS)
    return path.read_bytes()


@pytest.fixture
def small_limit():
    before = disk.set_size_limit(4096)
    try:
        yield 4096
    finally:
        disk.set_size_limit(before)


def _error_of(action) -> CassetteError:
    """The error `action` raises, run in a thread so that a regression that hangs fails the test."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "reading the cassette hung"
    error = outcome[0]
    assert isinstance(error, CassetteError), repr(error)
    return error


def _replay(path: Path) -> None:
    with use_cassette(path, record=False):
        pass


# -- what is not a regular file is refused, never read ---------------------------------------

def test_a_fifo_at_the_cassette_path_is_refused_instead_of_hanging(tmp_path):
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    error = _error_of(lambda: _replay(path))
    assert error.path == path and "a FIFO (named pipe), not a regular file" in str(error)
    assert "Remove it" in str(error)


def test_a_link_to_dev_zero_is_refused_instead_of_reading_forever(tmp_path):
    path = tmp_path / "zero.yaml"
    path.symlink_to("/dev/zero")
    error = _error_of(lambda: _replay(path))
    assert "a character device, not a regular file" in str(error)


def test_a_directory_at_the_cassette_path_is_refused(tmp_path):
    path = tmp_path / "dir.yaml"
    path.mkdir()
    error = _error_of(lambda: _replay(path))
    assert str(path) in str(error) and "directory" in str(error)


def test_recording_never_replaces_a_fifo(tmp_path):
    path = tmp_path / "fifo.yaml"
    os.mkfifo(path)
    error = _error_of(lambda: atomic_write(path, b"interactions: []\nversion: 1\n"))
    assert "a FIFO (named pipe), not a regular file" in str(error)
    assert path.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["fifo.yaml"]


# -- the size limit -------------------------------------------------------------------------

def test_a_cassette_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path, recorded, small_limit):
    path = tmp_path / "big.yaml"
    path.write_bytes(recorded.replace(b"interactions:\n", b"interactions:\n" + b"# padding\n" * 1000, 1))
    error = _error_of(lambda: _replay(path))
    assert "over the size limit of 4096 bytes" in str(error)
    assert "--laya-max-cassette-size" in str(error) and "laya_max_cassette_size" in str(error)


def test_a_recording_over_the_size_limit_is_not_written(tmp_path, small_limit):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"old")
    error = _error_of(lambda: atomic_write(path, b"x" * 5000))
    assert "over the size limit" in str(error)
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


def test_the_default_size_limit_is_sane():
    assert disk.size_limit() == disk.DEFAULT_SIZE_LIMIT == 16 * 1024 * 1024
    with pytest.raises(ValueError):
        disk.set_size_limit(0)


# -- writes that fail -----------------------------------------------------------------------

def _no_tmp_left(directory: Path) -> None:
    assert not [p for p in directory.rglob("*.tmp")], "a temporary file was left behind"


def test_a_path_component_that_is_a_file_is_a_cassette_error(tmp_path):
    (tmp_path / "cassettes").write_text("not a directory")
    path = tmp_path / "cassettes" / "test_x" / "test_y.yaml"
    error = _error_of(lambda: atomic_write(path, b"data"))
    assert error.path == path and str(path) in str(error)
    assert "A part of its path is not a directory" in str(error) and "--laya-cassette-dir" in str(error)
    _no_tmp_left(tmp_path)


def test_a_name_too_long_for_the_file_system_is_a_cassette_error(tmp_path):
    path = tmp_path / ("x" * 300 + ".yaml")
    error = _error_of(lambda: atomic_write(path, b"data"))
    assert "too long for the file system" in str(error) and "@pytest.mark.laya(cassette=" in str(error)
    read = _error_of(lambda: read_cassette(path))
    assert "too long" in str(read)
    _no_tmp_left(tmp_path)


def test_a_read_only_directory_is_a_cassette_error(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)  # what a read-only directory does to a non-root user
    path = tmp_path / "ro.yaml"
    error = _error_of(lambda: atomic_write(path, b"data"))
    assert str(path) in str(error) and "read-only" in str(error) and "make it writable" in str(error)


def test_a_full_disk_is_a_cassette_error_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    path = tmp_path / "full.yaml"
    path.write_bytes(b"old")
    error = _error_of(lambda: atomic_write(path, b"data"))
    assert "No space left on device" in str(error) and "free some space" in str(error)
    assert "the previous file is unchanged" in str(error) and path.read_bytes() == b"old"
    _no_tmp_left(tmp_path)


# -- broken files: each message says what is wrong and ends with what to do ------------------

BROKEN = {
    "empty": (lambda good: b"", "is empty"),
    "truncated": (lambda good: good[: len(good) // 2], "cassette"),
    "binary": (lambda good: b"\xff\xfe\x00\x01binary", "is not UTF-8 text"),
    "unknown-version": (lambda good: good.replace(b"version: 1", b"version: 2"), "has format version 2"),
    "no-version": (lambda good: good.replace(b"version: 1\n", b""), "has no 'version' key"),
    "not-a-mapping": (lambda good: b"- a\n- b\n", "is not a vcrpy cassette"),
}


@pytest.mark.parametrize("damage", BROKEN, ids=list(BROKEN))
def test_every_broken_cassette_message_ends_with_what_to_do(tmp_path, recorded, damage):
    corrupt, needle = BROKEN[damage]
    path = tmp_path / "broken.yaml"
    path.write_bytes(corrupt(recorded))
    error = _error_of(lambda: _replay(path))
    message = str(error)
    assert needle in message and message.count(str(path)) == 1
    assert message.endswith("or restore the file from version control."), message
    assert "--laya-record" in message


def test_a_tab_added_by_hand_is_named_as_a_tab_not_as_a_truncation(tmp_path, recorded):
    path = tmp_path / "tabbed.yaml"
    path.write_bytes(recorded.replace(b"    method: POST\n", b"\tmethod: POST\n", 1))
    message = str(_error_of(lambda: _replay(path)))
    assert "is not valid YAML" in message and "a tab there" in message and "Replace the tab with spaces" in message
    assert "truncated" not in message
    assert message.endswith("or restore the file from version control.")


def test_a_file_cut_mid_value_is_named_as_truncated(tmp_path):
    path = tmp_path / "cut.yaml"
    path.write_text("interactions:\n- request:\n    method: POST\n    uri: 'http://laya.invalid/v1/sys")
    message = str(_error_of(lambda: _replay(path)))
    assert "cut off (truncated)" in message and message.endswith(REPAIR[-40:])


# -- names ----------------------------------------------------------------------------------

def test_a_double_colon_in_a_parametrize_id_is_escaped_not_turned_into_a_dot():
    from pytest_laya.cassettes.naming import cassette_relpath

    colons = cassette_relpath("tests/test_x.py::test_y[a::b]")
    dot = cassette_relpath("tests/test_x.py::test_y[a.b]")
    assert colons != dot
    assert str(colons) == "test_x/test_y[a%3A%3Ab].yaml" and str(dot) == "test_x/test_y[a.b].yaml"
    # Class and test are still joined by a dot: the paths of recorded cassettes do not move.
    assert str(cassette_relpath("tests/test_x.py::TestA::test_b[p-1]")) == "test_x/TestA.test_b[p-1].yaml"
