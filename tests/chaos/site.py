"""A local site that counts the effects it receives: one form per key, whose every POST
is recorded (the effect), and gates that hold a request of a key in flight until the test
lets it go, so that a fault lands at a known point of a run.

    GET  /f/<key>          a form (name, email) posting to /f/<key>/submit
    POST /f/<key>/submit   the effect: recorded on arrival, then answered with a
                           confirmation page ("Thank you, <name>! Your form was received.")

Each task of the chaos suite has its own key, so every request is attributed to it.
"""

from __future__ import annotations

import html
import re
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio

from tests.local_site import QuietHandler, serve

Method = Literal["GET", "POST"]
_PATH = re.compile(r"^/f/(?P<key>[A-Za-z0-9_-]+)(?P<submit>/submit)?/?$")
# However long a test holds a request, the page is answered in the end: a handler never
# outlives the test by much.
MAX_HOLD_S = 300.0


@dataclass
class Hold:
    """One request held in flight: `arrived` once it came, answered once `release`d."""

    method: Method
    key: str
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()

    async def wait_arrived(self, timeout: float) -> bool:
        """Whether it arrived within `timeout`."""
        with anyio.move_on_after(timeout):
            while not self.arrived.is_set():
                await anyio.sleep(0.02)
            return True
        return False


@dataclass(frozen=True)
class Post:
    key: str
    fields: dict[str, str]
    at: float  # time.monotonic()


def form_page(key: str) -> str:
    return (
        f"<title>Form {key}</title><h1>Request form</h1>"
        f"<form method='post' action='/f/{key}/submit'>"
        "<label>Name <input name='name' id='name'></label>"
        "<label>Email <input name='email' id='email' type='email'></label>"
        "<button type='submit'>Send</button></form>"
    )


def confirmation_page(name: str) -> str:
    return (
        "<title>Received</title><h1>Done</h1>"
        f"<p class='confirmation'>Thank you, {html.escape(name)}! Your form was received.</p>"
    )


class CountingSite:
    """Serve with `with CountingSite() as site:`; `site.url` is its base URL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.posts: list[Post] = []
        self.gets: list[tuple[str, float]] = []
        self._holds: list[Hold] = []
        self.url = ""
        self._stack = ExitStack()

    # --- what the test sees

    def posts_of(self, key: str) -> list[Post]:
        with self._lock:
            return [p for p in self.posts if p.key == key]

    def form_url(self, key: str) -> str:
        return f"{self.url}/f/{key}"

    def hold(self, method: Method, key: str) -> Hold:
        """Hold the next `method` request for `key` (one request: later ones pass)."""
        hold = Hold(method, key)
        with self._lock:
            self._holds.append(hold)
        return hold

    def release_all(self) -> None:
        with self._lock:
            holds, self._holds = list(self._holds), []
        for hold in holds:
            hold.release()

    # --- what the handler does

    def _take_hold(self, method: Method, key: str) -> Hold | None:
        with self._lock:
            for hold in self._holds:
                if hold.method == method and hold.key == key:
                    self._holds.remove(hold)
                    return hold
        return None

    def arrived(self, method: Method, key: str, fields: dict[str, str] | None) -> None:
        """Record the request (a POST is the effect, counted as it arrives), then keep
        it in flight while a hold says so."""
        with self._lock:
            if fields is not None:
                self.posts.append(Post(key, fields, time.monotonic()))
            else:
                self.gets.append((key, time.monotonic()))
        hold = self._take_hold(method, key)
        if hold is not None:
            hold.arrived.set()
            hold.released.wait(MAX_HOLD_S)

    # --- serving

    def __enter__(self) -> CountingSite:
        self.url = self._stack.enter_context(_serve_site(self))
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_all()
        self._stack.close()


@contextmanager
def _serve_site(site: CountingSite) -> Iterator[str]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            match = _PATH.match(self.path.split("?", 1)[0])
            if match is None or match["submit"]:
                self.send_html("<title>Not found</title>", status=404)
                return
            site.arrived("GET", match["key"], None)
            self.send_html(form_page(match["key"]))

        def do_POST(self) -> None:
            match = _PATH.match(self.path.split("?", 1)[0])
            if match is None or not match["submit"]:
                self.send_html("<title>Not found</title>", status=404)
                return
            fields = self.posted_form()
            site.arrived("POST", match["key"], fields)
            self.send_html(confirmation_page(fields.get("name", "friend")))

    with serve(Handler) as url:
        yield url
