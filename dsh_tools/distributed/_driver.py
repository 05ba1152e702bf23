"""Connecting this process to Ray, once, the way Ray users expect.

``ray.init()`` with no arguments: connect to ``RAY_ADDRESS`` when it is set, else to a cluster
started on this machine with ``ray start``, else start a local instance. A harness that wants
other options calls ``ray.init(...)`` itself before the first placed call; that connection is used
as is.

A local instance's processes die with the thread that started them (Ray ties them to their
parent with a death signal), so ``ray.init`` always runs on one long-lived daemon thread of its
own, never on a caller's pool or loop thread that may end. ``init_ray(**options)`` does the same
for a harness that wants its own ``ray.init`` options.

The address ``ray.init`` would connect to is tried first: it must accept a TCP connection and
greet as the gRPC server of a Ray cluster's GCS does. Where nothing listens, or something else
does (a wrong port), ``ray.init`` retries its connection for many minutes before it gives up,
and a placed call would wait all that time. Such an address fails at once with
``ConnectionError`` naming the address and where it came from. That address is ``address=``
or ``RAY_ADDRESS`` given as ``host:port``, or, with neither (or ``auto``), the one the last
``ray start`` on this machine recorded in ``ray_current_cluster`` under Ray's temporary
directory (``$RAY_TMPDIR/ray``, else on Linux ``$TMPDIR/ray``, else ``/tmp/ray``;
``ray.init``'s ``_temp_dir`` when given): a cluster that died without ``ray stop`` leaves that
file behind.
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import sys
import tempfile
import threading
from types import ModuleType
from typing import Any

__all__ = [
    "connect_in_background",
    "connected_ray",
    "connection",
    "demand",
    "ensure_ray",
    "import_ray",
    "init_ray",
    "never_placed",
    "ray_temp_root",
    "still_connected",
    "unplaceable",
]

_lock = threading.Lock()
_keeper: threading.Thread | None = None

_PROBE_TIMEOUT = 5.0
"""Seconds a ``host:port`` address has to accept a TCP connection before ``ray.init``."""


def import_ray() -> ModuleType:
    """``ray``, or ``ImportError`` naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            "running tool bodies on Ray needs Ray: pip install 'dsh-tools[ray]'"
        ) from exc
    return ray


def connected_ray() -> ModuleType | None:
    """``ray`` while this process is connected to it, else None (after ``ray.shutdown()``).

    Most of Ray's calls connect anew when made while disconnected (``ray.cancel``,
    ``ray.wait``, ``ray.kill``, an actor method's ``.remote()``, ``get_runtime_context``). One
    that only cleans up after a call or a run (stops it, kills or disposes of its actor) asks
    this first: what it would clean up ended with the connection, and connecting anew would
    start a local instance from whatever thread made the call, an instance that ends with that
    thread (and Ray ends this process once its instance is gone)."""
    ray = import_ray()
    return ray if ray.is_initialized() else None


def connection() -> tuple[str, str]:
    """Which connection to Ray this process has (its job, and the node it is attached to).
    Actor handles made in an earlier one (before ``ray.shutdown()``) are of no use in it:
    their actors ended with it, and a new local instance, or the same cluster, has a new
    node or a new job. ``ConnectionError`` when there is none (asked of Ray then, it would
    connect anew: see ``connected_ray``)."""
    ray = connected_ray()
    if ray is None:
        raise ConnectionError("this process is not connected to Ray (ray.shutdown())")
    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id()


def still_connected(earlier: tuple[str, str]) -> bool:
    """Whether this process is still on the Ray connection ``earlier`` (a ``connection()``).
    After ``ray.shutdown()`` Ray never settles the replies of the calls it had in flight: a
    caller waiting for one asks this now and then."""
    try:
        return connection() == earlier
    except Exception:  # a new connection still being made: not the earlier one either
        return False


def ensure_ray() -> ModuleType:
    """``ray``, connected with ``ray.init()`` unless already connected (see the module
    docstring); raises what ``ray.init`` raised."""
    return init_ray()


def connect_in_background() -> concurrent.futures.Future[ModuleType]:
    """``ensure_ray()`` on a daemon thread of its own; the future gets its outcome. A caller
    awaits it without holding a thread, and an interpreter that exits while ``ray.init`` still
    retries (for minutes, where something that is not Ray answers) does not wait for it, as it
    waits for the threads of an executor."""
    outcome: concurrent.futures.Future[ModuleType] = concurrent.futures.Future()

    def connect() -> None:
        try:
            outcome.set_result(ensure_ray())
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=connect, name="dsh-ray-connect", daemon=True).start()
    return outcome


def init_ray(**options: Any) -> ModuleType:
    """``ray``, connected with ``ray.init(**options)`` on a long-lived thread unless it already
    is: a local instance then lives as long as this process, whichever thread asked for it."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    with _lock:
        if not ray.is_initialized():
            _init_on_keeper(ray, options)
    return ray


def _recorded_cluster(options: dict[str, Any]) -> tuple[str | None, str]:
    """The address the last ``ray start`` on this machine recorded, and the file it is in
    (``None`` when there is no such file); see the module docstring."""
    temp_dir = options.get("_temp_dir")
    if not isinstance(temp_dir, str):
        temp_dir = os.path.join(ray_temp_root(), "ray")
    path = os.path.join(temp_dir, "ray_current_cluster")
    try:
        with open(path, encoding="utf-8") as recorded:
            return recorded.read().strip() or None, path
    except (OSError, ValueError):  # no file, or not text: Ray starts a local instance
        return None, path


def ray_temp_root() -> str:
    """The directory Ray's temporary directory is made in, as Ray chooses it: ``TMPDIR``
    counts on Linux only (macOS sets it for every process, to a directory Ray does not use),
    and a ``RAY_TMPDIR`` that is set counts even when empty. A file anywhere else is not one
    ``ray.init`` reads, and failing a call for its address would refuse a cluster Ray would
    have started."""
    if "RAY_TMPDIR" in os.environ:
        return os.environ["RAY_TMPDIR"]
    if sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        return os.environ["TMPDIR"]
    if sys.platform.startswith(("linux", "darwin")):
        return "/tmp"
    return tempfile.gettempdir()


def _probe(options: dict[str, Any]) -> None:
    """Raise ``ConnectionError`` when the cluster address ``ray.init`` would connect to is a
    ``host:port`` where nothing accepts a connection. ``auto`` is what it is for Ray: the
    ``RAY_ADDRESS`` or the recorded cluster, when there is one (a ``RAY_ADDRESS`` of ``auto``
    too names the recorded cluster). Other forms (``local``, ``ray://...``) are left to Ray."""
    given = options.get("address")
    named = os.environ.get("RAY_ADDRESS")
    if given is not None and given != "auto":
        address, source = given, "address="
    elif named and named != "auto":
        address, source = named, "RAY_ADDRESS"
    else:
        address, path = _recorded_cluster(options)
        source = (
            f"recorded by `ray start` in {path}; remove that file to start a local instance instead"
        )
    if not isinstance(address, str) or "://" in address:
        return
    host, colon, port = address.strip().rpartition(":")
    if not colon or not host or not port.isdigit():
        return
    try:
        with socket.create_connection(
            (host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT
        ) as connection:
            why = _not_grpc(connection)
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
    if why is not None:
        raise ConnectionError(f"no Ray cluster answers at {address.strip()} ({source}): {why}")


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
"""An HTTP/2 client's connection preface and an empty SETTINGS frame: what a gRPC client
sends first."""


def _not_grpc(connection: socket.socket) -> str | None:
    """Why the server on ``connection`` is not a Ray cluster's (whose GCS is a gRPC server: it
    opens with a SETTINGS frame), or None. Where something else listens (a wrong port),
    ``ray.init`` would retry for many minutes. With TLS (``RAY_USE_TLS``) the answer is
    encrypted, and the TCP connection is all that is checked."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    header = b""
    try:
        connection.sendall(_PREFACE)
        while len(header) < 9:
            chunk = connection.recv(9 - len(header))
            if not chunk:
                break
            header += chunk
    except TimeoutError:
        return f"something listens there but says nothing within {_PROBE_TIMEOUT:g} s"
    stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
    if len(header) == 9 and header[3] == 0x04 and stream == 0:  # SETTINGS, of the connection
        return None
    if not header:
        return "something listens there but closes the connection without an answer"
    return "something listens there but does not answer as a Ray cluster (gRPC) does"


def _init_on_keeper(ray: Any, options: dict[str, Any]) -> None:
    global _keeper
    _probe(options)
    done = threading.Event()
    failure: list[BaseException] = []

    def keep() -> None:
        try:
            ray.init(**options)
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


def demand(options: dict[str, Any]) -> dict[str, float]:
    """What a task or actor with Ray's scheduling ``options`` needs of a node, in Ray's
    resource names (see ``unplaceable``)."""
    needs = {"CPU": options.get("num_cpus", 1), "GPU": options.get("num_gpus", 0)}
    needs.update(options.get("resources", {}))
    return needs


def unplaceable(needs: dict[str, float]) -> str | None:
    """Why no node of the cluster can ever place an actor needing ``needs`` (no live node has
    that much of each resource, free or not), or None when one could (it is busy, say)."""
    wanted = {name: amount for name, amount in needs.items() if amount > 0}
    ray = connected_ray()
    if ray is None or not wanted:
        return None
    try:
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    except Exception:  # the cluster's state cannot be read now: go on waiting
        return None
    if any(all(node.get(name, 0) >= amount for name, amount in wanted.items()) for node in nodes):
        return None
    listed = ", ".join(f"{name}={amount:g}" for name, amount in sorted(wanted.items()))
    return f"no node of the cluster ({len(nodes)} alive) has the resources one needs: {listed}"


def never_placed(what: str, wait_s: float, needs: dict[str, float]) -> str | None:
    """What a call that waited ``wait_s`` for Ray to place ``what`` (a worker, an actor) is
    told when no node can ever place one needing ``needs`` (``unplaceable``), or None when
    one could."""
    missing = unplaceable(needs)
    if missing is None:
        return None
    return f"Ray placed no {what} within {wait_s}s (placement_wait_s) and {missing}"
