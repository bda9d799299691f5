"""Blank values and values inside URLs and commands: a field that comes back blank
fails the replay rather than a broken answer or input; a value the run wrote into a URL
(encoded or not) or a command becomes a reference encoded for where it goes; names
copied out of a longer text are decided again."""

from __future__ import annotations

import dataclasses
import shlex
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest

from contracts.executors import Executor, LlmStep, ResultStep, ToolStep
from contracts.llm import CompleteReply, CompleteRequest
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolMetadata, ToolResult
from contracts.traces import Trace, TraceStep
from services.compiler.compile import compile
from services.executor import references
from services.runner.replay import Replayer, ReplayResult
from tests.hand_built_replay import hand_built_executor, offline_scope, small_model_reply

LIST_URL = "http://site.test/list"
SEARCH_PROMPT = (
    f"Open {LIST_URL}, take the first product and search for it; report the first result title"
)


def _step(index: int, tool: str, inp: dict[str, Any], out: Any, **meta: Any) -> TraceStep:
    return TraceStep(
        index=index, tool=tool, input=inp, output=out, status="ok", metadata=ToolMetadata(**meta)
    )


def _shell(index: int, command: str, *, stdout: str = "") -> TraceStep:
    out = {"stdout": stdout, "stderr": "", "exit_code": 0}
    return _step(index, "shell_exec", {"command": command}, out, exit_code=0)


def _nav(index: int, url: str, title: str) -> TraceStep:
    out = {"url": url, "status": 200, "title": title}
    return _step(index, "browser_navigate", {"url": url}, out, http_status=200, title=title)


def _compile(prompt: str, steps: list[TraceStep], answer: str, **task: Any) -> Executor:
    spec = TaskSpec(name="t", prompt=prompt, **task)
    trace = Trace(
        run_id="r1",
        task_id="t",
        task=spec,
        steps=steps,
        answer=answer,
        model="sonnet",
        captured_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    executor = compile(spec, trace)
    assert isinstance(executor, Executor), executor
    return executor


def _replay(executor: Executor, tools: Any, llm: Any = None) -> tuple[ReplayResult, list[Any]]:
    calls: list[Any] = []

    async def exec_tool(request: ExecTool) -> ToolResult:
        calls.append((request.tool, request.input))
        return ToolResult(ok=True, duration_ms=1, output=tools(request))

    async def complete(request: CompleteRequest) -> CompleteReply:
        calls.append(("llm", request.messages[0].content))
        return small_model_reply(llm(request) if llm else "x")

    scope = offline_scope()
    ports = dataclasses.replace(scope.ports, exec_tool=exec_tool, complete=complete)
    scope = dataclasses.replace(scope, ports=ports)
    return anyio.run(Replayer(executor, scope, retries=1, backoff_s=0.0).run), calls


def _tool_inputs(executor: Executor, tool: str) -> list[dict[str, Any]]:
    return [s.input for s in executor.steps if isinstance(s, ToolStep) and s.tool == tool]


# --- 1. a value the original run had must be there on replay --------------------------


def _news_executor() -> Executor:
    items = [
        {"title": "Council approves new river bridge", "author": "Jane Roe"},
        {"title": "Local team wins the final", "author": "John Doe"},
    ]
    return _compile(
        "Open http://site.test/news and report the top story's headline and author.",
        [
            _nav(0, "http://site.test/news", "Gazette"),
            _step(
                1,
                "browser_extract",
                {"selector": "article", "fields": {"title": "h2", "author": ".by"}},
                items,
            ),
        ],
        "Top story: Council approves new river bridge, by Jane Roe.",
    )


@pytest.mark.parametrize("author", [None, "", "  "])
def test_a_field_that_comes_back_blank_fails_the_template_answer(author: str | None) -> None:
    """The site renamed `.by`: rows still match, the author is null. The answer must
    not read "by null." (nor "by ."), and the replay falls back instead."""
    executor = _news_executor()
    result = executor.steps[-1]
    assert isinstance(result, ResultStep) and result.mode == "template"
    assert "{{step_1[0].author}}" in (result.template or "")

    def tools(request: ExecTool) -> Any:
        if request.tool == "browser_navigate":
            return {"url": request.input["url"], "status": 200, "title": "Gazette"}
        return [{"title": "Mayor resigns", "author": author}, {"title": "B", "author": author}]

    replayed, _ = _replay(executor, tools)
    assert not replayed.ok and replayed.answer is None
    assert replayed.failed_step == result.index
    assert "{{step_1[0].author}}" in (replayed.reason or "")


def test_a_blank_value_for_a_templated_input_fails_before_the_tool_runs() -> None:
    """Searching for "" (an emptied product name) is not the search the task does."""
    executor = _compile(
        SEARCH_PROMPT,
        [
            _nav(0, LIST_URL, "Shop"),
            _step(
                1,
                "browser_extract",
                {"selector": "li", "fields": {"name": ".n"}},
                [{"name": "Acme Widget Pro"}, {"name": "Other"}],
            ),
            _nav(2, "http://site.test/search?q=Acme Widget Pro", "Search"),
            _step(
                3,
                "browser_extract",
                {"selector": ".r", "fields": {"title": ".t"}},
                [{"title": "Result one"}],
            ),
        ],
        "Result one",
    )

    def tools(request: ExecTool) -> Any:
        if request.tool == "browser_navigate":
            return {"url": request.input["url"], "status": 200, "title": "Shop"}
        return [{"name": " "}, {"name": "x"}]

    replayed, calls = _replay(executor, tools)
    assert not replayed.ok
    assert "{{step_1[0].name" in (replayed.reason or "")
    assert [c[0] for c in calls] == ["browser_navigate", "browser_extract"]


def test_an_empty_output_a_small_model_reads_is_not_required() -> None:
    """Guard: data handed to the small model may be empty (no incidents today); only the
    values put into inputs and template answers must be there."""
    steps = [
        ToolStep(index=0, tool="browser_read_page", input={}),
        LlmStep(index=1, prompt="Incidents: {{step_0}}"),
        ResultStep(index=2, mode="template", template="Status: {{step_1}}", example="Status: ok"),
    ]
    replayed, _ = _replay(hand_built_executor("t", steps), lambda _r: "", lambda _r: "none")
    assert replayed.ok and replayed.answer == "Status: none"


# --- 2 and 3. values in a URL: encoded on replay, and matched when encoded -------------


def test_references_encode_for_a_url_component() -> None:
    outputs = {0: {"q": "AT&T Phone #1 100% new"}}
    assert references.render_string("?q={{step_0.q|url}}", outputs) == (
        "?q=AT%26T%20Phone%20%231%20100%25%20new"
    )
    assert references.render_string("?q={{ step_0.q | form }}", outputs) == (
        "?q=AT%26T+Phone+%231+100%25+new"
    )
    assert references.render_string("{{step_0.q|url}}", outputs) == (
        "AT%26T%20Phone%20%231%20100%25%20new"
    )
    ref = references.parse("{{step_0.q|form}}")
    assert ref == references.Ref(0, ("q",), "form") and ref.format() == "{{step_0.q|form}}"
    # An unknown filter is no reference: the text stays as it is.
    assert references.render_string("{{step_0.q|zip}}", outputs) == "{{step_0.q|zip}}"


def _search_executor(url: str, name: str = "Acme Widget Pro") -> Executor:
    return _compile(
        SEARCH_PROMPT,
        [
            _nav(0, LIST_URL, "Shop"),
            _step(
                1,
                "browser_extract",
                {"selector": "li", "fields": {"name": ".n"}},
                [{"name": name}, {"name": "Other thing"}],
            ),
            _nav(2, url, "Search"),
            _step(
                3,
                "browser_extract",
                {"selector": ".r", "fields": {"title": ".t"}},
                [{"title": "Result one alpha"}, {"title": "Result two"}],
            ),
        ],
        "Result one alpha",
    )


def _searched(executor: Executor, today: str) -> str:
    def tools(request: ExecTool) -> Any:
        if request.tool == "browser_navigate":
            return {"url": request.input["url"], "status": 200, "title": "Shop"}
        if request.input["selector"] == "li":
            return [{"name": today}, {"name": "x"}]
        return [{"title": "whatever"}]

    replayed, calls = _replay(executor, tools)
    assert replayed.ok, replayed.reason
    return calls[2][1]["url"]


TODAY = "AT&T Phone #1 100% new"


def test_a_value_the_run_wrote_raw_into_a_query_is_encoded_on_replay() -> None:
    executor = _search_executor("http://site.test/search?q=Acme Widget Pro")
    assert _tool_inputs(executor, "browser_navigate")[1] == {
        "url": "http://site.test/search?q={{step_1[0].name|url}}"
    }
    url = _searched(executor, TODAY)
    assert parse_qs(urlsplit(url).query) == {"q": [TODAY]} and urlsplit(url).fragment == ""


@pytest.mark.parametrize(
    ("url", "template", "sent"),
    [
        (
            "http://site.test/search?q=Acme%20Widget%20Pro",
            "http://site.test/search?q={{step_1[0].name|url}}",
            "http://site.test/search?q=AT%26T%20Phone%20%231%20100%25%20new",
        ),
        (
            "http://site.test/search?q=Acme+Widget+Pro&sort=new",
            "http://site.test/search?q={{step_1[0].name|form}}&sort=new",
            "http://site.test/search?q=AT%26T+Phone+%231+100%25+new&sort=new",
        ),
        (
            "http://site.test/search?q=Acme%20Widget%20Pro%20review",
            "http://site.test/search?q={{step_1[0].name|url}}%20review",
            "http://site.test/search?q=AT%26T%20Phone%20%231%20100%25%20new%20review",
        ),
        (
            "http://site.test/p/Acme%20Widget%20Pro/reviews",
            "http://site.test/p/{{step_1[0].name|url}}/reviews",
            "http://site.test/p/AT%26T%20Phone%20%231%20100%25%20new/reviews",
        ),
    ],
)
def test_a_value_the_run_wrote_encoded_into_a_url_is_a_reference(
    url: str, template: str, sent: str
) -> None:
    """An encoded value ("q=Acme%20Widget%20Pro") was a fixed URL: today's first product
    was never searched."""
    executor = _search_executor(url)
    assert _tool_inputs(executor, "browser_navigate")[1] == {"url": template}
    assert _searched(executor, TODAY) == sent


def test_a_link_that_spans_path_segments_is_not_encoded() -> None:
    """Guard: an href ("/p/acme-1") behind the site's origin is a path, not one value."""
    executor = _compile(
        f"Open {LIST_URL} and open the first product; report its title",
        [
            _nav(0, LIST_URL, "Shop"),
            _step(
                1,
                "browser_extract",
                {"selector": "a", "fields": {"href": "@href"}},
                [{"href": "/p/acme-1"}, {"href": "/p/other-2"}],
            ),
            _nav(2, "http://site.test/p/acme-1", "Acme"),
            _step(
                3, "browser_extract", {"selector": "h1", "fields": {"t": "h1"}}, [{"t": "Acme 1"}]
            ),
        ],
        "Acme 1",
    )
    assert _tool_inputs(executor, "browser_navigate")[1] == {
        "url": "http://site.test{{step_1[0].href}}"
    }


def test_an_href_the_run_followed_as_written_is_not_encoded_again() -> None:
    """A link that is already a URL's text ("item%201") went into the address as it
    was: encoded on replay it would be another page ("item%25201")."""
    executor = _compile(
        f"Open {LIST_URL}, open the first item and report its title",
        [
            _nav(0, LIST_URL, "Items"),
            _step(
                1,
                "browser_extract",
                {"selector": "a", "fields": {"href": "@href", "name": "a"}},
                [
                    {"href": "item%201", "name": "First thing"},
                    {"href": "item%202", "name": "Thing 2"},
                ],
            ),
            _nav(2, "http://site.test/items/item%201", "Item"),
            _step(3, "browser_extract", {"selector": "h1"}, ["The first item"]),
        ],
        "The first item",
    )
    assert _tool_inputs(executor, "browser_navigate")[1] == {
        "url": "http://site.test/items/{{step_1[0].href}}"
    }

    def tools(request: ExecTool) -> Any:
        match request.tool:
            case "browser_navigate":
                return {"url": request.input["url"], "status": 200, "title": "Items"}
            case _ if request.input["selector"] == "a":
                return [{"href": "item%203", "name": "Third thing"}]
            case _:
                return ["The third item"]

    replayed, calls = _replay(executor, tools)
    assert replayed.ok, replayed.reason
    opened = [inp["url"] for tool, inp in calls if tool == "browser_navigate"]
    assert opened == [LIST_URL, "http://site.test/items/item%203"]


# --- 4. a name copied out of a longer text ---------------------------------------------

SHELL = ["shell_exec"]
BROWSER = ["browser_navigate", "browser_read_page"]


def test_a_file_name_taken_from_a_listing_is_decided_again() -> None:
    """The newest backup is a line of `ls`: tomorrow it is another file, so the command
    is written again from today's listing, not replayed with yesterday's name."""
    executor = _compile(
        "Check that the newest backup in /backups is a valid archive and report its name and"
        " file count.",
        [
            _step(
                0,
                "shell_exec",
                {"command": "ls -1t /backups"},
                {
                    "stdout": "backup-2026-01-02.tar.gz\nbackup-2026-01-01.tar.gz\n",
                    "stderr": "",
                    "exit_code": 0,
                },
                exit_code=0,
            ),
            _shell(1, "tar tzf /backups/backup-2026-01-02.tar.gz", stdout="a\nb\nc\n"),
        ],
        "Newest backup backup-2026-01-02.tar.gz is valid with 3 files.",
        allowed_tools=SHELL,
    )
    pick = executor.steps[1]
    assert isinstance(pick, LlmStep) and "{{step_0}}" in pick.prompt
    assert _tool_inputs(executor, "shell_exec")[1] == {"command": "{{step_1}}"}

    # On replay the small model's line is the whole command, sent as its words (quoted
    # as one word, the tools service would look for a program named "tar tzf …").
    def tools(request: ExecTool) -> Any:
        listing = "backup-2026-01-03.tar.gz\nbackup-2026-01-02.tar.gz\n"
        stdout = listing if request.input["command"] == "ls -1t /backups" else "a\nb\n"
        return {"stdout": stdout, "stderr": "", "exit_code": 0}

    today = "tar tzf /backups/backup-2026-01-03.tar.gz"
    replayed, calls = _replay(executor, tools, llm=lambda _: today)
    commands = [inp["command"] for tool, inp in calls if tool == "shell_exec"]
    assert commands == ["ls -1t /backups", today], replayed.reason
    assert shlex.split(commands[1]) == ["tar", "tzf", "/backups/backup-2026-01-03.tar.gz"]


def test_a_link_read_in_a_page_text_is_decided_again() -> None:
    executor = _compile(
        "Open http://site.test/releases, open the latest release notes and summarise them.",
        [
            _nav(0, "http://site.test/releases", "Releases"),
            _step(
                1,
                "browser_read_page",
                {},
                "Releases\nLatest: v2.3.1 notes at http://site.test/notes/v2.3.1\n"
                "Older: v2.3.0 notes at http://site.test/notes/v2.3.0\n",
            ),
            _nav(2, "http://site.test/notes/v2.3.1", "Notes"),
            _step(3, "browser_read_page", {}, "v2.3.1\nFixed the login bug.\nFaster search.\n"),
        ],
        "v2.3.1 fixes the login bug and makes search faster.",
        allowed_tools=BROWSER,
    )
    assert any(isinstance(s, LlmStep) and s.trace_step == 2 for s in executor.steps)
    assert _tool_inputs(executor, "browser_navigate")[1] == {"url": "{{step_2}}"}


@pytest.mark.parametrize(
    "url",
    [
        "http://site.test/",  # the site's own address, which the page also shows
        "http://site.test/about",  # a plain word the page shows
        "http://site.test/archive/2026",  # a year the page's footer shows
    ],
)
def test_a_constant_url_the_page_merely_shows_stays_constant(url: str) -> None:
    """Guard: only a name with a digit that neither the prompt nor a constant holds
    (a version, a date, an id) makes the value a model step."""
    executor = _compile(
        "Open http://site.test/news, then open the other page and report its heading.",
        [
            _nav(0, "http://site.test/news", "News"),
            _step(1, "browser_read_page", {}, f"News\nSee {url} for more.\n(c) 2026 site.test\n"),
            _nav(2, url, "Other"),
            _step(3, "browser_read_page", {}, "Heading here\nbody\n"),
        ],
        "Heading here",
        allowed_tools=BROWSER,
    )
    assert not any(isinstance(s, LlmStep) for s in executor.steps)
    assert _tool_inputs(executor, "browser_navigate")[1] == {"url": url}


# --- 5. a value filled into a command line ------------------------------------------------


def test_a_headline_filled_into_a_command_stays_one_argument_on_replay() -> None:
    """Today's headline has a quote, a `;` and a `--`: filled into the recorded line as
    text, the tools service would split it into words of their own (an option the
    command never had, or a line it cannot split at all)."""
    executor = _compile(
        "Open http://site.test/news and append the top headline to the log with log-title.",
        [
            _nav(0, "http://site.test/news", "Gazette"),
            _step(1, "browser_extract", {"selector": "h2"}, ["Council approves bridge", "Other"]),
            _shell(2, 'log-title "Council approves bridge" --to news.log'),
        ],
        "Logged: Council approves bridge",
        allowed_tools=["browser_navigate", "browser_extract", "shell_exec"],
    )
    assert _tool_inputs(executor, "shell_exec") == [
        {"command": 'log-title "{{step_1[0]}}" --to news.log'}
    ]
    headline = "Rates up 2\"; it's --force"

    def tools(request: ExecTool) -> Any:
        if request.tool == "browser_navigate":
            return {"url": request.input["url"], "status": 200, "title": "Gazette"}
        if request.tool == "browser_extract":
            return [headline, "Other"]
        return {"stdout": "", "stderr": "", "exit_code": 0}

    replayed, calls = _replay(executor, tools)
    assert replayed.ok, replayed.reason
    command = next(inp["command"] for tool, inp in calls if tool == "shell_exec")
    assert shlex.split(command) == ["log-title", headline, "--to", "news.log"]


def test_a_command_that_only_looks_like_a_template_is_sent_as_recorded() -> None:
    """`{{step_1}}` typed in a command is text: the executor stores it escaped, and the
    replay sends it without the escape (a stray backslash would reach the program)."""
    command = "echo {{step_1}} > /tmp/marker"
    executor = _compile(
        "Open http://site.test/news, note the top headline and write the marker file.",
        [
            _nav(0, "http://site.test/news", "Gazette"),
            _step(1, "browser_extract", {"selector": "h2"}, ["Council approves bridge"]),
            _shell(2, command),
        ],
        "Top headline: Council approves bridge; marker written.",
        allowed_tools=["browser_navigate", "browser_extract", "shell_exec"],
    )
    assert _tool_inputs(executor, "shell_exec") == [{"command": "echo \\{{step_1}} > /tmp/marker"}]

    def tools(request: ExecTool) -> Any:
        if request.tool == "browser_navigate":
            return {"url": request.input["url"], "status": 200, "title": "Gazette"}
        if request.tool == "browser_extract":
            return ["Rates go up"]
        return {"stdout": "", "stderr": "", "exit_code": 0}

    replayed, calls = _replay(executor, tools)
    assert replayed.ok, replayed.reason
    assert [inp["command"] for tool, inp in calls if tool == "shell_exec"] == [command]


# --- 6. a file path or a command is not a URL ---------------------------------------------


def _report_executor(tool: str, recorded: dict[str, str]) -> Executor:
    out: Any = (
        {"content": "sales up"}
        if tool == "file_read"
        else {"stdout": "", "stderr": "", "exit_code": 0}
    )
    return _compile(
        "Open http://site.test/reports, take the newest report's name and deal with its file.",
        [
            _nav(0, "http://site.test/reports", "Reports"),
            _step(1, "browser_extract", {"selector": "li.report"}, ["Q3 report", "Q2 report"]),
            _step(2, tool, recorded, out),
        ],
        "Q3 report: sales up" if tool == "file_read" else "Logged Q3 report.",
        allowed_tools=["browser_navigate", "browser_extract", tool],
    )


@pytest.mark.parametrize(
    ("tool", "recorded", "expected"),
    [
        ("file_read", {"path": "/srv/reports/Q3 report.txt"}, "/srv/reports/Q4 Über ✓.txt"),
        (
            "shell_exec",
            {"command": '/usr/bin/logger "Q3 report"'},
            "/usr/bin/logger 'Q4 Über ✓'",
        ),
    ],
)
def test_a_name_filled_into_a_file_path_or_command_is_not_url_encoded(
    tool: str, recorded: dict[str, str], expected: str
) -> None:
    """A path from the root looks like a URL's path, but the file system and the shell
    take the name as it reads: "Q4%20%C3%9Cber" is another file (or argument)."""
    executor = _report_executor(tool, recorded)

    def tools(request: ExecTool) -> Any:
        if request.tool == "browser_navigate":
            return {"url": request.input["url"], "status": 200, "title": "Reports"}
        if request.tool == "browser_extract":
            return ["Q4 Über ✓", "Q3 report"]
        if request.tool == "file_read":
            return {"content": "sales up"}
        return {"stdout": "", "stderr": "", "exit_code": 0}

    replayed, calls = _replay(executor, tools)
    field = next(iter(recorded))
    sent = next(inp[field] for name, inp in calls if name == tool)
    if tool == "shell_exec":
        assert shlex.split(sent) == shlex.split(expected), replayed.reason
    else:
        assert sent == expected, replayed.reason
