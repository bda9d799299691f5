"""The stand-in model: a local HTTP server speaking the Anthropic Messages API that plays
a scripted agent, so the demo and the tests run offline through the real SDK.

It is NOT Claude and not a language model: a small documented policy
(services.dev.standin.policy) decides each turn from the task prompt and the tool results.
Start it with `rote model serve [--port P]`, or in-process:

    from services.dev.standin.server import StandinServer
    with StandinServer() as standin:          # a free port on 127.0.0.1
        os.environ["ANTHROPIC_BASE_URL"] = standin.url
        ...
"""
