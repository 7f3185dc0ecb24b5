"""The bundle's single executable: the studio, or (``--run-module M``) any of its modules.

PyInstaller freezes one program, but Studio runs three: the GUI, the engine it starts
(``engine serve``) and the engine's workers (``engine.worker``). ``engine.commands`` starts
children as ``<this executable> --run-module <module> ...`` when frozen; this file routes
them. ``Studio --run-module engine list`` is the bundled ``studio-engine``.
"""

from __future__ import annotations

import runpy
import sys

from engine.commands import RUN_MODULE_FLAG


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == RUN_MODULE_FLAG:
        module = sys.argv[2]
        sys.argv = [module, *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    from studio.app import main as studio_main

    studio_main()


if __name__ == "__main__":
    main()
