"""The offline demo: a local website whose layout can change (site.py, served by
pages.py), and the scripted walk through a task's life (scenario.py, `rote demo`)."""
