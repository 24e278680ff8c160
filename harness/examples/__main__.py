"""``python -m harness.examples FOLDER``: copies the example test file into FOLDER (created if
missing), to start a suite of your own from it; an existing file there is left as it is."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

EXAMPLE = Path(__file__).with_name("test_example_endpoint.py")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m harness.examples FOLDER   (writes FOLDER/test_example_endpoint.py)",
              file=sys.stderr)
        return 2
    target = Path(argv[0]) / EXAMPLE.name
    if target.exists():
        print(f"{target} exists: left as it is")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EXAMPLE, target)
    print(f"wrote {target} (pytest {target.parent}/ --mme-url URL, or mme_model_store in "
          "pytest.ini; its docstring says how)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
