"""Integrations with model APIs and tool ecosystems.

- ``to_openai_tools`` / ``to_anthropic_tools`` / ``to_openai_strict_schema``: export projected
  tool schemas to the OpenAI (Chat Completions or Responses) and Anthropic function-calling
  formats.
"""

from ._schemas import to_anthropic_tools, to_openai_strict_schema, to_openai_tools

__all__ = ["to_anthropic_tools", "to_openai_strict_schema", "to_openai_tools"]
