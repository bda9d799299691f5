"""Shared code every service stands on: settings, logging, the bus, micro endpoints,
stream provisioning, the embedded NATS server, event-store configuration, and the one
way to keep an event-sourced aggregate (aggregate, commands)."""
