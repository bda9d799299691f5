"""Wire contracts of rote: msgspec Structs and subject names. No I/O lives here.

Every message on every subject is JSON encoded from one of these Structs, so a
user with the NATS CLI can read and write them by hand.
"""
