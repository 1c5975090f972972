"""The readers dumpcat knows, in the order detection tries them, and detection itself.

A root is offered to each reader in turn; the first claim wins. More specific layouts come first
(a rank-layout tree of raw Ascend files is claimed by the raw reader before the npy reader, which
claims any rank-layout tree). Adding a producer is adding its line to BUILT_IN (its module is
imported only when detection reaches it or its name is asked for), or, for a reader that lives
outside this tree, an entry point of the group `dumpcat.producers` in its distribution:

    [project.entry-points."dumpcat.producers"]
    my-producer = "my_package.reader:MyReader"

The entry point's name is the reader's `name` (its `--producer` value). Such readers are tried
after the built-in ones; they are looked up (importlib.metadata, ~60 ms) only when no built-in
reader claims a root or a name is not a built-in one, so an ingest of a known dump never pays for it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import warnings
from pathlib import Path

from ingest.errors import DumpRootError
from ingest.readers.base import Detection, Reader

# (--producer value, "module:Class"), in detection order. The command line offers the names
# without importing a reader module; test_readers_registry.py checks each against its class.
BUILT_IN: tuple[tuple[str, str], ...] = (
    ("ascend-raw", "ingest.readers.ascend_raw:AscendRawReader"),
    ("mindspore-npy", "ingest.readers.mindspore_npy:MindSporeNpyReader"),
    ("ascend-raw-v1.2", "ingest.readers.ascend_raw:AscendRawV12Reader"),
    ("mindspore-bin", "ingest.readers.mindspore_bin:MindSporeBinReader"),
    ("msprobe", "ingest.readers.msprobe:MsprobeReader"),
    ("ge", "ingest.readers.ge_dump:GeDumpReader"),
    ("atc-om", "ingest.readers.ge_dump:OmDumpReader"),
)
ENTRY_POINT_GROUP = "dumpcat.producers"


def load(target: str) -> type[Reader]:
    """The class a `"module:Class"` target names (its module imported now)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@functools.cache
def _built_in(name: str) -> type[Reader]:
    return load(dict(BUILT_IN)[name])


@functools.cache
def external_readers() -> tuple[tuple[str, type[Reader]], ...]:
    """(name, class) of the readers installed distributions register in ENTRY_POINT_GROUP, in
    name order. One that cannot be loaded, is not a Reader, or whose name is taken or differs from
    its class's `name` is left out with a warning: a broken plug-in must not break detection.
    Cached; `external_readers.cache_clear()` looks again."""
    from importlib.metadata import entry_points

    built_in = {name for name, _ in BUILT_IN}
    found: list[tuple[str, type[Reader]]] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            cls = ep.load()
        except Exception as exc:  # any error of foreign code: reported, not raised
            warnings.warn(f"producer {ep.name!r} ({ep.value}) cannot be loaded: {exc}", stacklevel=2)
            continue
        problem = (
            "is not a dumpcat Reader" if not (isinstance(cls, type) and issubclass(cls, Reader))
            else f"is named {cls.name!r}, not {ep.name!r}" if getattr(cls, "name", None) != ep.name
            else "has the name of a built-in producer" if ep.name in built_in
            else "is registered twice" if any(n == ep.name for n, _ in found)
            else None
        )  # fmt: skip
        if problem is not None:
            warnings.warn(f"producer {ep.name!r} ({ep.value}) {problem}: left out", stacklevel=2)
            continue
        found.append((ep.name, cls))
    return tuple(found)


def built_in_names() -> list[str]:
    """The built-in readers' names, in detection order (no reader imported, no plug-in looked up)."""
    return [name for name, _ in BUILT_IN]


def reader_names() -> list[str]:
    """The values `--producer` accepts, in detection order: the built-in readers, then those of
    installed plug-ins (no reader module is imported for the built-in ones)."""
    return built_in_names() + [name for name, _ in external_readers()]


def built_in_readers() -> tuple[type[Reader], ...]:
    """The built-in reader classes, in detection order (imports their modules)."""
    return tuple(_built_in(name) for name, _ in BUILT_IN)


def all_readers() -> tuple[type[Reader], ...]:
    """Every reader class, in detection order: the built-in ones, then the plug-ins'."""
    return built_in_readers() + tuple(cls for _, cls in external_readers())


def reader_by_name(name: str) -> type[Reader]:
    if name in dict(BUILT_IN):
        return _built_in(name)
    for external, cls in external_readers():
        if external == name:
            return cls
    raise DumpRootError(f"unknown producer {name!r}; known producers: {', '.join(reader_names())}")


def detect(root: Path, producer: str | None = None) -> Detection:
    """The claim of the first reader that recognises `root` (or of the one named `producer`);
    DumpRootError listing what every reader looked for when none does."""
    if producer:
        readers: tuple[type[Reader], ...] = (reader_by_name(producer),)
        detection = _claim(root, readers)
    else:
        # The plug-ins are looked up only when no built-in reader claims the root.
        readers = built_in_readers()
        detection = _claim(root, readers)
        if detection is None:
            external = tuple(cls for _, cls in external_readers())
            detection = _claim(root, external)
            readers += external
    if detection is not None:
        return detection
    inside = _dumps_inside(root, readers)
    if len(inside) == 1:
        return inside[0]
    if inside:
        names = ", ".join(d.source.name for d in inside)
        raise DumpRootError(
            f"{root} holds {len(inside)} dumps ({names}): name the one to ingest, or several "
            "(`dumpcat ingest` takes several folders, each its own run)"
        )
    looked = "; ".join(f"{r.name}: {r.looked_for}" for r in readers)
    what = f"a {readers[0].name} dump" if producer else "a dump dumpcat can read"
    raise DumpRootError(f"{root} is not {what}. Looked for {looked}")


def _claim(root: Path, readers: tuple[type[Reader], ...]) -> Detection | None:
    for reader in readers:
        detection = reader.detect(root)
        if detection is not None:
            return dataclasses.replace(detection, source=root)
    return None


MAX_FOLDERS_LOOKED_INTO = 64


def _dumps_inside(root: Path, readers: tuple[type[Reader], ...]) -> list[Detection]:
    """The dumps in `root`'s folders, for a root that is not one itself (the run folder of a job
    holds its script, its dump config and `dump/`). One level down only, at most
    MAX_FOLDERS_LOOKED_INTO folders; a folder named `dump` wins over the others."""
    try:
        folders = sorted(
            (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: (p.name != "dump", p.name),
        )[:MAX_FOLDERS_LOOKED_INTO]
    except OSError:
        return []
    found = [d for d in (_claim(p, readers) for p in folders) if d is not None]
    return [d for d in found if d.source.name == "dump"] or found
