"""Settings refuse values that would quietly stall a service instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.kernel.settings import Settings, SettingsError, nats_url_problem, web_origin


def test_defaults_when_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ada")
    settings = Settings.from_env({})
    assert settings.max_concurrent == 2
    assert settings.replay_retries == 1
    assert settings.replay_backoff_s == 1.0
    assert settings.daily_budget_usd is None
    assert settings.data_dir == Path("/home/ada/.local/share/rote")
    assert settings.nats_url is None  # the embedded server
    assert (settings.event_store, settings.log_format) == ("sqlite", "auto")
    assert settings.prices_file is None  # the built-in price table
    assert Settings.from_env({"XDG_DATA_HOME": "/srv/data"}).data_dir == Path("/srv/data/rote")


def test_locations_come_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "ROTE_DATA_DIR": "/var/lib/rote",
            "ROTE_PRICES_FILE": "/etc/rote/prices.json",
            "ROTE_NATS_URL": "nats://10.0.0.5:4222",
            "ROTE_EVENT_STORE": "postgresql://rote@db/rote",
        }
    )
    assert settings.data_dir == Path("/var/lib/rote")
    assert settings.prices_file == Path("/etc/rote/prices.json")
    assert settings.nats_url == "nats://10.0.0.5:4222"
    assert settings.event_store == "postgresql://rote@db/rote"


def test_values_in_range_are_taken() -> None:
    settings = Settings.from_env(
        {
            "ROTE_MAX_CONCURRENT": "5",
            "ROTE_REPLAY_RETRIES": "0",
            "ROTE_REPLAY_BACKOFF_S": "0",
            "ROTE_DAILY_BUDGET_USD": "0",
            "ROTE_RUNNER_SLOTS": "1",
        }
    )
    assert settings.max_concurrent == 5
    assert settings.replay_retries == 0
    assert settings.replay_backoff_s == 0.0
    assert settings.daily_budget_usd == 0.0
    assert settings.runner_slots == 1


def test_durations_up_to_their_bound_are_taken() -> None:
    settings = Settings.from_env(
        {
            "ROTE_RUNNER_ACK_WAIT_S": "86400",
            "ROTE_REPLAY_BACKOFF_S": "3600",
            "ROTE_TOOLS_IDLE_S": "86400",
        }
    )
    assert settings.runner_ack_wait_s == 86400.0
    assert settings.replay_backoff_s == 3600.0
    assert settings.tools_idle_s == 86400.0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ROTE_MAX_CONCURRENT", "0"),  # the scheduler would never dispatch a run
        ("ROTE_MAX_CONCURRENT", "-2"),
        ("ROTE_RUNNER_SLOTS", "0"),  # the runner would never pull one
        ("ROTE_REPLAY_RETRIES", "-1"),  # a replay step would never be tried
        ("ROTE_REPLAY_RETRIES", "11"),
        ("ROTE_REPLAY_BACKOFF_S", "-0.5"),
        ("ROTE_REPLAY_BACKOFF_S", "nan"),
        ("ROTE_RUNNER_ACK_WAIT_S", "0"),
        # Longer than NATS can hold: its consumer would be refused mid start-up.
        ("ROTE_RUNNER_ACK_WAIT_S", "1e10"),
        ("ROTE_RUNNER_ACK_WAIT_S", "86401"),
        ("ROTE_REPLAY_BACKOFF_S", "1e12"),  # a retry that never comes
        ("ROTE_TOOLS_IDLE_S", "1e12"),
        ("ROTE_DAILY_BUDGET_USD", "-1"),
        ("ROTE_DAILY_BUDGET_USD", "inf"),
        ("ROTE_LLM_CONCURRENCY", "0"),
        ("ROTE_LLM_MAX_ATTEMPTS", "0"),
        ("ROTE_COMPILER_SNAPSHOT_EVERY", "-1"),
        ("ROTE_MAX_CONCURRENT", "two"),
        ("ROTE_LOG_LEVEL", "verbose"),  # would have logged at info, silently
    ],
)
def test_out_of_range_values_are_refused_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


@pytest.mark.parametrize("value", ["", " "])
def test_log_settings_left_empty_in_an_env_file_take_their_defaults(value: str) -> None:
    """`ROTE_LOG_FORMAT=` in a compose or env file means unset, as for every other."""
    settings = Settings.from_env({"ROTE_LOG_FORMAT": value, "ROTE_LOG_LEVEL": value})
    assert (settings.log_format, settings.log_level) == ("auto", "info")
    assert Settings.from_env({"ROTE_LOG_FORMAT": " JSON "}).log_format == "json"


def test_a_duration_too_long_names_its_bound() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"ROTE_RUNNER_ACK_WAIT_S": "1e10"})
    assert str(refused.value) == "ROTE_RUNNER_ACK_WAIT_S must be 86400 or less, got '1e10'"


@pytest.mark.parametrize(
    "url",
    ["nats://127.0.0.1:4222", "tls://nats.internal:4443", "ws://h:8080", "wss://h",
     "nats-1:4222", "nats://u:p@a:4222, nats://b:4222", "nats://[::1]:4222"],
)  # fmt: skip
def test_nats_urls_that_may_connect_are_accepted(url: str) -> None:
    assert nats_url_problem(url) is None
    assert Settings(nats_url=url).nats_url == url


@pytest.mark.parametrize(
    ("url", "why"),
    [("http://127.0.0.1:4222", "not http://"), ("nats://h:99999", "out of range"),
     ("nats://h:port", "not a usable"), ("nats://", "names no host"),
     ("nats://a:4222,redis://b", "not redis://")],
)  # fmt: skip
def test_nats_urls_that_never_connect_are_refused(url: str, why: str) -> None:
    problem = nats_url_problem(url)
    assert problem is not None and why in problem
    with pytest.raises(SettingsError, match="NATS"):
        Settings.from_env({"ROTE_NATS_URL": url})


def test_typed_secrets_name_their_origins() -> None:
    env = {
        "ROTE_TOOLS_SECRETS": "shop=https://Shop.test:443, Shop=http://sso.test:8080/,"
        "lab=http://[::1]:80"
    }
    assert Settings.from_env(env).tools_secrets == (
        ("shop", "https://shop.test"),
        ("shop", "http://sso.test:8080"),
        ("lab", "http://[::1]"),
    )


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("shop", "name=origin pairs"),
        ("2fa=https://a.test", "name=origin pairs"),
        ("shop=shop.test", "http(s)://host[:port]"),
        ("shop=ftp://shop.test", "http(s)://host[:port]"),
        ("shop=https://shop.test/login", "http(s)://host[:port]"),
        ("shop=https://shop.test:99999", "http(s)://host[:port]"),
    ],
)
def test_typed_secrets_that_cannot_be_used_are_refused(entry: str, said: str) -> None:
    with pytest.raises(SettingsError, match="ROTE_TOOLS_SECRETS") as refused:
        Settings.from_env({"ROTE_TOOLS_SECRETS": entry})
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://Shop.test/login?next=/", "https://shop.test"),
        ("http://127.0.0.1:8000/x", "http://127.0.0.1:8000"),
        ("http://shop.test:80", "http://shop.test"),
        ("about:blank", None),
        ("data:text/html,hi", None),
        ("https://:443/", None),
    ],
)
def test_web_origin(url: str, origin: str | None) -> None:
    assert web_origin(url) == origin
