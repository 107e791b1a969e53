"""A sandboxed command's changes carried out of an overlayfs upper directory, checkpointed first.

Most cases run a real command over a real overlay of a real directory (``unshare -rm``,
``mount -t overlay``, then bubblewrap, as the sandbox does), so the whiteouts and opaque
directories are the kernel's own; the result of applying the upper directory is compared
with the same command run directly on a copy. Where overlayfs or bubblewrap cannot start,
these tests fail: they never skip. The checkpoint is a recorder that reads each path as
the session's checkpoint store does (bytes, or absence; anything else an OSError), and one
case goes through the real store and ``queryloop rewind``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from queryloop.handlers.session.services.store import CheckpointStore, SessionPaths
from queryloop.handlers.tools.services.sandbox.overlay import (
    OverlayChanges,
    PathNote,
    UnsupportedUpperError,
    apply_upper,
    overlay_available,
    overlay_mount_options,
)
from queryloop.run.sessions import apply_rewind, plan_rewind

CAP = 1 << 20
MOUNT = 'mount -t overlay overlay -o "$1" "$2" && shift 2 && exec "$@"'
STARTED = "__sandboxed_command_started__"


class Recorder:
    """A checkpoint that keeps what the store would keep: each path's bytes, or None when it does not exist."""

    def __init__(self) -> None:
        self.calls: list[list[Path]] = []
        self.saved: dict[Path, bytes | None] = {}

    def __call__(self, paths: Sequence[Path]) -> None:
        self.calls.append(list(paths))
        for path in paths:
            try:
                self.saved[path] = path.read_bytes()
            except FileNotFoundError:
                self.saved[path] = None  # a directory or a file in the way raises, as in the store

    def rewind(self) -> None:
        """What ``queryloop rewind`` does with the entries: bytes written back, absent files removed."""
        for path, data in self.saved.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)


class Workspace:
    """A project directory, the overlay's upper and work directories beside it, and a place outside."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.proj = self.root / "proj"
        self.upper = self.root / "overlay" / "upper"
        self.work = self.root / "overlay" / "work"
        self.outside = self.root / "outside"
        for folder in (self.proj, self.upper, self.work, self.outside):
            folder.mkdir(parents=True)

    def write(self, files: dict[str, str | bytes]) -> None:
        for name, content in files.items():
            path = self.proj / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)

    def run_sandboxed(self, script: str, *, ok: bool = True) -> subprocess.CompletedProcess[str]:
        """``script`` run by bash in bubblewrap over an overlay of the project, as the sandbox runs it."""
        options = overlay_mount_options(self.proj, self.upper, self.work)
        assert options is not None
        bwrap = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        bwrap += ["--bind", str(self.proj), str(self.proj), "--unshare-all", "--cap-drop", "ALL"]
        bwrap += ["--die-with-parent", "--new-session", "--chdir", str(self.proj)]
        argv = ["unshare", "-rm", "sh", "-c", MOUNT, "sh", options, str(self.proj), *bwrap]
        done = subprocess.run(
            [*argv, "bash", "-c", f"echo {STARTED}; {script}"], capture_output=True, text=True, timeout=30
        )
        assert STARTED in done.stdout, f"the overlay or bubblewrap did not start: {done.stderr}"
        if ok:
            assert done.returncode == 0, done.stderr
        return done

    def run_directly(self, script: str) -> Path:
        """``script`` run on a copy of the project with no sandbox: what the real directory should become."""
        copy = self.root / "expected"
        shutil.copytree(self.proj, copy, symlinks=True)
        subprocess.run(["bash", "-c", script], cwd=copy, check=True, capture_output=True, timeout=30)
        return copy

    def apply(self, checkpoint: Recorder, cap_bytes: int = CAP) -> OverlayChanges:
        return apply_upper(self.upper, self.proj, checkpoint=checkpoint, cap_bytes=cap_bytes)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root``: a file's bytes and permissions, a directory's permissions, a link's target."""
    found: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            st = os.lstat(path)
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                found[rel] = ("other", stat.S_IFMT(st.st_mode))
    return found


def contents(root: Path) -> dict[str, bytes]:
    """The regular files under ``root`` and their bytes: what a rewind restores."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink()
    }


def notes(changes: OverlayChanges) -> dict[str, str]:
    return {note.path: note.why for note in changes.not_rewindable}


# ---- real commands over a real overlay ------------------------------------------------------------


def test_a_changed_appended_created_and_deleted_file_reach_the_real_directory_and_rewind_restores_them(
    ws: Workspace,
) -> None:
    ws.write({"a.txt": "old\n", "b.txt": "one\n", "del.txt": "doomed\n", "same.txt": "kept\n"})
    before = contents(ws.proj)
    script = "printf 'new\\n' > a.txt; echo more >> b.txt; echo c > created; rm del.txt"
    expected = ws.run_directly(script)
    ws.run_sandboxed(script)
    assert contents(ws.proj) == before, "the command's writes landed in the upper directory only"
    recorder = Recorder()

    changes = ws.apply(recorder)

    assert snapshot(ws.proj) == snapshot(expected)
    assert changes.changed == ("a.txt", "b.txt", "created") and changes.removed == ("del.txt",)
    assert len(recorder.calls) == 1, "the checkpoint is called once, before any change"
    assert recorder.saved == {
        ws.proj / "a.txt": b"old\n",
        ws.proj / "b.txt": b"one\n",
        ws.proj / "created": None,
        ws.proj / "del.txt": b"doomed\n",
    }
    assert changes.bytes_checkpointed == len(b"old\n") + len(b"one\n") + len(b"doomed\n")
    assert changes.not_rewindable == () and not changes.over_cap
    assert changes.summary() == "3 files changed and 1 file removed in the working directory (checkpointed for rewind)"
    recorder.rewind()
    assert contents(ws.proj) == before


def test_the_session_store_keeps_what_queryloop_rewind_needs_to_undo_a_sandboxed_command(
    ws: Workspace, tmp_path: Path
) -> None:
    ws.write({"a.txt": "old\n", "del.txt": "doomed\n", "sub/keep": "k\n"})
    before = contents(ws.proj)
    ws.run_sandboxed("echo new > a.txt; rm del.txt; echo n > sub/new; echo c > created")
    paths = SessionPaths(home=tmp_path / "home", cwd=ws.proj, session_id="0b6a4d6e-0000-4000-8000-000000000001")
    store = CheckpointStore(paths)

    changes = apply_upper(
        ws.upper,
        ws.proj,
        checkpoint=lambda files: store.save(prompt_id="p1", tool_use_id="toolu_1", files=files),
        cap_bytes=CAP,
    )

    assert changes.not_rewindable == ()
    assert contents(ws.proj) != before
    apply_rewind(plan_rewind(paths))
    assert contents(ws.proj) == before


def test_a_directory_emptied_and_remade_is_opaque_and_loses_only_what_the_command_did_not_remake(
    ws: Workspace,
) -> None:
    ws.write({"sub/old": "o\n", "sub/n": "before\n", "sub/deeper/f": "f\n", "top": "t\n"})
    before = contents(ws.proj)
    script = "rm -rf sub; mkdir sub; echo x > sub/n"
    expected = ws.run_directly(script)
    ws.run_sandboxed(script)
    assert os.getxattr(ws.upper / "sub", "user.overlay.opaque") == b"y", "the kernel marked it opaque"
    recorder = Recorder()

    changes = ws.apply(recorder)

    assert snapshot(ws.proj) == snapshot(expected)
    assert changes.removed == ("sub/deeper", "sub/old") and changes.changed == ("sub/n",)
    assert set(recorder.saved) == {ws.proj / "sub/deeper/f", ws.proj / "sub/old", ws.proj / "sub/n"}
    assert notes(changes) == {"sub/deeper": "a directory removed: rewind restores the files in it, not the directory"}
    recorder.rewind()
    assert contents(ws.proj) == before


def test_a_directory_renamed_by_mv_is_copied_then_removed_and_rewind_brings_its_files_back(ws: Workspace) -> None:
    ws.write({"d2/x": "x\n", "d2/nested/y": "y\n"})
    before = contents(ws.proj)
    expected = ws.run_directly("mv d2 d3")
    ws.run_sandboxed("mv d2 d3")  # overlayfs refuses to rename a lower directory (EXDEV): mv copies it
    assert stat.S_ISCHR(os.lstat(ws.upper / "d2").st_mode), "the old name is a whiteout"
    recorder = Recorder()

    changes = ws.apply(recorder)

    assert snapshot(ws.proj) == snapshot(expected)
    assert changes.removed == ("d2",) and changes.changed == ("d3", "d3/nested", "d3/nested/y", "d3/x")
    assert notes(changes) == {
        "d2": "a directory removed: rewind restores the files in it, not the directory",
        "d3": "a new directory: rewind removes the files in it, not the directory",
        "d3/nested": "a new directory: rewind removes the files in it, not the directory",
    }
    assert changes.summary().startswith(
        "4 files changed and 1 file removed in the working directory; cannot be rewound:"
    )
    recorder.rewind()
    assert contents(ws.proj) == before, "the files are back; the empty d3 stays"


def test_a_file_replaced_by_a_directory_and_a_directory_by_a_file_match_a_direct_run(ws: Workspace) -> None:
    ws.write({"f": "a file\n", "sub/s": "s\n", "sub/inner/t": "t\n"})
    script = "rm f; mkdir f; echo y > f/y; rm -r sub; echo z > sub"
    expected = ws.run_directly(script)
    ws.run_sandboxed(script)
    recorder = Recorder()

    changes = ws.apply(recorder)

    assert snapshot(ws.proj) == snapshot(expected)
    assert changes.changed == ("f", "f/y", "sub") and changes.removed == ()
    assert recorder.saved == {ws.proj / "f": b"a file\n", ws.proj / "sub/inner/t": b"t\n", ws.proj / "sub/s": b"s\n"}
    assert notes(changes) == {
        "f/y": "a new file in a directory that replaced a file or symlink",
        "sub": "a directory replaced by a file: rewind restores the files in it, not the directory",
    }


def test_a_command_cannot_write_through_a_symlink_to_outside_and_the_apply_never_does(ws: Workspace) -> None:
    (ws.outside / "k").write_text("keep\n")
    (ws.proj / "out").symlink_to(ws.outside)
    (ws.proj / "lnk").symlink_to(ws.outside / "k")
    outside = snapshot(ws.outside)
    done = ws.run_sandboxed("echo pwn > out/k; echo pwn > out/new; echo pwn > lnk; echo ok > inside", ok=False)
    assert done.stderr.count("Read-only file system") == 3, done.stderr

    changes = ws.apply(Recorder())

    assert snapshot(ws.outside) == outside
    assert changes.changed == ("inside",) and (ws.proj / "inside").read_text() == "ok\n"
    assert os.readlink(ws.proj / "out") == str(ws.outside) and os.readlink(ws.proj / "lnk") == str(ws.outside / "k")


def test_chmod_in_the_sandbox_changes_the_real_permissions_but_never_brings_a_set_id_bit_out(ws: Workspace) -> None:
    ws.write({"a.txt": "a\n", "run.sh": "echo hi\n", "tool": "#!/bin/sh\n", "sub/f": "f\n"})
    for name in ("a.txt", "run.sh", "tool"):
        (ws.proj / name).chmod(0o644)
    (ws.proj / "sub").chmod(0o755)
    ws.run_sandboxed("chmod 600 a.txt; chmod 755 run.sh tool; chmod u+s,g+s tool; chmod 700 sub")
    assert stat.S_IMODE(os.lstat(ws.upper / "tool").st_mode) & 0o6000, "the command did set them"
    recorder = Recorder()

    changes = ws.apply(recorder)

    modes = {name: stat.S_IMODE(os.lstat(ws.proj / name).st_mode) for name in ("a.txt", "run.sh", "tool", "sub")}
    assert modes == {"a.txt": 0o600, "run.sh": 0o755, "tool": 0o755, "sub": 0o700}
    assert recorder.calls == [], "no bytes changed: nothing to checkpoint"
    assert notes(changes) == {
        "a.txt": "its permissions: rewind restores bytes only",
        "run.sh": "its permissions: rewind restores bytes only",
        "sub": "a directory's permissions",
        "tool": "its permissions: rewind restores bytes only",
    }


def test_a_call_over_the_cap_checkpoints_what_fits_lists_the_rest_and_still_applies_everything(
    ws: Workspace,
) -> None:
    ws.write({"big1": b"1" * 3000, "big2": b"2" * 3000, "small": b"s" * 10})
    ws.run_sandboxed("for f in big1 big2 small; do echo changed > $f; done; echo n > new")
    recorder = Recorder()

    changes = ws.apply(recorder, cap_bytes=4000)

    assert all((ws.proj / name).read_text() == "changed\n" for name in ("big1", "big2", "small"))
    assert recorder.calls == [[ws.proj / "big1", ws.proj / "new", ws.proj / "small"]]
    assert changes.checkpointed == (ws.proj / "big1", ws.proj / "new", ws.proj / "small")
    assert changes.bytes_checkpointed == 3010 and changes.over_cap
    assert changes.not_rewindable == (PathNote(path="big2", why="over the 3.91 KiB checkpoint cap"),)
    assert changes.summary() == (
        "4 files changed in the working directory; cannot be rewound: big2 (over the 3.91 KiB checkpoint cap)"
    )


def test_a_checkpoint_that_fails_leaves_the_real_directory_unchanged_and_the_error_raised(ws: Workspace) -> None:
    ws.write({"a.txt": "a\n", "sub/s": "s\n", "d/x": "x\n"})
    before = snapshot(ws.proj)
    ws.run_sandboxed("echo b > a.txt; rm -rf sub; mkdir sub; mv d e; echo c > created; chmod 700 e")

    def full_disk(paths: Sequence[Path]) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        apply_upper(ws.upper, ws.proj, checkpoint=full_disk, cap_bytes=CAP)
    assert snapshot(ws.proj) == before


def test_a_fifo_is_not_copied_out_and_symlinks_come_out_as_symlinks(ws: Workspace) -> None:
    ws.write({"a.txt": "a\n", "b.txt": "b\n"})
    (ws.proj / "old_link").symlink_to("a.txt")
    script = "mkfifo pipe; ln -s a.txt link; ln -sfn b.txt old_link"
    ws.run_sandboxed(script)

    changes = ws.apply(Recorder())

    assert not (ws.proj / "pipe").exists()
    assert os.readlink(ws.proj / "link") == "a.txt" and os.readlink(ws.proj / "old_link") == "b.txt"
    assert changes.skipped == (PathNote(path="pipe", why="a FIFO is not copied"),)
    assert notes(changes) == {"link": "a new symlink", "old_link": "a symlink's target"}
    assert changes.summary().endswith("; not copied out of the sandbox: pipe (a FIFO is not copied)")


def test_a_file_only_touched_is_not_reported_as_changed_but_gets_its_new_time(ws: Workspace) -> None:
    ws.write({"a.txt": "a\n"})
    os.utime(ws.proj / "a.txt", (1_000_000, 1_000_000))
    ws.run_sandboxed("touch a.txt")
    recorder = Recorder()

    changes = ws.apply(recorder)

    assert changes.changed == () and recorder.calls == []
    assert changes.summary() == "no files changed in the working directory"
    assert os.lstat(ws.proj / "a.txt").st_mtime > 1_000_000


# ---- upper directories made by hand: what a kernel would not produce, or a race -----------------------


def test_an_upper_that_reaches_through_a_real_symlink_replaces_the_symlink_instead_of_following_it(
    ws: Workspace,
) -> None:
    (ws.outside / "k").write_text("keep\n")
    (ws.proj / "out").symlink_to(ws.outside)
    (ws.proj / "lnk").symlink_to(ws.outside / "k")
    outside = snapshot(ws.outside)
    (ws.upper / "out").mkdir()
    (ws.upper / "out" / "new").write_text("pwn\n")
    (ws.upper / "lnk").write_text("pwn\n")
    recorder = Recorder()

    changes = ws.apply(recorder)

    assert snapshot(ws.outside) == outside
    assert (ws.proj / "out" / "new").read_text() == "pwn\n" and not (ws.proj / "out").is_symlink()
    assert (ws.proj / "lnk").read_text() == "pwn\n" and not (ws.proj / "lnk").is_symlink()
    assert recorder.calls == [], "nothing is read through the symlinks either"
    assert notes(changes) == {
        "lnk": "a symlink replaced by a file",
        "out": "a symlink replaced by a directory",
        "out/new": "a new file in a directory that replaced a file or symlink",
    }


def test_a_directory_swapped_for_a_symlink_while_applying_is_refused_not_written_through(ws: Workspace) -> None:
    ws.write({"sub/keep": "k\n"})
    ws.run_sandboxed("echo n > sub/n")

    def swap(paths: Sequence[Path]) -> None:
        shutil.rmtree(ws.proj / "sub")
        (ws.proj / "sub").symlink_to(ws.outside)

    with pytest.raises(OSError, match="is no longer a directory"):
        apply_upper(ws.upper, ws.proj, checkpoint=swap, cap_bytes=CAP)
    assert list(ws.outside.iterdir()) == []


def test_an_upper_with_an_overlay_redirect_is_refused_before_anything_changes(ws: Workspace) -> None:
    ws.write({"a.txt": "a\n"})
    (ws.upper / "a.txt").write_text("b\n")
    (ws.upper / "moved").mkdir()
    os.setxattr(ws.upper / "moved", "user.overlay.redirect", b"/elsewhere")
    before = snapshot(ws.proj)
    recorder = Recorder()

    with pytest.raises(UnsupportedUpperError, match=r"user\.overlay\.redirect"):
        ws.apply(recorder)
    assert snapshot(ws.proj) == before and recorder.calls == []


# ---- options, the probe, the summary ------------------------------------------------------------------


def test_mount_options_name_the_three_directories_with_userxattr() -> None:
    options = overlay_mount_options(Path("/w/proj"), Path("/s/u"), Path("/s/w"))
    assert options == "lowerdir=/w/proj,upperdir=/s/u,workdir=/s/w,userxattr"


@pytest.mark.parametrize("bad", [",", ":", "\\", "\n", '"'])
def test_mount_options_are_none_for_a_path_overlayfs_cannot_name(bad: str) -> None:
    assert overlay_mount_options(Path(f"/w/pro{bad}j"), Path("/s/u"), Path("/s/w")) is None
    assert overlay_mount_options(Path("/w/proj"), Path("/s/u"), Path(f"/s/w{bad}")) is None


def test_overlayfs_mounts_in_an_unprivileged_user_namespace_here_and_the_probe_cleans_up(tmp_path: Path) -> None:
    assert overlay_available(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_a_summary_names_three_paths_that_cannot_be_rewound_and_counts_the_rest() -> None:
    changes = OverlayChanges(
        changed=tuple(f"d{n}" for n in range(5)),
        removed=(),
        checkpointed=(),
        not_rewindable=tuple(PathNote(path=f"d{n}", why="a new directory") for n in range(5)),
        bytes_checkpointed=0,
        over_cap=False,
        cap_bytes=CAP,
    )
    assert changes.summary() == (
        "5 files changed in the working directory; cannot be rewound: "
        "d0 (a new directory), d1 (a new directory), d2 (a new directory) and 2 more"
    )
