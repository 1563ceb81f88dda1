"""`Mode` and `RecordMode`: what a run does with each test's Laya traffic, as the questions the code asks.

Every trait of a mode is answered here, so a new mode (or record mode) is one member and its
rows below, and the command line's choices and messages follow from the members.
"""

from __future__ import annotations

from pytest_laya.wire.text_enum import TextEnum

__all__ = ["Mode", "RecordMode", "RouteKind"]


class Mode(TextEnum):
    """``--laya-mode``: how tests reach Laya."""

    REPLAY = "replay"
    RECORD = "record"
    LIVE = "live"
    FAKE = "fake"
    VERIFY = "verify"

    @property
    def needs_url(self) -> bool:
        """Tests reach a live server (``--laya-url``) unless their marker picks another."""
        return self in _REACHES_SERVER

    @property
    def uses_cassette_file(self) -> bool:
        """A test reads or writes its cassette file (else its traffic is captured, never saved)."""
        return self in _USES_CASSETTE_FILE

    @property
    def records(self) -> bool:
        """Tests' cassettes are written."""
        return self is Mode.RECORD

    @property
    def replays(self) -> bool:
        """Tests are answered from their cassettes, with no server and no socket."""
        return self is Mode.REPLAY

    @property
    def verifies(self) -> bool:
        """Tests run live and every answer is compared with their cassette."""
        return self is Mode.VERIFY

    @property
    def fakes(self) -> bool:
        """Tests' server is the built-in fake."""
        return self is Mode.FAKE

    @property
    def reads_cassettes(self) -> bool:
        """Tests read their recorded cassettes (replayed, or compared in verify)."""
        return self in _READS_CASSETTES

    @property
    def accounts_cassettes(self) -> bool:
        """The run replays or writes cassettes, so it knows which ones no test used (--laya-prune)."""
        return self in _ACCOUNTS_CASSETTES


_REACHES_SERVER = frozenset({Mode.LIVE, Mode.RECORD, Mode.VERIFY})
_USES_CASSETTE_FILE = frozenset({Mode.REPLAY, Mode.RECORD, Mode.VERIFY})
_READS_CASSETTES = frozenset({Mode.REPLAY, Mode.VERIFY})
_ACCOUNTS_CASSETTES = frozenset({Mode.REPLAY, Mode.RECORD})


class RecordMode(TextEnum):
    """``--laya-record[=all|missing|new_episodes]``: which tests record in record mode, and what
    of their old cassette they keep."""

    ALL = "all"
    MISSING = "missing"
    NEW_EPISODES = "new_episodes"

    @property
    def replays_recorded(self) -> bool:
        """A test whose cassette exists and can be read replays it instead of recording."""
        return self is RecordMode.MISSING

    @property
    def appends(self) -> bool:
        """A test whose cassette exists and can be read plays the interactions it holds and records
        only the requests it lacks, appended to it (the old interactions stay byte for byte)."""
        return self is RecordMode.NEW_EPISODES

    @property
    def reads_recorded(self) -> bool:
        """A test's existing cassette is read (replayed or appended to), not only replaced."""
        return self.replays_recorded or self.appends

    @property
    def vcr_record_mode(self) -> str:
        """vcrpy's ``record_mode`` of a cassette this mode records into (a test that `replays_recorded`
        is not recording, so its recordings are whole: ``all``)."""
        return "new_episodes" if self.appends else "all"

    @property
    def flag(self) -> str:
        """How the command line asks for it (``all`` is the bare flag's value)."""
        return self.flag_of(PLUGIN_RECORD_OPTION)

    def flag_of(self, option: str) -> str:
        """How `option` (``--laya-record``, the proxy's ``--record``) asks for it: ``all`` is the bare option."""
        return option if self is RecordMode.ALL else f"{option}={self.value}"

    @property
    def does(self) -> str:
        """What it does, in a message's words."""
        return _DOES[self]

    @classmethod
    def parse(cls, value: str, *, option: str | None = None) -> RecordMode:
        """`value` as a record mode; a ValueError saying what to pass instead (as `option` spells it:
        the plugin's ``--laya-record`` unless another command's option is named)."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(f"{mode.flag_of(option or PLUGIN_RECORD_OPTION)} ({mode.does})" for mode in cls)
            after = f"; put test paths before {PLUGIN_RECORD_OPTION}" if option is None else ""
            raise ValueError(f"{value!r} is not a record mode: use one of {choices}{after}") from None


#: The plugin's option for the record mode (the standalone proxy's is ``--record``).
PLUGIN_RECORD_OPTION = "--laya-record"

_DOES = {
    RecordMode.ALL: "refresh every selected test",
    RecordMode.MISSING: "record only tests without a cassette",
    RecordMode.NEW_EPISODES: "keep each cassette and append the requests it lacks",
}


class RouteKind(TextEnum):
    """What a test's route does with its server's traffic (the report's ``route``)."""

    REPLAY = "replay"  # answered from the cassette, no server reached
    RECORD = "record"  # sent to the server and saved in the cassette
    CAPTURE = "capture"  # sent and captured in memory, never saved (live, fake, reference)
    VERIFY = "verify"  # sent and captured, then compared with the cassette

    @property
    def replays(self) -> bool:
        return self is RouteKind.REPLAY

    @property
    def records(self) -> bool:
        return self is RouteKind.RECORD

    @property
    def verifies(self) -> bool:
        return self is RouteKind.VERIFY

    @property
    def captures(self) -> bool:
        """Its exchanges go to an in-memory capture that is never saved."""
        return self in _CAPTURES

    @property
    def uses_cassette_file(self) -> bool:
        """The test has a cassette file: played, written, or compared with."""
        return self is not RouteKind.CAPTURE

    @property
    def finishes_cassette(self) -> bool:
        """The route plays or writes its cassette file itself, and checks or saves it when it closes."""
        return self in _FINISHES_CASSETTE


_CAPTURES = frozenset({RouteKind.CAPTURE, RouteKind.VERIFY})
_FINISHES_CASSETTE = frozenset({RouteKind.REPLAY, RouteKind.RECORD})
