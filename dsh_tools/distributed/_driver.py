"""Connecting this process to Ray, once, the way Ray users expect.

``ray.init()`` with no arguments: connect to ``RAY_ADDRESS`` when it is set, else to a cluster
started on this machine with ``ray start``, else start a local instance. A harness that wants
other options calls ``ray.init(...)`` itself before the first placed call; that connection is used
as is.

A local instance's processes die with the thread that started them (Ray ties them to their
parent with a death signal), so ``ray.init`` runs on the main thread when it is the caller, and
otherwise on one long-lived daemon thread of its own, never on a pool or loop thread that may end.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

__all__ = ["ensure_ray", "import_ray"]

_lock = threading.Lock()
_keeper: threading.Thread | None = None


def import_ray() -> ModuleType:
    """``ray``, or ``ImportError`` naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "running tool bodies on Ray needs Ray: pip install 'dsh-tools[ray]'"
        ) from exc
    return ray


def ensure_ray() -> ModuleType:
    """``ray``, connected (see the module docstring); raises what ``ray.init`` raised."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    with _lock:
        if ray.is_initialized():
            return ray
        if threading.current_thread() is threading.main_thread():
            ray.init()
        else:
            _init_on_keeper(ray)
    return ray


def _init_on_keeper(ray: Any) -> None:
    global _keeper
    done = threading.Event()
    failure: list[BaseException] = []

    def keep() -> None:
        try:
            ray.init()
        except BaseException as exc:
            failure.append(exc)
            done.set()
            return
        done.set()
        threading.Event().wait()  # outlive every caller: the local instance dies with us

    _keeper = threading.Thread(target=keep, name="dsh-ray-driver", daemon=True)
    _keeper.start()
    done.wait()
    if failure:
        raise failure[0]
