"""Integrations with other tools and frameworks, each behind its own extra."""
