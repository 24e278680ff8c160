"""``mme lint``'s reports: text for people, JSON, SARIF 2.1.0 (GitHub code scanning annotates a
pull request with it) and JUnit XML (CI test reports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

from harness.lint import Report
from harness.lint.findings import RULES, Finding

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FORMATS = ("text", "json", "sarif", "junit")


def render(report: Report, form: str, skew: list[str]) -> str:
    return {"text": text, "json": as_json, "sarif": sarif, "junit": junit}[form](report, skew)


def text(report: Report, skew: list[str]) -> str:
    lines = []
    for finding in report.findings:
        lines.append(f"{_where(finding)}: {finding.level} {finding.rule.id} {finding.rule.name}: "
                     f"{finding.message}")
        lines.append(f"  SageMaker: {finding.rule.sagemaker}")
        lines.append(f"  fix: {finding.rule.fix}")
    lines += [f"could not read: {message}" for message in report.unreadable]
    counted = (f"{len(report.findings)} finding(s)" if report.findings else "no findings")
    lines.append(f"mme lint: {len(report.sources)} source(s), {counted}, against "
                 f"{report.release.image} (Triton {report.release.triton})"
                 + (f" on {report.instance_type}" if report.instance_type else ""))
    return "\n".join(lines) + "\n"


def _where(finding: Finding) -> str:
    line = f":{finding.line}" if finding.line else ""
    if Path(finding.source).is_dir():
        return f"{file_path(finding)}{line}"
    return f"{finding.where()}"


def _finding(finding: Finding) -> dict[str, Any]:
    return {"rule": finding.rule.id, "name": finding.rule.name, "severity": finding.level,
            "source": finding.source, "file": finding.file, "line": finding.line,
            "message": finding.message, "sagemaker": finding.rule.sagemaker,
            "fix": finding.rule.fix}


def as_json(report: Report, skew: list[str]) -> str:
    return json.dumps({
        "image": report.release.image, "triton": report.release.triton,
        "instance_type": report.instance_type, "sources": report.sources,
        "findings": [_finding(f) for f in report.findings], "unreadable": report.unreadable,
        "differences_from_embedded_triton": skew, "exit_code": report.exit_code,
    }, indent=2) + "\n"


def _uri(finding: Finding) -> str:
    return quote(file_path(finding).as_posix())


def file_path(finding: Finding) -> Path:
    """The finding's file on disk (a folder source's file; a tarball source: the tarball)."""
    source = Path(finding.source)
    if not (finding.file and source.is_dir()):
        return source
    inside = source / finding.file
    # a lone model folder: its files are named from its parent (m/config.pbtxt)
    return inside if inside.exists() else source.parent / finding.file


def sarif(report: Report, skew: list[str]) -> str:
    results = []
    for finding in report.findings:
        location: dict[str, Any] = {"artifactLocation": {"uri": _uri(finding)}}
        if finding.line and Path(finding.source).is_dir():
            location["region"] = {"startLine": finding.line}
        results.append({
            "ruleId": finding.rule.id,
            "ruleIndex": list(RULES).index(finding.rule.id),
            "level": finding.level,
            "message": {"text": f"{finding.message}. SageMaker: {finding.rule.sagemaker}. "
                                f"Fix: {finding.rule.fix}"},
            "locations": [{"physicalLocation": location}],
        })
    notifications = [{"level": "error", "message": {"text": m}} for m in report.unreadable]
    notifications += [{"level": "note", "message": {"text": m}} for m in skew]
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "mme lint",
            "rules": [{
                "id": rule.id, "name": rule.name,
                "shortDescription": {"text": rule.sagemaker},
                "help": {"text": rule.fix},
                "defaultConfiguration": {"level": rule.severity},
            } for rule in RULES.values()],
        }},
        "invocations": [{"executionSuccessful": not report.unreadable,
                         "toolExecutionNotifications": notifications}],
        "results": results,
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]},
                      indent=2) + "\n"


def junit(report: Report, skew: list[str]) -> str:
    suites = ElementTree.Element("testsuites", name="mme lint")
    suite = ElementTree.SubElement(suites, "testsuite", name=f"mme lint ({report.release.image})")
    by_source: dict[str, list[Finding]] = {s: [] for s in report.sources}
    for finding in report.findings:
        by_source.setdefault(finding.source, []).append(finding)
    cases = failures = errors = 0
    for source, found in by_source.items():
        if not found:
            ElementTree.SubElement(suite, "testcase", classname="mme lint", name=source)
            cases += 1
        for finding in found:
            case = ElementTree.SubElement(
                suite, "testcase", classname=source,
                name=f"{finding.rule.id} {finding.rule.name} {finding.file}".strip())
            failure = ElementTree.SubElement(case, "failure", type=finding.level,
                                             message=finding.message)
            failure.text = f"SageMaker: {finding.rule.sagemaker}\nfix: {finding.rule.fix}"
            cases += 1
            failures += 1
    for message in report.unreadable:
        case = ElementTree.SubElement(suite, "testcase", classname="mme lint", name="read")
        ElementTree.SubElement(case, "error", message=message)
        cases += 1
        errors += 1
    if skew:
        ElementTree.SubElement(suite, "system-out").text = "\n".join(skew)
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
