"""codebridge package."""
