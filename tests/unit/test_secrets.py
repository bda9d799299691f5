"""What `redact` masks in any text that may reach a log, an event or an error."""

from __future__ import annotations

import json

import msgspec
import pytest

from contracts.tasks import CreateTask
from contracts.tools import CloseSession, ToolMetadata, ToolResult
from services.kernel import secrets
from services.kernel.codec import decode
from services.kernel.errors import validation_error
from services.kernel.secrets import MASK, redact, register_credential, register_from_env
from services.kernel.settings import Settings
from services.tools.local import command_env


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("connect nats://s3cret-token@10.0.0.5:4222 failed", f"nats://{MASK}@10.0.0.5:4222"),
        ("nats://alice:hunter22@nats:4222", f"nats://alice:{MASK}@nats:4222"),
        ("tls://tok3n@a,wss://t0k@b", f"tls://{MASK}@a,wss://{MASK}@b"),
        ("postgresql://db/rote?password=pa55&sslmode=off", f"?password={MASK}&sslmode=off"),
        ("key sk-ant-api03-abcdefghijkl in a message", f"key {MASK} in a message"),
        # No user name: the password alone is the userinfo's secret part.
        ("event store postgresql://:pa55@db:5432/rote", f"postgresql://:{MASK}@db:5432/rote"),
        ("nats://:tok3n@nats:4222", f"nats://:{MASK}@nats:4222"),
        # An unencoded @ in the password: masked up to the last @ before the host.
        ("postgresql://rote:Pg@hunter22@db/rote", f"postgresql://rote:{MASK}@db/rote"),
        # Unencoded /?#, escaped quotes: all part of the password, up to the last @.
        ("postgresql://u:pa/sswordXYZ@h/db", f"postgresql://u:{MASK}@h/db"),
        ("redis://:pw#secret123@h", f"redis://:{MASK}@h"),
        ("postgresql://u:x?hunter22@h/db", f"postgresql://u:{MASK}@h/db"),
        ('{"e":"postgresql://u:ab\\"cdefghij@h"}', f'{{"e":"postgresql://u:{MASK}@h"}}'),
        ("postgresql://u:pw@[::1]:5432/db", f"postgresql://u:{MASK}@[::1]:5432/db"),
        # Credential query parameters, whatever their case.
        ("https://api.test/v1?Access_Token=tok3n&page=2", f"?Access_Token={MASK}&page=2"),
        ("https://api.test/x?api_key=abcdefghijkl#top", f"?api_key={MASK}#top"),
        ("/cb?code=1&client_secret=pa55&refresh_token=t0k@", f"client_secret={MASK}&refresh"),
        ("see /cb?id_token=hunter22 and", f"/cb?id_token={MASK} and"),
        # A quote, <, > or backslash is part of the value; & # whitespace and " end it.
        ("/r?password=abc'hunter22&x=1", f"?password={MASK}&x=1"),
        ("/r?token=pa55<hunter22>\\x#top", f"?token={MASK}#top"),
        ('<a href="/r?token=hunter22">reset</a>', f'<a href="/r?token={MASK}">reset</a>'),
        ('{"u":"/r?token=hunter22\\"}', f'{{"u":"/r?token={MASK}\\"}}'),
    ],
)
def test_credentials_in_urls_and_key_shapes_are_masked(text: str, shown: str) -> None:
    masked = redact(text)
    assert shown in masked
    for secret in (
        *("s3cret-token", "hunter22", "tok3n", "t0k@", "pa55", "abcdefghijkl"),
        *("sswordXYZ", "secret123", "cdefghij"),
    ):
        assert secret not in masked


def test_ordinary_urls_user_names_and_a_pages_own_links_are_left_alone() -> None:
    # Pagination cursors and a page's signed links are its content: masked, a run that
    # follows them would never compile.
    text = (
        "GET https://alice@example.test/news?page=2&page_token=abc&next_token=def "
        "https://cdn.test/img.png?sig=xyz&signature=uvw http://[::1]:8080/a@b and "
        "http://127.0.0.1:8000/"
    )
    assert redact(text) == text


def test_an_at_later_in_a_url_over_masks_rather_than_leaks() -> None:
    # A password may hold unencoded / ? # @, so it runs to the last @ before a host-like
    # part: a port followed by /@user, or an e-mail in the query, is masked with it.
    assert redact("https://medium.com:443/@alice") == f"https://medium.com:{MASK}@alice"
    assert redact("https://u:hunter22@h/p?mail=a@b.c") == f"https://u:{MASK}@b.c"
    # A bare " ends it: the next field of a JSON line is not swallowed.
    line = '{"url":"nats://u:hunter22@nats:4222","to":"a@b.c"}'
    assert redact(line) == f'{{"url":"nats://u:{MASK}@nats:4222","to":"a@b.c"}}'


@pytest.fixture
def no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Registered secrets are process-wide: each test here starts from none.
    monkeypatch.setattr(secrets, "_secrets", set())


@pytest.mark.usefixtures("no_secrets")
def test_a_short_api_key_is_masked_but_flags_and_counts_are_not() -> None:
    register_from_env(
        {
            "ANTHROPIC_API_KEY": "k3y!",
            "ROTE_DEBUG_TOKEN": "on",
            "SKIP_PASSWORD": "true",
            "PASSWORD_MIN_LENGTH": "12",
        }
    )
    assert redact("invalid x-api-key: 'k3y!'") == f"invalid x-api-key: '{MASK}'"
    # A variable found only by its name may hold a flag or a count: they stay readable.
    assert redact("debug on, skip true, 12 items") == "debug on, skip true, 12 items"


@pytest.mark.usefixtures("no_secrets")
def test_a_short_password_is_masked_as_a_word_not_inside_other_words() -> None:
    register_from_env({"ROTE_PG_PASSWORD": "rote", "DEPLOY_TOKEN": "tok3n-long-enough"})
    assert redact("user rote, password rote.") == f"user {MASK}, password {MASK}."
    # Inside other words it is no secret: masking it there would mangle every output
    # (and a mask in a tool output keeps the run from compiling).
    assert redact("rotenone at /srv/protest") == "rotenone at /srv/protest"
    # Nor inside dotted, dashed, slashed or underscored names: subjects, hosts, paths.
    names = "rote.api.llm.complete rote-runner /srv/rote rote/x rote@h ROTE_X rote_y x.rote"
    assert redact(f"call {names}") == f"call {names}"
    assert redact("(rote), 'rote' rote: rote...") == f"({MASK}), '{MASK}' {MASK}: {MASK}..."
    # Long secrets are masked wherever they occur.
    assert redact("Xtok3n-long-enoughX") == f"X{MASK}X"


# Secret values as a deployment sets them, each shown in a line of text (a command's
# output, /proc/<pid>/environ, a driver's error).
SECRET_ENV = {
    "AWS_SECRET_ACCESS_KEY": "AwsSecretKey0123456789abcdef",
    "STRIPE_KEY": "sk_live_998877abc",
    "db_password": "lowercasePw88",  # names are matched case-insensitively
    "SHORT_PASSWORD": "pw12345",  # 7 characters: still a password
    "PGPASSWORD": "pgpw42",
    "MYSQL_PWD": "mysqlPwd777",
    "DB_PASS": "dbPass555",
    "GITHUB_PAT": "ghp_GithubPat0000",
    "API_TOKEN": "t0k3",  # 4 characters under a name that says secret
    "SLACK_WEBHOOK_URL": "https://hooks.slack.test/services/T0/B0/SlackHook123",
    "SENTRY_DSN": "https://abcdef0123@sentry.test/42",
    "DATABASE_URL": "postgresql://db.internal/app",
    "SECRET_KEY_BASE": "railsSecretKeyBase",
    "GCPCREDENTIALS": "gcpCredentialsJson",  # glued names, like PGPASSWORD
    "MYCREDENTIAL": "myCredential42",
}
# Names that do not say secret: the shell's working directory, paths, a socket.
PLAIN_ENV = {
    "PWD": "/srv/app",
    "OLDPWD": "/srv",
    "PATH": "/usr/local/bin:/usr/bin",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "SSL_KEY_FILE": "/etc/ssl/app.key",
    "TOKEN_URL": "https://auth.test/oauth/token",
    "CACHE_KEY_PREFIX": "shop",
    "SORT_KEY": "name",  # KEY only hints: a short value stays readable
}


@pytest.mark.usefixtures("no_secrets")
def test_values_of_secret_looking_variables_are_masked() -> None:
    register_from_env({**SECRET_ENV, **PLAIN_ENV})
    for name, value in SECRET_ENV.items():
        assert redact(f"{name}={value}\0next") == f"{name}={MASK}\0next", name
    for name, value in PLAIN_ENV.items():
        assert redact(f"{name}={value}") == f"{name}={value}", name


def test_commands_do_not_see_secret_looking_variables() -> None:
    seen = command_env({**SECRET_ENV, "PATH": "/usr/bin"})
    assert seen == {"PATH": "/usr/bin"}


@pytest.mark.usefixtures("no_secrets")
def test_passwords_of_urls_in_any_variable_are_masked_anywhere() -> None:
    # Registered as written and decoded: a driver quotes the password it sent.
    register_from_env(
        {
            "HTTP_PROXY": "http://proxy:pr%40xyPw1@proxy.internal:3128",
            "ROTE_EVENT_STORE": "postgresql://:EmptyUserPw@db/rote",
            "ROTE_NATS_URL": "nats://natsTok3n@nats:4222",
            "REPORT_URL": "https://reports.test/feed?access_token=feedTok9",
        }
    )
    masked = redact("auth failed for 'pr@xyPw1' / EmptyUserPw / natsTok3n / feedTok9")
    assert masked == f"auth failed for '{MASK}' / {MASK} / {MASK} / {MASK}"


@pytest.mark.usefixtures("no_secrets")
def test_a_short_url_password_is_masked_in_its_url_only() -> None:
    # A dev password registered everywhere would mask "pass" in "passport".
    register_from_env({"ROTE_EVENT_STORE": "postgres://user:pass@localhost:5432/rote"})
    assert redact("postgres://user:pass@localhost:5432/rote, passport") == (
        f"postgres://user:{MASK}@localhost:5432/rote, passport"
    )


@pytest.mark.usefixtures("no_secrets")
def test_settings_urls_are_masked_in_its_repr_and_registered() -> None:
    # However the URL came (an argument, the environment), its password is a secret.
    settings = Settings(
        nats_url="nats://rote:Zq8vLx3m@Rt9Wb@nats:4222",
        event_store="postgresql://rote:Pg%2Fpw7788@db:5432/rote",
    )
    shown = repr(settings)
    assert "nats_url='nats://rote:[redacted]@nats:4222'" in shown
    assert "event_store='postgresql://rote:[redacted]@db:5432/rote'" in shown
    assert redact("cannot log in with Zq8vLx3m@Rt9Wb or Pg/pw7788") == (
        f"cannot log in with {MASK} or {MASK}"
    )


@pytest.mark.usefixtures("no_secrets")
def test_credentials_under_four_characters_would_mask_ordinary_text() -> None:
    register_credential("abc")
    assert redact("abc def") == "abc def"


@pytest.mark.usefixtures("no_secrets")
@pytest.mark.parametrize(
    ("key", "telling"),
    [
        ("litellm-master-key-abc\r", "master-key"),  # an env file with CRLF line ends
        ("team-key-7\r\n", "team-key"),
        ("in\rside-key", "side-key"),
    ],
)
def test_a_credential_is_masked_raw_trimmed_and_escaped(key: str, telling: str) -> None:
    register_credential(key)
    escaped = key.encode("unicode_escape").decode()
    quoted = [
        f"raw {key} end",
        f"sent {key.strip()} end",
        f"Illegal header value b'Bearer {escaped}'",  # how httpx quotes a refused header
        json.dumps({"key": key}),
        repr(key),
    ]
    for text in quoted:
        masked = redact(text)
        assert MASK in masked
        assert telling not in masked, masked


@pytest.mark.usefixtures("no_secrets")
def test_a_contract_is_masked_in_its_values_and_nested_keys_and_kept_when_clean() -> None:
    register_credential("tok3n-long-enough")
    result = ToolResult(
        ok=True,
        duration_ms=1,
        output={"sessions": {"tok3n-long-enough": ["tok3n-long-enough"]}},
        metadata=ToolMetadata(url="https://u:hunter22@site.test/", title="tok3n-long-enough"),
    )
    masked = secrets.redact_struct(result)
    assert masked is not None
    assert masked.output == {"sessions": {MASK: [MASK]}}
    assert masked.metadata == ToolMetadata(url=f"https://u:{MASK}@site.test/", title=MASK)
    clean = ToolResult(ok=True, duration_ms=1, output={"a": "b"})
    assert secrets.redact_struct(clean) is clean  # nothing copied on the hot path
    # A value whose mask would break the contract: nothing rather than the secret.
    assert secrets.redact_struct(CloseSession(run_id="tok3n-long-enough")) is None


def test_an_error_masks_the_field_it_names_as_it_masks_its_message() -> None:
    # A key pasted where a field belongs is named twice by the error (its message and its
    # field): both reach the caller, and an intake rejection keeps them as an event.
    for key, telling in (
        ("https://deploy:hunter22@git.test/repo", "hunter22"),
        ("sk-ant-api03-abcdefghijkl", "abcdefghijkl"),
    ):
        with pytest.raises(msgspec.ValidationError) as caught:
            decode(json.dumps({"name": "a", "prompt": "b", key: 1}).encode(), CreateTask)
        info = validation_error(caught.value).info()
        assert info.field is not None and info.message is not None
        assert telling not in info.field
        assert telling not in info.message
        assert MASK in info.field
