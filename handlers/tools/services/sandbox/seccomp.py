"""The seccomp filter that keeps a sandboxed command off the host's Unix sockets.

Owns :func:`unix_socket_filter`: a classic BPF program refusing ``socket(AF_UNIX, …)`` and ``io_uring_setup`` with
``EPERM``, killing a process that enters through another ABI. Why: docs/security.md. Installed by ``launch`` or
``bridge``.
"""

from __future__ import annotations

import errno
import platform
import struct
from typing import Final

__all__ = ["unix_socket_filter"]

# linux/filter.h, linux/seccomp.h, linux/audit.h
_LD_W_ABS: Final = 0x20
_JEQ_K: Final = 0x15
_JGE_K: Final = 0x35
_RET_K: Final = 0x06
_RET_KILL_PROCESS: Final = 0x80000000
_RET_ERRNO: Final = 0x00050000
_RET_ALLOW: Final = 0x7FFF0000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data, little-endian
_AF_UNIX: Final = 1
_X32_BIT: Final = 0x40000000

# machine: (AUDIT_ARCH_*, socket, io_uring_setup)
_ARCHES: Final = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def unix_socket_filter(machine: str | None = None) -> bytes | None:
    """The filter for this machine (``platform.machine()``); None where its system call numbers are not known."""
    numbers = _ARCHES.get(machine or platform.machine())
    if numbers is None:
        return None
    arch, socket_nr, io_uring_nr = numbers
    refuse = _RET_ERRNO | errno.EPERM
    program = [
        _op(_LD_W_ABS, _OFFSET_ARCH),
        _op(_JEQ_K, arch, jt=1),  # this ABI: on; any other: killed
        _op(_RET_K, _RET_KILL_PROCESS),
        _op(_LD_W_ABS, _OFFSET_NR),
        _op(_JGE_K, _X32_BIT, jf=1),  # x32's numbers carry this bit
        _op(_RET_K, _RET_KILL_PROCESS),
        _op(_JEQ_K, io_uring_nr, jf=1),
        _op(_RET_K, refuse),
        _op(_JEQ_K, socket_nr, jf=3),  # not socket(): allowed
        _op(_LD_W_ABS, _OFFSET_ARG0),
        _op(_JEQ_K, _AF_UNIX, jf=1),
        _op(_RET_K, refuse),
        _op(_RET_K, _RET_ALLOW),
    ]
    return b"".join(program)
