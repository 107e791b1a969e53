"""A loaded machine's declaration kept as plain data, so a run whose YAML has not changed skips reading it.

Owns :func:`load_machine_cached` and the file's format; why it is safe to read: docs/security.md (the machine
cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Final

import attrs

from ..errors import SpecError
from . import spec as _spec
from .load import Machine, load_machine, machine_from_spec, parse_machine

__all__ = ["load_machine_cached"]

FORMAT: Final = 1
"""The file format's version: part of every file's name, so an older format is never read."""
MAX_BYTES: Final = 16 << 20  # a declaration far larger than any machine's: such a file is not read
KEEP: Final = 16  # files kept in the folder (the newest): one per version of each machine a user runs

# The only classes a file can name: the records of a declaration, nothing else.
_RECORDS: Final[dict[str, type]] = {
    name: cls
    for name, cls in vars(_spec).items()
    if isinstance(cls, type) and attrs.has(cls) and cls.__module__ == _spec.__name__
}


class _Unfit(Exception):
    """A value the format cannot hold exactly, or a file that does not decode to a declaration."""


def load_machine_cached(path: str | Path, cache_dir: Path | None) -> Machine:
    """The machine declared at ``path``, as :func:`~queryloop.fsm.model.load.load_machine` builds it.

    With a ``cache_dir``, the declaration is taken from the file named by the YAML's hash when
    there is one that passes every check; otherwise the YAML is read and the file written.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return load_machine(p)  # it words the error
    if cache_dir is None:
        return parse_machine(text, str(p))
    entry = cache_dir / f"{_key(str(p), raw)}.json"
    cached = _read(cache_dir, entry)
    if cached is not None:
        with contextlib.suppress(SpecError):  # refused now (a handler renamed since): the YAML says why
            return machine_from_spec(cached)
    machine = parse_machine(text, str(p))
    _write(cache_dir, entry, machine.spec)
    return machine


# ---- the file's name ----------------------------------------------------------------------------

_loader_digest: bytes | None = None


def _loader_source() -> bytes:
    """A digest of the loader's own source: a loader that reads YAML differently never reads an older file."""
    global _loader_digest
    if _loader_digest is None:
        digest = hashlib.sha256(f"format {FORMAT}".encode())
        for module in sorted(Path(__file__).parent.glob("*.py")):
            digest.update(module.name.encode() + b"\0" + module.read_bytes())
        _loader_digest = digest.digest()
    return _loader_digest


def _key(path: str, raw: bytes) -> str:
    digest = hashlib.sha256(_loader_source())
    digest.update(path.encode("utf-8", "surrogateescape") + b"\0" + raw)
    return f"machine-v{FORMAT}-{digest.hexdigest()}"


# ---- the format ---------------------------------------------------------------------------------


def _plain(value: Any) -> object:
    """``value`` as JSON data whose records, tuples and dicts are tagged, so it reads back as it was."""
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if kind is tuple:
        return {"__t": [_plain(v) for v in value]}
    if kind is list:
        return [_plain(v) for v in value]
    if kind is dict:
        return {"__d": [[_plain(k), _plain(v)] for k, v in value.items()]}
    if _RECORDS.get(kind.__name__) is kind:
        fields = {f.alias: _plain(getattr(value, f.name)) for f in attrs.fields(kind) if f.init}
        return {"__r": kind.__name__, "__f": fields}
    raise _Unfit(f"cannot keep a {kind.__name__}")


def _tagged(obj: dict[str, Any]) -> object:
    """The ``object_hook`` that turns a tagged object back into its tuple, dict or record."""
    if obj.keys() == {"__t"}:
        return tuple(obj["__t"])
    if obj.keys() == {"__d"}:
        return {k: v for k, v in obj["__d"]}
    if obj.keys() == {"__r", "__f"}:
        cls = _RECORDS.get(obj["__r"]) if isinstance(obj["__r"], str) else None
        if cls is None or not isinstance(obj["__f"], dict):
            raise _Unfit("not a record of a declaration")
        return cls(**obj["__f"])  # its validators run
    return obj


def _decode(data: bytes) -> _spec.MachineSpec:
    try:
        spec = json.loads(data, object_hook=_tagged)
    except (ValueError, TypeError, _Unfit, RecursionError):
        raise _Unfit("not a cached declaration") from None
    if type(spec) is not _spec.MachineSpec:
        raise _Unfit("not a cached declaration")
    return spec


# ---- the folder ---------------------------------------------------------------------------------


def _owned(st: os.stat_result) -> bool:
    """The user's own and writable by no one else (a file another user could have written is never read)."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(cache_dir: Path, entry: Path) -> _spec.MachineSpec | None:
    try:
        folder = os.lstat(cache_dir)
        if not stat.S_ISDIR(folder.st_mode) or not _owned(folder):
            return None
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode) or not _owned(st) or st.st_size > MAX_BYTES:
            return None
        data = file.read(MAX_BYTES + 1)
    try:
        return _decode(data)
    except _Unfit:
        return None


def _write(cache_dir: Path, entry: Path, spec: _spec.MachineSpec) -> None:
    """Keep ``spec`` in ``entry`` if it reads back equal (best effort: a folder that cannot be written is left)."""
    try:
        data = json.dumps(_plain(spec), ensure_ascii=False, separators=(",", ":")).encode()
        if _decode(data) != spec:
            return
    except _Unfit:
        return
    try:
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".machine-", suffix=".tmp")  # mode 0600
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, entry)  # a run reading it meanwhile sees the whole file or none
        _prune(cache_dir)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _prune(cache_dir: Path) -> None:
    """Keep the newest :data:`KEEP` files: each edit of a machine's YAML leaves one more."""
    kept = sorted(cache_dir.glob(f"machine-v{FORMAT}-*.json"), key=lambda f: f.stat().st_mtime, reverse=True)
    for old in kept[KEEP:]:
        with contextlib.suppress(OSError):
            old.unlink()
