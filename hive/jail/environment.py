"""The environment a jailed command gets: named on an allowlist, nothing else of hive's own.

Certificates, PATH, the locale, the terminal, where the usual toolchains live (`VIRTUAL_ENV`,
`JAVA_HOME`, `GOPATH`, ...), the agent's identity (`HIVE_ISSUE`, `HIVE_AGENT_ID`: what the hooks
and the agent protocol read) and the git settings hive gives agents (`GIT_CONFIG_COUNT/KEY/VALUE`).
A provider's keys and base URLs reach only the CLI of that provider: the names its backend lists
(`JailSpec.provider_env`). Proxy settings never pass: a jail reaches the outside only through
hive's relay, which sets its own (network.py) and goes through the user's proxy itself.
Everything else — the runner's `GIT_DIR`, hive's `HIVE_*` settings, tokens of other services,
`SSH_AUTH_SOCK` — stays outside.
"""

from __future__ import annotations

NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ", "COLORTERM",
    "NO_COLOR", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE", "HIVE_ISSUE", "HIVE_AGENT_ID", "GIT_CONFIG_COUNT", "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
    # toolchains: where they live and how they behave (no credentials)
    "PYTHONDONTWRITEBYTECODE", "PYTHONUTF8", "PYTHONIOENCODING", "VIRTUAL_ENV", "PYENV_ROOT",
    "PYENV_VERSION", "JAVA_HOME", "GOPATH", "GOROOT", "GOFLAGS", "CARGO_HOME", "RUSTUP_HOME",
    "NVM_DIR", "NODE_PATH",
})
PREFIXES = ("LC_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
# set inside every jail: its own /tmp; a `git hive` command run there runs in its own process
# (a command server started in a jail would only cost the agent its imports)
FIXED = {"TMPDIR": "/tmp", "HIVE_COMMAND_SERVER": "0"}


def allowed(name: str, provider: tuple[str, ...] = ()) -> bool:
    """Whether `name` passes: on the common allowlist, or one the backend named (`X_*`: a prefix)."""
    if name in NAMES or name.startswith(PREFIXES):
        return True
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in provider)


def jail_environment(env: dict[str, str], provider: tuple[str, ...] = ()) -> dict[str, str]:
    """The names of `env` a jailed command may see, plus the jail's fixed ones."""
    kept = {name: value for name, value in env.items() if allowed(name, provider)}
    kept.update(FIXED)
    return kept
