"""The Code Mode sandbox: kernel layer, seccomp filter, per-run confinement and the policy.

The template process imports this package (under a private name) for ``SandboxPlan``; the host
uses ``CodeSandbox``.
"""

from ._confine import MIN_LANDLOCK_ABI, SandboxPlan, SandboxUnavailable
from ._policy import CodeSandbox

__all__ = ["MIN_LANDLOCK_ABI", "CodeSandbox", "SandboxPlan", "SandboxUnavailable"]
