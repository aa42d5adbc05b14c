"""Whether a jail can be built here, and with which `bwrap`: probed once per process."""

from __future__ import annotations

import functools
import glob
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass

from hive.jail.limits import available_mechanism

INSTALL_FIX = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
# the copy the codex npm package ships (hive's own npm cache first)
VENDORED = ("~/.cache/git-hive/npm/node_modules/@openai/codex-linux-*/vendor/*/codex-resources/bwrap",)
PROBE_TIMEOUT = 10


@dataclass(frozen=True)
class Support:
    ok: bool
    bwrap: str = ""
    reason: str = ""               # why no jail can be built (when not ok)
    fix: str = ""                  # what the user can do about it
    process_limit: str = ""        # what bounds a jail's processes ("" when nothing does)

    def describe(self) -> str:
        if not self.ok:
            return f"agents cannot be jailed: {self.reason} — {self.fix}"
        bound = self.process_limit or "no process limit (root without a writable pids cgroup)"
        return f"agents run jailed (bubblewrap {self.bwrap}; processes bounded by {bound})"


def find_bwrap() -> str:
    """`HIVE_BWRAP`, else `bwrap` on PATH, else the copy shipped with codex; "" when none."""
    named = os.environ.get("HIVE_BWRAP", "")
    if named:
        return named if os.access(named, os.X_OK) else ""
    found = shutil.which("bwrap")
    if found:
        return found
    for pattern in VENDORED:
        for candidate in sorted(glob.glob(pattern.replace("~", _login_home(), 1))):
            if os.access(candidate, os.X_OK):
                return candidate
    return ""


def _login_home() -> str:
    """The user's own home (hive's npm cache lives there), whatever HOME says."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


@functools.lru_cache(maxsize=1)
def support() -> Support:
    """Can this machine build hive's jail? Tried for real: bwrap runs `true` in one."""
    if not sys.platform.startswith("linux"):
        return Support(False, reason=f"the jail needs Linux (this is {sys.platform})",
                       fix='run agents on Linux, or set sandbox = "off" to run them unjailed')
    bwrap = find_bwrap()
    if not bwrap:
        return Support(False, reason="bubblewrap (bwrap) is not installed",
                       fix=f'{INSTALL_FIX}, or set sandbox = "off" to run agents unjailed')
    try:
        probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                "--unshare-all", "--share-net", "--die-with-parent", "true"],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Support(False, bwrap, reason=f"{bwrap} cannot run ({e})",
                       fix=f'{INSTALL_FIX}, or set sandbox = "off" to run agents unjailed')
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return Support(False, bwrap, reason=f"bubblewrap cannot make namespaces here ({said})",
                       fix="enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 "
                           'or user.max_user_namespaces > 0), or set sandbox = "off" to run agents unjailed')
    return Support(True, bwrap, process_limit=available_mechanism())
