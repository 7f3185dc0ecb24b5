"""Every registered method module keeps the contract: listing it imports no torch."""

import subprocess
import sys

import pytest

from engine.registry import method_modules


@pytest.mark.parametrize("module", method_modules())
def test_listing_a_method_module_imports_no_torch(module):
    code = (f"import sys, {module} as m; [s.describe() for s in m.SPECS]; "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"
