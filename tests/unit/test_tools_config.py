"""The tools service's configuration from the environment: what an operator sets is
what the browser pool and the local tools get, and a bad value is refused up front."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.kernel.settings import Settings, SettingsError
from services.tools.toolbox import ToolsConfig


def test_environment_reaches_the_browser_pool_and_the_local_tools() -> None:
    settings = Settings.from_env(
        {
            "ROTE_DATA_DIR": "/tmp/rote-config-test",
            "ROTE_TOOLS_POOL_SIZE": "0",
            "ROTE_TOOLS_IDLE_S": "45",
            "ROTE_TOOLS_ALLOW_COMMANDS": "df *, uptime",
            "ROTE_TOOLS_PATH_ROOTS": "/srv/reports",
            "ROTE_CHROMIUM": "/opt/chromium/chrome",
        }
    )
    config = ToolsConfig.from_settings(settings)
    assert config.browser.pool_size == 0 and config.browser.idle_timeout_s == 45.0
    assert config.browser.chromium == "/opt/chromium/chrome"
    assert config.allowed_commands == ("df *", "uptime")
    assert config.path_roots == ("/srv/reports",)
    defaults = ToolsConfig.from_settings(Settings.from_env({}))
    assert (defaults.browser.pool_size, defaults.browser.idle_timeout_s) == (2, 900.0)
    assert defaults.allowed_commands == () and defaults.path_roots == ()  # deny by default


@pytest.mark.parametrize(
    ("name", "value"),
    [("ROTE_TOOLS_POOL_SIZE", "-1"), ("ROTE_TOOLS_POOL_SIZE", "many"),
     ("ROTE_TOOLS_POOL_SIZE", "33"), ("ROTE_TOOLS_IDLE_S", "0"), ("ROTE_TOOLS_IDLE_S", "soon")],
)  # fmt: skip
def test_bad_tools_settings_are_refused_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_screenshots_are_reported_at_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A relative ROTE_DATA_DIR: the path a screenshot's result gives must not depend
    # on the directory the tools service happened to start in.
    monkeypatch.chdir(tmp_path)
    config = ToolsConfig.from_settings(Settings.from_env({"ROTE_DATA_DIR": "data"}))
    assert config.limits.screenshot_dir == tmp_path / "data" / "blobs"
