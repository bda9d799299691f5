"""The scheduler: event-sourced tasks, their triggers, and the dispatch of their runs.

Pure rules live in modules named for the idea (triggers, conditions, dispatch, budget,
recovery, failures, ledger, spec: the checks a spec passes, which the runner's
runs.start applies too); `task.py` is the aggregate, `application.py` the event
store façade, `engine.py` the tick loop, and `service.py` wires it all to NATS.
"""
