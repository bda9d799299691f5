"""The offline demo: a local website whose layout can change, and the scripted walk
through a task's life (`rote demo`)."""
