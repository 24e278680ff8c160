"""A snapshot of the server's state: its JSON document and the folder it is saved in.

The document (``GET /_emulator/snapshot`` answers it, ``POST /_emulator/snapshot`` takes it)::

    {"format": "sagemaker-mme-emulator-snapshot", "version": 1, "created": 1718000000.0,
     "control_plane": {"models": [ROW], "endpoint_configs": [ROW], "endpoints": [ROW],
                       "inference_components": [ROW]},      # ROW: {"name", "created", "doc"}
     "alarms": [ALARM],                                      # each as stored, state included
     "autoscaling": {"targets": [TARGET], "policies": [POLICY]},
     "loaded_models": [{"endpoint", "variant", "target_model"}] or null,
     "async_requests": [{"endpoint", "age_s", "received_wall", "doc", "body"}] or absent}

``async_requests`` are the asynchronous requests accepted and not yet answered (waiting or in
flight): each with its age on the emulated clock when saved, the request as InvokeEndpointAsync
gave it, and its inline body (base64; null for an ``InputLocation``).

The folder (``mme snapshot save DIR``, ``mme serve --restore DIR``): ``manifest.json`` (format,
version, created, the files) and one JSON file per part: ``control-plane.json``,
``alarms.json``, ``autoscaling.json``, ``async-requests.json`` when requests are queued and,
saved ``--with-models``, ``loaded-models.json``. It is
written whole into a temporary folder beside it, then renamed into place: a folder that exists
is a complete snapshot. Nothing here imports the server: ``mme snapshot`` uses it too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

FORMAT = "sagemaker-mme-emulator-snapshot"
VERSION = 1
MANIFEST = "manifest.json"
TABLES = ("models", "endpoint_configs", "endpoints", "inference_components")
# Each part of the document and the file that holds it in a folder.
FILES = {"control_plane": "control-plane.json", "alarms": "alarms.json",
         "autoscaling": "autoscaling.json", "loaded_models": "loaded-models.json",
         "async_requests": "async-requests.json"}
ASYNC_REQUEST_KEYS = {"endpoint", "age_s", "received_wall", "doc", "body"}
_HEAD = ("format", "version", "created")


class SnapshotError(ValueError):
    """Not a snapshot this emulator reads; the message says what to fix."""


def document(control_plane: dict[str, list[dict[str, Any]]], alarms: list[dict[str, Any]],
             autoscaling: dict[str, list[dict[str, Any]]],
             loaded_models: list[dict[str, str]] | None,
             async_requests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A snapshot document of the parts given, stamped now (``async_requests`` only when some
    are queued: a snapshot without is read by emulators that know no such part)."""
    doc = {"format": FORMAT, "version": VERSION, "created": time.time(),
           "control_plane": control_plane, "alarms": alarms, "autoscaling": autoscaling,
           "loaded_models": loaded_models}
    if async_requests:
        doc["async_requests"] = async_requests
    return doc


def check(doc: Any) -> dict[str, Any]:
    """``doc`` if it is a snapshot document of this version, else SnapshotError saying why."""
    if not isinstance(doc, dict):
        raise SnapshotError("a snapshot is a JSON object (GET /_emulator/snapshot answers one)")
    if doc.get("format") != FORMAT:
        raise SnapshotError(f'not a snapshot: its "format" is {doc.get("format")!r}, not '
                            f'"{FORMAT}" (GET /_emulator/snapshot or mme snapshot save makes one)')
    if doc.get("version") != VERSION:
        raise SnapshotError(f"a snapshot of format version {doc.get('version')!r}; this emulator "
                            f"reads version {VERSION}: save it again with this emulator")
    unknown = sorted(set(doc) - set(_HEAD) - set(FILES))
    if unknown:
        raise SnapshotError(f"unknown fields {', '.join(unknown)}; a snapshot has "
                            f"{', '.join((*_HEAD, *FILES))}")
    control = _object(doc, "control_plane")
    for table in control:
        if table not in TABLES:
            raise SnapshotError(f'control_plane: unknown table "{table}"; the tables are '
                                f"{', '.join(TABLES)}")
        for row in _list(control, table, f"control_plane.{table}"):
            if not (isinstance(row, dict) and isinstance(row.get("name"), str)
                    and isinstance(row.get("created"), int | float)
                    and isinstance(row.get("doc"), dict)):
                raise SnapshotError(f"control_plane.{table}: each row is "
                                    '{"name": str, "created": number, "doc": object}, not '
                                    f"{json.dumps(row)[:200]}")
    for alarm in _list(doc, "alarms", "alarms"):
        if not isinstance(alarm, dict) or not isinstance(alarm.get("name"), str):
            raise SnapshotError(f"alarms: each is an alarm object with a name, not "
                                f"{json.dumps(alarm)[:200]}")
    scaling = _object(doc, "autoscaling")
    for part in scaling:
        if part not in ("targets", "policies"):
            raise SnapshotError(f'autoscaling: unknown part "{part}"; it has targets, policies')
        if not all(isinstance(item, dict) for item in _list(scaling, part, f"autoscaling.{part}")):
            raise SnapshotError(f"autoscaling.{part}: each is an object")
    loaded = doc.get("loaded_models")
    if loaded is not None:
        for item in _list(doc, "loaded_models", "loaded_models"):
            if not (isinstance(item, dict) and set(item) == {"endpoint", "variant", "target_model"}
                    and all(isinstance(v, str) for v in item.values())):
                raise SnapshotError('loaded_models: each is {"endpoint": str, "variant": str, '
                                    f'"target_model": str}}, not {json.dumps(item)[:200]}')
    for request in _list(doc, "async_requests", "async_requests"):
        if not (isinstance(request, dict) and set(request) == ASYNC_REQUEST_KEYS
                and isinstance(request["endpoint"], str)
                and isinstance(request["age_s"], int | float)
                and isinstance(request["received_wall"], int | float)
                and isinstance(request["doc"], dict)
                and (request["body"] is None or isinstance(request["body"], str))):
            raise SnapshotError('async_requests: each is {"endpoint": str, "age_s": number, '
                                '"received_wall": number, "doc": object, "body": base64 str '
                                f"or null}}, not {json.dumps(request)[:200]}")
    return doc


def _object(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise SnapshotError(f"{key}: an object, not {type(value).__name__}")
    return value


def _list(doc: dict[str, Any], key: str, where: str) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise SnapshotError(f"{where}: a list, not {type(value).__name__}")
    return value


# -- the folder -----------------------------------------------------------------------------------

def is_snapshot_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a manifest of this format (any version)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT


def write_folder(doc: dict[str, Any], folder: Path) -> list[str]:
    """Save ``doc`` (checked) as the folder ``folder``: written whole beside it, then renamed
    into place. A snapshot already there is replaced; any other folder that is not empty, or a
    file, is refused (SnapshotError). Returns the files written."""
    check(doc)
    folder = folder.expanduser()
    if folder.exists() and not folder.is_dir():
        raise SnapshotError(f"{folder} is a file; give a folder for the snapshot")
    if folder.is_dir() and any(folder.iterdir()) and not is_snapshot_folder(folder):
        raise SnapshotError(f"{folder} is a folder that is not a snapshot and not empty; give a "
                            "new folder (or an older snapshot, which is replaced)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    parts = {key: doc[key] for key in FILES if doc.get(key) is not None}
    files = [FILES[key] for key in parts]
    temporary = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp",
                                      dir=folder.parent))
    try:
        for key, value in parts.items():
            _write_json(temporary / FILES[key], value)
        _write_json(temporary / MANIFEST, {**{k: doc[k] for k in _HEAD}, "files": files})
        _replace(temporary, folder)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return [MANIFEST, *files]


def _write_json(path: Path, value: Any) -> None:
    with path.open("w") as out:
        json.dump(value, out, indent=1, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())


def _replace(temporary: Path, folder: Path) -> None:
    """``temporary`` renamed to ``folder``; an older snapshot (or an empty folder) there is
    moved aside first and removed once the new one is in place."""
    if not folder.exists():
        os.rename(temporary, folder)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=folder.parent))
    os.rename(folder, old / "snapshot")
    try:
        os.rename(temporary, folder)
    except OSError:
        os.rename(old / "snapshot", folder)  # the older snapshot stays as it was
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def read_folder(folder: Path) -> dict[str, Any]:
    """The document saved in ``folder``, checked; SnapshotError saying what is wrong."""
    folder = folder.expanduser()
    if not folder.is_dir():
        raise SnapshotError(f"{folder}: no such folder (mme snapshot save DIR writes one)")
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise SnapshotError(f"{folder} is not a snapshot: it has no {MANIFEST} (mme snapshot "
                            "save DIR writes one)") from None
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{folder / MANIFEST} is unreadable ({exc})") from None
    if not isinstance(manifest, dict):
        raise SnapshotError(f"{folder / MANIFEST} is not a snapshot's manifest")
    doc: dict[str, Any] = {k: manifest.get(k) for k in _HEAD}
    check(doc)  # the format and version first: a newer snapshot's files are not read
    names = {name: key for key, name in FILES.items()}
    listed = manifest.get("files")
    if not isinstance(listed, list) or not all(name in names for name in listed):
        raise SnapshotError(f"{folder / MANIFEST}: files must list some of "
                            f"{', '.join(FILES.values())}")
    for name in listed:
        try:
            doc[names[name]] = json.loads((folder / name).read_text())
        except (OSError, ValueError) as exc:
            raise SnapshotError(f"{folder / name} is missing or unreadable ({exc}); the "
                                "snapshot is incomplete: save it again") from None
    doc.setdefault("loaded_models", None)
    return check(doc)
