"""The scheduler: event-sourced tasks, their triggers, and the dispatch of their runs.

Pure rules live in modules named for the idea (triggers; conditions: whether a
condition's predicate holds of a tool's output; dispatch, budget, recovery, failures,
ledger; spec: the checks a spec passes, for tasks.create and update and for runs.start's
inline spec; task_events and task_rules: a task's events and what they decide and mean);
`task.py` is the aggregate, `application.py` the event store façade, `engine.py` the
tick loop (`condition_watch.py`: when each condition is checked; `condition_probe.py`:
reading a trigger's tool output through the tools service), `adhoc.py`
rote.api.runs.start, and `service.py` wires it all to NATS.
"""
