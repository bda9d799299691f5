"""One tool call from request to result, without the bus: refusals first (allowed_tools,
unknown tool, input schema, command and path policy), then the tool under the call's
timeout, then bounding of what it produced."""

from __future__ import annotations

import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec
from playwright.async_api import Error as PlaywrightError

from contracts import tools as t
from contracts.errors import ErrorInfo
from contracts.tools import SESSION_LOST, ExecTool, ToolResult
from services.kernel.errors import MAX_MESSAGE_CHARS, ServiceError
from services.kernel.settings import Settings, SettingsError
from services.kernel.text import cut_text
from services.tools import local, policy
from services.tools.bounds import bound_metadata, bound_value, well_formed
from services.tools.browser import BrowserConfig, BrowserPool, BrowserUnavailable
from services.tools.browser_errors import first_line
from services.tools.browser_tools import BROWSER_TOOLS
from services.tools.limits import BrowserLimits, Budget, inner_timeout
from services.tools.outcome import Outcome, ToolFailure
from services.tools.pages import crash_failure, recover, replace_crashed
from services.tools.session import Session
from services.tools.specs import spec_for, validate_input
from services.tools.vault import Vault

KB = 1024


@dataclass(frozen=True)
class ToolsConfig:
    data_dir: Path
    allowed_commands: tuple[str, ...] = ()
    path_roots: tuple[str, ...] = ()
    # A tool's output in its reply and in its finished event (NATS payloads are 1 MB).
    max_output_bytes: int = 256 * KB
    # A call's input as recorded in its events (file_write content can be large).
    max_event_input_bytes: int = 64 * KB
    max_file_chars: int = 200_000
    # (name, origin) pairs: the secrets a run may type by placeholder (vault.py).
    secrets: tuple[tuple[str, str], ...] = ()
    browser: BrowserConfig = field(default_factory=BrowserConfig)
    limits: BrowserLimits = field(default_factory=BrowserLimits)

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolsConfig:
        data_dir = Path(settings.data_dir)
        return cls(
            data_dir=data_dir,
            allowed_commands=settings.allowed_commands,
            path_roots=settings.path_roots,
            secrets=settings.tools_secrets,
            browser=BrowserConfig(
                chromium=settings.chromium,
                pool_size=settings.tools_pool_size,
                idle_timeout_s=settings.tools_idle_s,
            ),
            # Absolute: a screenshot's result names its file for readers elsewhere.
            limits=BrowserLimits(screenshot_dir=data_dir.absolute() / "blobs"),
        )


@dataclass(frozen=True)
class Prepared:
    """A call that passed every refusal check, ready to run."""

    call: ExecTool
    args: t.ToolInput
    kind: str
    argv: list[str] | None = None
    path: Path | None = None
    root: Path | None = None  # the path root `path` lies under
    can_block: bool = True


class ToolBox:
    def __init__(self, config: ToolsConfig, browsers: BrowserPool | None) -> None:
        self.config = config
        self.browsers = browsers
        self.roots = policy.PathRoots.of(config.path_roots)
        self.vault = Vault.of(config.secrets)
        for pattern in config.allowed_commands:
            try:
                policy.pattern_words(pattern)
            except ValueError as exc:
                # Refused at start: a pattern that cannot be read would otherwise fail
                # every shell_exec call.
                raise SettingsError(f"ROTE_TOOLS_ALLOW_COMMANDS: {exc}") from None

    def prepare(self, call: ExecTool) -> Prepared:
        """Every refusal, before anything runs. Raises ServiceError."""
        policy.check_allowed(call.tool, call.allowed_tools)
        spec = spec_for(call.tool)
        args = validate_input(call.tool, call.input)
        match args:
            case t.ShellExecInput(command=command):
                argv = policy.split_command(command)
                policy.check_command(argv, self.config.allowed_commands)
                return Prepared(call, args, spec.kind, argv=argv)
            case t.FileReadInput(path=path) | t.FileWriteInput(path=path):
                confined = self.roots.confine(path)
                return Prepared(
                    call, args, spec.kind, path=confined, root=self.roots.root_of(confined)
                )
            case _:
                return Prepared(call, args, spec.kind, can_block=spec.can_block)

    async def run(self, prepared: Prepared) -> ToolResult:
        """Run a prepared call under its timeout. A tool failure is ok=false; only an
        unusable browser is raised (ServiceError `unavailable`). Output, metadata and
        error message are bounded here, so reply and finished event fit a NATS payload."""
        call = prepared.call
        started = time.perf_counter()
        outcome: Outcome | None = None
        try:
            if not prepared.can_block:
                # It waits on nothing, so it cannot overrun a deadline.
                outcome = await self._dispatch(prepared)
            else:
                # A bare cancel scope with a deadline: what fail_after wraps, without
                # the generator around it.
                with anyio.CancelScope(deadline=anyio.current_time() + call.timeout_s):
                    outcome = await self._dispatch(prepared)
        except ToolFailure as failure:
            return self._failed(failure, started)
        if outcome is None:  # the deadline cancelled the call
            message = f"{call.tool} did not finish within {call.timeout_s:g}s"
            return self._failed(ToolFailure("timeout", message), started)
        output, cut = bound_value(outcome.output, self.config.max_output_bytes)
        metadata = outcome.metadata
        if cut and metadata.item_count is not None:
            # The items a reader gets, not those the tool found before the cut.
            count = len(output) if isinstance(output, list) else 0
            metadata = msgspec.structs.replace(metadata, item_count=count)
        return ToolResult(
            ok=True,
            output=output,
            truncated=outcome.truncated or cut,
            duration_ms=_ms_since(started),
            metadata=bound_metadata(metadata),
        )

    async def execute(self, call: ExecTool) -> ToolResult:
        return await self.run(self.prepare(call))

    def _failed(self, failure: ToolFailure, started: float) -> ToolResult:
        output, cut = bound_value(failure.output, self.config.max_output_bytes)
        return ToolResult(
            ok=False,
            output=output,
            truncated=failure.truncated or cut,
            duration_ms=_ms_since(started),
            metadata=bound_metadata(failure.metadata),
            # Playwright's messages quote page markup, which may hold a lone surrogate.
            error=ErrorInfo(
                code=failure.code,
                message=cut_text(well_formed(failure.message), MAX_MESSAGE_CHARS),
            ),
        )

    async def _dispatch(self, prepared: Prepared) -> Outcome:
        call, args = prepared.call, prepared.args
        match args:
            case t.ShellExecInput(timeout=timeout):
                assert prepared.argv is not None
                return await local.shell_exec(
                    prepared.argv,
                    timeout=min(timeout or call.timeout_s, inner_timeout(call.timeout_s)),
                    cwd=self._workdir(),
                    max_output_bytes=self.config.max_output_bytes // 2,
                )
            case t.FileReadInput():
                assert prepared.path is not None and prepared.root is not None
                path, root = prepared.path, prepared.root
                return await anyio.to_thread.run_sync(
                    lambda: local.file_read(path, root=root, max_chars=self.config.max_file_chars)
                )
            case t.FileWriteInput(content=content):
                assert prepared.path is not None and prepared.root is not None
                path, root = prepared.path, prepared.root
                return await anyio.to_thread.run_sync(
                    lambda: local.file_write(path, content, root=root)
                )
            case t.NoopInput(echo=echo):
                return Outcome(output=echo)
            case _:
                return await self._browser_call(call, args)

    def _workdir(self) -> Path:
        if self.roots.roots:
            return self.roots.roots[0]
        return Path(tempfile.gettempdir())

    async def _browser_call(self, call: ExecTool, args: Any) -> Outcome:
        if self.browsers is None:
            raise ServiceError("unavailable", "this tools service runs without a browser")
        budget = Budget(call.timeout_s)
        try:
            session = await self.browsers.acquire(call.run_id, attempt=call.attempt)
        except BrowserUnavailable as exc:
            raise ServiceError("unavailable", str(exc)) from None
        except PlaywrightError as exc:
            raise ToolFailure("browser_error", f"cannot open a browser context: {exc}") from None
        session.in_flight += 1
        try:
            # One call at a time per run: its tools share one page.
            async with session.lock:
                try:
                    session.begin_call(accept_dialogs=getattr(args, "confirm", False))
                    if session.lost:
                        if call.tool != "browser_navigate":
                            raise ToolFailure(
                                SESSION_LOST,
                                "the browser restarted and this run's page was lost (its"
                                " cookies too); the page is blank now: navigate again",
                            )
                        session.lost = False  # the run has a page of its own again
                    if session.interrupted:
                        session.interrupted = False
                        await recover(session)
                    tool = BROWSER_TOOLS[call.tool]
                    args = self._with_secrets(args, session)
                    outcome = await tool(session, args, budget, self.config.limits)
                    # A text or list output has no place for them: the next call's has.
                    if session.dialogs and isinstance(outcome.output, dict):
                        outcome.output = {**outcome.output, "dialogs": session.report_dialogs()}
                    return outcome
                except anyio.get_cancelled_exc_class():
                    session.interrupted = True
                    raise
                except PlaywrightError as exc:
                    # The renderer died under the call: say so, and leave a fresh page
                    # for the next call rather than one on which every call fails.
                    crashed_url = None
                    with suppress(PlaywrightError):  # the browser itself is gone
                        crashed_url = await replace_crashed(session)
                    if crashed_url is not None:
                        raise crash_failure(crashed_url) from None
                    raise self._browser_failure(exc) from None
                except ToolFailure as failure:
                    if failure.code == "timeout":
                        session.interrupted = True  # the page may be what is stuck
                    if failure.metadata.url is None and not session.page.is_closed():
                        failure.metadata.url = session.page.url  # where it failed
                    raise
                finally:
                    session.between_calls()
        except ToolFailure:
            # A dead Playwright driver says nothing: a failed call is how it shows.
            await self.browsers.check_connected()
            raise
        finally:
            session.in_flight -= 1
            session.touch()

    def _with_secrets(self, args: t.ToolInput, session: Session) -> t.ToolInput:
        """`args` with the secret placeholders of its typed text filled in (only the
        page sees them: `call.input`, which the events and the trace show, keeps the
        placeholders), and the fields they go into noted on the session for the tool
        to check their frames."""
        page_url = session.page.url

        def filled(key: str, value: str) -> str:
            if (secret := self.vault.secret_of(value)) is not None:
                session.secret_fields[key] = secret
            return self.vault.fill(value, page_url)

        match args:
            case t.BrowserTypeInput(selector=selector, text=text):
                return msgspec.structs.replace(args, text=filled(selector, text))
            case t.BrowserFillFormInput(fields=fields):
                values = {
                    key: filled(key, value) if isinstance(value, str) else value
                    for key, value in fields.items()
                }
                return msgspec.structs.replace(args, fields=values)
        return args

    def _browser_failure(self, exc: PlaywrightError) -> ToolFailure:
        message = first_line(exc)
        assert self.browsers is not None
        if not self.browsers.connected or "has been closed" in message:
            return ToolFailure(
                "browser_closed", f"the browser went away during the call: {message}"
            )
        return ToolFailure("browser_error", message)


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def event_input(value: dict[str, Any], max_bytes: int) -> tuple[dict[str, Any], bool]:
    """A call's input as its tool events carry it (at most `max_bytes` encoded), and
    whether it was cut: a trace must not take a cut input for the call as made."""
    bounded, cut = bound_value(value, max_bytes)
    return (bounded, cut) if isinstance(bounded, dict) else ({}, True)
