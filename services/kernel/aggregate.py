"""The one way rote keeps an event-sourced aggregate (the scheduler's Task, the compiler's
Executor) on the eventsourcing library.

- Rules, pure: the state is a msgspec Struct and each kind of event a msgspec Struct with
  typed fields; `decide_*(state, ...) -> list[event]` says what happens, `apply(state,
  event)` folds one event in. They know nothing of storage.
- The aggregate (a `Folded`) holds `state` and declares, for each kind of event, the class
  that stores it (a `Stored` naming its `event_type`): the stored topic names the event and
  the stored fields are the event's. A change of what is stored is the library's
  `class_version` with `upcast_vN_vM(state)` on that class, and on the aggregate class for
  its snapshots (which hold `state`, through a registered transcoding).
- `open(opening_event)` makes a new aggregate, its opening event recorded
  (`Task.open(Defined(...))`); `record(events)` stamps the decided events as the
  aggregate's next and applies them. The application saves with
  services.kernel.commands, which retries a concurrent save.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar, cast
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic

from services.kernel.codec import encode

S = TypeVar("S", bound=msgspec.Struct)  # the state
C = TypeVar("C", bound=msgspec.Struct)  # the opening (creation) event
E = TypeVar("E", bound=msgspec.Struct)  # the events recorded after it


class Carrier:
    """How one kind of event is stored: its fields as plain JSON values (datetimes as the
    library's own), `text_fields` as JSON text.

    The stored fields are the event type's, written once, on the msgspec Struct: the
    stored class does not declare them again as the library's dataclass fields. They
    live in the stored event's instance dict, where the library's mapper puts what it
    reads back."""

    event_type: ClassVar[type[msgspec.Struct]]
    # Fields holding user data (a recorded tool input, a condition's input), stored as
    # text: the library's JSON reader would take any {"_type_", "_data_"} object in them
    # for one of its own encoded values (see services/kernel/transcoding.py).
    text_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def carrying(cls, event: msgspec.Struct, **envelope: Any) -> Self:
        """This class's stored form of `event`, with the library's `envelope` (ids,
        version, time) and any context the aggregate adds, exactly as the library's
        mapper would read it back."""
        fields: dict[str, Any] = {}
        for name in event.__struct_fields__:
            value = getattr(event, name)
            if name in cls.text_fields:
                fields[name] = encode(value).decode()
            else:
                fields[name] = msgspec.to_builtins(value, builtin_types=(datetime,))
        # Built the way eventsourcing's Mapper.to_domain_event builds every stored event
        # it reads (a bare instance given its dict): the class's constructor takes only
        # the envelope, not the event's fields (see the class docstring). So an event
        # recorded now is the very object a reload gives (tests/unit/test_kernel_aggregate).
        stored = object.__new__(cls)
        object.__setattr__(stored, "__dict__", {**envelope, **fields})
        return stored

    @property
    def event(self) -> Any:
        """The event this stores, typed (after the library's upcasting)."""
        stored = vars(self)  # the undeclared stored fields (see the class docstring)
        fields = {k: stored[k] for k in self.event_type.__struct_fields__ if k in stored}
        for name in self.text_fields:
            fields[name] = msgspec.json.decode(fields[name])
        return msgspec.convert(fields, self.event_type)


class Stored(Carrier, Aggregate.Event):
    """A recorded event of the aggregate, stored under its own topic."""

    def apply(self, aggregate: Any) -> None:
        aggregate.fold(self.event)


class StoredCreation(Carrier, Aggregate.Created):
    """The aggregate's opening event: its state starts from it (`Folded.start`)."""

    def apply(self, aggregate: Any) -> None:
        aggregate.state = type(aggregate).start(self.event)


class Folded(Aggregate, Generic[S, C, E]):
    """An aggregate whose state is folded from its events by pure rules. Subclasses
    nest a `StoredCreation` for their opening event and a `Stored` for every other
    kind, and say how the state starts (`start`), how an event folds in (`fold`) and
    which aggregate an opening event names (`id_of`). A new one is made with `open`."""

    if TYPE_CHECKING:
        state: S

    # event type -> the class that stores it, per aggregate class.
    _carriers: ClassVar[dict[type[Any], type[Stored] | type[StoredCreation]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # After the library has made each nested event class its own (a subclass of the
        # aggregate's Event): those are the classes events are stored as.
        cls._carriers = {
            value.event_type: value
            for value in vars(cls).values()
            if isinstance(value, type)
            and issubclass(value, Stored | StoredCreation)
            and hasattr(value, "event_type")
        }

    @classmethod
    @abstractmethod
    def start(cls, opening: C) -> S:
        """The state as the opening event leaves it."""

    @abstractmethod
    def fold(self, event: E) -> None:
        """Fold one recorded event into `state` (the rules' `apply`)."""

    @classmethod
    @abstractmethod
    def id_of(cls, opening: C) -> UUID:
        """The aggregate id the opening event names."""

    def context(self) -> dict[str, Any]:
        """What every event recorded from now on carries besides its own fields, for
        readers of the notification log (none by default)."""
        return {}

    @classmethod
    def open(cls, opening: C) -> Self:
        """A new aggregate, its opening event recorded. (Not `Aggregate(...)`: the
        library would build the opening event from keyword arguments, and its stored
        class takes none of the event's fields.)"""
        stored = cls._carriers[type(opening)].carrying(
            opening,
            originator_topic=get_topic(cls),
            originator_id=cls.id_of(opening),
            originator_version=cls.INITIAL_VERSION,
            timestamp=Aggregate.Event.create_timestamp(),
        )
        # The library's own construction from an opening event (what a reload does).
        aggregate = cast(Self, stored.mutate(None))
        aggregate.pending_events.append(stored)
        return aggregate

    def record(self, events: Iterable[E]) -> list[E]:
        """Record decided events as the aggregate's next, applying each; returns them."""
        recorded = list(events)
        for event in recorded:
            stored = self._carriers[type(event)].carrying(
                event,
                **self.context(),
                originator_id=self.id,
                originator_version=self.version + 1,
                timestamp=Aggregate.Event.create_timestamp(),
            )
            stored.mutate(self)
            self.pending_events.append(stored)
        return recorded
