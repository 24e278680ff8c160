"""What later CI steps need to reach the emulator with unmodified AWS code, and how they get it.

botocore (boto3, the SageMaker Python SDK, the AWS CLI) reads a service's endpoint from
``AWS_ENDPOINT_URL_<SERVICE ID>`` (the service id upper-cased, spaces as ``_``), so code with
no ``endpoint_url=`` reaches the emulator for the four APIs it serves. A region is set (the
emulator's), and dummy credentials unless the job has its own or the emulator checks
signatures (``--auth sigv4``: clients then need one of its ``--credentials`` profiles).

On a GitHub runner (``$GITHUB_ENV``/``$GITHUB_OUTPUT`` set) the variables are appended to
``$GITHUB_ENV`` (every later step of the job gets them) and ``endpoint-url`` to
``$GITHUB_OUTPUT``; ``export`` lines are printed everywhere, for ``eval "$(mme ci up ...)"``.
"""

from __future__ import annotations

import configparser
import os
import shlex
import uuid
from collections.abc import Mapping
from pathlib import Path

from mme.ci.state import FORMER_STATE_ENV, STATE_ENV

# botocore's service ids of the APIs the emulator serves, as their endpoint variables.
ENDPOINT_VARIABLES = (
    "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME",
    "AWS_ENDPOINT_URL_SAGEMAKER",
    "AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING",
    "AWS_ENDPOINT_URL_CLOUDWATCH",
)
URL_VARIABLE = "MME_CI_URL"  # the emulator's URL (e.g. for pytest --mme-url "$MME_CI_URL")
DUMMY_KEY = "testing"
# Variables by which a job says where its credentials come from: present, we add none.
CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def region_for(flag_or_mme: str | None, env: Mapping[str, str]) -> str:
    """The region: ``--region``/``MME_REGION``, else the job's own (``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, so clients and emulator agree), else us-east-1."""
    return flag_or_mme or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"


def has_credentials(env: Mapping[str, str]) -> bool:
    """Whether the job already has AWS credentials configured (variables, or a default profile
    in the shared files). [U] An instance role is not seen: finding it takes a network call to
    the metadata service; such a runner sets AWS_PROFILE or keys to keep its own."""
    if any(env.get(name) for name in CREDENTIAL_VARIABLES):
        return True
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    files = (env.get("AWS_SHARED_CREDENTIALS_FILE") or str(home / ".aws" / "credentials"),
             env.get("AWS_CONFIG_FILE") or str(home / ".aws" / "config"))
    for name in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(name)
        except configparser.Error:
            continue
        for section in ("default", "profile default"):
            if parser.has_option(section, "aws_access_key_id") or \
                    parser.has_option(section, "credential_process") or \
                    parser.has_option(section, "sso_session") or \
                    parser.has_option(section, "role_arn"):
                return True
    return False


def client_variables(url: str, region: str, auth: str, state_dir: Path,
                     env: Mapping[str, str]) -> dict[str, str]:
    """Every variable a later step gets, in a stable order."""
    variables = {name: url for name in ENDPOINT_VARIABLES}
    variables.update({"AWS_REGION": region, "AWS_DEFAULT_REGION": region})
    if auth == "off" and not has_credentials(env):
        variables.update({"AWS_ACCESS_KEY_ID": DUMMY_KEY, "AWS_SECRET_ACCESS_KEY": DUMMY_KEY})
    variables.update({URL_VARIABLE: url, STATE_ENV: str(state_dir),
                      FORMER_STATE_ENV: str(state_dir)})
    return variables


def export_lines(variables: Mapping[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items())


def github_lines(variables: Mapping[str, str]) -> str:
    """``$GITHUB_ENV``/``$GITHUB_OUTPUT`` syntax; a value with a newline gets a delimiter."""
    lines = []
    for name, value in variables.items():
        if "\n" in value or "\r" in value:
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
            lines.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
        else:
            lines.append(f"{name}={value}\n")
    return "".join(lines)


def append_github(env: Mapping[str, str], variables: Mapping[str, str], url: str,
                  state_dir: Path) -> list[str]:
    """Append to the runner's files when they are set; the names of the files written."""
    written = []
    if env.get("GITHUB_ENV"):
        with open(env["GITHUB_ENV"], "a", encoding="utf-8") as out:
            out.write(github_lines(variables))
        written.append("GITHUB_ENV")
    if env.get("GITHUB_OUTPUT"):
        with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write(github_lines({"endpoint-url": url, "state-dir": str(state_dir)}))
        written.append("GITHUB_OUTPUT")
    return written
