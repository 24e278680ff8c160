"""Principals: an AWS shared-credentials file (``~/.aws/credentials`` format) plus their policies.

Each ``[profile]`` section is one IAM user, ``arn:aws:iam::<account>:user/<profile>``, whose
identity policy is ``<policies>/<profile>.json`` (one policy document, or a JSON list of them, as
a user may have several attached). Anything wrong is refused at start with the file and the reason.
"""

from __future__ import annotations

import configparser
import json
from dataclasses import dataclass, field
from pathlib import Path

from emulator.auth.policy import Policy, PolicyError, parse_policy

# [U] IAM refuses a policy over its size quota (6,144 characters for a managed policy) long
#     before it could nest this deep; the emulator reads the file, so it says what is wrong.
POLICY_TOO_DEEP = ("JSON nested too deeply to be a policy (a policy document nests a few "
                   "levels: Statement, Condition, operator, key, values)")


class AuthConfigError(Exception):
    """A credentials or policy file that cannot be used; ``mme serve`` exits 2 with this text."""

    def __init__(self, path: Path | None, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path is not None else reason)
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Principal:
    name: str
    access_key: str
    secret_key: str
    arn: str
    session_token: str | None = None
    policies: tuple[Policy, ...] = field(default=())


def load_credentials(path: Path, account: str) -> dict[str, Principal]:
    """Access key id -> principal (without policies yet)."""
    if not path.is_file():
        raise AuthConfigError(path, "no such credentials file")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(), source=str(path))
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise AuthConfigError(path, f"not a shared-credentials file: {exc}") from exc
    principals: dict[str, Principal] = {}
    for name in parser.sections():
        section = parser[name]
        missing = [k for k in ("aws_access_key_id", "aws_secret_access_key")
                   if not section.get(k, "").strip()]
        if missing:
            raise AuthConfigError(path, f"profile [{name}] has no {' and no '.join(missing)}")
        if name.startswith("profile "):  # that prefix belongs to ~/.aws/config, not credentials
            raise AuthConfigError(path, f"section [{name}]: write [{name[8:]}] in a credentials "
                                        "file ('profile ' is the ~/.aws/config syntax)")
        if "/" in name or not name.strip():
            raise AuthConfigError(path, f"profile [{name}] is not a valid IAM user name")
        key = section["aws_access_key_id"].strip()
        if key in principals:
            raise AuthConfigError(path, f"profiles [{principals[key].name}] and [{name}] share "
                                        f"the access key id {key}")
        principals[key] = Principal(
            name=name, access_key=key, secret_key=section["aws_secret_access_key"].strip(),
            arn=f"arn:aws:iam::{account}:user/{name}",
            session_token=(section.get("aws_session_token") or "").strip() or None,
        )
    if not principals:
        raise AuthConfigError(path, "no [profile] section with aws_access_key_id and "
                                    "aws_secret_access_key")
    return principals


def load_policies(folder: Path, principals: dict[str, Principal]) -> dict[str, Principal]:
    """Attach ``<folder>/<profile>.json`` to each principal; a stray policy file is refused."""
    if not folder.is_dir():
        raise AuthConfigError(folder, "no such policies folder (one <profile>.json per profile)")
    by_name = {p.name: p for p in principals.values()}
    attached: dict[str, tuple[Policy, ...]] = {}
    for file in sorted(folder.glob("*.json")):
        if file.stem not in by_name:
            raise AuthConfigError(file, f"no profile [{file.stem}] in the credentials file "
                                        f"(profiles: {', '.join(sorted(by_name))})")
        try:
            document = json.loads(file.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise AuthConfigError(file, f"not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise AuthConfigError(file, POLICY_TOO_DEEP) from exc
        documents = document if isinstance(document, list) else [document]
        try:
            attached[file.stem] = tuple(parse_policy(d) for d in documents)
        except PolicyError as exc:
            raise AuthConfigError(file, str(exc)) from exc
        except RecursionError as exc:  # parseable, yet too deep to walk or to quote back
            raise AuthConfigError(file, POLICY_TOO_DEEP) from exc
    return {key: Principal(p.name, p.access_key, p.secret_key, p.arn, p.session_token,
                           attached.get(p.name, ()))
            for key, p in principals.items()}


def load_principals(credentials: Path, policies: Path, account: str) -> dict[str, Principal]:
    return load_policies(policies, load_credentials(credentials, account))
