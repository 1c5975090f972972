"""The server's password from a mounted secret file (`--password-file`, `DUMPCAT_PASSWORD_FILE`).

A password given as `--password` is on the process's command line, which `ps` shows to every user of
the machine (or of the container); from `DUMPCAT_PASSWORD` it is in the environment, which children
inherit. A file (a Docker or Kubernetes secret, mounted read-only) is neither: it is read once, here.

The file holds the password on one line; the line end an editor or `echo` adds is dropped. A file
others may *read* is accepted (Docker swarm mounts secrets with mode 0444, and in a container the
server's user is the only one); a file others may *write* is refused, since anyone could then choose
the password.
"""

from __future__ import annotations

import os
import stat

PASSWORD_ENV = "DUMPCAT_PASSWORD"
PASSWORD_FILE_ENV = "DUMPCAT_PASSWORD_FILE"
MAX_PASSWORD_BYTES = 4096  # a password file larger than this is not one (a wrong path)


class CredentialsError(ValueError):
    """The password cannot be had as asked; the message is one line for `dumpcat: error: …`."""


def read_password_file(path: str | os.PathLike) -> str:
    """The password held in `path`, without its line end; CredentialsError when the file is missing,
    unreadable, not a regular file, writable by others, empty, longer than one line or than
    MAX_PASSWORD_BYTES, or not UTF-8."""
    name = os.fspath(path)
    try:
        # O_NONBLOCK: a FIFO given by mistake must not block the open; it is refused just below
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CredentialsError(f"cannot read the password file {name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CredentialsError(f"the password file {name} is not a regular file")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise CredentialsError(
                f"the password file {name} may be written by others (mode {stat.S_IMODE(st.st_mode):o}): "
                f"chmod go-w {name}"
            )
        try:
            data = os.read(fd, MAX_PASSWORD_BYTES + 3)  # + a CR LF and one byte too many
        except OSError as exc:
            raise CredentialsError(f"cannot read the password file {name}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if len(data) > MAX_PASSWORD_BYTES:
        raise CredentialsError(f"the password file {name} is longer than {MAX_PASSWORD_BYTES} bytes")
    if not data:
        raise CredentialsError(f"the password file {name} is empty")
    if b"\n" in data or b"\r" in data or b"\x00" in data:
        raise CredentialsError(f"the password file {name} holds more than one line: put the password alone")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError(f"the password file {name} is not UTF-8 text") from None


def resolve_password(password: str | None, password_file: str | None) -> str | None:
    """The password from `--password` / DUMPCAT_PASSWORD or from `--password-file` /
    DUMPCAT_PASSWORD_FILE (both given is an error: which one is meant?), or None."""
    if password is not None and password_file is not None:
        raise CredentialsError(
            "--password (DUMPCAT_PASSWORD) and --password-file (DUMPCAT_PASSWORD_FILE) both given: keep one"
        )
    if password_file is not None:
        return read_password_file(password_file)
    return password
