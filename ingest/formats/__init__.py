"""Byte-level decoders of dump file formats: pure functions from bytes to values, no catalog.

Grouped by producer family (`mindspore/`, `ascend/`, `msprobe/`); what several share stays here:
npy headers, dtypes (and the special ones MindSpore stores as others), tensor data with device
formats undone, the parsed-graph model, decimal fields, and the size caps of metadata files.
"""
