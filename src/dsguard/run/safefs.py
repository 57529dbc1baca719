"""The only ways dsguard opens a file for writing: never through a symlink, never as a stranger.

dsguard often runs as root or as a service user for hours, in directories other users can
reach. Every plain ``open(path, "a")`` is then a way to make it write wherever an attacker
wants: a symlink planted at ``log_dir/events.jsonl`` or ``attempt-1.log`` turns "append a log
line" into "append to /etc/shadow"; a ``checkpoint-N`` that links outside the output dir
turns "patch trainer_state.json" into "rewrite someone else's file". And a world-readable
``events.jsonl`` hands a ``--hub_token`` to every local user.

So every writer in ``run/`` goes through these primitives:

* :func:`open_file`: ``O_NOFOLLOW | O_CLOEXEC`` (and ``O_CREAT`` with mode 0600), refusing a
  symlink, a non-regular file (a FIFO planted there would block dsguard forever) and a file
  with other hard links (the same trick as a symlink, one level down); an existing file that
  is group- or world-readable is narrowed to owner-only, since it may hold what a redaction
  of an older dsguard missed;
* :func:`write_atomic`: the temp file is created with ``O_EXCL | O_NOFOLLOW`` in the target's
  own directory, opened once with ``O_DIRECTORY | O_NOFOLLOW`` and used by descriptor, so a
  directory swapped for a link between the check and the rename changes nothing;
* :func:`check_dir` / :func:`make_private_dir`: the directory written into is a real directory
  (not a symlink) owned by the running user or root; a new log dir is created 0700.

Failures of these checks raise :class:`UnsafePathError`, which is an ``OSError`` (so a caller
that already turns "cannot create the log dir" into a one-line error and exit 2 handles it
too) and a ``DsguardError``; its message is one line naming the path and the problem.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from dsguard.errors import DsguardError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "UnsafePathError",
    "check_dir",
    "create_at",
    "make_private_dir",
    "open_dir",
    "open_file",
    "replace_at",
    "write_all",
    "write_atomic",
]

#: Everything dsguard creates in a log dir: owner only (logs hold argv, env and output).
FILE_MODE = 0o600
DIR_MODE = 0o700

_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(DsguardError, OSError):
    """A path dsguard was about to write through is a symlink, not a regular file or
    directory, hard-linked elsewhere, or owned by another user."""

    def __init__(self, path: Path | str, problem: str, err: int = errno.EPERM) -> None:
        super().__init__(err, problem, str(path))
        self.path = Path(path)
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (os.geteuid(), 0)


def _check_dir_stat(path: Path, st: os.stat_result, *, owner: bool) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            path, "is a symlink: dsguard writes only into a real directory", errno.ELOOP
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "is not a directory", errno.ENOTDIR)
    if owner and not _owner_ok(st):
        raise UnsafePathError(
            path,
            f"is owned by uid {st.st_uid}, not by the running user (uid {os.geteuid()}) or "
            "root: its owner could swap dsguard's files for links",
        )


def check_dir(path: Path, *, owner: bool = True) -> os.stat_result:
    """``path`` is a real directory (not a symlink) owned by the running user or root.

    Raises:
        UnsafePathError: it is not.
        FileNotFoundError: it does not exist.
    """
    st = os.lstat(path)
    _check_dir_stat(path, st, owner=owner)
    return st


def make_private_dir(path: Path, *, narrow: bool = False) -> None:
    """Create ``path`` (and missing parents) with the last component 0700 whatever the
    umask, then :func:`check_dir` it.

    ``narrow``: an existing directory of the running user loses its group and other bits too
    (the log dir: its files hold argv and output, and an older dsguard made it 0755).
    Without it an existing directory keeps its mode.

    Raises:
        UnsafePathError: ``path`` is a symlink, not a directory, or another user's.
        OSError: it cannot be created (a parent is a file, read-only filesystem, ...).
    """
    created = False
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, DIR_MODE)
            created = True
    st = check_dir(path)
    mode = stat.S_IMODE(st.st_mode)
    if created:
        mode = DIR_MODE  # the umask may have taken owner bits; this never adds others
    elif narrow and st.st_uid == os.geteuid():
        mode &= ~0o077
    if mode != stat.S_IMODE(st.st_mode):
        fd = open_dir(path)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def open_dir(path: Path, *, owner: bool = True) -> int:
    """A descriptor of directory ``path`` itself (``O_NOFOLLOW``): used with ``dir_fd`` so the
    directory checked is the directory written into.

    Raises:
        UnsafePathError: ``path`` is a symlink, not a directory, or (``owner``) another user's.
        OSError: it cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise UnsafePathError(
                path, "is a symlink: dsguard writes only into a real directory", errno.ELOOP
            ) from None
        raise
    try:
        _check_dir_stat(path, os.fstat(fd), owner=owner)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: Path, flags: int, *, mode: int = FILE_MODE, check_parent: bool = True) -> int:
    """Open ``path`` for writing (``flags``: ``O_WRONLY | O_APPEND | O_CREAT``, ...) without
    following a symlink at its last component; see the module docstring for what is refused.

    Raises:
        UnsafePathError: a symlink, not a regular file, hard-linked, or (``check_parent``)
            the directory is a symlink or another user's.
        OSError: anything else (ENOSPC on create, EACCES, ...).
    """
    if check_parent:
        check_dir(path.parent)
    try:
        # O_NONBLOCK: opening a FIFO planted at the path fails (ENXIO) instead of blocking.
        fd = os.open(path, flags | _NO_FOLLOW | os.O_NONBLOCK | os.O_NOCTTY, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(
                path, "is a symlink: dsguard never writes through one", errno.ELOOP
            ) from None
        if exc.errno == errno.ENXIO:
            raise UnsafePathError(path, "is not a regular file", errno.ENXIO) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(path, "is not a regular file", errno.EINVAL)
        if st.st_nlink > 1:
            raise UnsafePathError(
                path, f"has {st.st_nlink} hard links: writing it would write them all"
            )
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o077)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_all(fd: int, data: bytes) -> tuple[int, OSError | None]:
    """Write as much of ``data`` as ``fd`` takes: (bytes written, the error that stopped it).

    A regular file on a nearly full disk takes part of a write and then fails (ENOSPC): the
    caller must know how much went out, to finish the line later rather than tear it.
    """
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except InterruptedError:  # pragma: no cover - PEP 475 retries EINTR itself
            continue
        except OSError as exc:
            return done, exc
        if n == 0:  # pragma: no cover - a regular file never returns 0 for a non-empty write
            return done, OSError(errno.EIO, "write returned 0")
        done += n
    return done, None


def write_atomic(
    path: Path,
    data: bytes,
    *,
    mode: int = FILE_MODE,
    keep: os.stat_result | None = None,
    check_owner: bool = True,
) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never half.

    ``check_owner``: the directory must belong to the running user or root (log dir files);
    a checkpoint dir belongs to whoever trains, so the patch only insists on a real directory.
    See :func:`replace_at` for ``mode`` and ``keep``.

    Raises:
        UnsafePathError: the directory is a symlink, not a directory, or another user's.
        OSError: the write failed (ENOSPC, EIO, ...); ``path`` is then unchanged.
    """
    dfd = open_dir(path.parent, owner=check_owner)
    try:
        replace_at(dfd, path.name, data, mode=mode, keep=keep)
    finally:
        os.close(dfd)


def write_atomic_refusing_links(path: Path, data: bytes) -> None:
    """:func:`write_atomic` into a private dir, refusing a symlink at ``path`` instead of
    replacing it: for files the training process reads (an attempt's copy of the script's
    own config file, ``log_dir/attempt-N.NAME``), a link planted at that predictable name is
    someone steering what the script loads, and silently replacing it would hide that.

    Raises:
        UnsafePathError: ``path`` is a symlink, or its directory is unsafe.
        OSError: the write failed; ``path`` keeps its old content.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            path, "is a symlink; dsguard will not write an attempt's config through or over it",
            errno.ELOOP,
        )  # fmt: skip
    make_private_dir(path.parent)
    write_atomic(path, data)


def replace_at(
    dfd: int, name: str, data: bytes, *, mode: int = FILE_MODE, keep: os.stat_result | None = None
) -> None:
    """Replace ``name`` in the directory open as ``dfd`` with ``data``, atomically.

    ``keep``: the replaced file's stat; the new file gets its mode and owner (a patched
    checkpoint file must stay readable by the user who trains, not become root's 0600).
    Otherwise the new file is ``mode``. A symlink at ``name`` is replaced, never followed.

    Raises:
        OSError: the write failed (ENOSPC, EIO, ...); ``name`` is then unchanged.
    """
    tmp = ""
    try:
        for _ in range(100):
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, mode,
                             dir_fd=dfd)  # fmt: skip
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 collisions of 48 random bits
            raise FileExistsError(errno.EEXIST, "no free temp name", name)
        try:
            _, err = write_all(fd, data)
            if err is not None:
                raise err
            _set_owner_and_mode(fd, mode, keep)
            os.fsync(fd)
        finally:
            os.close(fd)
        # rename(2) replaces a link at ``name`` itself, never the file it points to.
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = ""
        with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
            os.fsync(dfd)
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)


def create_at(dfd: int, name: str, data: bytes, *, keep: os.stat_result | None = None) -> bool:
    """Create ``name`` in ``dfd`` with ``data`` unless something (even a link) is there.

    Returns False when the name was taken. ``keep`` as in :func:`replace_at`.
    """
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, FILE_MODE,
                     dir_fd=dfd)  # fmt: skip
    except FileExistsError:
        return False
    try:
        _, err = write_all(fd, data)
        if err is not None:
            raise err
        _set_owner_and_mode(fd, FILE_MODE, keep)
        if keep is not None:
            os.utime(fd, ns=(keep.st_atime_ns, keep.st_mtime_ns))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dfd)
        raise
    os.close(fd)
    return True


def _set_owner_and_mode(fd: int, mode: int, keep: os.stat_result | None) -> None:
    if keep is None:
        os.fchmod(fd, mode)
        return
    if (keep.st_uid, keep.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):  # not root: the file was ours anyway
            os.fchown(fd, keep.st_uid, keep.st_gid)
    os.fchmod(fd, stat.S_IMODE(keep.st_mode))
