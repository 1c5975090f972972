"""Errors of the ingest layer that several of its parts raise: here, below both the pipeline and
the readers, so that detection (`ingest.readers.registry`) raises them without importing the
pipeline (which imports the registry)."""

from __future__ import annotations


class DumpRootError(Exception):
    """The dump directory cannot be ingested at all (missing, unreadable, not a dump)."""
