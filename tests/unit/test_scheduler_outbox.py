"""What a recorded task event becomes on the bus: a secret written into a task's spec
is masked in every event, while the run request carries the spec as written (the run
needs it)."""

from __future__ import annotations

from contracts.runs import RunEvent, RunRequest
from contracts.tasks import TaskEvent, TaskSpec
from services.kernel.secrets import register_secret
from services.scheduler.application import to_view
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from tests.unit.conftest import T0

SECRET = "tok-outbox-9f8e7d6c5b4a"


def test_a_secret_in_a_spec_is_masked_in_events_not_in_the_run_request() -> None:
    register_secret(SECRET)
    spec = TaskSpec(name="deploy check", prompt=f"Log in with {SECRET} and read the status")
    task = Task.open(Defined(task_id="deploy-check", spec=spec, at=T0))
    task.request_run("r-1", "manual", T0)
    task.dispatch_run("r-1", "manual", T0)
    messages = [m for e in task.collect_events() for m in messages_for(e, "deploy-check")]

    events = [m.event for m in messages if isinstance(m.event, TaskEvent | RunEvent)]
    specs = [e.spec for e in events if e.spec is not None]
    assert len(specs) == 3  # defined, run_dispatched, and the run's "requested"
    assert all(SECRET not in s.prompt and "[redacted]" in s.prompt for s in specs)

    (request,) = [m.event for m in messages if isinstance(m.event, RunRequest)]
    assert request.spec.prompt == spec.prompt


def test_a_spec_without_secrets_is_shown_as_it_is() -> None:
    spec = TaskSpec(name="news", prompt="Open http://127.0.0.1:8000/news and report")
    task = Task.open(Defined(task_id="news", spec=spec, at=T0))
    (message,) = [m for e in task.collect_events() for m in messages_for(e, "news")]
    assert isinstance(message.event, TaskEvent) and message.event.spec == spec


def test_reasons_and_errors_are_masked_in_events() -> None:
    # An operator's pause reason and a run's error may quote a secret or a URL with
    # its password; the events keep them readable around the mask.
    register_secret(SECRET)
    task = Task.open(
        Defined(task_id="deploy-check", spec=TaskSpec(name="deploy check", prompt="Check"), at=T0)
    )
    task.pause(f"rotating {SECRET}", T0)
    task.resume(T0)
    task.request_run("r-1", "manual", T0)
    task.dispatch_run("r-1", "manual", T0)
    task.finish_run(
        "r-1",
        status="failed",
        at=T0,
        reason="abandoned",
        error="cannot reach postgresql://rote:Pg@hunter22@db/rote",
        reported_by="scheduler",
    )
    messages = [m for e in task.collect_events() for m in messages_for(e, "deploy-check")]
    events = [m.event for m in messages if isinstance(m.event, TaskEvent | RunEvent)]
    (paused,) = [e for e in events if isinstance(e, TaskEvent) and e.event == "paused"]
    assert paused.reason == "rotating [redacted]"
    finished = [e for e in events if e.error is not None]
    assert len(finished) == 2  # the task's run_finished and the run's failed event
    for event in finished:
        assert event.error == "cannot reach postgresql://rote:[redacted]@db/rote"


def test_a_pause_reason_is_masked_in_the_task_view_too() -> None:
    # tasks.get shows the reason as the paused event does.
    register_secret(SECRET)
    task = Task.open(
        Defined(task_id="deploy-check", spec=TaskSpec(name="deploy check", prompt="Check"), at=T0)
    )
    task.pause(f"rotating {SECRET}", T0)
    assert to_view(task).status_reason == "rotating [redacted]"


def test_a_run_asked_for_is_a_requested_run_before_it_goes_out() -> None:
    # runs.get reads a run from its events: the run_id tasks.run gave out names one at
    # once, even while it waits behind another. Sent out later, its `requested` event
    # comes again under the same Nats-Msg-Id: the stream keeps one.
    task = Task.open(Defined(task_id="news", spec=TaskSpec(name="news", prompt="Report"), at=T0))
    task.request_run("r-1", "manual", T0)
    task.dispatch_run("r-1", "manual", T0, queued=True)
    requested = [
        m
        for e in task.collect_events()
        for m in messages_for(e, "news")
        if isinstance(m.event, RunEvent)
    ]
    assert [(m.subject, m.msg_id) for m in requested] == [
        ("rote.evt.run.news.r-1.requested", "r-1:requested")
    ] * 2
    asked = requested[0].event
    assert isinstance(asked, RunEvent)
    assert (asked.status, asked.origin, asked.at) == ("requested", "manual", T0)
