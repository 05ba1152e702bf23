"""The one check of an agent key that a public read is given (``names(agent=...)``,
``assemble_prompt(agent)``...): a read with a key that is not a ``str`` would silently answer
for the global view instead of refusing."""

from __future__ import annotations

__all__ = ["check_agent_key"]


def check_agent_key(agent: object, *, optional: bool = True) -> None:
    """``TypeError`` unless ``agent`` is a ``str`` (or ``None``, the global view, when
    ``optional``), naming the type given."""
    if type(agent) is str or (optional and agent is None):
        return
    raise TypeError(f"agent keys are str, got {type(agent).__name__}")
