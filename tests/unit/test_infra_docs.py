"""The operator docs and examples in infra/ name what the code really has: every setting,
every service, an environment file rote accepts, and (README.md, which infra/README.md
refers to) the rule saying which environment variables hold secrets."""

from __future__ import annotations

import re
from pathlib import Path

from services.kernel import secrets
from services.kernel.runtime import SERVICE_MODULES
from services.kernel.secrets import MIN_SCANNED_SECRET_CHARS, MIN_SECRET_CHARS, secret_floor
from services.kernel.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "infra" / "README.md").read_text()
MAIN_README = (ROOT / "README.md").read_text()
SETTINGS_SOURCE = (ROOT / "services" / "kernel" / "settings.py").read_text()


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (no quoting used)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def test_every_setting_is_in_the_environment_table() -> None:
    variables = set(re.findall(r'"(ROTE_[A-Z_]+)"', SETTINGS_SOURCE))
    assert "ROTE_STREAM_REPLICAS" in variables
    table = README[README.index("## 5. Environment") :]
    documented = set(re.findall(r"^\| `(ROTE_[A-Z_]+)` \|", table, re.MULTILINE))
    assert variables == documented


def test_every_service_is_in_the_services_table() -> None:
    rows = set(re.findall(r"^\| `([a-z]+)` \|", README, re.MULTILINE))
    assert set(SERVICE_MODULES) <= rows


def test_the_example_environment_file_is_accepted() -> None:
    env = env_file(ROOT / "infra" / "systemd" / "rote.env.example")
    settings = Settings.from_env(env)
    assert settings.stream_replicas == 3
    assert settings.event_store_kind == "postgresql"
    assert settings.nats_url is not None and settings.nats_url.startswith("nats://")
    assert settings.log_format == "json"


def test_the_unit_template_serves_its_instance() -> None:
    unit = (ROOT / "infra" / "systemd" / "rote@.service").read_text()
    assert re.search(r"^ExecStart=\S+/rote serve %i$", unit, re.MULTILINE)
    assert "EnvironmentFile=/etc/rote/rote.env" in unit


# --- which environment variables hold secrets ---------------------------------------------

SECRETS_INTRO = "An environment variable holds one when its name says so"


def secret_rule() -> tuple[dict[str, str], str]:
    """The README's bullets on secret names (by their text before the first `:`), and
    the paragraph after them."""
    start = MAIN_README.index(SECRETS_INTRO)
    bullets_start = MAIN_README.index("\n\n* ", start) + 2
    bullets_end = MAIN_README.index("\n\n", bullets_start)
    after_end = MAIN_README.index("\n\n", bullets_end + 2)
    bullets = {}
    for bullet in MAIN_README[bullets_start:bullets_end].removeprefix("* ").split("\n* "):
        head, _, body = bullet.partition(":")
        bullets[head] = " ".join(body.split())
    return bullets, " ".join(MAIN_README[bullets_end:after_end].split())


def names(text: str) -> set[str]:
    return set(re.findall(r"`([A-Z][A-Z0-9_]*)`", text))


def test_the_readme_states_the_secret_name_rule_of_the_code() -> None:
    bullets, _ = secret_rule()
    assert set(bullets) == {
        f"masked from {MIN_SECRET_CHARS} characters",
        f"masked from {MIN_SCANNED_SECRET_CHARS} characters (names that only hint)",
        "never",
    }
    strong = bullets[f"masked from {MIN_SECRET_CHARS} characters"]
    hint = bullets[f"masked from {MIN_SCANNED_SECRET_CHARS} characters (names that only hint)"]
    never = bullets["never"]
    # Every word the code knows is in its bullet...
    suffixes = set(re.findall(r"[A-Z]+", secrets._SECRET_SUFFIX.pattern))
    assert names(strong) >= secrets._SECRET_WORDS | secrets._SECRET_LAST_WORDS | suffixes
    assert names(hint) >= secrets._HINT_LAST_WORDS | {"KEY"}
    assert names(never) >= secrets._NOT_SECRET | secrets._LOCATOR_WORDS
    # ...and every name or word a bullet gives is classified as it says, alone or as the
    # last word of a name.
    for text, floor in ((strong, MIN_SECRET_CHARS), (hint, MIN_SCANNED_SECRET_CHARS)):
        for name in names(text):
            assert floor in (secret_floor(name), secret_floor(f"X_{name}")), name
    for name in names(never):
        assert secret_floor(name) is None, name
    assert set(re.findall(r"`([a-z]+)`", never)) <= secrets._FLAGS
    assert f"a number of fewer than {MIN_SCANNED_SECRET_CHARS} digits" in never


def test_the_readme_states_what_else_is_masked() -> None:
    _, after = secret_rule()
    assert f"A value under {MIN_SCANNED_SECRET_CHARS} characters is masked only where" in after
    credentials = " and ".join(f"`{name}`" for name in secrets.CREDENTIAL_ENV)
    assert f"{credentials} are masked from {MIN_SECRET_CHARS} characters" in after
    query_names = set(secrets._QUERY_SECRET_NAMES.split("|"))
    listed = re.search(r"credential query parameters \(([^;)]*)", after)
    assert listed is not None
    documented = set(re.findall(r"`([a-z_-]+)`", listed.group(1)))
    assert documented and documented <= query_names
    assert f"also masked on its own, from {MIN_SCANNED_SECRET_CHARS} characters" in after


def test_the_infra_guide_refers_to_the_readme_for_secret_names() -> None:
    assert "\n## Configuration\n" in MAIN_README
    start = README.index("Which variables count as secrets")
    paragraph = README[start : README.find("\n\n", start) % (len(README) + 1)]
    assert "(../README.md#configuration)" in paragraph
    assert not names(paragraph), "the rule is stated once, in README.md"
