"""`cassettes.derived`: what replay derives from a file, kept across processes, never stale, never a secret."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_laya.cassettes import derived, head, persist, replay
from pytest_laya.cassettes.config import CassetteConfig

SHIPPED = Path(__file__).resolve().parents[2] / "cassettes" / "laya-serve-0.4.15" / "score.yaml"


@pytest.fixture
def cache(tmp_path: Path) -> Any:
    """A cache folder in use, and a clean slate in memory (the parse and replay caches are per process)."""
    calls: list[Any] = []
    extra = derived.Extra("probe", lambda: calls[-1][1] if calls else b"v1", lambda head, interactions: len(interactions),
                          lambda plain: calls.append(("restored", plain)) or True)
    before = derived.use(tmp_path / "derived", (extra,))
    persist._PARSED.clear()
    persist._DIRECT.clear()
    replay._CACHE.clear()
    yield tmp_path / "derived", calls
    derived.use(*before)
    persist._PARSED.clear()
    persist._DIRECT.clear()
    replay._CACHE.clear()


def load(path: Path, config: CassetteConfig | None = None, api_key: str | None = None) -> Any:
    """`path` read by another run: what this one noted is in the folder, nothing of it in memory."""
    another_process(derived.directory())
    persist._PARSED.clear()
    persist._DIRECT.clear()
    replay._CACHE.clear()
    derived._entries.clear()
    return replay._loaded(path, api_key, config or CassetteConfig())


def entry_of(path: Path) -> Any:
    """The cassette entry kept for the file at `path`, read from the folder."""
    derived._entries.clear()
    return derived._entry(hashlib.sha256(path.read_bytes()).hexdigest())


def kinds(folder: Path) -> list[str]:
    """The kinds of the entries in `folder` (the runs' notes of the files they read left out)."""
    return sorted(p.suffix for p in folder.rglob("*")
                  if p.is_file() and not p.name.startswith(".tmp") and p.suffix != ".seen")


def test_a_value_comes_back_and_a_damaged_one_does_not(cache):
    folder, _ = cache
    derived.put("probe", {"a": [1, b"x"]}, b"key")
    assert derived.get("probe", b"key") == {"a": [1, b"x"]}
    assert derived.get("probe", b"other") is None
    (entry,) = [p for p in folder.rglob("*.probe")]
    entry.write_bytes(entry.read_bytes()[:-1] + b"!")
    assert derived.get("probe", b"key") is None


def test_without_a_folder_nothing_is_kept(tmp_path):
    before = derived.use(None)
    try:
        derived.put("probe", 1, b"key")
        assert derived.get("probe", b"key") is None
    finally:
        derived.use(*before)


def test_a_second_read_is_the_first_ones_result(cache, tmp_path):
    folder, calls = cache
    path = tmp_path / "score.yaml"
    shutil.copy(SHIPPED, path)
    assert load(path) and kinds(folder) == []  # a file's first run notes it, and keeps nothing
    first = load(path)
    another_process(folder)
    assert kinds(folder) == [".pack"]  # its second: its head and interactions, in the run's one pack
    second = load(path)
    assert [(r.method, r.uri, r.body, list(r.headers.items()), s) for r, s in second.interactions] == \
        [(r.method, r.uri, r.body, list(r.headers.items()), s) for r, s in first.interactions]
    assert second.index == first.index and second.data == first.data
    assert calls == [("restored", len(first.interactions))]


def test_another_configuration_or_extra_key_is_worked_out_again(cache, tmp_path):
    folder, calls = cache
    path = tmp_path / "score.yaml"
    shutil.copy(SHIPPED, path)
    load(path)  # noted
    load(path)
    filtered = CassetteConfig(filter_headers=(("x-inference-time-ms", None),))
    load(path, filtered)
    another_process(folder)
    assert kinds(folder) == [".pack", ".pack"]  # one for each run that kept an entry
    assert len(entry_of(path)["variants"]) == 2
    assert not calls  # each worked out from the file, nothing restored
    calls.append(("spec edited", b"v2"))  # the extra's key changes, as an edited spec's hash does
    load(path)
    assert len(entry_of(path)["variants"]) == 3  # the earlier two kept beside it
    assert calls == [("spec edited", b"v2")]


def test_an_api_key_or_a_learned_secret_keeps_no_interactions(cache, tmp_path):
    folder, _ = cache
    path = tmp_path / "score.yaml"
    data = yaml.safe_load(SHIPPED.read_text())
    data["interactions"][0]["request"]["headers"]["authorization"] = ["Bearer sk-learned-secret-4242"]
    path.write_text(yaml.safe_dump(data))
    loaded = load(path)
    assert loaded.learned == ("sk-learned-secret-4242",)
    load(path, api_key="sk-given-key-1234")
    another_process(folder)
    assert kinds(folder) == []


def test_the_kept_parse_is_the_files_head_and_a_full_read_still_parses_the_whole_file(cache, tmp_path):
    """A later run's replay reads the file's head (version, metadata) and its own entry, not the
    whole parse again; `read_cassette`, which others read interactions from, still gives them all."""
    folder, _ = cache
    path = tmp_path / "score.yaml"
    shutil.copy(SHIPPED, path)
    whole = yaml.safe_load(SHIPPED.read_text())
    first = load(path)
    assert first.data == {key: value for key, value in whole.items() if key != "interactions"}
    head._HEADS.clear()
    second = load(path)
    assert second.data == first.data and "interactions" not in second.data
    assert len(second.interactions) == len(whole["interactions"])
    head._HEADS.clear()
    persist._PARSED.clear()
    persist._DIRECT.clear()
    assert head.read_head(path) == first.data
    assert len(persist.read_cassette(path)["interactions"]) == len(whole["interactions"])


def test_a_file_is_looked_up_in_the_folder_once_per_process(cache, tmp_path, monkeypatch):
    """A first run asks for a file's head, its variant and, keeping one, the variants kept beside
    it: one read of the folder answers all three, the one that found nothing included."""
    path = tmp_path / "score.yaml"
    shutil.copy(SHIPPED, path)
    looked: list[Path] = []
    real = derived._pack
    monkeypatch.setattr(derived, "_pack", lambda pack: looked.append(pack) or real(pack))
    head._HEADS.clear()
    load(path)  # its first run: noted, nothing looked up
    assert looked == [] and derived._packed is None
    head._HEADS.clear()
    load(path)  # the folder listed once: no pack yet
    assert looked == [] and derived._packed == {}
    head._HEADS.clear()
    load(path)  # another process: reads the pack the second one wrote, once for head and variant
    (pack,) = derived._packs()
    assert looked == [pack]


def another_process(folder: Path) -> None:
    """The cache folder as a new process finds it (what this one wrote or found is not in memory)."""
    derived.use(folder, derived.extras())


@pytest.fixture
def score(tmp_path: Path) -> Path:
    """A copy of a shipped cassette, to read and edit."""
    path = tmp_path / "score.yaml"
    shutil.copy(SHIPPED, path)
    return path


def test_a_one_off_run_notes_its_files_and_the_next_writes_their_entries_in_one_pack(cache, score):
    folder, path = cache[0], score
    load(path)
    another_process(folder)
    assert [p.suffix for p in folder.rglob("*") if p.is_file()] == [".seen"]  # one small file, no entry
    assert entry_of(path) is None
    load(path)
    assert kinds(folder) == []  # held until the run ends
    another_process(folder)
    assert kinds(folder) == [".pack"] and not list(folder.rglob(".tmp-*"))
    assert entry_of(path) is not None


@pytest.mark.parametrize("damage", ["cut off", "another kit's"])
def test_an_unreadable_pack_is_ignored_its_entries_kept_again_and_the_next_pack_removes_it(cache, score, damage,
                                                                                          monkeypatch):
    folder, path = cache[0], score
    load(path)
    load(path)
    another_process(folder)
    (pack,) = folder.glob("*.pack")
    if damage == "cut off":
        pack.write_bytes(pack.read_bytes()[:-9])
    else:
        monkeypatch.setattr(derived, "_code_digest", b"another version of the kit")
    another_process(folder)
    assert entry_of(path) is None
    load(path)  # worked out again and kept (another kit's first run notes the file first)
    load(path)
    another_process(folder)
    (again,) = folder.glob("*.pack")
    assert again != pack
    assert entry_of(path) is not None


def test_packs_are_merged_once_there_are_enough_keeping_the_newest_entries(cache, tmp_path, monkeypatch):
    folder, _ = cache
    monkeypatch.setattr(derived, "_PACKS_MAX", 2)
    monkeypatch.setattr(derived, "_PACKED_MAX", 2)
    paths = [tmp_path / f"score{n}.yaml" for n in range(3)]
    for n, path in enumerate(paths):
        path.write_bytes(SHIPPED.read_bytes() + f"# file {n}\n".encode())  # other bytes: an entry each
    for path in paths[:2]:  # each kept by a run of its own: a pack each
        load(path)
        load(path)
    load(paths[2])
    load(paths[2])  # this run keeps the third file's entry ...
    replay._CACHE.clear()
    assert replay._loaded(paths[0], None, CassetteConfig())  # ... and reads the first file's from its pack
    another_process(folder)  # its pack merges the two there, the second file's entry the oldest
    assert len(list(folder.glob("*.pack"))) == 1
    assert [entry_of(path) is not None for path in paths] == [True, False, True]


def test_the_notes_keep_the_newest_files_and_ignore_a_damaged_note_file(cache, monkeypatch):
    folder, _ = cache
    monkeypatch.setattr(derived, "_SEEN_MAX", 3)
    for n in range(5):
        derived.note(hashlib.sha256(b"%d" % n).hexdigest())
    another_process(folder)
    assert [derived.noted(hashlib.sha256(b"%d" % n).hexdigest()) for n in range(5)] == [False, False, True, True, True]
    (notes,) = folder.rglob("*.seen")
    notes.write_bytes(notes.read_bytes()[:-1])
    another_process(folder)
    assert not derived.noted(hashlib.sha256(b"4").hexdigest())


def test_an_entry_another_process_created_first_is_replaced_by_a_whole_one(cache):
    folder, _ = cache
    assert derived.get("probe", b"key") is None  # missing: this process would create it
    path = derived._path("probe", (b"key",))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"another process, halfway")
    derived.put("probe", {"a": 1}, b"key")
    another_process(folder)
    assert derived.get("probe", b"key") == {"a": 1}
