"""A crash with no Python exception (SIGSEGV in Qt or a C extension) leaves the stacks of every
thread in the log folder's ``faulthandler.log``, under a header naming the process."""

from __future__ import annotations

import signal
import subprocess
import sys


def test_a_segfault_writes_every_threads_stack_to_the_log_folder(tmp_path):
    crash = ("import faulthandler, threading, time\n"
             "from studio.app import enable_faulthandler\n"
             f"enable_faulthandler({str(tmp_path)!r})\n"
             "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
             "def crash_here():\n"
             "    faulthandler._sigsegv()\n"
             "crash_here()\n")
    process = subprocess.Popen([sys.executable, "-c", crash], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    assert process.wait(60) == -signal.SIGSEGV
    text = (tmp_path / "faulthandler.log").read_text()
    assert f"--- studio pid {process.pid} started" in text
    assert "Segmentation fault" in text and "crash_here" in text
    assert "Current thread 0x" in text and "\nThread 0x" in text  # the sleeping one too
