"""Local sites and recurring tasks for the cost benchmark (services/dev/bench/bench_cost.py).

Eight small sites, each rendered in three layouts (v1 -> v2 -> v3) and in numbered
editions. An edition changes the content (new stories, moved prices, fresh reference
numbers), so a replay must read the page again; a layout change is a redesign: the list
a task reads moves to markup that a *different* entry of the stand-in model's candidate
lists finds (services/dev/standin/scripts.py CANDIDATE_SELECTORS and CANDIDATE_RECORDS), so
the selector a compiled executor recorded finds nothing any more. Forms keep their
field names through a redesign, page reads use no selector and an extract of a class
every layout keeps still matches: those tasks survive layout changes, as they would on
real sites.

Each task is a prompt in the stand-in's vocabulary with `{url}` for the site's origin.
Every task gets its own `SiteServer` (its own port, layout and edition), so tasks can
run side by side on their own schedules.

    with SiteServer(SITES["gazette"]) as server:
        server.layout, server.edition = "v2", 3
        prompt = TASKS[0].prompt_for(server.url)

tasks.py holds the tasks, the sites by name and their server; site.py what a site is
made of, lists.py the list sites' markup, sites.py the seven list sites' content and
townhall.py the forms. The page server they share with the demo's site is
services/dev/demo/pages.py.
"""
