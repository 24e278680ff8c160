"""The SAGEMAKER_* -> tritonserver translation, one by one, as SageMaker's Triton serve does it."""

from __future__ import annotations

import pytest

from emulator.triton.sagemaker_env import (
    FRONTEND_ONLY,
    SageMakerEnvironmentError,
    TritonArgs,
    triton_args_from_environment,
)

DEFAULT_ARGS = [
    "--model-namespacing=true",
    "--allow-grpc=false",
    "--allow-metrics=false",
    "--log-verbose=true",
    "--backend-config=python,shm-default-byte-size=16777216",
    "--backend-config=python,shm-growth-byte-size=1048576",
]


def translate(**env: str) -> TritonArgs:
    return triton_args_from_environment(env)


def test_serve_defaults_apply_to_an_empty_environment() -> None:
    result = translate()
    assert result.args == DEFAULT_ARGS
    assert result.passthrough_env == {}
    assert result.ping_mode == "live"
    assert result.inference_type == "infer"
    assert result.default_model_name is None
    assert result.ignored == {}


@pytest.mark.parametrize(
    ("variable", "value", "replaces", "flag"),
    [
        ("SAGEMAKER_TRITON_DISABLE_MODEL_NAMESPACING", "false",
         "--model-namespacing=true", "--model-namespacing=false"),
        ("SAGEMAKER_TRITON_ALLOW_GRPC", "true", "--allow-grpc=false", "--allow-grpc=true"),
        ("SAGEMAKER_TRITON_ALLOW_METRICS", "true", "--allow-metrics=false", "--allow-metrics=true"),
        ("SAGEMAKER_TRITON_LOG_VERBOSE", "0", "--log-verbose=true", "--log-verbose=0"),
        ("SAGEMAKER_TRITON_SHM_DEFAULT_BYTE_SIZE", "33554432",
         "--backend-config=python,shm-default-byte-size=16777216",
         "--backend-config=python,shm-default-byte-size=33554432"),
        ("SAGEMAKER_TRITON_SHM_GROWTH_BYTE_SIZE", "2097152",
         "--backend-config=python,shm-growth-byte-size=1048576",
         "--backend-config=python,shm-growth-byte-size=2097152"),
    ],
)
def test_variables_with_a_default_replace_it(variable: str, value: str, replaces: str,
                                             flag: str) -> None:
    args = translate(**{variable: value}).args
    assert flag in args
    assert replaces not in args
    assert len(args) == len(DEFAULT_ARGS)
    # Same position as the default it replaces: serve's order is kept.
    assert args.index(flag) == DEFAULT_ARGS.index(replaces)


@pytest.mark.parametrize(
    ("variable", "value", "flag"),
    [
        ("SAGEMAKER_TRITON_GRPC_PORT", "8101", "--grpc-port=8101"),
        ("SAGEMAKER_TRITON_METRICS_PORT", "8102", "--metrics-port=8102"),
        ("SAGEMAKER_TRITON_BUFFER_MANAGER_THREAD_COUNT", "4", "--buffer-manager-thread-count=4"),
        ("SAGEMAKER_TRITON_LOG_INFO", "false", "--log-info=false"),
        ("SAGEMAKER_TRITON_LOG_WARNING", "false", "--log-warning=false"),
        ("SAGEMAKER_TRITON_LOG_ERROR", "true", "--log-error=true"),
        ("SAGEMAKER_TRITON_TENSORFLOW_VERSION", "2", "--backend-config=tensorflow,version=2"),
    ],
)
def test_optional_variables_add_their_flag(variable: str, value: str, flag: str) -> None:
    result = translate(**{variable: value})
    assert set(result.args) == {*DEFAULT_ARGS, flag}
    assert len(result.args) == len(DEFAULT_ARGS) + 1
    assert result.passthrough_env == {variable: value}
    assert result.ignored == {}


def test_an_empty_value_counts_as_unset_like_bash_test_n() -> None:
    assert translate(SAGEMAKER_TRITON_LOG_VERBOSE="", SAGEMAKER_TRITON_GRPC_PORT="").args == (
        DEFAULT_ARGS
    )


@pytest.mark.parametrize(("variable", "flag"), sorted(FRONTEND_ONLY.items()))
def test_frontend_only_variables_are_reported_not_applied(variable: str, flag: str) -> None:
    result = translate(**{variable: "8080"})
    assert result.args == DEFAULT_ARGS
    assert variable in result.ignored
    assert "SageMaker frontend" in result.ignored[variable]
    # ...but still in the container's environment, as on SageMaker.
    assert result.passthrough_env == {variable: "8080"}


@pytest.mark.parametrize(("variable", "flag"), sorted(FRONTEND_ONLY.items()))
def test_frontend_only_variables_apply_when_the_frontend_is_used(variable: str, flag: str) -> None:
    result = triton_args_from_environment({variable: "8080"}, sagemaker_frontend=True)
    assert f"{flag}=8080" in result.args
    assert result.ignored == {}


def test_model_load_gpu_limit_gives_one_flag_per_gpu() -> None:
    env = {"SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT": "0.8"}
    result = triton_args_from_environment(env, gpu_count=2)
    tail = result.args[len(DEFAULT_ARGS):]
    assert tail == ["--model-load-gpu-limit", "0:0.8", "--model-load-gpu-limit", "1:0.8"]


def test_model_load_gpu_limit_without_gpu_adds_nothing_and_says_so() -> None:
    result = translate(SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT="0.8")
    assert result.args == DEFAULT_ARGS
    assert "SAGEMAKER_TRITON_MODEL_LOAD_GPU_LIMIT" in result.ignored


def test_additional_args_are_appended_last_and_split_like_bash() -> None:
    result = translate(
        SAGEMAKER_TRITON_ADDITIONAL_ARGS="--strict-readiness=false  --exit-timeout-secs=5",
        SAGEMAKER_TRITON_LOG_ERROR="true",
    )
    assert result.args[-2:] == ["--strict-readiness=false", "--exit-timeout-secs=5"]
    assert "--log-error=true" in result.args


def test_values_with_spaces_split_into_words_as_in_serve() -> None:
    # serve expands $SAGEMAKER_ARGS unquoted: a space in a value starts a new argument.
    result = translate(SAGEMAKER_TRITON_LOG_INFO="false --log-format=ISO8601")
    at = result.args.index("--log-info=false")
    assert result.args[at + 1] == "--log-format=ISO8601"
    assert len(result.args) == len(DEFAULT_ARGS) + 2


def test_ping_mode_is_live_for_mme_unless_overridden() -> None:
    assert translate().ping_mode == "live"
    overridden = translate(SAGEMAKER_TRITON_OVERRIDE_PING_MODE="ready")
    assert overridden.ping_mode == "ready"
    assert overridden.args == DEFAULT_ARGS
    assert "SAGEMAKER_TRITON_OVERRIDE_PING_MODE" in overridden.ignored


def test_single_model_endpoints_ping_ready_and_ignore_the_override() -> None:
    result = triton_args_from_environment(
        {"SAGEMAKER_TRITON_OVERRIDE_PING_MODE": "live"}, multi_model=False
    )
    assert result.ping_mode == "ready"
    assert result.ignored["SAGEMAKER_TRITON_OVERRIDE_PING_MODE"] == "multi-model endpoints only"


@pytest.mark.parametrize("value", ["infer", "generate", "generate_stream"])
def test_valid_inference_types_are_kept(value: str) -> None:
    result = translate(SAGEMAKER_TRITON_INFERENCE_TYPE=value)
    assert result.inference_type == value
    assert result.args == DEFAULT_ARGS


@pytest.mark.parametrize("value", ["Infer", "predict", "generate-stream"])
def test_an_invalid_inference_type_fails_like_serve(value: str) -> None:
    with pytest.raises(SageMakerEnvironmentError, match="SAGEMAKER_TRITON_INFERENCE_TYPE"):
        translate(SAGEMAKER_TRITON_INFERENCE_TYPE=value)


def test_default_model_name_is_for_single_model_endpoints_only() -> None:
    sme = triton_args_from_environment(
        {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "ensemble"}, multi_model=False
    )
    assert sme.default_model_name == "ensemble"
    mme = translate(SAGEMAKER_TRITON_DEFAULT_MODEL_NAME="ensemble")
    assert mme.default_model_name is None
    assert "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME" in mme.ignored


def test_every_variable_reaches_the_environment_unchanged() -> None:
    env = {"SAGEMAKER_TRITON_LOG_INFO": "false", "MY_MODEL_SETTING": "42", "SAGEMAKER_REGION": "x"}
    assert translate(**env).passthrough_env == env


def test_the_input_mapping_is_not_modified() -> None:
    env = {"SAGEMAKER_TRITON_LOG_INFO": "false"}
    result = triton_args_from_environment(env)
    result.passthrough_env["OTHER"] = "1"
    assert env == {"SAGEMAKER_TRITON_LOG_INFO": "false"}
