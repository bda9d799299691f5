"""Deny-by-default policy: which tools a call may use, which commands may run, which
paths may be touched. Every rule refuses with a ServiceError before anything runs. A
call may use the tools its allowed_tools names, and browser_candidates when it names
any browser tool (IMPLIED_BY_BROWSER).

Command patterns (ROTE_TOOLS_ALLOW_COMMANDS) are matched word by word: a pattern is
split like a command (shlex), and each of its words must match exactly one word of
the command, so the counts must agree. A `*` therefore never spans words: `cat *.log`
admits `cat app.log` but not `cat /etc/shadow app.log`. A last pattern word of exactly
`**` stands for any further words, none included: `echo **` admits `echo` and
`echo a b c` (and any option: `**` says "anything").

Within a word, wildcards never lead out of the directory the pattern names: the word
and the pattern are compared path component by component (split at `/`), as a shell
glob does. `*`, `?` and `[...]` match within one component (never a `/`); a component
that is exactly `**` matches any number of non-empty components (`/opt/scripts/**`
admits any file below /opt/scripts); a `..` component is matched only by a `..`
written in the pattern, never by a wildcard; and no wildcard matches an empty
component (a relative `*/*` never admits the absolute `/etc`). So `cat /data/*` admits
`cat /data/a.log`, but neither `cat /data/../etc/passwd` nor `cat /data/a/b`.

A word starting with `-` (an option) is matched only by a pattern word that starts with
`-` itself, or by a whole-word `*` (any one word: `df *` admits `df -h`): `python3 *.py`
does not admit `python3 '-cimport os;...#.py'`, nor `sort *.csv` `--files0-from=x.csv`.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

from contracts.tools import is_browser_tool
from services.kernel.errors import ServiceError
from services.kernel.text import cut_text

# Tools a call may use without naming them, when it names any browser tool: they only
# read what the run's own page already shows (browser_candidates: its controls and its
# lists, no other page, nothing acted on), so allowing the run's page allows them. A
# replay repairs a step with browser_candidates (services/runner) whatever tools the
# task named when it was defined.
IMPLIED_BY_BROWSER = frozenset({"browser_candidates"})


def check_allowed(tool: str, allowed_tools: Iterable[str]) -> None:
    """A tool the call's allowed_tools does not name is refused, live or replayed,
    except a tool of IMPLIED_BY_BROWSER for a call that names a browser tool."""
    allowed = set(allowed_tools)
    if tool in allowed:
        return
    if tool in IMPLIED_BY_BROWSER and any(is_browser_tool(name) for name in allowed):
        return
    raise ServiceError(
        "tool_not_allowed",
        f"tool {tool!r} is not in this call's allowed_tools",
        field="tool",
    )


def split_command(command: str) -> list[str]:
    """POSIX-shell word splitting; the command then runs without a shell, so `;`, `|`,
    `$(...)` and redirections are plain characters, never operators."""
    if "\x00" in command:
        # exec cannot pass it in an argument: refused here, not failing at spawn.
        raise ServiceError("invalid_request", "the command contains NUL", field="input.command")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ServiceError(
            "invalid_request", f"cannot split the command: {exc}", field="input.command"
        ) from None
    if not argv:
        raise ServiceError("invalid_request", "the command is empty", field="input.command")
    return argv


# The last pattern word that admits any further words (zero or more).
REST = "**"


@cache
def pattern_words(pattern: str) -> tuple[str, ...]:
    """A command pattern split like a command. Raises ValueError on a pattern shlex
    cannot split (an unbalanced quote): the tools service refuses to start with it."""
    try:
        return tuple(shlex.split(pattern))
    except ValueError as exc:
        raise ValueError(f"cannot split the command pattern {pattern!r}: {exc}") from None


def _word_matches(arg: str, word: str) -> bool:
    """`arg` matches the pattern word `word` component by component (module docstring).
    Dynamic programming over components: `**` components cannot blow up the time."""
    if arg.startswith("-") and not word.startswith("-") and word != "*":
        # An option may carry a program or a file list glued on (`-cimport os#.py`,
        # `--files0-from=x.csv`): a wildcard standing for a file name never admits one.
        return False
    parts, pats = arg.split("/"), word.split("/")
    # ok[j] (for the current i, from the end): parts[i:] matches pats[j:].
    ok = [False] * len(pats) + [True]  # i == len(parts): only trailing `**`s match
    for j in range(len(pats) - 1, -1, -1):
        ok[j] = pats[j] == REST and ok[j + 1]
    for i in range(len(parts) - 1, -1, -1):
        part, prev = parts[i], ok
        ok = [False] * len(pats) + [False]
        for j in range(len(pats) - 1, -1, -1):
            pat = pats[j]
            if pat == REST:
                # None more (ok[j + 1]) or this part and maybe more (prev[j]); never
                # an empty part (a leading `/`: an absolute path) nor `..`.
                ok[j] = ok[j + 1] or (part not in ("", "..") and prev[j])
            elif part == ".." and pat != "..":
                ok[j] = False  # a wildcard never climbs out
            elif part == "" and pat != "" and len(parts) > 1:
                # Nor matches the empty component before a leading `/` (`*/*` is no
                # licence for `/etc`) or of a `//` (`/srv//x` is `/srv/x`).
                ok[j] = False
            else:
                ok[j] = fnmatchcase(part, pat) and prev[j + 1]
    return ok[0]


def matches(argv: Sequence[str], pattern: str) -> bool:
    """Each pattern word matches exactly one argv word; a last `**` takes the rest."""
    words = pattern_words(pattern)
    if words and words[-1] == REST:
        words = words[:-1]
        if len(argv) < len(words):
            return False
    elif len(argv) != len(words):
        return False
    return all(_word_matches(arg, word) for arg, word in zip(argv, words, strict=False))


def check_command(argv: Sequence[str], patterns: Sequence[str]) -> str:
    """Match argv against the allowed patterns word by word (see the module docstring);
    return the canonical command line (`shlex.join(argv)`). No patterns configured:
    every command is refused."""
    line = shlex.join(argv)
    if not patterns:
        raise ServiceError(
            "command_denied",
            "no commands are allowed (set ROTE_TOOLS_ALLOW_COMMANDS to command patterns)",
            field="input.command",
        )
    if not any(matches(argv, pattern) for pattern in patterns):
        raise ServiceError(
            "command_denied",
            # Masked before the cut: half a secret would pass the later redaction.
            f"command {cut_text(line, 200)!r} matches no allowed pattern",
            field="input.command",
        )
    return line


@dataclass(frozen=True)
class PathRoots:
    """Directories file tools may use, resolved once (so a root that is itself a
    symlink is compared by its target)."""

    roots: tuple[Path, ...]

    @classmethod
    def of(cls, roots: Iterable[str | Path]) -> PathRoots:
        return cls(tuple(Path(r).expanduser().resolve() for r in roots))

    def confine(self, path: str) -> Path:
        """The resolved path if it lies under a root. Relative paths are taken from the
        first root. resolve() follows every symlink and removes `..`, so neither can
        lead out of the roots."""
        if not self.roots:
            raise ServiceError(
                "path_denied",
                "no file paths are allowed (set ROTE_TOOLS_PATH_ROOTS)",
                field="input.path",
            )
        if "\x00" in path:
            raise ServiceError("invalid_request", "the path contains NUL", field="input.path")
        try:
            # expanduser() raises RuntimeError for an unknown user (`~nobody_here/x`).
            candidate = Path(path).expanduser()
            if not candidate.is_absolute():
                candidate = self.roots[0] / candidate
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, an unknown ~user
            raise ServiceError(
                "path_denied", f"cannot resolve {path!r}: {exc}", field="input.path"
            ) from None
        if not any(resolved == root or resolved.is_relative_to(root) for root in self.roots):
            raise ServiceError(
                "path_denied",
                f"{path!r} resolves to {str(resolved)!r}, outside the allowed roots",
                field="input.path",
            )
        return resolved

    def root_of(self, resolved: Path) -> Path:
        """The root a confined path lies under: file tools open it from there, one
        component at a time (services/tools/local.py)."""
        for root in self.roots:
            if resolved == root or resolved.is_relative_to(root):
                return root
        raise ServiceError(
            "path_denied", f"{str(resolved)!r} is outside the allowed roots", field="input.path"
        )
