"""``CodeSandbox``: what a sandboxed Code Mode program may reach beyond its scratch directory."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence

import msgspec

try:
    from ...actors._keywords import KeywordChecked
except ImportError:  # in the template, which imports this package alone under a private name
    KeywordChecked = msgspec.StructMeta  # type: ignore[misc, assignment]

__all__ = ["MIN_OPEN_FILES", "CodeSandbox", "lies_beneath"]

MIN_OPEN_FILES = 32
"""The least ``max_open_files`` a run may be given: the worker holds about ten descriptors of
its own (its channel, pipes and event loop) before the program opens any."""


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8, as the runtime's settings cross to its template (a
    lone surrogate, such as ``os.fsdecode`` makes of an undecodable byte, does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _paths(key: str, value: object) -> tuple[str, ...]:
    # Any sequence the field's type admits, but text: a string is a sequence of characters.
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise TypeError(f"code sandbox: {key} must be a list of absolute paths")
    paths = []
    for index, given in enumerate(value):
        # A path object (``pathlib.Path``) is taken as its text; bytes are not (a grant must
        # be text, as the runtime's settings cross to its template as UTF-8).
        path = os.fspath(given) if isinstance(given, os.PathLike) else given
        if type(path) is not str or not path.startswith("/") or "\0" in path:
            raise ValueError(f"code sandbox: {key}[{index}] must be an absolute path, got {path!r}")
        if not _utf8(path):
            raise ValueError(
                f"code sandbox: {key}[{index}] must be valid UTF-8 (a path with undecodable "
                f"bytes cannot be granted; grant a parent directory), got {path!r}"
            )
        paths.append(path)
    return tuple(paths)


def lies_beneath(path: str, root: str) -> bool:
    """Whether ``path`` lies strictly beneath the directory ``root`` (both absolute, normalized
    or resolved alike)."""
    return path != root and path.startswith(root.rstrip("/") + "/")


def _refuse_nested(read: Sequence[str], write: Sequence[str]) -> None:
    """Refuse a grant strictly beneath a ``write`` grant. It is covered already, and a run may
    replace anything beneath its ``write`` grant with a symbolic link to anywhere, which the
    next template would follow when it opens the grant: a run of one tool system could so
    choose what the next one (the next session of the same harness, say) is granted."""
    roots = [posixpath.normpath(path) for path in write]
    for key, paths in (("read", read), ("write", write)):
        for index, path in enumerate(paths):
            normal = posixpath.normpath(path)
            for root, given in zip(roots, write, strict=True):
                if lies_beneath(normal, root):
                    raise ValueError(
                        f"code sandbox: {key}[{index}] {path!r} lies beneath the write grant "
                        f"{given!r}, which covers it already (a run could replace it with a "
                        "symbolic link the next template would grant); remove it"
                    )


class CodeSandbox(msgspec.Struct, metaclass=KeywordChecked, frozen=True, kw_only=True):
    """The grants of the Code Mode sandbox (everything not granted is refused).

    - ``read``: absolute paths (directories or files) the program may read and execute.
    - ``write``: absolute paths the program may read, create, change and remove beneath.
    - ``env``: the program's whole environment (nothing of the host's is passed otherwise).
    - ``max_processes``: how many processes the run may have at once (the worker included).
    - ``max_open_files``: how many descriptors each of the run's processes may have open
      (``RLIMIT_NOFILE``), so that a run's descriptors hold at most ``max_processes x
      max_open_files`` of the machine's open-file table, whatever the host's own limit is (a
      value above the host process's own hard limit gets that limit).
    - ``cgroups``: measure and hold each run with its own cgroups when this host lets the
      runtime make them (root with the v1 ``memory``, ``cpuacct`` and ``pids`` hierarchies);
      ``False`` keeps to the namespace init's ``/proc`` walk (see ``docs/sandbox.md`` for what
      each guarantees).

    A granted path must exist when the runtime's template starts, else every run fails naming
    it (one missing when the runtime is made is named then, in a warning). A grant beneath a
    ``write`` grant raises ``ValueError`` (the ``write`` grant covers it, and a run could
    replace it with a link to anywhere); one that links lead there (or through
    there and out again), and a ``write`` grant holding the Python installation, a shared
    library the harness has loaded (the C library, a vendor's), this package, the temporary
    directory (where every runtime keeps its scratch mount point) or a place where the
    harness's user looks for code to run by name (its ``sys.path`` and bytecode, ``~/.local/lib``,
    home directory and its hidden entries, ``PATH``, ``LD_LIBRARY_PATH``, the system Pythons'
    libraries and what links there lead to, the dynamic loader's ``/etc/ld.so.preload`` and
    ``ld.so.cache``), fail every run naming them.
    The program always has its own fresh scratch directory (its working directory, a tmpfs of
    at most ``max_memory_mb``) and read access to the Python installation.
    """

    # Sequence, so that a checked harness may pass the lists the docs show; stored as tuples
    # of ``str``, which is what a harness reads back. A path object (``pathlib.Path``) is
    # taken as its text at run time too, but typed as ``str`` so that reading stays precise.
    read: Sequence[str] = ()
    write: Sequence[str] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    max_processes: int = 64
    max_open_files: int = 256
    cgroups: bool = True

    def __post_init__(self) -> None:
        read, write = _paths("read", self.read), _paths("write", self.write)
        msgspec.structs.force_setattr(self, "read", read)
        msgspec.structs.force_setattr(self, "write", write)
        _refuse_nested(read, write)
        if not isinstance(self.env, dict):
            raise TypeError("code sandbox: env must be a dict of str to str")
        for name, value in self.env.items():
            if type(name) is not str or type(value) is not str:
                raise TypeError("code sandbox: env must be a dict of str to str")
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"code sandbox: env name {name!r} must be a valid variable name")
            if "\0" in value:  # the name is fine: say what is not
                raise ValueError(
                    f"code sandbox: env[{name!r}] must hold no NUL character, got {value!r}"
                )
            if not _utf8(name) or not _utf8(value):
                raise ValueError(
                    f"code sandbox: env[{name!r}] must be valid UTF-8, name and value, "
                    f"got {value!r}"
                )
        count = self.max_processes
        if type(count) is not int:
            raise TypeError("code sandbox: max_processes must be a positive integer")
        if count < 1:
            raise ValueError(f"code sandbox: max_processes must be a positive integer, got {count}")
        files = self.max_open_files
        if type(files) is not int:
            raise TypeError("code sandbox: max_open_files must be an integer")
        if files < MIN_OPEN_FILES:
            raise ValueError(
                f"code sandbox: max_open_files must be at least {MIN_OPEN_FILES} (the worker's own "
                f"descriptors and its imports need them), got {files}"
            )
        if type(self.cgroups) is not bool:
            raise TypeError("code sandbox: cgroups must be True or False")
