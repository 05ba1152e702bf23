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
import sys

__all__ = ["search_places"]


def search_places() -> list[tuple[str, bool, str]]:
    """Each place as ``(absolute path, whether a grant beneath it holds part of it too, what
    it is)``. A run may write anything beneath a ``write`` grant, and code it leaves in one of
    these runs as the host's user, outside the sandbox, the next time the harness or any
    Python or command of that user starts:

    - the directories of the host's ``sys.path`` (the harness script's directory or working
      directory first): a ``sitecustomize.py``, or a module named like one the harness
      imports (``json.py``), is imported from there before the standard library's;
    - the user's Python directories (``~/.local/lib``, or ``$PYTHONUSERBASE/lib``): every
      Python of that user that is not in a virtual environment runs the ``.pth`` files of its
      ``site-packages`` there as it starts, and imports from it;
    - the user's home directory (``$HOME`` and the one the password database names): its
      shells' startup files (``.bashrc``, ``.profile``) and the directories above;
    - the directories of the host's ``PATH``, whose commands the harness and its tools run by
      name.
    """
    places: dict[str, tuple[bool, str]] = {}  # by path, the first reason kept
    for entry in sys.path:
        if isinstance(entry, str):
            where = "a directory the harness's Python imports from (sys.path)"
            places.setdefault(os.path.abspath(entry or os.curdir), (False, where))
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
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry.startswith("/"):
            places.setdefault(entry, (False, "a directory of the harness's PATH, run by name"))
    return [(path, whole, what) for path, (whole, what) in places.items()]
