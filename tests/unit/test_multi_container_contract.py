"""Multi-container endpoints without a container: CreateModel's rules, TargetContainerHostname's
three ValidationErrors, the --image mappings, and the spec surviving the control plane's state."""

from __future__ import annotations

import dataclasses
import json

import pytest

from emulator.containers.images import ImageMap, is_triton_image, names_triton
from emulator.contract import runtime
from emulator.contract.control_plane import ControlPlaneError, parse_request
from emulator.contract.runtime_errors import ValidationError
from emulator.hosting.multi_container import check_container_hostname
from emulator.hosting.spec import DIRECT, SERIAL, ContainerSpec, EndpointSpec, VariantSpec

ROLE = "arn:aws:iam::123456789012:role/x"
SKLEARN = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
TRITON = "785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.09-py3"


def create_model(**params: object) -> None:
    body = {"ModelName": "mce", "ExecutionRoleArn": ROLE, **params}
    parse_request("SageMaker.CreateModel", json.dumps(body).encode())


def refused(**params: object) -> str:
    with pytest.raises(ControlPlaneError) as excinfo:
        create_model(**params)
    assert excinfo.value.code == "ValidationException"
    return excinfo.value.message


def container(hostname: str | None = None, **extra: object) -> dict[str, object]:
    found: dict[str, object] = {"Image": SKLEARN, "ModelDataUrl": "s3://b/m.tar.gz", **extra}
    if hostname:
        found["ContainerHostname"] = hostname
    return found


def test_the_documented_example_is_accepted() -> None:
    create_model(Containers=[container("englishModel"), container("germanModel", Image=TRITON)],
                 InferenceExecutionConfig={"Mode": "Direct"})
    create_model(Containers=[container(), container()])  # Serial by default: no hostnames needed


def test_sixteen_containers_are_one_too_many() -> None:
    message = refused(Containers=[container(f"c{i}") for i in range(16)])
    assert "at 'containers' failed to satisfy constraint: Member must have length less than " \
           "or equal to 15" in message
    create_model(Containers=[container(f"c{i}") for i in range(15)])


def test_duplicate_hostnames_are_refused_in_either_mode() -> None:
    for mode in ("Serial", "Direct"):
        message = refused(Containers=[container("same"), container("same")],
                          InferenceExecutionConfig={"Mode": mode})
        assert "ContainerHostname same is used by more than one container" in message


def test_direct_needs_a_hostname_on_every_container() -> None:
    message = refused(Containers=[container("a"), container()],
                      InferenceExecutionConfig={"Mode": "Direct"})
    assert "ContainerHostname must be specified for every container in Direct mode." in message


def test_a_multi_model_container_cannot_join_a_pipeline() -> None:
    mme = {"Mode": "MultiModel", "ModelDataUrl": "s3://b/prefix/"}
    message = refused(Containers=[container(**mme), container(**mme)])
    # SageMaker's own message (observed).
    assert "More than one container in MultiModel mode is not supported with inference " \
           "pipeline." in message
    assert "cannot be part of a multi-container model" in refused(
        Containers=[container(), container(**mme)])
    create_model(PrimaryContainer=container(**mme))  # alone, it is a multi-model endpoint


def test_an_unknown_inference_execution_mode_is_refused() -> None:
    assert "Member must satisfy enum value set: [Serial, Direct]" in refused(
        Containers=[container("a"), container("b")], InferenceExecutionConfig={"Mode": "Both"})


def variant(mode: str | None, *hostnames: str | None) -> VariantSpec:
    specs = [ContainerSpec("s3://b/m.tar.gz", mode="SingleModel", hostname=h) for h in hostnames]
    return VariantSpec("AllTraffic", specs[0], more_containers=tuple(specs[1:]),
                       execution_mode=mode)


def request(hostname: str | None) -> runtime.InvokeRequest:
    headers = {"content-type": "text/csv"}
    if hostname is not None:
        headers["x-amzn-sagemaker-target-container-hostname"] = hostname
    return runtime.parse_invoke("mce", headers, b"1,2,3", 6 << 20, "rid")


def test_the_three_validation_errors_of_target_container_hostname() -> None:
    direct = variant(DIRECT, "englishModel", "germanModel")
    check_container_hostname(direct, request("germanModel"), "mce")  # the documented call
    with pytest.raises(ValidationError, match="does not exist in endpoint mce"):
        check_container_hostname(direct, request("frenchModel"), "mce")
    with pytest.raises(ValidationError, match="configured for direct invocation: "
                                                     "specify TargetContainerHostname"):
        check_container_hostname(direct, request(None), "mce")
    serial = variant(SERIAL, "englishModel", "germanModel")
    with pytest.raises(ValidationError, match="not configured for direct invocation"):
        check_container_hostname(serial, request("englishModel"), "mce")
    single = variant(None, None)  # a single-container endpoint is not Direct either
    with pytest.raises(ValidationError, match="not configured for direct invocation"):
        check_container_hostname(single, request("primary"), "mce")
    check_container_hostname(serial, request(None), "mce")
    check_container_hostname(single, request(None), "mce")


def test_a_malformed_hostname_header_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="targetContainerHostname"):
        request("not a hostname")
    with pytest.raises(ValidationError, match="targetContainerHostname"):
        request("a" * 64)


def test_a_multi_container_spec_survives_the_state_round_trip() -> None:
    spec = EndpointSpec("mce", (dataclasses.replace(variant(DIRECT, "englishModel", "germanModel"),
                                                    startup_timeout_s=90.0),))
    again = EndpointSpec.from_doc(json.loads(json.dumps(spec.to_doc())))
    assert again == spec
    assert [c.hostname for c in again.variants[0].containers] == ["englishModel", "germanModel"]
    assert again.variants[0].is_direct and again.variants[0].is_multi_container


def test_image_mappings() -> None:
    images = ImageMap.parse([f"{SKLEARN}=mme-sklearn-serve:test",
                             "785573368785.dkr.ecr.us-east-1.amazonaws.com/"
                             "sagemaker-tritonserver=mme-triton-cpu:test"])
    assert images.resolve(SKLEARN) == "mme-sklearn-serve:test"
    assert images.resolve(TRITON) == "mme-triton-cpu:test"  # a key without a tag: every tag
    assert images.resolve("other:1") == "other:1"  # unmapped: run if the engine has it
    legacy = ImageMap.parse("mme-triton-cpu:test")  # the original flag: the Triton image
    assert legacy.resolve(TRITON) == legacy.resolve(None) == "mme-triton-cpu:test"
    assert legacy.resolve(SKLEARN) == SKLEARN  # never runs a scikit-learn model as Triton
    assert ImageMap.parse("a=b, c=d").mappings == {"a": "b", "c": "d"}  # MME_IMAGE
    with pytest.raises(ValueError, match="second image without a mapping"):
        ImageMap.parse(["x", "y"])
    with pytest.raises(ValueError, match="expected PRODUCTION_URI=LOCAL_IMAGE"):
        ImageMap.parse(["=b"])


def test_which_images_run_as_triton() -> None:
    assert names_triton(TRITON) and names_triton("nvcr.io/nvidia/tritonserver:24.08-py3")
    assert names_triton(None) and not names_triton(SKLEARN)
    assert is_triton_image(SKLEARN, "mme-triton-cpu:test",
                           {"com.sagemaker-mme-emulator.shims-dir": "/opt/tritonserver/backends"})
    assert not is_triton_image(TRITON, "mme-sklearn-serve:test",
                               {"com.sagemaker-mme-emulator.image": "sklearn-serve"})
