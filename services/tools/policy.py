"""Deny-by-default policy: which tools a call may use, which commands may run, which
paths may be touched. Every rule refuses with a ServiceError before anything runs."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from services.kernel.errors import ServiceError


def check_allowed(tool: str, allowed_tools: Iterable[str]) -> None:
    """A tool the call's allowed_tools does not name is refused, live or replayed."""
    if tool not in set(allowed_tools):
        raise ServiceError(
            "tool_not_allowed",
            f"tool {tool!r} is not in this call's allowed_tools",
            field="tool",
        )


def split_command(command: str) -> list[str]:
    """POSIX-shell word splitting; the command then runs without a shell, so `;`, `|`,
    `$(...)` and redirections are plain characters, never operators."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ServiceError(
            "invalid_request", f"cannot split the command: {exc}", field="input.command"
        ) from None
    if not argv:
        raise ServiceError("invalid_request", "the command is empty", field="input.command")
    return argv


def check_command(argv: Sequence[str], patterns: Sequence[str]) -> str:
    """Match the canonical command line (`shlex.join(argv)`) against the allowed fnmatch
    patterns; return it. No patterns configured: every command is refused."""
    line = shlex.join(argv)
    if not patterns:
        raise ServiceError(
            "command_denied",
            "no commands are allowed (set ROTE_TOOLS_ALLOW_COMMANDS to fnmatch patterns)",
            field="input.command",
        )
    if not any(fnmatchcase(line, pattern) for pattern in patterns):
        raise ServiceError(
            "command_denied",
            f"command {line[:200]!r} matches no allowed pattern",
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
        candidate = Path(path).expanduser()
        if not candidate.is_absolute():
            candidate = self.roots[0] / candidate
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
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
