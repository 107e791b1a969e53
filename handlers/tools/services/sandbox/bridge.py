"""The sandbox's end of the way out: a loopback port inside the sandbox relayed to the proxy's Unix socket.

Runs inside as ``python3 -I -S bridge.py SOCKET PORT FILTER -- CMD`` and imports no queryloop (docs/security.md).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Sequence

__all__ = ["bridge_argv", "main"]

_CHUNK = 64 * 1024
_PR_SET_PDEATHSIG = 1  # prctl(2)
_PR_SET_DUMPABLE = 4


def bridge_argv(
    socket_path: str | os.PathLike[str],
    port: int,
    command: Sequence[str],
    *,
    python: str = sys.executable,
    script: str | os.PathLike[str] | None = None,
    seccomp_filter: str | os.PathLike[str] | None = None,
) -> tuple[str, ...]:
    """The argument vector that runs ``command`` inside the sandbox behind the bridge on ``port``.

    ``script``: where the sandbox sees this file (default: where it is), for a sandbox that
    hides the directory it is installed in.
    """
    here = os.fspath(script) if script is not None else os.path.abspath(__file__)
    program = "-" if seccomp_filter is None else os.fspath(seccomp_filter)
    return (python, "-I", "-S", here, os.fspath(socket_path), str(port), program, "--", *command)  # -S: faster


def _warn(message: str) -> None:
    print(f"queryloop sandbox: {message}", file=sys.stderr, flush=True)


def _parse(argv: Sequence[str]) -> tuple[str, int, str, list[str]] | str:
    """Socket, port, filter and command, or the reason the command line is malformed."""
    if len(argv) < 5 or argv[3] != "--":
        return "usage: bridge.py SOCKET PORT FILTER -- CMD [ARGS...]"
    if not argv[1].isdigit() or not 0 < int(argv[1]) < 65536:
        return f"PORT must be a number from 1 to 65535, not {argv[1]!r}"
    return argv[0], int(argv[1]), argv[2], list(argv[4:])


_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def _install_filter(path: str) -> str | None:
    """Install the seccomp program in ``path`` on this process; None when done, else why not."""
    try:
        with open(path, "rb") as file:
            program = file.read()
    except OSError as exc:
        return f"cannot read the seccomp filter {path}: {exc.strerror}"
    if not program or len(program) % 8:
        return f"{path} is not a seccomp program"
    libc = ctypes.CDLL(None, use_errno=True)
    fprog = _SockFprog(len(program) // 8, program)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}"
    return None


def _listen(socket_path: str, port: int) -> socket.socket | None:
    """The listening loopback socket, or None (after one warning) when the network cannot be bridged."""
    try:
        if not stat.S_ISSOCK(os.stat(socket_path).st_mode):
            _warn(f"{socket_path} is not a socket; the command runs without network")
            return None
    except OSError as exc:
        _warn(f"proxy socket {socket_path}: {exc.strerror}; the command runs without network")
        return None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError as exc:
        listener.close()
        _warn(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}; the command runs without network")
        return None
    return listener


def _pump(source: socket.socket, sink: socket.socket, done: threading.Semaphore) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)  # pass the end on: a tunnel's other side may still answer
    except OSError:
        for sock in (source, sink):  # a broken side ends the other direction too
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    finally:
        if not done.acquire(blocking=False):  # the second direction to finish closes both
            source.close()
            sink.close()


def _relay(client: socket.socket, socket_path: str) -> None:
    proxy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proxy.connect(socket_path)
    except OSError:
        proxy.close()
        client.close()  # the client sees the connection closed, as with no proxy at all
        return
    done = threading.Semaphore(1)
    for source, sink in ((client, proxy), (proxy, client)):
        threading.Thread(target=_pump, args=(source, sink, done), daemon=True).start()


def _end_with_parent(parent: int) -> None:
    """Die when the parent (the command, once exec'd) ends, even outside a PID namespace."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass  # not Linux: the watcher below still ends the relay

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)

    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(0)
    threading.Thread(target=watch, daemon=True).start()


def _close_inherited(*, keep: set[int]) -> None:
    """Close every descriptor above the standard streams except ``keep`` (bubblewrap's status pipes,
    say, must not outlive the command because the relay holds them)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _serve(listener: socket.socket, socket_path: str, parent: int) -> None:
    """The child: let go of the command's streams and files, then relay every connection until killed.

    It makes itself undumpable first: the command runs as the same user, and could otherwise
    ptrace the relay or write its memory through ``/proc`` and use its Unix socket, which the
    command's own seccomp filter refuses it.
    """
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        os._exit(1)  # no relay rather than one the command could take over
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _close_inherited(keep={devnull, listener.fileno()})
    _end_with_parent(parent)
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            time.sleep(0.05)  # out of file descriptors, say: keep serving
            continue
        _relay(client, socket_path)


def _exec(command: list[str]) -> int:
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        _warn(f"cannot run {command[0]!r}: {exc.strerror}")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    raise AssertionError("execvp returned")  # pragma: no cover


def main(argv: Sequence[str]) -> int:
    """Listen, fork the relay, run the command (``argv`` excludes the program name); its exit status."""
    parsed = _parse(argv)
    if isinstance(parsed, str):
        _warn(parsed)
        return 125
    socket_path, port, program, command = parsed
    listener = _listen(socket_path, port)
    if listener is not None:
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            try:
                _serve(listener, socket_path, parent)
            finally:
                os._exit(0)
        listener.close()
    if program == "-":
        return _exec(command)
    return _run_filtered(program, command)


def _run_filtered(program: str, command: list[str]) -> int:
    """Run the command with the seccomp ``program`` installed on it alone; wait for it, reaping what it leaves.

    The bridge stays, undumpable, as the sandbox's first process (bubblewrap's ``--as-pid-1``):
    bubblewrap's own first process would be a process without the filter that the command,
    as the same user, could write into through ``/proc``.
    """
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        _warn("cannot make the bridge undumpable; the command does not run")
        return 125
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        problem = _install_filter(program)
        if problem is not None:
            _warn(f"{problem}; the command does not run")
            os._exit(125)
        os._exit(_exec(command))
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
