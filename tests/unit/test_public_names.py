"""emulator/public_names.py: Triton's words, in the names a client knows."""

from __future__ import annotations

from pathlib import Path

from emulator.public_names import public_text

REPO = Path("/c/endpoints/local/AllTraffic/i-1/triton-repo")


def test_installed_names_and_cache_paths_become_public() -> None:
    text = (f"load failed for model '{REPO}::ensemble--ab12': depends on '{REPO}::pre--ab12'; "
            f"At: {REPO}/pre--ab12/1/model.py(3); model 'pre--ab12x' is another one")
    assert public_text(text, REPO, ["ensemble--ab12", "pre--ab12"], "ensemble--ab12",
                       "team/chain.tar.gz") == (
        "load failed for model 'team/chain.tar.gz': depends on 'pre'; "
        "At: /opt/ml/models/ab12/model/pre/1/model.py(3); model 'pre--ab12x' is another one")
