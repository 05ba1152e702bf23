"""registry package."""
