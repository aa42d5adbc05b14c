"""The health probe of Codex's provider: GET `<base_url>/models`, spending no tokens."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from hive.backends.codex.home import auth_file_key

BUILTIN_PROVIDERS = {"openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
                     "ollama": ("http://localhost:11434/v1", ""),
                     "lmstudio": ("http://localhost:1234/v1", "")}


# where the CLI signs in with ChatGPT and renews its token, beside the API
LOGIN_URLS = ("https://chatgpt.com", "https://auth.openai.com")
PROVIDER_ENV = ("OPENAI_*", "CODEX_*", "AZURE_OPENAI_*")   # what of the environment reaches the jailed CLI


def _provider(codex_config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    provider = str(codex_config.get("model_provider") or "openai")
    providers = codex_config.get("model_providers")
    providers = providers if isinstance(providers, dict) else {}
    entry = providers.get(provider)
    return provider, entry if isinstance(entry, dict) else {}


def base_url(codex_config: dict[str, Any]) -> str:
    """The configured `model_provider`'s base URL (the `[codex]` table, else the environment)."""
    provider, entry = _provider(codex_config)
    base = str(entry.get("base_url") or "")
    if not base and provider == "openai":
        base = os.environ.get("OPENAI_BASE_URL") or str(codex_config.get("openai_base_url") or "")
    return base or BUILTIN_PROVIDERS.get(provider, ("", ""))[0] or BUILTIN_PROVIDERS["openai"][0]


def provider_access(codex_config: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(URLs, environment names) the jailed CLI needs for its provider: the base URL (and
    OpenAI's sign-in hosts for the built-in provider), the provider's key variable."""
    provider, entry = _provider(codex_config)
    urls = (base_url(codex_config), *(LOGIN_URLS if provider == "openai" else ()))
    key = str(entry.get("env_key") or BUILTIN_PROVIDERS.get(provider, ("", ""))[1])
    return urls, (*PROVIDER_ENV, *((key,) if key else ()))


def probe_target(codex_config: dict[str, Any], codex_home: str) -> tuple[str, dict[str, str]]:
    """The URL and headers of the probe for the configured `model_provider`."""
    provider, entry = _provider(codex_config)
    default_key = BUILTIN_PROVIDERS.get(provider, ("", ""))[1]
    url = base_url(codex_config).rstrip("/") + "/models"
    query = entry.get("query_params")
    if isinstance(query, dict) and query:
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode({str(k): str(v) for k, v in query.items()})
    headers = {"User-Agent": "git-hive", "Accept": "application/json"}
    static = entry.get("http_headers")
    if isinstance(static, dict):
        headers.update({str(k): str(v) for k, v in static.items()})
    env_key = str(entry.get("env_key") or default_key)
    key = os.environ.get(env_key, "") if env_key else ""
    if not key and provider == "openai":
        key = auth_file_key(Path(codex_home) / "auth.json")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return url, headers


def probe(url: str, headers: dict[str, str], timeout: float) -> bool:
    """GET url: True when it connects and answers a status below 500 that is not 429."""
    request = urllib.request.Request(url, headers=headers, method="GET")
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers = [urllib.request.ProxyHandler({})] if host in ("127.0.0.1", "localhost", "::1") else []
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return status < 500 and status != 429
