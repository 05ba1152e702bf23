"""Past one machine: tool bodies and Code Mode programs on a Ray cluster.

``define_tool(..., placement=RayPlacement(...))`` runs only the tool's body on Ray; the registry,
hooks, guards, approval, wrappers, post-hooks, the session log and batch scheduling stay in the
calling process. ``RayCodeRuntime`` runs Code Mode programs on a Ray node with their tool calls
coming back to this process's pipeline. Ray is imported on first use
(``pip install 'dsh-tools[ray]'``).
"""

from ..registry import Placement
from ._code_runtime import RayCodeRuntime
from ._driver import init_ray
from ._errors import RemoteToolError, RemoteUnavailableError, RemoteWorkerLostError
from ._placement import RAY_DEFAULT, RayPlacement, set_ray_default
from ._remote import RemoteRunContext

__all__ = [
    "RAY_DEFAULT",
    "Placement",
    "RayCodeRuntime",
    "RayPlacement",
    "RemoteRunContext",
    "RemoteToolError",
    "RemoteUnavailableError",
    "RemoteWorkerLostError",
    "init_ray",
    "set_ray_default",
]
