"""A process that can write no file: Linux Landlock, the OS wall of the statement workers.

A statement worker whose DuckDB reads the catalog's parquet files itself needs DuckDB's file
access on, limited to the catalog's folder (`allowed_directories`). DuckDB then also lets a
statement write there (`COPY ... TO`, `ATTACH`): the guard refuses both, and this module makes the
refusal the kernel's. `deny_writes()` restricts the calling process, and every thread and process
it starts later, so that no file can be created, written, truncated, renamed, linked or removed
anywhere; reading, and writing to descriptors already open (the worker's sockets), still work.

Landlock needs no privilege (Linux 5.13 or later, enabled in the kernel; a container's seccomp
profile may still refuse the calls). It restricts only the calling thread and what it starts, so
it is applied while the worker has one thread, before DuckDB starts its own. Written from the
kernel's UAPI (include/uapi/linux/landlock.h, Documentation/userspace-api/landlock.rst): the
standard library has no binding, and the calls are three.
"""

from __future__ import annotations

import ctypes
import os

# System call numbers: the same on every architecture (Landlock came after their unification).
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0  # flag: return the ABI version, create nothing
_PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_* rights that change the file system, and the ABI that introduced each.
_WRITE_RIGHTS = {
    1 << 1: 1,  # WRITE_FILE
    1 << 4: 1,  # REMOVE_DIR
    1 << 5: 1,  # REMOVE_FILE
    1 << 6: 1,  # MAKE_CHAR
    1 << 7: 1,  # MAKE_DIR
    1 << 8: 1,  # MAKE_REG
    1 << 9: 1,  # MAKE_SOCK
    1 << 10: 1,  # MAKE_FIFO
    1 << 11: 1,  # MAKE_BLOCK
    1 << 12: 1,  # MAKE_SYM
    1 << 13: 2,  # REFER (link or rename across directories)
    1 << 14: 3,  # TRUNCATE
}


class _RulesetAttr(ctypes.Structure):
    # the first field of struct landlock_ruleset_attr: the kernel reads as many bytes as we pass
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version, or 0 where Landlock cannot be used (not Linux, an old or
    unconfigured kernel, a seccomp profile that refuses the call)."""
    if os.uname().sysname != "Linux":
        return 0
    try:
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        version = libc.syscall(
            _SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION
        )
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def deny_writes() -> str | None:
    """Make this process unable to change any file, from now on and in every thread and child it
    starts. Call while it has one thread. Returns None when done, else why it could not be."""
    abi = abi_version()
    if abi < 1:
        return "the kernel offers no Landlock (Linux 5.13 or later with Landlock enabled)"
    handled = 0
    for right, since in _WRITE_RIGHTS.items():
        if abi >= since:
            handled |= right
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = _RulesetAttr(handled)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    fd = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if fd < 0:
        return f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}"
    try:
        # no rule is added: every handled right is denied everywhere
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, fd, 0) != 0:
            return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(fd)
    return None
