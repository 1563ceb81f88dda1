"""Client settings: arguments win, LAYA_SERVED_* fill in, empty means unset, bad is a config error."""

from __future__ import annotations

import pytest

from pytest_laya import LayaConfigError, ServedLayaClient
from pytest_laya.client.settings import DEFAULT_TIMEOUT_S, ClientSettings


def test_environment_supplies_defaults():
    env = {"LAYA_SERVED_URL": "http://127.0.0.1:9/", "LAYA_SERVED_MODEL": "english",
           "LAYA_SERVED_API_KEY": "k", "LAYA_SERVED_TIMEOUT_S": "2.5"}
    s = ClientSettings.resolve(environ=env)
    assert (s.url, s.model, s.api_key, s.timeout_s) == ("http://127.0.0.1:9", "english", "k", 2.5)


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
