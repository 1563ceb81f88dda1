"""The places in a Laya body that scrubbing may change, and the names it never touches.

Scrubbing finds values structurally (`json_splice`): a volatile value is zeroed only where the
specs name it (`normalise_volatile`), and a string that is a name the user chose (`is_name`)
is never changed, whatever it is equal to. docs/cassettes.md lists the places.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_laya.cassettes.json_splice import KEEP, JsonPath, splice

__all__ = ["LOCAL_PATH", "decision_part", "is_name", "may_be_volatile", "normalise_volatile", "volatile_value"]


#: What replaces the directories of a recording machine's absolute path (the last part is kept).
LOCAL_PATH = "<local>"


# The places the specs name as volatile, relative to a decision (the body itself, or each of a
# batch's `results`): laya-serve's and the Jev-strict `latency_ms`, a `timing` object's members.
_LATENCY = "latency_ms"
_TIMING = "timing"
# Identity fields that may hold an absolute path of the recording machine (laya-serve's
# `routing.repo` of a local checkpoint), at the top of a body or in these identity objects.
_PATH_FIELDS = frozenset({"repo", "checkpoint", "checkpoint_dir", "local_dir", "model_dir"})
_IDENTITY_OBJECTS = frozenset({"routing", "served_by"})
_ABSOLUTE = re.compile(r"/|[A-Za-z]:[\\/]|\\\\")
_VOLATILE_MARKERS = (b"latency_ms", b"timing", b"repo", b"checkpoint", b"local_dir", b"model_dir")
# A path field's name, then a string that may decode to an absolute path (`_ABSOLUTE`): a slash, an
# escape (``\/``, ``\\``) or a drive letter. JSON's whitespace is within ``\s``.
_PATH_VALUE = re.compile(rb'"(?:' + b"|".join(re.escape(f.encode()) for f in sorted(_PATH_FIELDS))
                         + rb')"\s*:\s*"(?:/|\\|[A-Za-z]:)')


def decision_part(path: JsonPath) -> JsonPath:
    """`path` relative to the decision it is in: a batch's ``/results/<i>`` prefix taken off."""
    if len(path) >= 2 and path[0] == "results" and isinstance(path[1], int):
        return path[2:]
    return path


def is_name(path: JsonPath) -> bool:
    """Whether the string at `path` is a name the user chose (a question id, an option name or a
    level's label), which scrubbing never changes: an answer's ``choice`` and ``legend`` labels, a
    list of options in a question's ``criteria``, ``served_by.truncated_questions``, a problem's
    ``errors[].question``. Member names are never changed either."""
    part = decision_part(path)
    n = len(part)
    if n == 3 and part[0] == "answers" and part[2] == "choice":
        return True
    if n == 4 and part[0] == "answers" and part[2] == "legend":
        return True
    if n == 4 and part[0] == "questions" and part[2] == "criteria" and isinstance(part[3], int):
        return True
    if n == 3 and part[:2] == ("served_by", "truncated_questions"):
        return True
    return n == 3 and part[0] == "errors" and part[2] == "question"


def volatile_value(path: JsonPath, value: Any) -> Any:
    """The stored value for the volatile value at `path`, or `KEEP` (see `normalise_volatile`)."""
    # Called for every value of a body: what cannot be a volatile place is kept before
    # `decision_part` is worked out (a place's last name is `latency_ms`, a `timing` member's
    # parent is `timing`, a path field's name is one of `_PATH_FIELDS`).
    if type(value) in (int, float):
        if not path or not (path[-1] == _LATENCY or (len(path) >= 2 and path[-2] == _TIMING)):
            return KEEP
        part = decision_part(path)
        if part == (_LATENCY,) or (len(part) == 2 and part[0] == _TIMING):
            return 0
        return KEEP
    if not isinstance(value, str) or not path or path[-1] not in _PATH_FIELDS:
        return KEEP
    part = decision_part(path)
    if not part or not _ABSOLUTE.match(value):
        return KEEP
    if len(part) == 1 or (len(part) == 2 and part[0] in _IDENTITY_OBJECTS) or (len(part) == 3 and part[0] == "models"):
        return _local(value)
    return KEEP


def normalise_volatile(body: bytes) -> bytes:
    """A JSON body with its durations zeroed and machine paths made relative, every other byte kept.

    Only the places the specs name: `latency_ms` and each number of a `timing` object, at the top
    of a decision (or of each batch result); `repo`, `checkpoint`, `checkpoint_dir`, `local_dir`
    and `model_dir` holding an absolute path, at the top of a body, in `routing` or `served_by`,
    or in a `/health` document's `models/<name>`. A question id or option name is never touched,
    whatever it is called. A body that is not JSON is kept as it is.
    """
    if not may_be_volatile(body):
        return body
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return body
    spliced = splice(text, volatile_value)
    return body if spliced is None or spliced is text else spliced.encode("utf-8")


def may_be_volatile(body: bytes) -> bool:
    """Whether `body` may hold a volatile place (a quick look at its bytes, before parsing it).

    Without a ``\\u`` escape, a member name is spelt as it reads, so a path field can only change
    where its name is followed by a string that may start an absolute path (``/``, any escape, a
    drive letter): a decision's usual ``"repo": "org/model"``, not absolute, is not parsed.
    """
    if not body:
        return False
    if b"\\u" in body:  # a name may be escaped: the markers alone decide, as they always have
        return any(marker in body for marker in _VOLATILE_MARKERS)
    return b"latency_ms" in body or b"timing" in body or _PATH_VALUE.search(body) is not None


def _local(path: str) -> str:
    last = re.split(r"[/\\]+", path.rstrip("/\\"))[-1]
    return f"{LOCAL_PATH}/{last}" if last else LOCAL_PATH
