"""The scheduler: event-sourced tasks, their triggers, and the dispatch of their runs.

Pure rules live in modules named for the idea (triggers, conditions, dispatch, budget,
recovery, failures, ledger, spec: the checks a spec passes, for tasks.create and
update and for runs.start's inline spec); `task.py` is the aggregate, `application.py` the event
store façade, `engine.py` the tick loop, and `service.py` wires it all to NATS.
"""
