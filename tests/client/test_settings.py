"""Client settings: arguments win, LAYA_SERVED_* fill in, empty means unset, bad is a config error."""

from __future__ import annotations

import httpx
import pytest

from pytest_laya import LayaConfigError, ServedLayaClient
from pytest_laya.client.base import loopback_direct, ssl_context
from pytest_laya.client.secret import Secret
from pytest_laya.client.settings import DEFAULT_TIMEOUT_S, ClientSettings
from tests.helpers.leaks import URL_UNSAFE_CANARY as KEY


def test_environment_supplies_defaults():
    env = {"LAYA_SERVED_URL": "http://127.0.0.1:9/", "LAYA_SERVED_MODEL": "english",
           "LAYA_SERVED_API_KEY": "k", "LAYA_SERVED_TIMEOUT_S": "2.5"}
    s = ClientSettings.resolve(environ=env)
    assert (s.url, s.model, s.api_key.reveal(), s.timeout_s) == ("http://127.0.0.1:9", "english", "k", 2.5)
    assert "k" not in repr(s.api_key) and s.api_key == Secret("k")


def test_arguments_win_over_the_environment():
    env = {"LAYA_SERVED_URL": "http://a:1", "LAYA_SERVED_MODEL": "english", "LAYA_SERVED_TIMEOUT_S": "9"}
    s = ClientSettings.resolve("http://b:2", model="tiny", timeout_s=1, environ=env)
    assert (s.url, s.model, s.timeout_s) == ("http://b:2", "tiny", 1.0)


def test_empty_variables_count_as_unset():
    env = {"LAYA_SERVED_URL": "http://a:1", "LAYA_SERVED_MODEL": "", "LAYA_SERVED_API_KEY": "", "LAYA_SERVED_TIMEOUT_S": ""}
    s = ClientSettings.resolve(environ=env)
    assert (s.model, s.api_key, s.timeout_s) == (None, None, DEFAULT_TIMEOUT_S)


def test_missing_url_says_what_to_set():
    with pytest.raises(LayaConfigError, match="LAYA_SERVED_URL") as info:
        ClientSettings.resolve(environ={"LAYA_SERVED_URL": ""})
    assert info.value.code == "missing_url"


@pytest.mark.parametrize(
    ("env", "kwargs", "message"),
    [
        ({"LAYA_SERVED_URL": "localhost:8000"}, {}, "LAYA_SERVED_URL must be an http"),
        ({}, {"url": "ftp://x"}, "url must be an http"),
        ({"LAYA_SERVED_URL": "http://a:1", "LAYA_SERVED_TIMEOUT_S": "soon"}, {}, "LAYA_SERVED_TIMEOUT_S must be a number"),
        ({"LAYA_SERVED_URL": "http://a:1", "LAYA_SERVED_TIMEOUT_S": "-1"}, {}, "positive"),
        ({"LAYA_SERVED_URL": "http://a:1"}, {"timeout_s": float("inf")}, "positive"),
    ],
)
def test_bad_values_are_config_errors_naming_the_setting(env, kwargs, message):
    with pytest.raises(LayaConfigError, match=message) as info:
        ClientSettings.resolve(environ=env, **kwargs)
    assert info.value.code == "bad_setting"


def test_credentials_in_a_url_are_never_echoed():
    with pytest.raises(LayaConfigError) as info:
        ClientSettings.resolve("ftp://user:hunter2@host")
    assert "hunter2" not in str(info.value)


def test_client_reads_the_environment(monkeypatch):
    monkeypatch.setenv("LAYA_SERVED_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("LAYA_SERVED_API_KEY", "secret-canary")
    client = ServedLayaClient()
    assert client.url == "http://127.0.0.1:1"
    assert "secret-canary" not in repr(client) and "***" in repr(client)
    client.close()


def test_a_bad_request_id_is_a_config_error():
    client = ServedLayaClient("http://127.0.0.1:1")
    with pytest.raises(LayaConfigError, match="request_id"):
        client.decide("s", {"q": {"type": "noul", "instructions": "?"}}, request_id="has space")
    client.close()


# --------------------------------------------------------------------------- keys and URLs (issue 16)


@pytest.mark.parametrize(("key", "says"), [
    (KEY + "\n", "a line feed at the end (read the secret file with .strip())"),
    (KEY + "\r\n", "a carriage return"),
    (" " + KEY, "a space at the start"),
    (KEY[:5] + "\t" + KEY[5:], "a tab at position 6"),
    (KEY + "\u00e9", "a non-ASCII character at the end"),
    (KEY + "\u4e2d", "a non-ASCII character at the end"),
    (KEY[:3] + "\x00" + KEY[3:], "a control character at position 4"),
    (KEY + "\u00a0", "whitespace at the end"),
])
@pytest.mark.parametrize("source", ["api_key", "LAYA_SERVED_API_KEY"])
def test_a_key_that_cannot_be_sent_is_a_config_error_that_never_shows_it(key, says, source):
    env = {"LAYA_SERVED_URL": "http://127.0.0.1:1"}
    kwargs = {}
    if source == "api_key":
        kwargs["api_key"] = key
    else:
        env["LAYA_SERVED_API_KEY"] = key
    with pytest.raises(LayaConfigError) as info:
        ClientSettings.resolve(environ=env, **kwargs)
    message = str(info.value)
    assert info.value.code == "bad_setting" and says in message and f"from {source}" in message
    assert KEY not in message and KEY[:8] not in message and KEY[-8:] not in message


def test_a_client_with_a_bad_key_sends_nothing():
    with pytest.raises(LayaConfigError, match="line feed") as info:
        ServedLayaClient("http://127.0.0.1:1", api_key=KEY + "\n")
    assert KEY not in str(info.value)


def test_a_secret_never_prints_and_never_pickles():
    import pickle

    secret = Secret(KEY)
    shown = [repr(secret), str(secret), f"{secret}", f"{secret!r}", "%s" % secret, format(secret, ">40")]
    assert all(KEY not in text and "***" in text for text in shown)
    assert secret.reveal() == KEY and secret == Secret(KEY) and secret != Secret(KEY + "x") and secret != KEY
    assert Secret.wrap("") is None and Secret.wrap(None) is None and Secret.wrap(secret) is secret
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    settings = ClientSettings("http://user:hunter22@127.0.0.1:1", api_key=KEY)
    assert isinstance(settings.api_key, Secret)
    assert KEY not in repr(settings) and "hunter22" not in repr(settings)


@pytest.mark.parametrize(("url", "says"), [
    ("http://[::1", "cannot be read"),
    ("http://127.0.0.1:99999", "cannot be read"),
    ("http://127.0.0.1:0", "port 0"),
    ("http://exa mple.com", "whitespace"),
    ("http://127.0.0.1:8000\n", "whitespace"),
    ("http://a\x00b", "control character"),
    ("http://127.0.0.1:8000/?token=hunter22", "no query string"),
    ("http://127.0.0.1:8000/#x", "no query string"),
    ("http://:8000", "no host"),
    ("http://user:hunter22@[::1", "cannot be read"),
    ("user:hunter22@127.0.0.1:8000", "must be an http"),
])
def test_a_url_the_client_cannot_use_is_a_config_error_without_its_secrets(url, says):
    with pytest.raises(LayaConfigError) as info:
        ClientSettings.resolve(url)
    assert info.value.code == "bad_setting" and says in str(info.value)
    assert "hunter22" not in str(info.value)


def test_a_non_string_setting_is_a_config_error():
    for kwargs in ({"url": 8000}, {"url": "http://a:1", "model": 3}, {"url": "http://a:1", "api_key": 123}):
        with pytest.raises(LayaConfigError) as info:
            ClientSettings.resolve(**kwargs)
        assert info.value.code == "bad_setting"


@pytest.mark.parametrize(("url", "shown"), [
    ("http://user:hunter22@host:1/p", "http://***@host:1/p"),
    ("http://user:p@ss:hunter22@host", "http://***@host"),
    ("http://user:hunter%2F22@host?x=1", "http://***@host?***"),
    ("user:hunter22@host:1", "***@host:1"),
    ("http://host:1/p?token=hunter22#frag", "http://host:1/p?***#frag"),
    ("http://host:1", "http://host:1"),
    ("http://[::1", "http://[::1"),
])
def test_redact_url_hides_credentials_and_queries_and_never_raises(url, shown):
    from pytest_laya.client import redact_url

    assert redact_url(url) == shown


@pytest.mark.parametrize("route", ["/v1/systemone", "/v1/systemone/", "/v1/systemone/batch", "/health"])
def test_a_url_that_already_ends_in_a_route_says_to_drop_it(route):
    # Else every decision would 404 at /v1/systemone/v1/systemone, with no hint why.
    with pytest.raises(LayaConfigError) as caught:
        ClientSettings.resolve(f"http://127.0.0.1:8000/gateway{route}", environ={})
    assert caught.value.code == "bad_setting"
    assert f"it ends in {route.rstrip('/')}, which the client adds itself: drop it" in str(caught.value)
    # A prefix before the routes is a base URL like any other.
    assert ClientSettings.resolve("http://127.0.0.1:8000/gateway", environ={}).url == "http://127.0.0.1:8000/gateway"


def _mounts(client: httpx.Client) -> list[tuple[str, object]]:
    return [(pattern.pattern, None if transport is None else getattr(transport._pool, "_proxy_url", "direct"))
            for pattern, transport in client._mounts.items()]


def test_every_client_follows_the_proxy_environment_of_its_moment_as_httpx_does(proxy_from, monkeypatch):
    """The proxies are read once per environment, not once per client: a variable set or unset
    between two clients still reaches the second, with the mounts httpx itself would build."""
    url = "http://laya.invalid:8080"
    seen = []
    for setup in (lambda: None, lambda: proxy_from("http://proxy.invalid:3128"),
                  lambda: monkeypatch.setenv("no_proxy", "laya.invalid,10.0.0.1"),
                  lambda: monkeypatch.delenv("HTTP_PROXY")):
        setup()
        with ServedLayaClient(url) as client:
            expected = httpx.Client(verify=ssl_context(), mounts=loopback_direct(url))
            assert _mounts(client._http) == _mounts(expected)
            seen.append(_mounts(client._http))
            expected.close()
    assert seen[0] != seen[1] != seen[2] != seen[3]


def test_a_plain_http_client_loads_no_ca_bundle_and_its_proxies_trust_what_httpx_would(proxy_from, monkeypatch):
    """The CA bundle (~35 ms) is loaded only for what may speak TLS: an https URL, or a proxy."""
    import pytest_laya.client.base as base

    def no_bundle() -> None:
        raise AssertionError("a plain-http client loaded the CA bundle")

    monkeypatch.setattr(base, "ssl_context", no_bundle)
    with ServedLayaClient("http://laya.invalid:8080") as client:
        assert not client._http._transport._pool._ssl_context.get_ca_certs()
    monkeypatch.setattr(base, "ssl_context", ssl_context)
    proxy_from("https://proxy.invalid:3128")
    with ServedLayaClient("http://laya.invalid:8080") as client:
        proxied = [transport for transport in client._http._mounts.values() if transport is not None]
        assert proxied and all(transport._pool._ssl_context is ssl_context() for transport in proxied)
