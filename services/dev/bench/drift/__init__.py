"""Local sites and recurring tasks for the drift benchmark (services/dev/bench/bench_drift.py).

Seven small sites whose pages are rendered in a *page state*: an edition of the data, a
layout (v1, or v2 whose markup a v1 executor cannot find: a breaking redesign) and the
silent drifts in force (state.py DRIFT_KINDS: a redesign that keeps every selector,
position and title a compiled executor reads, changes what the values mean, and says so
on the page). Each task is a prompt in the stand-in's careful vocabulary
(services/dev/standin/careful.py) with a schedule of page states (tasks.py).

    with DriftServer(SITES["weather"]) as server:
        server.state = PageState(edition=3, drifts=frozenset({"unit_changed"}))
        prompt = TASKS_BY_ID["weather-high-lisbon"].prompt_for(server.url)

state.py holds page states and how they are written (language, numbers, dates, times,
captions, the frame); tables.py the table sites, pages.py the labelled-value and ranked
list sites, sites.py the seven sites and their data; truth.py what a task's answer means
on a state, from the data; judge.py an answer against it; oracle.py the stand-in's full
run offline over the pages' DOM, for the unit tests; reads.py what a recorded extract
reads on a state with the page's fingerprint of it, as a replay's verification is given.
"""
