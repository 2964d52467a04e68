"""The ``restricted`` Pod Security Standard, written out as the rules it is made of
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, the baseline's
rules included), over a Pod spec as the API serves it (camelCase JSON). No API server
is at hand to enforce a namespace's ``pod-security.kubernetes.io/enforce: restricted``
label; this says what it would refuse, and why."""

from __future__ import annotations

from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def violations(pod: dict[str, Any]) -> list[str]:
    """What in ``pod`` (a PodSpec) the restricted profile refuses; [] when it passes."""
    found: list[str] = []
    pod_context = pod.get("securityContext") or {}
    containers = [
        *pod.get("initContainers", []),
        *pod.get("containers", []),
        *pod.get("ephemeralContainers", []),
    ]
    for name in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(name):
            found.append(f"{name} is true")
    found += _context_violations("pod", pod_context)
    for sysctl in pod_context.get("sysctls") or ():
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']} is not a safe one")
    for volume in pod.get("volumes") or ():
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']} is of type {sorted(kinds - RESTRICTED_VOLUMES)}")
    for container in containers:
        found += _container_violations(container, pod_context)
    return found


def _context_violations(where: str, context: dict[str, Any]) -> list[str]:
    found = []
    if (context.get("windowsOptions") or {}).get("hostProcess"):
        found.append(f"{where}: windowsOptions.hostProcess is true")
    if context.get("runAsUser") == 0:
        found.append(f"{where}: runAsUser is 0")
    if context.get("runAsNonRoot") is False:
        found.append(f"{where}: runAsNonRoot is false")
    selinux = context.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
        found.append(f"{where}: seLinuxOptions {selinux}")
    seccomp = (context.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in ("RuntimeDefault", "Localhost"):
        found.append(f"{where}: seccompProfile is {seccomp}")
    apparmor = (context.get("appArmorProfile") or {}).get("type")
    if apparmor is not None and apparmor not in ("RuntimeDefault", "Localhost"):
        found.append(f"{where}: appArmorProfile is {apparmor}")
    return found


def _container_violations(container: dict[str, Any], pod_context: dict[str, Any]) -> list[str]:
    name = container["name"]
    context = container.get("securityContext") or {}
    found = _context_violations(f"container {name}", context)
    if context.get("privileged"):
        found.append(f"container {name}: privileged")
    if context.get("allowPrivilegeEscalation") is not False:
        found.append(f"container {name}: allowPrivilegeEscalation is not false")
    if context.get("procMount", "Default") != "Default":
        found.append(f"container {name}: procMount is {context['procMount']}")
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or ()):
        found.append(f"container {name}: capabilities do not drop ALL")
    added = set(capabilities.get("add") or ())
    if added - {"NET_BIND_SERVICE"} or added - BASELINE_CAPABILITIES:
        found.append(f"container {name}: adds capabilities {sorted(added)}")
    if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
        found.append(f"container {name}: runAsNonRoot is not true")
    seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        found.append(f"container {name}: no RuntimeDefault or Localhost seccompProfile")
    for port in container.get("ports") or ():
        if port.get("hostPort"):
            found.append(f"container {name}: hostPort {port['hostPort']}")
    return found
