"""The operator docs and examples in infra/ name what the code really has: every setting,
every service, and an environment file rote accepts."""

from __future__ import annotations

import re
from pathlib import Path

from services.kernel.runtime import SERVICE_MODULES
from services.kernel.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "infra" / "README.md").read_text()
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
