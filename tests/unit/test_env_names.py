"""Every variable follows the MME_<FLAG> rule: the emulator's settings are named after their flags
(tests/unit/test_settings.py), and every other ``MME_*`` variable the tests or the image builds
read is one of the knobs listed, once, in tests/README.md."""

from __future__ import annotations

import re
from pathlib import Path

from emulator.settings import Settings, env_name

ROOT = Path(__file__).parents[2]
# A variable read: os.environ.get, os.environ[...], os.getenv of a quoted name; a shell $ or ${
READ = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()["'](MME_[A-Z0-9_]+)"""
                  r"""|\$\{?(MME_[A-Z0-9_]+)""")


def _read_under(*folders: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".py", ".sh") or not path.is_file():
                continue
            for match in READ.finditer(path.read_text(errors="replace")):
                found.setdefault(match.group(1) or match.group(2), str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_tests_and_builds_read_is_a_setting_or_a_documented_knob() -> None:
    settings = {env_name(name) for name in Settings.model_fields}
    documented = set(re.findall(r"`(MME_[A-Z0-9_]+)`", (ROOT / "tests" / "README.md").read_text()))
    undocumented = {name: where for name, where in _read_under("tests", "docker").items()
                    if name not in settings and name not in documented}
    assert not undocumented, (
        f"variables read but neither a setting nor listed in tests/README.md: {undocumented}")
