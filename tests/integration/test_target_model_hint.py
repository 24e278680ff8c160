"""A TargetModel the store does not hold: AWS's message as AWS words it (it calls the store a
bucket, whatever it is), and beside it, in a header of the emulator's own (``X-Mme-Hint``),
what a local model folder holds instead and the closest name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.client_support import runtime_client
from tests.support import package, write_scale_model

AWS_WORDS = ("Failed to download model data(bucket: {location}, key: {key}). Please ensure that "
             "there is an object located at the URL and that the role passed to CreateModel has "
             "permissions to download the model.")


def _refused(url: str, target: str) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        runtime_client(url).invoke_endpoint(EndpointName="local", TargetModel=target,
                                            ContentType="application/json", Body=b"{}")
    response: dict[str, Any] = raised.value.response
    return response


def test_a_typo_keeps_aws_words_and_the_hint_names_what_the_folder_holds(
        start_emulator: Any, store: Path, tmp_path: Path) -> None:
    for name in ("text_embedding", "image_classifier"):
        package(write_scale_model(tmp_path / "w", name), store / f"{name}.tar.gz", "folder")
    (store / "team-a").mkdir()
    package(write_scale_model(tmp_path / "w", "scale"), store / "team-a" / "scale.tar.gz",
            "folder")
    server = start_emulator(model_data=str(store))

    response = _refused(server.url, "text_embeding.tar.gz")
    assert response["Error"]["Code"] == "ValidationError"
    assert response["Error"]["Message"] == AWS_WORDS.format(location=store.resolve(),
                                                            key="text_embeding.tar.gz")
    hint = response["ResponseMetadata"]["HTTPHeaders"]["x-mme-hint"]
    assert hint == (f"no file text_embeding.tar.gz in the model folder {store.resolve()} (the "
                    "'bucket' of the message; TargetModel is a file's path in it); did you mean "
                    "text_embedding.tar.gz?; it holds 3: image_classifier.tar.gz, "
                    "team-a/scale.tar.gz, text_embedding.tar.gz")

    far = _refused(server.url, "resnet50")["ResponseMetadata"]["HTTPHeaders"]
    assert "did you mean" not in far["x-mme-hint"]
    assert far["x-mme-hint"].endswith("it holds 3: image_classifier.tar.gz, team-a/scale.tar.gz, "
                                      "text_embedding.tar.gz")


def test_a_hint_in_a_header_is_printable_ascii(start_emulator: Any, store: Path,
                                                tmp_path: Path) -> None:
    package(write_scale_model(tmp_path / "w", "scale"), store / "modèle.tar.gz", "folder")
    server = start_emulator(model_data=str(store))
    hint = _refused(server.url, "modele.tar.gz")["ResponseMetadata"]["HTTPHeaders"]["x-mme-hint"]
    assert hint.endswith("did you mean mod\\xe8le.tar.gz?; it holds 1: mod\\xe8le.tar.gz")
    assert all(" " <= c <= "~" for c in hint)
