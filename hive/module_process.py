"""A module of hive's that runs as a Python process of its own, started from its bytecode.

The scripted agent and a jail's network relay are such modules: standard library only, started
once per agent. Named by path, a script is compiled anew at every start; imported, a module comes
from the bytecode beside it (where an installed copy has it; `-I` leaves any PYTHONPYCACHEPREFIX
out). The module's folder goes last on `sys.path`, after the standard library it imports, and
`-I` keeps the working directory off it. The module's `main(argv)` gets the arguments given after
the command line's code and its return value is the exit status.
"""

from __future__ import annotations

import os
import sys


def argv(module_file: str, python: str = sys.executable) -> list[str]:
    """The command line that runs the module in `module_file`; its arguments go after it."""
    folder, name = os.path.split(os.path.abspath(module_file))
    module = name.removesuffix(".py")
    if not module.isidentifier():
        raise ValueError(f"{module_file}: not a module's file name")
    code = f"import sys; sys.path.append({folder!r}); import {module}; sys.exit({module}.main(sys.argv[1:]))"
    return [python, "-I", "-S", "-c", code]


def bytecode(module_file: str) -> str:
    """Where the interpreter running hive looks for the module's bytecode."""
    folder, name = os.path.split(os.path.abspath(module_file))
    return os.path.join(folder, "__pycache__", f"{name.removesuffix('.py')}.{sys.implementation.cache_tag}.pyc")
