"""Byte-level decoders of dump file formats: pure functions from bytes to values, no catalog."""
