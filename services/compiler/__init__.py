"""The compiler: turns a successful full run's trace into an executor, and keeps every
executor's health as an event-sourced aggregate.

Pure core (no NATS, no database): dataflow/ (where each value came from), compile (trace
-> Executor | Skip: skip rules in skip, the run's plan in plan, the executor as it is
assembled in assembly, what each trace step recorded in recorded, tool steps in steps,
small-model steps in judgement, the answer in result, the checks a replay makes after
each tool step in step_checks, stats in stats), executor_events and health (the events,
and the rules as a fold over them; the candidate rules in promotion, the replay checks'
tallies in trust, the versions healed in place in healed), outcomes and views (what
queries and the bus show).
Storage: aggregate (the Executor aggregate) and store (the eventsourcing application).
Wiring: service. What an executor's steps mean at replay (references, expectations,
tool kinds) is the executor language, services/executor/.
"""
