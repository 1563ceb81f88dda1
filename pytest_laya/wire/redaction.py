"""What stands in for a secret, wherever the kit stores or shows one.

Scrubbing replaces a whole value, never the part of it that is secret, with one of two words:
`REDACTED` in what is stored or listed (cassettes, recorded calls, a server's log), `MASK` in
what is printed of a setting (a `Secret`'s repr, a URL's password and query).
"""

from __future__ import annotations

__all__ = ["MASK", "REDACTED"]

#: A secret's value in a cassette, a recorded call's headers or a server's captured log.
REDACTED = "<redacted>"
#: A secret in a repr or a shown URL (``Secret('***')``, ``http://***@host/?***``).
MASK = "***"
