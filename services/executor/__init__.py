"""The executor language: what an executor's steps mean, shared by the compiler (which
writes executors) and the runner (which replays them). Pure: no NATS, no database.

The steps themselves are contracts (contracts/executors.py); this package says what
they mean at replay:

    references    the {{step_N.path}} syntax: filling a step's input, a prompt or the
                  answer template from earlier steps' outputs
    expectations  the checks a replayed step's result must pass, and condition gates
    toolkinds     which tools read, act, navigate, and which failures are safe to retry
    fingerprint   the digest of a task spec an executor was compiled for
    drift         what a read's drift fingerprint keeps of its values: their shapes
    quality       the optional quality check of a replayed answer: prompt and verdict
    cost          what a replay is expected to cost, and what a full run cost
"""
