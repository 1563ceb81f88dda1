"""`CassetteConfig`: a project's own secrets, noise and hosts, in pytest-recording's words.

The keys are vcrpy's and pytest-recording's, so a ``vcr_config`` fixture carries over:
``filter_headers`` (request or response header names, or ``(name, replacement)`` pairs),
``filter_query_parameters``, ``filter_post_data_parameters`` (form fields, or JSON pointers such
as ``/metadata/tenant_token`` into a JSON body), ``before_record_request`` and
``before_record_response`` (your hooks, run after the kit's own scrubbing; returning None drops
the interaction), ``allowed_hosts`` (hosts ``--laya-block-network`` lets through) and
``ignore_hosts`` (hosts that are never the Laya server). Other keys of a ``vcr_config``
(``record_mode``, ``match_on``, ``cassette_library_dir``...) belong to pytest-recording's own
cassettes and are not read here. An unknown key or a wrong type is a ValueError saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CassetteConfig", "KEYS", "VCR_CONFIG_KEYS_IGNORED"]

#: The keys a ``laya_vcr_config`` may hold.
KEYS = ("filter_headers", "filter_query_parameters", "filter_post_data_parameters",
        "before_record_request", "before_record_response", "allowed_hosts", "ignore_hosts")
#: pytest-recording ``vcr_config`` keys that configure its own cassettes, not the Laya one.
VCR_CONFIG_KEYS_IGNORED = ("record_mode", "match_on", "cassette_library_dir", "serializer", "path_transformer",
                           "decode_compressed_response", "record_on_exception", "allow_playback_repeats",
                           "filter_sensitive_data", "custom_patches", "inject", "drop_unused_requests")

Replacement = Any  # a value, or a callable (key, value, request) -> value, as vcrpy takes them


def _pairs(value: Any, key: str, where: str) -> tuple[tuple[str, Replacement], ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: {key} must be a list of names or (name, replacement) pairs, got {value!r}")
    out = []
    for item in value:
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            out.append((item[0], item[1]))
        else:
            raise ValueError(f"{where}: each {key} entry is a name or a (name, replacement) pair, got {item!r}")
    return tuple(out)


def _hosts(value: Any, key: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(h, str) for h in value):
        raise ValueError(f"{where}: {key} must be a list of host names (e.g. ['api.example.com', '127.0.0.1']), "
                         f"got {value!r}")
    return tuple(value)


def _hook(value: Any, key: str, where: str) -> Callable[[Any], Any] | None:
    if value is None:
        return None
    if not callable(value):
        raise ValueError(f"{where}: {key} must be a function taking the request (or response) and returning it "
                         f"(or None to drop it), got {value!r}")
    hook: Callable[[Any], Any] = value
    return hook


@dataclass(frozen=True)
class CassetteConfig:
    """What to scrub and which hosts are whose, beyond the kit's own rules (see the module docs)."""

    filter_headers: tuple[tuple[str, Replacement], ...] = ()
    filter_query_parameters: tuple[tuple[str, Replacement], ...] = ()
    filter_post_data_parameters: tuple[tuple[str, Replacement], ...] = ()
    before_record_request: Callable[[Any], Any] | None = None
    before_record_response: Callable[[Any], Any] | None = None
    allowed_hosts: tuple[str, ...] = ()
    ignore_hosts: tuple[str, ...] = ()

    @property
    def filters(self) -> tuple[tuple[str, Replacement], ...]:
        """Every (name, replacement) pair of the header, query and post-data filters."""
        return (*self.filter_headers, *self.filter_query_parameters, *self.filter_post_data_parameters)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None, *, where: str = "laya_vcr_config",
                     lenient: bool = False) -> CassetteConfig:
        """Read `config`; `lenient` ignores pytest-recording's own keys (a ``vcr_config`` read as ours)."""
        if config is None:
            return cls()
        if not isinstance(config, Mapping):
            raise ValueError(f"{where} must return a dict of {', '.join(KEYS)}, got {type(config).__name__}")
        unknown = sorted(k for k in config if k not in KEYS and not (lenient and k in VCR_CONFIG_KEYS_IGNORED))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; pytest-laya reads "
                             f"{', '.join(KEYS)}")
        return cls(
            filter_headers=_pairs(config.get("filter_headers"), "filter_headers", where),
            filter_query_parameters=_pairs(config.get("filter_query_parameters"), "filter_query_parameters", where),
            filter_post_data_parameters=_pairs(config.get("filter_post_data_parameters"),
                                               "filter_post_data_parameters", where),
            before_record_request=_hook(config.get("before_record_request"), "before_record_request", where),
            before_record_response=_hook(config.get("before_record_response"), "before_record_response", where),
            allowed_hosts=_hosts(config.get("allowed_hosts"), "allowed_hosts", where),
            ignore_hosts=_hosts(config.get("ignore_hosts"), "ignore_hosts", where),
        )

    def merged(self, other: CassetteConfig) -> CassetteConfig:
        """This config with `other`'s entries added (hooks: `other` wins)."""
        return CassetteConfig(
            filter_headers=self.filter_headers + other.filter_headers,
            filter_query_parameters=self.filter_query_parameters + other.filter_query_parameters,
            filter_post_data_parameters=self.filter_post_data_parameters + other.filter_post_data_parameters,
            before_record_request=other.before_record_request or self.before_record_request,
            before_record_response=other.before_record_response or self.before_record_response,
            allowed_hosts=self.allowed_hosts + other.allowed_hosts,
            ignore_hosts=self.ignore_hosts + other.ignore_hosts,
        )
