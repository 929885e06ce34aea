"""Files that are never half written, output paths checked before any work, and clean stops on a signal.

Standard library only: every layer above may use it.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import secrets
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:  # Unix
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

# --- one line for an error --------------------------------------------------------------------------


def first_line(err: BaseException) -> str:
    """``"TypeName: first non-empty line"`` of an error (at most 300 characters): what a one-line message quotes."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0][:300]}" if lines else type(err).__name__


# --- JSON -------------------------------------------------------------------------------------------


def json_safe(obj: object) -> object:
    """JSON-safe copy: NaN and infinity become null (strict JSON has neither); other objects their str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def save_json(obj: object, path: str | Path) -> None:
    """Write ``obj`` as strict JSON, atomically: a kill mid-write leaves the previous file whole.
    A failure (a full disk, say) raises an ``OSError`` that names ``path``."""
    path = Path(path)
    text = json.dumps(json_safe(obj), indent=1, allow_nan=False) + "\n"
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, f"{path} could not be written ({err.strerror or first_line(err)})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


# --- output paths, checked before any work ------------------------------------------------------------

PROBE_BYTES = 4096
"""What the up-front test-write writes and flushes: an empty file fits on a full disk, a block does not."""


def check_output_file(path: str | Path, what: str = "--json") -> None:
    """Refuse, before any work, an output file that cannot be written (a folder, under a file, read-only,
    on a full disk)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give a file name")
    check_writable_folder(path.parent, what, path, keep=False)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path} exists and cannot be written (permission denied)")


def check_output_folder(path: str | Path, what: str = "--out", keep: bool = True) -> None:
    """Create the output folder ``path`` and test-write a file in it, before any work (without ``keep``, a folder
    it had to create is removed again, so a run stopped before it writes leaves none behind)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file; give a folder")
    check_writable_folder(path, what, path, keep=keep)


def check_writable_folder(folder: Path, what: str, target: Path, keep: bool = True) -> None:
    """Create ``folder`` and test-write (and flush) a block in it; one ``ValueError`` naming ``what`` if it
    fails. Without ``keep`` the folders it had to create are removed again (the writer makes them)."""
    missing = []
    for above in (folder, *folder.parents):
        if above.exists():
            if not above.is_dir():
                raise ValueError(f"{what} {target} cannot be written: {above} is a file, not a folder")
            break
        missing.append(above)
    probe = folder / f".write-test-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as fh:
            fh.write(b"\0" * PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ValueError(f"{what} {target} cannot be written: {reason} (in {folder})") from None
    finally:
        try:
            probe.unlink(missing_ok=True)
            for made in [] if keep else missing:  # deepest first
                made.rmdir()
        except OSError:
            pass


def is_inside(path: str | Path, folder: str | Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (links resolved)."""
    p, f = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return p == f or f in p.parents


# --- one writer per folder ------------------------------------------------------------------------------

_held: dict[str, list[int]] = {}  # lock file -> [fd, depth]: this process's locks (re-entrant)


def lock_file(target: Path) -> Path:
    """The lock of ``target``: a hidden file beside it, so that replacing ``target`` whole keeps the lock."""
    real = Path(os.path.realpath(target))
    return real.parent / f".{real.name}.lock"


@contextmanager
def folder_lock(target: str | Path, what: str) -> Iterator[None]:
    """Hold the lock of ``target`` while inside (re-entrant in one process). Another process holding it:
    a ``ValueError`` of one line. The system frees the lock when a process ends, however it ends."""
    key = str(lock_file(Path(target)))
    if key in _held:
        _held[key][1] += 1
    else:
        fd = _acquire(key, what, Path(target))
        _held[key] = [fd, 1]
    try:
        yield
    finally:
        _held[key][1] -= 1
        if _held[key][1] == 0:
            os.close(_held.pop(key)[0])  # closing the file releases its lock


def check_not_locked(target: str | Path, what: str) -> None:
    """Refuse, before any work, a ``target`` that another process is writing (holds its lock)."""
    if not lock_file(Path(target)).exists():  # never locked: a check leaves no lock file behind
        return
    with folder_lock(target, what):
        pass


def _acquire(key: str, what: str, target: Path) -> int:
    try:
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise ValueError(f"{what} {target} cannot be locked for writing: {err.strerror} ({key})") from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        try:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        except OSError:  # Windows: the locked byte cannot be read
            owner = "unknown"
        os.close(fd)
        raise ValueError(
            f"{what} {target} is being written by another run (process {owner}); "
            "wait for it to end, or give another folder"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


# --- folders replaced whole ------------------------------------------------------------------------------


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (its renames) to the disk."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder; its renames are flushed by the file system
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder``, then the folders themselves, to the disk."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())
    for root, _dirs, _files in os.walk(folder, topdown=False):
        fsync_dir(Path(root))


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a C library without renameat2 (glibc < 2.28, musl)
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a file system that cannot exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_folder(new: Path, path: Path) -> None:
    """Put the folder ``new`` at ``path``, replacing what is there, so that ``path`` is never half written.

    An absent or empty ``path`` is replaced by one rename. An existing folder is swapped with ``new`` in
    one step where the system can (Linux), then deleted. Elsewhere it is first renamed aside to
    ``.NAME.old-*``; a kill between the two renames leaves it there, whole, and ``recover_folder`` puts it
    back. Once ``new`` is in place, failing to delete the old copy loses nothing: it stays as a hidden
    temporary that a later save removes.
    """
    try:
        os.rename(new, path)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES, errno.EPERM):
            raise
        if exchange(new, path):
            fsync_dir(path.parent)
            shutil.rmtree(new, ignore_errors=True)  # the previous folder, now at the temporary name
            return
        old = path.parent / f".{path.name}.old-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(path, old)
        os.rename(new, path)
        fsync_dir(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    fsync_dir(path.parent)


def recover_folder(path: Path, marker: str) -> None:
    """Where a replacement was killed between its two renames (systems without an atomic swap), the previous
    folder waits beside ``path`` as ``.NAME.old-*``: put it back if it holds ``marker``."""
    if path.exists() or not path.parent.is_dir():
        return
    olds = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and (olds[-1] / marker).exists():
        os.rename(olds[-1], path)
        fsync_dir(path.parent)


# --- clean stops ------------------------------------------------------------------------------------------

_stop_request: dict = {"signal": None, "depth": 0}  # signals reach the process, not one trainer
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""Ctrl-C, ``kill``/a scheduler, and a closed terminal or dropped SSH session (not on Windows)."""


@contextmanager
def stop_on_signal(at_once: bool = False) -> Iterator[None]:
    """While inside: the first SIGINT (Ctrl-C), SIGTERM or SIGHUP asks the run to stop after its current
    step (``take_stop_request``); a second one, or the first with ``at_once``, raises ``KeyboardInterrupt``.
    Nests; a no-op outside the main thread, where Python cannot install signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if at_once or _stop_request["signal"] is not None:
            raise KeyboardInterrupt
        _stop_request["signal"] = signum

    # A signal the parent set to be ignored (a job started with & or nohup) stays ignored.
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN}
    _stop_request["depth"] += 1
    try:
        yield
    finally:
        _stop_request["depth"] -= 1
        if _stop_request["depth"] == 0:
            _stop_request["signal"] = None  # nobody is left to act on it
        for sig, h in previous.items():
            signal.signal(sig, h)


def take_stop_request() -> bool:
    """True (once) when a stop signal has arrived since the last call."""
    if _stop_request["signal"] is None:
        return False
    _stop_request["signal"] = None
    return True
