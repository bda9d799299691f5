"""The llm service: the only part of rote that talks to a model (rote.api.llm.*)."""
