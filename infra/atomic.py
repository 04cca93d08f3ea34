"""Every file trainfleet writes goes through `write_file`: whole or not at all, never half a file.

    temp file in the target's own directory -> write -> fsync -> chmod to the target's mode
    -> os.replace over the target -> fsync the directory

so a crash, a kill -9 or a full disk leaves either the previous file or the new one. On any failure the
temp file is removed, the target is untouched, and the error is one line naming the file, the reason and
the fix (`cannot write X: no space left on device; free space and retry`).

- A symlink is followed: the file it points to is replaced and the link stays a link.
- An existing file keeps its permission bits (and its owner where allowed); a new file gets 0666 minus the
  umask (0644 usually), not the 0600 of a bare mkstemp. A read-only file is refused, not replaced.
- A directory is refused. Other things that are not regular files (a terminal, /dev/stdout, a FIFO,
  /dev/full) cannot be replaced by a rename, so they are written directly, errors reported the same way.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from infra.errors import TrainfleetError

TMP_SUFFIX = ".tmp"

# errno -> (what happened, what to do about it)
_REASONS = {
    errno.ENOSPC: ("no space left on device", "free space and retry"),
    errno.EDQUOT: ("disk quota exceeded", "free space and retry"),
    errno.EACCES: ("permission denied", "choose a writable location or fix the permissions"),
    errno.EPERM: ("operation not permitted", "choose a writable location or fix the permissions"),
    errno.EROFS: ("read-only file system", "choose a writable location"),
    errno.EISDIR: ("it is a directory", "name a file"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "fix the path"),
    errno.ENOENT: ("its folder does not exist", "create the folder or fix the path"),
    errno.ENAMETOOLONG: ("the name is too long", "use a shorter path"),
    errno.EIO: ("input/output error", "check the device and retry"),
}


class WriteError(TrainfleetError, OSError):
    """A write that failed; one line for the user, and still an OSError for callers that catch those."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.errno = code


def describe(exc: OSError) -> str:
    """'no space left on device; free space and retry' for an OSError."""
    reason, fix = _REASONS.get(exc.errno or -1, (exc.strerror or str(exc) or "unknown error", "retry"))
    return f"{reason}; {fix}"


def write_error(path: Path | str, exc: OSError, what: str = "") -> WriteError:
    label = f"{what} {path}" if what else str(path)
    return WriteError(f"cannot write {label}: {describe(exc)}", exc.errno)


def resolve_target(path: Path | str) -> Path:
    """The file a write to `path` lands in: the end of a symlink chain, else `path` itself."""
    path = Path(path)
    if path.is_symlink():
        return Path(os.path.realpath(path))
    return path


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(folder: Path | str) -> None:
    """Make a rename in `folder` durable (best effort: some file systems refuse fsync on a directory)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(
    path: Path | str,
    data: str | bytes,
    *,
    what: str = "",
    mode: int | None = None,
    make_parents: bool = False,
) -> Path:
    """Atomically replace `path` with `data` (str is written as UTF-8); returns the file written.

    `what` names the file in an error ("stack file", "--output"); `mode` overrides the permission bits
    (default: the existing file's, else 0666 minus the umask)."""
    shown = Path(path)
    target = resolve_target(shown)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise write_error(shown, exc, what) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise WriteError(f"cannot write {what + ' ' if what else ''}{shown}: it is a directory; name a file",
                         errno.EISDIR)  # fmt: skip
    if st is not None and not stat.S_ISREG(st.st_mode):
        return _write_in_place(shown, target, payload, what)
    if st is not None and not os.access(target, os.W_OK):  # a read-only file stays as protected as it was
        raise write_error(shown, OSError(errno.EACCES, os.strerror(errno.EACCES)), what)
    if make_parents:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a folder should be
            raise write_error(shown, OSError(errno.ENOTDIR, "not a directory"), what) from None
        except OSError as exc:
            raise write_error(shown, exc, what) from None
    bits = mode if mode is not None else (stat.S_IMODE(st.st_mode) if st is not None else _default_mode())
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=target.parent)
        try:
            _write_all(fd, payload)
            os.fsync(fd)
            os.fchmod(fd, bits)
            if st is not None and (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
                try:  # keep the owner when allowed (root editing a user's file); else ours, as any editor
                    os.fchown(fd, st.st_uid, st.st_gid)
                except OSError:
                    pass
        finally:
            os.close(fd)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise write_error(shown, exc, what) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    fsync_dir(target.parent)
    return target


def _write_in_place(shown: Path, target: Path, payload: bytes, what: str) -> Path:
    """A device or FIFO (/dev/stdout, /dev/null, /dev/full): no rename possible, write straight to it."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    except OSError as exc:
        raise write_error(shown, exc, what) from None
    try:
        _write_all(fd, payload)
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS, errno.EBADF):
                raise
    except OSError as exc:
        raise write_error(shown, exc, what) from None
    finally:
        os.close(fd)
    return target


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A fresh folder beside the destination, for building a tree that is swapped in when complete."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=TMP_SUFFIX, dir=parent))
    except OSError as exc:
        raise write_error(parent / prefix, exc) from None


def check_target(path: Path | str, what: str = "") -> None:
    """Before long work that ends in `write_file(path)`: refuse a folder or a missing folder with one line."""
    path = Path(path)
    label = f"{what} {path}" if what else str(path)
    target = resolve_target(path)
    if target.is_dir():
        raise WriteError(f"cannot write {label}: it is a directory; name a file", errno.EISDIR)
    if not target.parent.is_dir():
        raise WriteError(
            f"cannot write {label}: folder {target.parent} does not exist; create it or fix the path",
            errno.ENOENT,
        )


def move_aside(path: Path, what: str, fix: str) -> Path:
    """Rename a corrupt file to `<name>.corrupt-<unix time>` beside it (never over an earlier corrupt copy), so a
    refresh can write a fresh one and nothing is lost; one line naming `what` and `fix` if it cannot be moved."""
    import time

    aside = path.with_name(path.name + f".corrupt-{int(time.time())}")
    while aside.exists() or aside.is_symlink():
        aside = aside.with_name(aside.name + "-1")
    try:
        os.rename(path, aside)
    except OSError as exc:
        raise TrainfleetError(
            f"the {what} {path} is corrupt and cannot be moved aside ({exc.strerror or exc}); {fix}"
        ) from None
    return aside
