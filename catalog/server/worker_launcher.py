"""The statement workers' launcher: one process that imports their modules once and forks each worker.

A statement worker spends most of its start in imports (DuckDB, Arrow datasets, the guard's parser,
sqlglot, the PostgreSQL codecs): about a second of CPU each, paid by every worker of every server
and again by each replacement of a killed one. The server starts this launcher once; it imports
all of that, opens no database and starts no thread of its own, and then forks a worker for each
request. A forked worker opens its contained engine, warms up and limits its address space as a
worker started from scratch does (`catalog.server.statement_worker.run`).

Channels (both socket pairs made by the server):

- *requests* (server to launcher, a SOCK_SEQPACKET pair): one JSON message per worker,
  `{"n": ..., "config": {...}}`, with the worker's data and control sockets passed as file
  descriptors (SCM_RIGHTS).
- *notices* (launcher to server): JSON lines `{"started": n, "pid": p}` when worker `n` is
  forked and `{"exited": p, "status": s}` when it ends (`status` as `subprocess.Popen.returncode`:
  negative for a signal), since only the launcher, its parent, can collect that.

The launcher ends when the server closes the requests channel; workers it forked keep serving
until the server closes their data socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys

MAX_REQUEST = 1 << 16  # bytes of one request line (a worker's config is a few hundred)


def preload() -> None:
    """Import what a worker imports, so that each fork starts with it loaded. Nothing here may
    open a database or start a thread: a forked child has only the thread that forked it."""
    import sqlglot.dialects.duckdb  # noqa: F401  (loaded lazily by the first translation)

    from catalog import guard  # noqa: F401
    from catalog.server import pg_catalog, pg_translate, pgcodec, sandbox, statement_worker  # noqa: F401


def exit_status(wait_status: int) -> int:
    """os.waitpid's status as subprocess's returncode: the exit code, or minus the signal."""
    return os.waitstatus_to_exitcode(wait_status)


class Launcher:
    def __init__(self, requests: socket.socket, notices: socket.socket) -> None:
        self.requests, self.notices = requests, notices
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_write, False)
        signal.set_wakeup_fd(self.wake_write)
        # A handler (not SIG_DFL) so that SIGCHLD writes to the wake-up pipe.
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def notify(self, message: dict) -> None:
        self.notices.sendall(json.dumps(message).encode() + b"\n")

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.notify({"exited": pid, "status": exit_status(status)})

    def serve(self) -> None:
        while True:
            readable, _, _ = select.select([self.requests, self.wake_read], [], [])
            if self.wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_read, 512)
                self.reap()
            if self.requests in readable:
                message, fds, _flags, _addr = socket.recv_fds(self.requests, MAX_REQUEST, 2)
                if not message:
                    return  # the server is gone
                if len(fds) == 2:
                    self.fork(json.loads(message), *fds)
                else:  # not from the server: nothing to start
                    for fd in fds:
                        os.close(fd)
            self.reap()

    def fork(self, request: dict, data_fd: int, control_fd: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (self.wake_read, self.wake_write, self.requests.fileno(), self.notices.fileno()):
                    os.close(fd)
                from catalog.server.statement_worker import run

                run(data_fd, control_fd, request["config"])
                code = 0
            finally:
                os._exit(code)
        os.close(data_fd)
        os.close(control_fd)
        self.notify({"started": request["n"], "pid": pid})


def main() -> None:
    requests = socket.socket(fileno=int(sys.argv[1]))
    notices = socket.socket(fileno=int(sys.argv[2]))
    preload()
    with contextlib.suppress(BrokenPipeError, ConnectionError, KeyboardInterrupt):
        Launcher(requests, notices).serve()


if __name__ == "__main__":
    main()
