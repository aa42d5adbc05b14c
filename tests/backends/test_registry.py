"""The agent kinds of `hive.backends.registry`: what each one declares reaches every place that
needs it — config validation, `--backend`, the no-jail-no-agent rule, the CLI checks, the
permission policy — so a new backend is one module and one registry line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hive import config
from hive.agents import jails, permissions
from hive.backends import registry
from hive.backends.base import PermissionRequest
from hive.cli import plan as plan_cli
from hive.cli import run as run_cli
from hive.jail import detect

KINDS = sorted(registry.KINDS)


def _choices(command) -> tuple[str, ...]:
    option = next(p for p in command.params if p.name == "backend")
    return tuple(option.type.choices)


def test_config_and_the_cli_accept_every_registered_backend() -> None:
    assert config.KEYS["backend"].choices == registry.names()
    for role in ("queen", "worker", "refinery"):
        assert config.KEYS[f"{role}_backend"].choices == ("", *registry.names())
    assert _choices(run_cli.run) == registry.names() and _choices(plan_cli.plan) == registry.names()
    for name in KINDS:
        assert registry.backend_class(name).name == name            # the class says the same name


@pytest.mark.parametrize("name", KINDS)
def test_an_untrusted_kind_does_not_start_where_no_jail_can_be_built(name: str, monkeypatch) -> None:
    monkeypatch.setenv("HIVE_BWRAP", "/nonexistent/bwrap")
    detect.support.cache_clear()
    try:
        chosen = config.Config(backend=name)
        refusal, _ = jails.start_problem(chosen, ("worker",))
        assert bool(refusal) == registry.kind(name).untrusted, (name, refusal)
    finally:
        detect.support.cache_clear()


@pytest.mark.parametrize("name", [n for n in KINDS if registry.kind(n).command_setting])
def test_a_missing_cli_is_named_with_its_setting(name: str, tmp_path: Path) -> None:
    setting = registry.kind(name).command_setting
    chosen = config.Config(backend=name, **{setting: str(tmp_path / "not-installed")})
    problem = registry.agent_cli_problem(chosen, "worker")
    assert problem is not None and f"set {setting}" in problem and name in problem


@pytest.mark.parametrize("folder", registry.settings_dirs())
def test_every_kinds_settings_folder_is_refused_to_agents(folder: str, tmp_path: Path) -> None:
    for request in (PermissionRequest("1", "Write", paths=[str(tmp_path / folder / "settings.json")]),
                    PermissionRequest("2", "Bash", command=f"echo x > {folder}/settings.json")):
        verdict = permissions.decide(request, role="worker", root=str(tmp_path))
        assert not verdict.allow and folder in verdict.reason, (request, verdict)
