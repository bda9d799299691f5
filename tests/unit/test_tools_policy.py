"""The deny-by-default policy: allowed tools, command patterns, path confinement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contracts.tools import ExecTool
from services.kernel.errors import ServiceError
from services.kernel.settings import SettingsError
from services.tools.policy import PathRoots, check_allowed, check_command, split_command
from services.tools.toolbox import ToolBox, ToolsConfig


def _refusal(fn, *args) -> ServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(ServiceError) as caught:
        fn(*args)
    return caught.value


def test_a_tool_outside_allowed_tools_is_refused() -> None:
    check_allowed("browser_navigate", ["browser_navigate", "browser_extract"])
    err = _refusal(check_allowed, "shell_exec", ["browser_navigate"])
    assert (err.code, err.field, err.status) == ("tool_not_allowed", "tool", 403)
    assert _refusal(check_allowed, "browser_navigate", []).code == "tool_not_allowed"


def _call(tool: str, allowed_tools: list[str]) -> ExecTool:
    return ExecTool(
        run_id="run-1", allowed_tools=allowed_tools, tool=tool, input={"purpose": "act"}
    )


def test_browser_candidates_comes_with_any_browser_tool() -> None:
    """It reads only what the run's own page shows: a run allowed a browser tool may
    call it unnamed (a replay repairing a step does); a run without one may not."""
    box = ToolBox(ToolsConfig(data_dir=Path("/nonexistent")), browsers=None)
    for allowed in (["browser_navigate", "browser_extract"], ["browser_click"]):
        assert box.prepare(_call("browser_candidates", allowed)).kind == "browser"
    for allowed in (["shell_exec"], ["file_read", "noop"], []):
        with pytest.raises(ServiceError) as caught:
            box.prepare(_call("browser_candidates", allowed))
        assert (caught.value.code, caught.value.field) == ("tool_not_allowed", "tool")
    # Only it: any other browser tool must be named.
    err = _refusal(check_allowed, "browser_click", ["browser_navigate", "browser_candidates"])
    assert err.code == "tool_not_allowed"


def test_no_patterns_means_no_commands() -> None:
    err = _refusal(check_command, ["echo", "hi"], ())
    assert err.code == "command_denied"
    assert "ROTE_TOOLS_ALLOW_COMMANDS" in err.message


@pytest.mark.parametrize(
    ("command", "patterns", "allowed"),
    [
        ("echo hello", ["echo *"], True),
        ("echo", ["echo", "echo *"], True),
        ("df -h", ["df -h"], True),
        ("df -h /", ["df -h"], False),
        ("rm -rf /", ["echo *", "df *"], False),
        ("ECHO hi", ["echo *"], False),  # case-sensitive on every platform
        ("git  status", ["git status"], True),  # matched on the canonical line
        ("grep 'a b' f.txt", ["grep 'a b' *"], True),
        # Word by word: `*` matches within one word, never across words...
        ("cat app.log", ["cat *.log"], True),
        ("cat /etc/shadow app.log", ["cat *.log"], False),
        ("python3 run.py", ["python3 *.py"], True),
        ("python3 -c 'import os' x.py", ["python3 *.py"], False),
        ("ls -la /", ["ls *"], False),
        ("echo hello world", ["echo *"], False),
        ("echo", ["echo *"], False),
        # ...and a last `**` admits any further words, none included.
        ("echo", ["echo **"], True),
        ("echo hello world", ["echo **"], True),
        ("git log --oneline -n 5", ["git log **"], True),
        ("git status", ["git log **"], False),
        ("git", ["git log **"], False),
        ("ls -l a b", ["ls -l **"], True),
        # `**` anywhere but last is a plain word pattern: exactly one word.
        ("ls a b c", ["ls ** b"], False),
        ("ls a b", ["ls ** b"], True),
    ],
)
def test_commands_match_fnmatch_patterns(command: str, patterns: list[str], allowed: bool) -> None:
    argv = split_command(command)
    if allowed:
        assert check_command(argv, patterns)
    else:
        assert _refusal(check_command, argv, patterns).code == "command_denied"


def test_shell_operators_are_plain_words_not_a_way_around_the_patterns() -> None:
    # "echo **" allows echo; the `;` is an argument to echo, never a second command.
    argv = split_command("echo hi; rm -rf /tmp/x")
    assert argv == ["echo", "hi;", "rm", "-rf", "/tmp/x"]
    assert check_command(argv, ["echo **"]) == "echo 'hi;' rm -rf /tmp/x"
    # A pattern naming the first word only does not admit a chained command.
    assert _refusal(check_command, split_command("ls && rm x"), ["ls"]).code == "command_denied"


def test_unsplittable_command_is_invalid() -> None:
    err = _refusal(split_command, "echo 'unterminated")
    assert (err.code, err.field) == ("invalid_request", "input.command")
    assert _refusal(split_command, "   ").code == "invalid_request"
    # exec cannot pass a NUL in an argument.
    err = _refusal(split_command, "echo a\x00b")
    assert (err.code, err.field) == ("invalid_request", "input.command")


def test_an_unreadable_pattern_stops_the_tools_service_at_start(tmp_path: Path) -> None:
    config = ToolsConfig(data_dir=tmp_path, allowed_commands=("echo **", "grep 'x *"))
    with pytest.raises(SettingsError, match=r"ROTE_TOOLS_ALLOW_COMMANDS.*grep 'x"):
        ToolBox(config, None)


def test_an_unknown_home_directory_is_a_refusal(tmp_path: Path) -> None:
    roots = PathRoots.of([tmp_path])
    # expanduser() raises RuntimeError for a user the system does not know.
    err = _refusal(roots.confine, "~no_such_user_rote_test/x")
    assert (err.code, err.field) == ("path_denied", "input.path")
    assert "~no_such_user_rote_test/x" in err.message


def test_paths_are_confined_to_the_roots(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    roots = PathRoots.of([root])

    assert roots.confine(str(root / "sub" / "a.txt")) == root.resolve() / "sub" / "a.txt"
    assert roots.confine("sub/new.txt") == root.resolve() / "sub" / "new.txt"  # relative
    assert roots.confine(str(root)) == root.resolve()

    for escape in [
        str(outside / "secret.txt"),
        str(root / ".." / "outside" / "secret.txt"),
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "/etc/passwd",
        str(tmp_path / "rootx" / "a"),  # a sibling sharing the prefix is not inside
    ]:
        err = _refusal(roots.confine, escape)
        assert (err.code, err.field) == ("path_denied", "input.path"), escape


def test_symlinks_cannot_lead_out(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    os.symlink(outside / "secret.txt", root / "link.txt")
    os.symlink(outside, root / "dirlink")
    os.symlink(root / "loop", root / "loop")
    roots = PathRoots.of([root])
    for escape in ["link.txt", "dirlink/secret.txt", "dirlink/new.txt"]:
        assert _refusal(roots.confine, escape).code == "path_denied", escape
    assert _refusal(roots.confine, "loop").code == "path_denied"
    # A symlink that stays inside is fine, and resolves to its target.
    (root / "real.txt").write_text("r")
    os.symlink(root / "real.txt", root / "inside.txt")
    assert roots.confine("inside.txt") == (root / "real.txt").resolve()


def test_a_root_that_is_a_symlink_is_compared_by_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    roots = PathRoots.of([tmp_path / "alias"])
    assert roots.confine(str(tmp_path / "alias" / "f")) == real.resolve() / "f"
    assert roots.confine(str(real / "f")) == real.resolve() / "f"


def test_no_roots_means_no_paths(tmp_path: Path) -> None:
    err = _refusal(PathRoots.of([]).confine, str(tmp_path / "a"))
    assert err.code == "path_denied"
    assert "ROTE_TOOLS_PATH_ROOTS" in err.message


def test_several_roots(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    roots = PathRoots.of([a, b])
    assert roots.confine(str(b / "x")) == b.resolve() / "x"
    assert roots.confine("x") == a.resolve() / "x"  # relative: from the first root
