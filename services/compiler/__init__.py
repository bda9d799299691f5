"""The compiler: turns a successful full run's trace into an executor, and keeps every
executor's health as an event-sourced aggregate.

Pure core (no NATS, no database): references (the {{step_N.path}} syntax), dataflow
(where values came from), compile (trace -> Executor | Skip), expectations (replay
checks), health (the rules, as a fold over events), outcomes and views. Storage: store
(eventsourcing). Wiring: service.

What a replay needs (the runner imports these):
    references.render(value, outputs)       fill a step's input (JSON types kept)
    references.render_text(text, outputs)   fill a prompt or result template (text)
    expectations.check_all(expect, output, metadata, outputs)
    expectations.condition_holds(step, outputs)
"""
