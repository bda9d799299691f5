"""The stand-in's scripted agent: from the task prompt (the first user message) and the
tool results so far, decide the next turn. Pure: no HTTP, no clock, no randomness, so
the same conversation always gets the same next turn.

Vocabulary (case-insensitive; the sentence may sit inside a longer prompt; <URL> is
scheme://... with no spaces or commas; <N> is digits or one..ten):

1. "Open <URL> and report the top <N> <things>"
   browser_navigate {url}; then browser_extract {selector} probing CANDIDATE_SELECTORS
   in order until one returns at least N items (a probe that returns fewer stays in
   the conversation, like a real model exploring); answer exactly
   "Top <N> <things>:\\n1. a\\n2. b\\n3. c" from the first N items (runs of whitespace
   inside an item collapsed to one space).
2. "Open <URL>, click <link text>, and report the top <N> <things>"
   navigate; browser_click {text: <link text>} (quotes around it are dropped); then as 1.
3. "Open <URL>, fill the form with <field>=<value>, <field>=<value> and report the
   confirmation"
   navigate; browser_fill_form {fields: {<field>: <value>, ...}}; browser_read_page;
   answer "Confirmation: <line>" with the first page line that mentions confirm, thank,
   success or received. Values may be quoted to hold commas.
4. "Open <URL> and report the cheapest <thing>"
   navigate; browser_extract {selector, fields} probing CANDIDATE_RECORDS until one
   returns an item with a name and a readable price; answer
   "Cheapest <thing>: <name> at <price>" (the price as the page shows it; the first of
   equal prices wins).
5. "Open <URL>, open the cheapest <thing> and report its <detail>"
   as 4, then browser_click {text: <name>}; browser_read_page; answer
   "Cheapest <thing>: <name> at <price>; <detail>: <value>" where <value> is what follows
   "<detail>:" on the first page line mentioning <detail> (else that whole line).
6. "Open <URL> and extract <css selector>" (the selector may be quoted or backticked)
   navigate; browser_extract {selector}; answer "Items matching <selector>:\\n1. a\\n..."
   (at most 20 items).
7. "Open <URL> and report its title"
   navigate; answer "Title: <title>".
8. "Open <URL> and read the page"
   navigate; browser_read_page; answer "The page reads:\\n<the first 20 non-empty lines>".
9. A judgement prompt for replay steps (no tools needed): any prompt with "cheapest"
   and a JSON array of objects with "price" (and "name"); optionally "answer with its
   <field> only". Answers the <field> (default name) of the cheapest item, nothing else.
10. An answer-again prompt for replay result steps (no tools needed), as rote's
   compiler writes them: "Task (for context): <one of the tasks above, URLs may read
   <url>>", "Answer the task again from today's data ...", and "Today's data:" followed
   by lines "step_N (<tool>): <value>". Answers the task from that data exactly as the
   full run would have answered it from the same tool outputs.
11. A quality-check prompt for replayed answers, as rote's runner writes it
   (services/executor/quality.py): "Quality check of a replayed answer", then
   "<earlier_answer>...</earlier_answer>" and "<new_answer>...</new_answer>". Answers
   "PASS: ..." when the new answer has the earlier one's form — the same words before
   the first line's colon, the same number of lines, and numbered items that are
   neither empty nor repeated (a page of placeholders) — else "FAIL: <the problem>".

The careful tasks (careful.py): questions whose answer means something only with the
page's notes. Like a careful large model, each navigates, reads the page
(browser_read_page), then extracts; it finds a column or a field by its label (English,
or Portuguese through a small glossary), reads values in the light of the page's notes
(a unit or currency in a label or caption, "in thousands", day- or month-first dates,
"Times in CET (UTC+1)", "Newest first", a footnote marking an entry discontinued, a sale
price beside a struck one, decimal commas on a Portuguese page) and states the meaning:
"64 °F", "16.92 EUR", "1,500,000 USD", "2025-04-03", "15:10 UTC+1". A page whose "Updated"
date is more than a day before its own "Today is" date is answered "The page is stale:
last updated <date>, today is <date>." instead of being read.
12. "Open <URL> and report the <field> for <key>"
   the table's header (`table thead th`, else `.grid .head span`), then its rows with the
   key (first) column and the field's column (`td:nth-child(k)`); answer
   "The <field> for <key>: <value>".
13. "Open <URL> and report the <thing> with the highest|lowest|earliest|latest <field>"
   as 12 over every row; answer "The <thing> with the <direction> <field>: <key> (<value>)".
14. "Open <URL> and report its <field>"
   labels (`dl dt`, else `ul.keys li`), then values (`dl dd`, else `ul.values li`) in the
   same order; answer "Its <field>: <value>".
15. "Open <URL> and report the <N> newest|latest|oldest|earliest|most read|least read
   <things>"
   extract by CANDIDATE_SELECTORS; the page's order caption says which end of the list
   they are at; answer "The <N> <order> <things>:\n1. a\n2. b ...".
16. A pick prompt about a careful task (12-15), as rote's compiler writes them ("The task
   needs one item from the list below ... answer with its <field> only", or "The task
   chose one item ...: the one whose <field> is <value>. Answer with its <field> only",
   then the list): the item the task names (12), the highest or lowest as the values read
   with no notes (13), the item an earlier pick named, or else the item at the place it
   was last time. A pick prompt holds the list alone, so it is always literal.
Item 10 for a careful task answers from the data the prompt gives, as the full run would
from the same data: with the page's text among it, its notes are read; without it, values
are read literally (the earlier answer's unit, English numbers, month-first dates, the list
in the order it comes) (careful_again.py).
17. A verification prompt for a replayed answer, as rote's runner writes it
   (services/executor/verification.py: "Verification of a replayed answer.", "Task: ...",
   "<answer>", "<changes>", then <read> blocks with a page's notes, headers, labels and
   items, or its text). For a careful task (12-15): what the task answers from those
   reads, read as a careful reader would (the page's notes; each value by the page's label
   of it now; a stale page; an excluded entry; a sale price), compared with the answer:
   "PASS: ..." when they mean the same, else "FAIL: <what the page gives instead>" (also
   when the reads cannot give the answer). For any other task, simply: "PASS: nothing on
   the page contradicts the answer." when every value the answer states appears in the
   reads, else FAIL (verifying.py, verdicts.py).
18. A comparison of a replayed answer with a shadow full run's (services/executor/
   verification.py: "Comparison of two answers to one task.", "<replayed_answer>",
   "<full_answer>"): "SAME: ..." when the two are one answer after whitespace, case and a
   final full stop, else "DIFFERENT: ..." (verifying.py, verdicts.py).

19. A heal prompt for a replayed step whose element is gone, as rote's runner writes it
   (services/executor/healing.py `heal_prompt`: "Repair of a replayed step.", the task,
   the <step> as recorded, the <page>'s numbered candidates). An action picks the
   candidate of the recorded role named like the recorded control (case, punctuation and
   spacing aside), else, like a small model, the one of that role sharing most words with
   its name (rote's guard refuses it), else none; a read picks the group each recorded
   field maps into by value shape (each to its own part, the part named likest the field),
   preferring the one sharing words with the recorded sample, then the best-named, then
   the count nearest the sample's; a plain read, the group of texts shaped like the
   sample's. Answers {"candidate": <id>} (with "fields" for a read with fields) or
   {"candidate": null} (healing.py).

Session lost (items 1-8, 12-15): a tool result "session_lost: ..." (the runner's, when the tools
process holding the page died) starts the script over, as a real model would: navigate to
<URL> again and go on as if fresh, forgetting the steps before it (at most 3 times).

Misbehaviour markers (anywhere in the prompt, for runner tests):
- [standin:stuck]    repeats the same failing call, browser_click
                     {"selector": "#rote-standin-stuck"}, every turn.
- [standin:endless]  never ends the turn: browser_scroll down by a growing amount
                     (browser_read_page when scroll is not offered).
- [standin:fail]     answers an API error: 500 api_error; [standin:fail:<status>]
                     picks the status (429, 529, 400, ...).
- [standin:redacted] also returns a redacted_thinking block beside each tool call.
- [standin:unsupported] puts a server_tool_use block (a web search the server ran)
                     before the text of its answer: content rote's contracts cannot
                     carry, billed all the same.

A short sentence precedes the first tool call ("Let me open <URL>.") and every probe
that follows an unsuccessful one, the way real models narrate. Anything else gets a
text answer saying what the stand-in understands.

Tool results are read from tool_result blocks: the content is the JSON text of the
tool's output (ToolResult.output; a whole ToolResult object is unwrapped too), or plain
text; `is_error` marks a failure whose text is the error.

Where each part lives: conversation.py reads the request and holds the decisions,
vocabulary.py parses the prompt into a task, scripts.py scripts the browsing tasks (1-8),
careful.py the careful tasks (12-15) and meaning.py the page notes they read,
replay_prompts.py answers rote's replay prompts (9-11, 16; careful_again.py for the
careful tasks), verifying.py and verdicts.py the verification and comparison prompts
(17, 18), healing.py the heal prompt (19), reading.py reads tool outputs.
This module adds the markers and the session losses and decides.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from contracts.tools import SESSION_LOST
from services.dev.standin.conversation import (
    Answer,
    ApiFailure,
    Conversation,
    Decision,
    Step,
    ToolCall,
)
from services.dev.standin.vocabulary import MARKER, VOCABULARY, parse_task

MARKERS: list[str] = [
    "[standin:stuck]",
    "[standin:endless]",
    "[standin:fail]",
    "[standin:fail:<status>]",
    "[standin:redacted]",
    "[standin:unsupported]",
]

STUCK_CALL: tuple[str, dict[str, Any]] = ("browser_click", {"selector": "#rote-standin-stuck"})
# A browser call whose session died with its tools process fails with SESSION_LOST
# (contracts/tools.py); the model reads it as "session_lost: <message>" and must
# navigate again.
# Session losses the script starts over from; at the next one it answers that it could not
# finish instead of navigating forever.
MAX_SESSION_RESTARTS = 3

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def markers(prompt: str) -> dict[str, str | None]:
    return {m["name"].lower(): m["arg"] for m in MARKER.finditer(prompt)}


def understood() -> str:
    lines = [
        "I am rote's stand-in model, not Claude: I follow a small scripted vocabulary. "
        "I understand these tasks:",
        *(f"- {form}" for form in VOCABULARY),
    ]
    return "\n".join(lines)


def _fail(arg: str | None) -> ApiFailure:
    status = int(arg) if arg and arg.isdigit() and 400 <= int(arg) <= 599 else 500
    error_type = _ERROR_TYPES.get(status, "api_error")
    return ApiFailure(
        status, error_type, f"stand-in failure requested by [standin:fail] ({status})"
    )


def _stuck(conv: Conversation) -> Decision:
    name, tool_input = STUCK_CALL
    if name not in conv.tools:
        if not conv.tools:
            return Answer("[standin:stuck] needs at least one tool to call.")
        name, tool_input = sorted(conv.tools)[0], {}
    return ToolCall(name, dict(tool_input))


def _endless(conv: Conversation) -> Decision:
    k = len(conv.steps)
    if "browser_scroll" in conv.tools:
        return ToolCall("browser_scroll", {"direction": "down", "amount": 200 + 100 * k})
    if "browser_read_page" in conv.tools:
        return ToolCall("browser_read_page", {})
    if conv.tools:
        return ToolCall(sorted(conv.tools)[0], {})
    return Answer("[standin:endless] needs at least one tool to call.")


def decide(conv: Conversation) -> Decision:
    found = markers(conv.prompt)
    if "fail" in found:
        return _fail(found["fail"])
    decision = _next_turn(conv, found)
    if isinstance(decision, ToolCall) and "redacted" in found:
        decision = ToolCall(decision.name, decision.input, decision.preface, redacted=True)
    if isinstance(decision, Answer) and "unsupported" in found:
        decision = Answer(decision.text, unsupported=True)
    return decision


def _next_turn(conv: Conversation, found: dict[str, str | None]) -> Decision:
    if "stuck" in found:
        return _stuck(conv)
    if "endless" in found:
        return _endless(conv)
    task = parse_task(conv.prompt)
    if task is None:
        return Answer(understood())
    missing = sorted(task.tools - conv.tools)
    if missing:
        return Answer(
            f"This task needs the tools {', '.join(missing)}, which the request does not offer."
        )
    steps, losses = current_session(conv.steps)
    if losses and not steps:  # the latest call was refused: the page is gone
        if losses > MAX_SESSION_RESTARTS:
            return Answer(
                f"The browser session was lost {losses} times; I could not finish the task."
            )
        decision = task.next(steps)
        if isinstance(decision, ToolCall) and decision.name == "browser_navigate":
            url = decision.input.get("url")
            return replace(
                decision, preface=f"The browser session was lost; let me open {url} again."
            )
        return decision
    return task.next(steps)


def session_lost(step: Step) -> bool:
    """Whether `step` was refused because the run's browser session was lost."""
    return not step.ok and (step.error or "").startswith(f"{SESSION_LOST}:")


def current_session(steps: tuple[Step, ...]) -> tuple[tuple[Step, ...], int]:
    """The steps since the latest session loss (all of them when there was none), and how
    many losses there were: after a loss the script starts over from its navigation."""
    losses = [i for i, step in enumerate(steps) if session_lost(step)]
    return (steps[losses[-1] + 1 :] if losses else steps), len(losses)
