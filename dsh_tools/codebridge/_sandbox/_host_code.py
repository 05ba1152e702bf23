"""Where the host looks for code to run by name: the places a ``write`` grant must not hold.

Computed in the host as its runtime's template starts (``search_places``) and checked by the
template against the ``write`` grants (``_confine._refuse_host_search_path``): the template
runs isolated (``python -I``, an empty environment), so only the host knows its own search
path, home and ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import sys
import sysconfig
from typing import Final

from ._policy import lies_beneath

__all__ = ["ENTRIES", "mapped_code", "search_places"]

ENTRIES: Final = "entries"
"""How much of a searched directory (a ``PATH`` directory) a grant beneath it holds: a file
directly in it, which a command by that name runs, and not a directory there or anything deeper
(a command is looked up in the directory itself, and a run cannot replace its grant's root)."""

_SYSTEM_LIBRARIES = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/lib64")
"""Where the machine's own Pythons keep their libraries (``python3``, ``python3.11``)."""
_LOADER_FILES: Final = (
    ("/etc/ld.so.preload", False),
    ("/etc/ld.so.cache", False),
    ("/etc/ld.so.conf", False),
    ("/etc/ld.so.conf.d", True),
)
"""The dynamic loader's machine-wide files (``glibc``): every library ``ld.so.preload`` names is
loaded into every command any user starts, as ``LD_PRELOAD`` would be, and every library is
found through ``ld.so.cache``, which ``ldconfig`` (run as root by every package install) writes
from ``ld.so.conf`` and the files of ``ld.so.conf.d``. Most machines have no ``ld.so.preload``:
a grant that holds where it would be lets a run make one."""


def search_places() -> list[tuple[str, bool | str, str]]:
    """Each place as ``(absolute path, whether a grant beneath it holds part of it too (or
    ``ENTRIES``: only a file directly in it), what it is)``. A run may write anything beneath a
    ``write`` grant, and code it leaves in one of these runs as the host's user, outside the
    sandbox, the next time the harness or any Python or command of that user starts:

    - the directories of the host's ``sys.path`` (the harness script's directory or working
      directory first): a ``sitecustomize.py``, or a module named like one the harness
      imports (``json.py``), is imported from there before the standard library's;
    - where the harness keeps its bytecode, a grant beneath included: the ``__pycache__`` of
      each directory of its ``sys.path``, and the directory ``sys.pycache_prefix``
      (``PYTHONPYCACHEPREFIX``) names when it has one, which holds the bytecode of every
      module, the standard library's included. An unchecked bytecode file there is loaded for
      its module whatever the source says;
    - the modules and packages (namespace packages included, every directory they span) the
      harness has imported from outside the Python installation
      (its own sources, ``/srv/agent/tools``), a grant beneath them included: the harness
      runs what a run wrote there the next time it starts;
    - the user's Python directories (``~/.local/lib``, or ``$PYTHONUSERBASE/lib``): every
      Python of that user that is not in a virtual environment runs the ``.pth`` files of its
      ``site-packages`` there as it starts, and imports from it;
    - the user's home directory (``$HOME`` and the one the password database names): its
      shells' startup files (``.bashrc``, ``.profile``) and the directories above;
    - what is hidden in that home directory, and everything beneath it (``~/.config``,
      ``~/.ssh``, ``~/.cache``): the configuration of the programs the user runs, much of
      which names commands to run (``~/.config/git/config``'s ``core.fsmonitor`` runs at every
      ``git status``, ``~/.config/systemd/user`` starts services, ``~/.cache/pip`` holds the
      packages ``pip`` installs next). A granted path must exist when the template starts,
      so listing what is there covers every grant beneath;
    - where the host's environment moves that configuration (``XDG_CONFIG_HOME``, a grant
      beneath it included), and the file every non-interactive ``bash`` it starts runs first
      (``BASH_ENV``: each ``bash -c`` of a ``bash`` tool);
    - the directories of the host's ``PATH``, whose commands the harness and its tools run by
      name, a file granted directly in one included (a grant of ``/usr/local/bin/tool`` is a
      grant of what ``tool`` runs), and those of its ``LD_LIBRARY_PATH``, a grant beneath them
      included (the loader looks in subdirectories such as ``glibc-hwcaps`` too), where the
      dynamic loader looks for every library of every command the harness starts (its
      ``libz.so.1``, its ``libc.so.6``) before the system's directories; an entry that is
      empty, ``.`` or relative (``node_modules/.bin``) names a directory of the working
      directory, from which the harness's commands look it up;
    - the shared libraries the harness has loaded (``ctypes.CDLL`` of a vendor's library, an
      extension module's dependency), which its next start loads again, and those of its
      ``LD_PRELOAD`` and ``LD_AUDIT``, which the loader loads into every command it starts:
      the template checks the code it has mapped itself, and it starts with an empty
      environment and loads only the worker;
    - the library directories of the machine's other Pythons (``/usr/lib/python3``,
      ``/usr/local/lib/python3.11``, a grant beneath them included): the system's
      ``python3``, which every user, ``apt`` and ``cron`` run, runs the ``.pth`` files of its
      ``dist-packages`` there as it starts; and what the links directly in those and in the
      harness's own standard library lead to outside them (Debian's ``sitecustomize.py``,
      imported at every start, is a link into ``/etc/python3.11``);
    - the dynamic loader's machine-wide files (``_LOADER_FILES``): ``/etc/ld.so.preload``
      names libraries it loads into every command of the machine.
    """
    places: dict[str, tuple[bool | str, str]] = {}  # by path, the first reason kept
    imported_from = _resolved([entry for entry in sys.path if isinstance(entry, str)])
    for entry in imported_from:
        where = (
            "a directory the harness's Python imports from (sys.path; python -P keeps "
            "the working directory of `python -m` or `-c` off it)"
        )
        places.setdefault(entry, (False, where))
    for entry in imported_from:
        where = "where the harness's Python loads the bytecode of the modules beside it"
        places.setdefault(os.path.join(entry, "__pycache__"), (True, where))
    for entry in _resolved([sys.pycache_prefix] if sys.pycache_prefix else []):
        where = (
            "where the harness's Python keeps, and loads again, the bytecode of every module it "
            "imports (PYTHONPYCACHEPREFIX)"
        )
        places.setdefault(entry, (True, where))
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for name, module in list(sys.modules.items()):
        if "." in name:
            continue  # a submodule lies in its top-level package
        source = getattr(module, "__file__", None)
        if isinstance(source, str) and os.path.basename(source).startswith("__init__."):
            sources = [os.path.dirname(source)]  # the package, everything in it
        elif isinstance(source, str):
            sources = [source]
        else:
            # A namespace package (no __init__.py) has no file but the directories it spans;
            # a built-in module has neither.
            path = getattr(module, "__path__", None)
            sources = [entry for entry in path if isinstance(entry, str)] if path else []
        for source in sources:
            inside = any(source.startswith(prefix.rstrip("/") + "/") for prefix in prefixes)
            if os.path.isabs(source) and not inside:
                places.setdefault(source, (True, "code the harness has imported"))
    homes = [os.path.expanduser("~")]
    with contextlib.suppress(KeyError):  # a user the password database does not know: $HOME
        homes.append(pwd.getpwuid(os.geteuid()).pw_dir)
    bases = [os.environ.get("PYTHONUSERBASE") or os.path.join(home, ".local") for home in homes]
    for base in bases:
        where = "where every Python of the harness's user looks for packages and .pth files"
        places.setdefault(os.path.join(os.path.abspath(base), "lib"), (True, where))
    for home in homes:
        where = "the home directory of the harness's user (its shells' startup files)"
        places.setdefault(os.path.abspath(home), (False, where))
    for home in homes:
        where = "configuration the programs of the harness's user read (a hidden entry of its home)"
        for name in _entries(home):
            if name.startswith("."):
                places.setdefault(os.path.join(os.path.abspath(home), name), (True, where))
    configuration = os.environ.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(configuration):  # a relative one is ignored, as the specification says
        where = "the configuration the programs of the harness's user read (XDG_CONFIG_HOME)"
        places.setdefault(os.path.normpath(configuration), (True, where))
    startup = os.environ.get("BASH_ENV", "")
    if startup:
        where = "the file every non-interactive bash of the harness runs first (BASH_ENV)"
        places.setdefault(os.path.abspath(startup), (False, where))
    for entry in _entries_of(os.environ.get("PATH"), os.pathsep):
        where = "a directory of the harness's PATH, run by name"
        places.setdefault(entry, (ENTRIES, where))
    for entry in _entries_of(os.environ.get("LD_LIBRARY_PATH"), ":;"):
        where = (
            "a directory of the harness's LD_LIBRARY_PATH, where the dynamic loader looks first "
            "for every library of every command the harness starts"
        )
        places.setdefault(entry, (True, where))
    for code in mapped_code():
        if not any(code.startswith(prefix.rstrip("/") + "/") for prefix in prefixes):
            # (The installation's own, its extension modules, are refused as a whole.)
            where = "a library the harness has loaded (its next start loads it again)"
            places.setdefault(code, (False, where))
    for variable in ("LD_PRELOAD", "LD_AUDIT"):
        where = (
            f"a library the dynamic loader loads into every command the harness starts ({variable})"
        )
        for entry in re.split("[: ]", os.environ.get(variable, "")):
            if "/" in entry:  # a bare name is looked up where the directories above are
                places.setdefault(os.path.abspath(entry), (False, where))
    for libraries in _SYSTEM_LIBRARIES:
        where = "where the machine's Pythons look for packages and .pth files"
        for name in _entries(libraries):
            if name.startswith("python"):
                library = os.path.join(libraries, name)
                places.setdefault(library, (True, where))
                linked = f"a file of the machine's Python, linked from its library {library!r}"
                for target, whole in _linked_out(library):
                    places.setdefault(target, (whole, linked))
    for stdlib in dict.fromkeys((sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))):
        where = f"a file of the harness's Python, linked from its library {stdlib!r}"
        for target, whole in _linked_out(stdlib):
            places.setdefault(target, (whole, where))
    for path, whole in _LOADER_FILES:
        where = "where the dynamic loader finds what it loads into every command of the machine"
        places.setdefault(path, (whole, where))
    return [(*_encodable(path, whole), what) for path, (whole, what) in places.items()]


def mapped_code() -> list[str]:
    """The files this process has mapped executable (the interpreter, its shared libraries and
    extension modules), as ``/proc/self/maps`` names them; none where it cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    found = set()
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "x" in fields[1] and fields[5].startswith("/"):
            found.add(fields[5].removesuffix(" (deleted)"))
    return sorted(found)


def _entries_of(search_path: str | None, separators: str) -> list[str]:
    """The directories a search path (``PATH``, ``LD_LIBRARY_PATH``) names for the harness's
    commands, none where it is unset or empty (``_resolved``)."""
    if not search_path:
        return []
    return _resolved(re.split(f"[{re.escape(separators)}]", search_path))


def _resolved(entries: list[str]) -> list[str]:
    """``entries`` as absolute paths: an empty entry, ``.`` or a relative one
    (``node_modules/.bin``) is looked up from the working directory, which the harness and its
    commands start in unless told otherwise; where that directory has been removed, nothing is
    found there, and they are left out (rather than failing every run)."""
    try:
        here = os.getcwd() if not all(entry.startswith("/") for entry in entries) else "/"
    except OSError:
        return [os.path.normpath(entry) for entry in entries if entry.startswith("/")]
    return [os.path.normpath(os.path.join(here, entry)) for entry in entries]


def _encodable(path: str, whole: bool | str) -> tuple[str, bool | str]:
    """``(path, whole)``, or where ``path`` holds bytes that are not UTF-8 (which cannot cross
    to the template, nor be granted), its nearest directory above that is, held only: a grant
    holds the one exactly when it holds the other, as none can lie between them or beneath."""
    given = path
    while True:
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            path = os.path.dirname(path)
        else:
            return path, whole if path == given else False


def _linked_out(directory: str) -> list[tuple[str, bool]]:
    """Where the symbolic links directly in ``directory`` lead outside it, each with whether it
    is a directory (a grant beneath it then holds part of it too). Debian's
    ``/usr/lib/python3.11/sitecustomize.py``, which its ``python3`` imports at every start, is a
    link to ``/etc/python3.11/sitecustomize.py``, which need not exist: a grant holding such a
    target writes what is read as a file of ``directory``. Only the directory's own entries,
    where such links live: a walk of a whole library would cost every template's start."""
    found = []
    resolved = os.path.realpath(directory)
    for name in _entries(directory):
        entry = os.path.join(directory, name)
        if os.path.islink(entry):
            target = os.path.realpath(entry)
            if not lies_beneath(target, resolved):
                found.append((target, os.path.isdir(target)))
    return found


def _entries(directory: str) -> list[str]:
    """The names in ``directory``; none where it cannot be listed."""
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []
