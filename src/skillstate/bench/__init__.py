"""Benchmarks that ship with the package (``skillstate bench ...``)."""
