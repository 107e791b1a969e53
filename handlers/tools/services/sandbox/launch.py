"""Running a model-proposed command inside bubblewrap: the probe, the mounts, the network, the capture.

Owns :class:`Sandbox`: the ``bwrap`` line for one command (:meth:`Sandbox.prepare`) and bringing its changes back
(:meth:`SandboxedCommand.finish`). What a sandboxed command sees: docs/security.md. Does not decide which calls run
here (``policy``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

from ..rules import PermissionRules, read_denied, read_denied_paths
from ..runs_later import RunsLater, find_runs_later
from . import bridge
from .bridge import bridge_argv
from .nofollow import remove_inside, remove_tree
from .overlay import OverlayChanges, apply_upper
from .overlayfs import overlay_available, overlay_mount_options
from .policy import FilesystemPlaces, SandboxPolicy
from .protect import SandboxRefusal, WalkLimitError, existing_protected, is_protected, shallow_protected
from .proxy import DomainProxy
from .seccomp import unix_socket_filter
from .upper import PathNote

__all__ = ["DEFAULT_CAPTURE_BYTES", "PROXY_PORT", "Sandbox", "SandboxedCommand"]

PROXY_PORT: Final = 3128
"""The port on the sandbox's own loopback where the bridge to the domain proxy listens."""

DEFAULT_CAPTURE_BYTES: Final = 64 * 1024 * 1024
"""How many bytes of the files one command overwrites or removes are checkpointed (beyond: not rewindable)."""

_MAX_WALK: Final = 200_000  # directory entries walked to find what Read deny rules cover and what is protected

_Rel = tuple[str, ...]


@attrs.frozen(kw_only=True)
class _Writable:
    """A folder ``allowWrite`` makes writable: what runs later in it, and the protected paths it held before."""

    root: Path
    later: RunsLater
    protected_before: frozenset[Path]
    binds: tuple[Path, ...]  # bound read-only: the protected paths, a symlink's target within

    def remove_new_protected(self, limit: int) -> None:
        """Remove again each protected path the command made here (no mount could cover what did not exist)."""
        try:
            found = set(existing_protected(self.root, later=self.later, limit=limit))
        except WalkLimitError as exc:
            raise SandboxRefusal(f"{exc}; files the command made in {self.root} were not checked") from None
        for path in sorted(found - self.protected_before):
            remove_inside(self.root, path.relative_to(self.root).parts)


@attrs.frozen(kw_only=True)
class SandboxedCommand:
    """One command ready to start inside the sandbox, and how to bring its changes back afterwards."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    upper: Path | None  # the overlay's upper directory (None: the working directory is bound directly)
    work: Path | None
    cwd: Path
    cap_bytes: int
    guard: Callable[[_Rel, bool], bool] = attrs.field(eq=False)  # what it may not change: (path, is a folder)
    later: RunsLater = attrs.field(factory=RunsLater)  # what runs later there (``runs_later``)
    protected_before: frozenset[Path] = frozenset()  # bound directly: the protected paths that existed
    walk_limit: int = _MAX_WALK
    also_writable: tuple[_Writable, ...] = ()  # allowWrite's folders: looked at again afterwards

    def finish(self, checkpoint: Callable[[Sequence[Path]], object] | None) -> OverlayChanges | None:
        """Checkpoint the originals of what the command changed, then apply the changes; None when not captured.

        Runs whether the command succeeded, failed, timed out or was cancelled: what it
        wrote, it wrote, except what is protected. ``checkpoint`` None (no session kept)
        applies without storing. Bound directly (no overlay), nothing is captured, and a
        protected path the command created (no mount could cover what did not exist) is
        removed again and listed; raises :class:`SandboxRefusal` when the working directory
        grew too large to look.
        """
        try:
            return self._bring_back(checkpoint)
        finally:  # whatever came of the working directory: allowWrite's folders are looked at too
            for writable in self.also_writable:
                writable.remove_new_protected(self.walk_limit)

    def _bring_back(self, checkpoint: Callable[[Sequence[Path]], object] | None) -> OverlayChanges | None:
        if self.upper is None:
            return self._remove_new_protected()
        try:
            return apply_upper(
                self.upper,
                self.cwd,
                checkpoint=checkpoint or _no_checkpoint,
                cap_bytes=self.cap_bytes,
                guard=self.guard,
            )
        finally:
            for folder in (self.upper, self.work):
                if folder is not None:
                    remove_tree(folder)

    def _remove_new_protected(self) -> OverlayChanges | None:
        try:
            found = set(existing_protected(self.cwd, later=self.later, limit=self.walk_limit))
        except WalkLimitError as exc:
            raise SandboxRefusal(f"{exc}; files the command made there were not checked") from None
        made = sorted(found - self.protected_before)
        if not made:
            return None
        for path in made:
            remove_inside(self.cwd, path.relative_to(self.cwd).parts)
        refused = tuple(PathNote(path=str(p.relative_to(self.cwd)), why="protected, removed") for p in made)
        return OverlayChanges(
            changed=(),
            removed=(),
            checkpointed=(),
            not_rewindable=(),
            refused=refused,
            bytes_checkpointed=0,
            over_cap=False,
            cap_bytes=self.cap_bytes,
        )


def _bindable(found: Iterable[Path], root: Path) -> tuple[tuple[Path, ...], list[_Rel]]:
    """The protected paths ``found`` under ``root`` to bind read-only, and the symlink targets among them.

    A protected symlink is bound at its target when that lies in ``root`` (writing through it
    would change the target), and the target is protected too.
    """
    paths: list[Path] = []
    targets: list[_Rel] = []
    for path in found:
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if target.is_relative_to(root) and target != root and target.exists():
                paths.append(target)
                targets.append(target.relative_to(root).parts)
        elif path.exists():
            paths.append(path)
    return tuple(paths), targets


def _no_checkpoint(paths: Sequence[Path]) -> None:
    return None


class Sandbox:
    """The run's sandbox: its policy, its own temporary directory, its proxy; builds each command's ``bwrap`` line.

    ``hidden`` tells which files the Read deny rules cover (``permissions.read_denied``;
    None when there are none: nothing is walked); ``denied_paths`` are literal paths
    those rules name outside the working directory.
    """

    def __init__(
        self,
        policy: SandboxPolicy,
        *,
        cwd: Path,
        hidden: Callable[[Path], bool] | None = None,
        denied_paths: Sequence[Path] = (),
        capture: bool = True,
        cap_bytes: int = DEFAULT_CAPTURE_BYTES,
        walk_limit: int = _MAX_WALK,
    ) -> None:
        self.policy = policy
        self.walk_limit = walk_limit
        self.cwd = cwd.resolve()
        self.hidden = hidden
        self.places: FilesystemPlaces = policy.places(Path.home())
        self.denied_paths = (*denied_paths, *self.places.deny_read)
        self.cap_bytes = cap_bytes
        self.scratch = Path(tempfile.mkdtemp(prefix="queryloop-sandbox-"))
        self.tmp = self.scratch / "tmp"
        self.tmp.mkdir()
        # The stand-in for a hidden file: an empty regular file (a device node such as /dev/null cannot be
        # opened where the sandbox's user namespace makes every mount nodev).
        self.empty = self.scratch / "empty"
        self.empty.write_bytes(b"")
        self.empty.chmod(0o444)
        self._lock = threading.Lock()
        self._proxy: DomainProxy | None = None
        self.net = self.scratch / "net"  # seen by the sandbox when it bridges the network: the bridge, the filter
        self.net.mkdir()
        program = unix_socket_filter()
        self.socket_filter: Path | None = None
        if program is not None:
            self.socket_filter = self.net / "unix.bpf"
            self.socket_filter.write_bytes(program)
        self.capture_problem: str | None = self._capture_problem() if capture else "capture is off"

    def _capture_problem(self) -> str | None:
        if overlay_mount_options(self.cwd, self.scratch / "u", self.scratch / "w") is None:
            return f"the working directory's path ({self.cwd}) cannot be named in overlayfs options"
        if shutil.which("unshare") is None:
            return "util-linux's `unshare` is not installed"
        probe = self.scratch / "probe"
        probe.mkdir()
        try:
            return overlay_available(probe)
        finally:
            remove_tree(probe)

    @classmethod
    def for_rules(cls, policy: SandboxPolicy, *, cwd: Path, rules: PermissionRules, capture: bool = True) -> Sandbox:
        """The sandbox a run with these permission rules gets: what their Read deny rules cover, hidden."""
        real = cwd.resolve()
        reads_denied = any(r.tool == "Read" and r.specifier is not None for r in rules.deny)
        return cls(
            policy,
            cwd=real,
            hidden=read_denied(rules, cwd=real, lexical=True) if reads_denied else None,
            denied_paths=read_denied_paths(rules, cwd=real),
            capture=capture,
        )

    @property
    def captures(self) -> bool:
        """Are the working directory's changes checkpointed (overlayfs works here)?"""
        return self.capture_problem is None

    def refused_hosts(self) -> tuple[str, ...]:
        """Hosts the proxy refused so far (not in ``allowedDomains``)."""
        return self._proxy.refused() if self._proxy is not None else ()

    def close(self) -> None:
        """Stop the proxy and remove the run's temporary directory."""
        with self._lock:
            if self._proxy is not None:
                self._proxy.close()
                self._proxy = None
        remove_tree(self.scratch)

    def _proxy_socket(self) -> Path:
        with self._lock:
            if self._proxy is None:
                folder = self.net
                # The bridge runs from here: the sandbox sees this folder, not always where queryloop is
                # installed (an install under /tmp is hidden by the sandbox's own /tmp).
                shutil.copyfile(bridge.__file__, folder / "bridge.py")
                self._proxy = DomainProxy(self.policy.allowed_domains, folder / "proxy.sock")
                self._proxy.start()
            return self._proxy.socket_path

    def prepare(self, command: str, env: Mapping[str, str]) -> SandboxedCommand:
        """The ``bwrap`` command line (and environment) that runs ``bash -c command`` in the sandbox.

        Raises :class:`SandboxRefusal` when a protection cannot be given here: no seccomp
        program for this machine, a working directory too large to walk, a Read deny rule
        naming a symlink to a folder the sandbox cannot hide.
        """
        if self.socket_filter is None:
            raise SandboxRefusal(
                "the sandbox cannot keep commands off Unix sockets on this machine's architecture, so it runs none"
            )
        environment = {**env, "TMPDIR": "/tmp"}
        for key in ("no_proxy", "NO_PROXY"):
            environment.pop(key, None)
        args: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--bind", str(self.tmp), "/tmp", "--bind", str(self.cwd), str(self.cwd)]
        later = find_runs_later(self.cwd, path_env=env.get("PATH"))
        found, protected, guard = self._protection(later)
        writable = self._also_writable(env.get("PATH"))
        for folder in writable:
            args += ["--bind", str(folder.root), str(folder.root)]
            protected += folder.binds
        for path in [*protected, *self._write_denied()]:
            args += ["--ro-bind", str(path), str(path)]
        args += self._masks()
        inner: list[str] = ["bash", "-c", command]
        seccomp: list[str] = ["--seccomp", "3"]  # fd 3: the filter, opened by the wrapper below
        filter_fd = True
        if self.policy.allowed_domains:
            socket = self._proxy_socket()
            # read-only: it holds the bridge and the seccomp filter the next command's start reads (a Unix
            # socket is connected to on a read-only mount all the same)
            args += ["--ro-bind", str(socket.parent), str(socket.parent)]
            url = f"http://127.0.0.1:{PROXY_PORT}"
            for key in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
                environment[key] = url
            python = os.path.realpath(sys.executable)
            prefix = os.path.realpath(sys.base_prefix)
            if Path(prefix).is_relative_to("/tmp"):  # an interpreter under /tmp: shown at its place, read-only
                args += ["--ro-bind", prefix, prefix]
            script = socket.parent / "bridge.py"
            inner = list(
                bridge_argv(socket, PROXY_PORT, inner, python=python, script=script, seccomp_filter=self.socket_filter)
            )
            seccomp, filter_fd = ["--as-pid-1"], False  # the relay needs a Unix socket: the bridge filters the command
        args += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--chdir", str(self.cwd)]
        bwrap = [shutil.which("bwrap") or "bwrap", *args, *seccomp, "--", *inner]
        if filter_fd:
            bwrap = ["sh", "-c", 'f=$1; shift; exec "$@" 3<"$f"', "sh", str(self.socket_filter), *bwrap]
        if not self.captures:
            return SandboxedCommand(
                argv=tuple(bwrap),
                env=environment,
                upper=None,
                work=None,
                cwd=self.cwd,
                cap_bytes=self.cap_bytes,
                guard=guard,
                later=later,
                protected_before=frozenset(found),
                walk_limit=self.walk_limit,
                also_writable=writable,
            )
        upper = Path(tempfile.mkdtemp(prefix="upper-", dir=self.scratch))
        work = Path(tempfile.mkdtemp(prefix="work-", dir=self.scratch))
        options = overlay_mount_options(self.cwd, upper, work)
        assert options is not None  # checked when the sandbox was made
        mount = 'mount -t overlay overlay -o "$1" "$2" && shift 2 && exec "$@"'
        argv = ("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, "sh", options, str(self.cwd))
        return SandboxedCommand(
            argv=(*argv, *bwrap),
            env=environment,
            upper=upper,
            work=work,
            cwd=self.cwd,
            cap_bytes=self.cap_bytes,
            guard=guard,
            later=later,
            walk_limit=self.walk_limit,
            also_writable=writable,
        )

    def _also_writable(self, path_env: str | None) -> tuple[_Writable, ...]:
        """``allowWrite``'s folders that exist, outside the working directory and not holding it, each with its
        protected paths (walked: what runs later there stays read-only, as in the working directory)."""
        folders: list[_Writable] = []
        for place in self.places.allow_write:
            root = Path(os.path.realpath(place))
            if not root.is_dir() or root.is_relative_to(self.cwd) or self.cwd.is_relative_to(root):
                continue
            later = find_runs_later(root, path_env=path_env)
            try:
                found = frozenset(existing_protected(root, later=later, limit=self.walk_limit))
            except WalkLimitError as exc:
                why = "without looking it cannot protect them, so the command does not run"
                raise SandboxRefusal(f"{exc}; {why}") from None
            folders.append(_Writable(root=root, later=later, protected_before=found, binds=_bindable(found, root)[0]))
        return tuple(folders)

    def _write_denied(self) -> list[Path]:
        """``denyWrite``'s paths that exist (a mount needs something to cover), as a write reaches them."""
        return [Path(os.path.realpath(p)) for p in self.places.deny_write if os.path.exists(p)]

    def _protection(self, later: RunsLater) -> tuple[list[Path], list[Path], Callable[[_Rel, bool], bool]]:
        """The protected paths found, those to bind read-only, and the test ``overlay`` holds each change to.

        With the overlay, every change is held to :func:`protect.is_protected` when it comes
        out, so only the usual places are looked at (the working directory's own entries,
        its ``.git``, the home directory's); bound directly, the whole directory is walked.
        ``denyWrite``'s paths in the working directory are held to it too.
        """
        try:
            found = (
                list(shallow_protected(self.cwd, later=later))
                if self.captures
                else list(existing_protected(self.cwd, later=later, limit=self.walk_limit))
            )
        except WalkLimitError as exc:
            raise SandboxRefusal(
                f"{exc}; without overlayfs it cannot protect them, so the command does not run"
            ) from None
        paths, targets = _bindable(found, self.cwd)

        for place in self.places.deny_write:
            denied = Path(os.path.realpath(place))
            if denied.is_relative_to(self.cwd) and denied != self.cwd:
                targets.append(denied.relative_to(self.cwd).parts)

        def guard(rel: _Rel, directory: bool) -> bool:
            return is_protected(rel, later=later, directory=directory) or any(rel[: len(t)] == t for t in targets)

        return found, list(paths), guard

    def _masks(self) -> list[str]:
        """bwrap arguments replacing what the Read deny rules cover with empty, read-only stand-ins.

        A path under a directory already hidden is not masked again (bwrap could not make
        its mount point in the read-only stand-in).
        """
        args: list[str] = []
        hidden_dirs: list[Path] = []
        for path, is_dir in self._denied():
            if any(path == d or d in path.parents for d in hidden_dirs):
                continue
            if is_dir:
                hidden_dirs.append(path)
                args += ["--tmpfs", str(path), "--remount-ro", str(path)]
            else:
                args += ["--ro-bind", str(self.empty), str(path)]
        return args

    def _denied(self) -> Iterator[tuple[Path, bool]]:
        """What the Read deny rules cover, by the path a read reaches: a symlink's target, not the link.

        Raises :class:`SandboxRefusal` past ``_MAX_WALK`` entries (what is not walked cannot be
        hidden) and for a covered symlink whose target the sandbox cannot hide (the root, the
        working directory or a folder holding it).
        """
        for path in self.denied_paths:
            yield from self._reached(path)
        hidden = self.hidden
        if hidden is None:
            return
        seen = 0
        for root, dirs, files in os.walk(self.cwd):
            base = Path(root)
            kept: list[str] = []
            for name in dirs:
                path = base / name
                if hidden(path):
                    yield from self._reached(path)
                else:
                    kept.append(name)
            dirs[:] = kept
            for name in files:
                path = base / name
                if hidden(path):
                    yield from self._reached(path)
            seen += len(dirs) + len(files)
            if seen > self.walk_limit:
                raise SandboxRefusal(
                    f"the working directory holds more than {self.walk_limit:,} entries, so the sandbox cannot find "
                    "every file the Read deny rules cover; the command does not run"
                )

    def _reached(self, path: Path) -> Iterator[tuple[Path, bool]]:
        """The path a read of ``path`` reaches (its target when a symlink), and whether it is a directory."""
        if not os.path.lexists(path):
            return
        target = Path(os.path.realpath(path))
        if not target.exists():
            return
        if target == Path("/") or self.cwd.is_relative_to(target) or target in (self.tmp, Path("/tmp")):
            raise SandboxRefusal(
                f"{path} is covered by a Read deny rule but leads to {target}, which the sandbox cannot hide; "
                "the command does not run"
            )
        yield target, target.is_dir()
