"""Keeps the exporters' chatter off the terminal while a bundled ensemble builds.

torch.onnx, onnxscript, transformers and onnxruntime print well over a hundred lines while
``text_embedding`` exports (rewrite passes, deprecation warnings, progress bars), from Python and
from native code alike. ``exporter_output_hidden`` points file descriptor 2 at a temporary file
for the duration of the build, so all of it is caught whatever writes it; if the build fails,
what was caught is written out after all, so the reason is never lost. ``--verbose`` skips it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def exporter_output_hidden(hidden: bool = True) -> Iterator[None]:
    if not hidden:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if failed:  # the build's own output is the best account of why it failed
                caught.seek(0)
                sys.stderr.write(caught.read().decode(errors="replace"))
                sys.stderr.flush()
