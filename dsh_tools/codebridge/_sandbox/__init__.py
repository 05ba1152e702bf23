"""The Code Mode sandbox: the kernel layer (``_kernel``: Landlock, namespaces, mounts), the
seccomp filter (``_seccomp``), per-run cgroups (``_cgroup``), the namespace's init that watches
and ends a run (``_init``), per-run confinement (``_confine``) and the policy (``_policy``).

The template process imports this package (under a private name) for ``SandboxPlan``; the host
uses ``CodeSandbox``.
"""

from ._confine import MIN_LANDLOCK_ABI, SandboxPlan, SandboxUnavailable
from ._policy import CodeSandbox

__all__ = ["MIN_LANDLOCK_ABI", "CodeSandbox", "SandboxPlan", "SandboxUnavailable"]
