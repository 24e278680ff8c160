"""``mme gpu-check``: the GPU path end to end, on a machine with an NVIDIA GPU, in one command.

It serves models on the embedded Triton as an endpoint on a GPU instance type (``ml.g5.xlarge``
unless told otherwise) and checks, through unmodified boto3 and the emulator's own pages:

- a ``KIND_GPU`` TorchScript model runs on CUDA through the pytorch shim (the shim says which
  device in Triton's log, and its process holds GPU memory), with the same answers as its
  ``KIND_CPU`` twin;
- GPU memory: each model's measured GPU memory (NVML) counts against the instance's GPU
  budget; a model that does not fit beside another evicts it; one model alone larger than the
  budget gets SageMaker's 507 ModelError;
- GPUUtilization and GPUMemoryUtilization of the instance in CloudWatch
  (``get_metric_statistics``, unit Percent) and on ``/metrics``;
- the time of a cold load and of a warm call on the GPU against the same model on the CPU,
  printed as ratios.

Each check prints one PASS/FAIL line and the run goes on after a failure; the exit code is 1 when
any check failed, 2 when there is no GPU. ``--report FILE`` writes every figure as JSON.
``docker/gpu-check.sh`` runs this and the GPU tests (``pytest -m gpu``) in one command.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3
WIDTH = 1024  # the MLP's features: 4 layers of 1024 x 1024 float32 weights, 16 MiB in all
LAYERS = 4
BATCH = 64
WARM_CALLS = 30
BURN_WIDTH = 2048  # the burner: 200 products of 2048 x 2048 matrices a call (3.4 TFLOP)
BURN_STEPS = 200
ENDPOINT = "local"
VARIANT = "AllTraffic"

# A Python-backend model that holds ``gpu_bytes`` of GPU memory from its load to its unload, as
# a model's weights would: the GPU budget's checks need models of known GPU size, and files of
# that size would only slow the check down.
GPU_HOLDER_PY = '''
import json
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        size = int(config["parameters"]["gpu_bytes"]["string_value"])
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        self.held = torch.ones(size // 4, dtype=torch.float32, device=self.device)
        torch.cuda.synchronize(self.device)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = (torch.from_numpy(x).to(self.device) * self.held[0]).cpu().numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses

    def finalize(self):
        self.held = None
        torch.cuda.empty_cache()
'''


@dataclass
class Report:
    """Every check's outcome and every figure, printed as it comes and written as JSON."""

    checks: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append({"check": name, "ok": ok, "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return ok

    def figure(self, name: str, value: Any) -> None:
        self.figures[name] = value

    @property
    def failed(self) -> list[str]:
        return [c["check"] for c in self.checks if not c["ok"]]


@contextmanager
def step(report: Report, name: str) -> Iterator[None]:
    """A check that raised is a failed check with the exception's words, and the run goes on."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - reported as this check's failure, run goes on
        report.check(name, False, f"{type(exc).__name__}: {exc}")


def write_model_config(folder: Path, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(text)


def write_mlp(repo: Path, name: str, kind: str) -> None:
    """A TorchScript MLP (seeded, so every build has the same weights) for the pytorch shim."""
    import torch

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for index in range(LAYERS):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if index < LAYERS - 1:
            layers.append(torch.nn.ReLU())
    module = torch.nn.Sequential(*layers).eval()
    write_torchscript(repo / name, module, WIDTH, BATCH, kind)


def write_torchscript(folder: Path, module: Any, width: int, max_batch_size: int,
                      kind: str) -> None:
    """``module`` traced into ``folder/1/model.pt`` with a config for the pytorch shim: one
    FP32 input ``INPUT__0`` and output ``OUTPUT__0`` of ``width`` features."""
    import torch

    (folder / "1").mkdir(parents=True, exist_ok=True)
    if not isinstance(module, torch.jit.ScriptModule):
        with torch.no_grad():
            module = torch.jit.trace(  # type: ignore[no-untyped-call]  # unannotated
                module, torch.zeros(1, width))
    module.save(str(folder / "1" / "model.pt"))
    write_model_config(folder, f'''name: "{folder.name}"
backend: "pytorch"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ kind: {kind} count: 1 }} ]
''')


def write_gpu_holder(repo: Path, name: str, gpu_bytes: int) -> None:
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(GPU_HOLDER_PY)
    write_model_config(folder, f'''name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_GPU count: 1 }} ]
parameters {{ key: "gpu_bytes" value {{ string_value: "{gpu_bytes}" }} }}
''')


def write_gpu_burner(repo: Path, name: str) -> None:
    """A TorchScript model that keeps the GPU busy for a while on every call (BURN_STEPS
    products of BURN_WIDTH x BURN_WIDTH matrices), so that GPUUtilization has something to
    show."""
    import torch

    class Burner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.steps = BURN_STEPS
            self.weight = torch.nn.Parameter(torch.full((BURN_WIDTH, BURN_WIDTH),
                                                        1.0 / BURN_WIDTH))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.weight * 1.0  # on the model's device
            for _ in range(self.steps):
                z = torch.tanh(z @ self.weight)
            return x + z.mean()

    # Scripted, not traced: a trace would run the products on this machine's CPU.
    write_torchscript(repo / name, torch.jit.script(Burner()), 4, 4, "KIND_GPU")


def build_store(store: Path, work: Path, holder_bytes: int, too_big_bytes: int) -> None:
    from ensembles.packaging import package

    builders: dict[str, Callable[[Path], None]] = {
        "mlp_gpu": lambda repo: write_mlp(repo, "mlp", "KIND_GPU"),
        "mlp_cpu": lambda repo: write_mlp(repo, "mlp", "KIND_CPU"),
        "holder_a": lambda repo: write_gpu_holder(repo, "holder", holder_bytes),
        "holder_b": lambda repo: write_gpu_holder(repo, "holder", holder_bytes),
        "too_big": lambda repo: write_gpu_holder(repo, "holder", too_big_bytes),
        "burner": lambda repo: write_gpu_burner(repo, "burner"),
    }
    for target, build in builders.items():
        repo = work / target
        build(repo)
        package(repo, store / f"{target}.tar.gz")


class Endpoint:
    """The emulator's endpoint as a user reaches it: boto3 clients and the emulator's pages."""

    def __init__(self, url: str) -> None:
        import boto3
        from botocore.config import Config

        self.url = url
        credentials = {"aws_access_key_id": "x", "aws_secret_access_key": "x",
                       "region_name": "us-east-1"}
        config = Config(retries={"max_attempts": 1}, read_timeout=600)
        self.runtime = boto3.client("sagemaker-runtime", endpoint_url=url, config=config,
                                    **credentials)
        self.cloudwatch = boto3.client("cloudwatch", endpoint_url=url, config=config,
                                       **credentials)

    def invoke(self, target: str, name: str, batch: Any) -> tuple[Any, float]:
        """The (first) answer as a numpy array, and the call's seconds. Tensors travel as
        binary+json, as production clients send them: a JSON list of floats would time the
        JSON parsers rather than the model."""
        from harness.payloads import build_request, parse_response

        request = build_request({name: batch})
        started = time.perf_counter()
        resp = self.runtime.invoke_endpoint(
            EndpointName=ENDPOINT, TargetModel=target, ContentType=request.content_type,
            Accept=request.content_type.split(";")[0], Body=request.body)
        answer = parse_response(resp["Body"].read(), resp.get("ContentType"))
        seconds = time.perf_counter() - started
        return next(iter(answer.values())), seconds

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as resp:  # ours
            text: str = resp.read().decode()
            return text

    def _endpoint(self) -> dict[str, Any]:
        endpoint: dict[str, Any] = json.loads(self.get("/_emulator/models"))["Endpoints"][ENDPOINT]
        return endpoint

    def models(self) -> dict[str, dict[str, Any]]:
        """``/_emulator/models``' entries of the endpoint's (one) instance, by TargetModel."""
        return {model["TargetModel"]: model for model in self._endpoint()["Models"]}

    def instance(self) -> dict[str, Any]:
        instance: dict[str, Any] = self._endpoint()["Variants"][VARIANT]["Instances"][0]
        return instance


def wait_for(condition: Callable[[], Any], timeout_s: float, interval_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


class LogLines(logging.Handler):
    """Keeps the log lines (Triton's output included) that contain a marker."""

    def __init__(self, marker: str) -> None:
        super().__init__(logging.DEBUG)
        self.marker = marker
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.marker in message:
            self.lines.append(message)


def environment(report: Report) -> bool:
    from emulator.triton.launcher import count_gpus

    gpus = count_gpus()
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             check=False).stdout.strip() if gpus else "nvidia-smi lists none"
    report.figure("gpus", listing)
    try:
        import torch

        cuda = (f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
                f"{torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
                else f"torch {torch.__version__} sees no GPU")
    except ImportError:
        cuda = "torch is not installed (the pytorch shim and this check need it)"
    report.figure("torch", cuda)
    try:
        import pynvml

        pynvml.nvmlInit()
        nvml = f"NVML {pynvml.nvmlSystemGetDriverVersion()}, {pynvml.nvmlDeviceGetCount()} GPU(s)"
    except Exception as exc:  # noqa: BLE001 - reported: the GPU metrics need NVML
        nvml = f"NVML unavailable ({type(exc).__name__}: {exc}); pip install nvidia-ml-py"
    report.figure("nvml", nvml)
    return report.check("environment", gpus > 0 and "sees no GPU" not in cuda
                        and "unavailable" not in nvml, f"{listing}; {cuda}; {nvml}")


def check_torchscript(report: Report, endpoint: Endpoint, device_lines: LogLines) -> None:
    import numpy as np

    rng = np.random.default_rng(7)
    batch = rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
    with step(report, "cold load"):
        gpu_out, gpu_cold = endpoint.invoke("mlp_gpu.tar.gz", "INPUT__0", batch)
        cpu_out, cpu_cold = endpoint.invoke("mlp_cpu.tar.gz", "INPUT__0", batch)
        report.figure("cold_gpu_s", gpu_cold)
        report.figure("cold_cpu_s", cpu_cold)
        report.check("cold load", True, f"first call (download, load, answer): GPU "
                     f"{gpu_cold:.3f} s, CPU {cpu_cold:.3f} s, GPU/CPU x{gpu_cold / cpu_cold:.2f}")
        error = float(np.linalg.norm(gpu_out - cpu_out) / np.linalg.norm(cpu_out))
        report.figure("gpu_vs_cpu_relative_error", error)
        report.check("same answers", error < 1e-3,
                     f"KIND_GPU vs KIND_CPU outputs: ||gpu - cpu|| / ||cpu|| = {error:.2e}")
    with step(report, "runs on CUDA"):
        said = wait_for(lambda: [line for line in device_lines.lines if "cuda" in line], 10)
        models = endpoint.models()
        gpu_bytes = models.get("mlp_gpu.tar.gz", {}).get("GpuBytes")
        cpu_bytes = models.get("mlp_cpu.tar.gz", {}).get("GpuBytes")
        report.figure("mlp_gpu_bytes", gpu_bytes)
        report.figure("mlp_cpu_bytes", cpu_bytes)
        weights = LAYERS * WIDTH * (WIDTH + 1) * 4
        report.check("runs on CUDA", bool(said) and (gpu_bytes or 0) >= weights,
                     f"the shim said {said[:1] or 'nothing'}; GPU memory measured: KIND_GPU "
                     f"model {gpu_bytes} bytes (weights {weights}), KIND_CPU model {cpu_bytes}")
    with step(report, "warm call"):
        timings = {}
        for target in ("mlp_gpu.tar.gz", "mlp_cpu.tar.gz"):
            endpoint.invoke(target, "INPUT__0", batch)
            timings[target] = statistics.median(
                endpoint.invoke(target, "INPUT__0", batch)[1] for _ in range(WARM_CALLS))
        gpu_warm, cpu_warm = timings["mlp_gpu.tar.gz"], timings["mlp_cpu.tar.gz"]
        report.figure("warm_gpu_s", gpu_warm)
        report.figure("warm_cpu_s", cpu_warm)
        report.check("warm call", True, f"median of {WARM_CALLS} calls of batch {BATCH}x{WIDTH}: "
                     f"GPU {gpu_warm * 1e3:.2f} ms, CPU {cpu_warm * 1e3:.2f} ms, "
                     f"CPU/GPU x{cpu_warm / gpu_warm:.2f}")


def check_gpu_budget(report: Report, endpoint: Endpoint, budget: int) -> None:
    import numpy as np
    from botocore.exceptions import ClientError

    x = np.ones((1, 4), dtype=np.float32)
    with step(report, "GPU memory measured"):
        endpoint.invoke("holder_a.tar.gz", "X", x)
        a = endpoint.models()["holder_a.tar.gz"]
        report.figure("holder_a_gpu_bytes", a.get("GpuBytes"))
        report.check("GPU memory measured", (a.get("GpuBytes") or 0) > 0,
                     f"holder_a holds {a.get('GpuBytes')} bytes of GPU memory (NVML), against "
                     f"a GPU budget of {budget}; instance: "
                     f"{endpoint.instance().get('GpuLoadedBytes')} bytes counted")
    with step(report, "GPU eviction"):
        endpoint.invoke("holder_b.tar.gz", "X", x)
        models = wait_for(lambda: (m := endpoint.models()) and
                          m.get("holder_a.tar.gz", {}).get("State") != "loaded" and m, 30)
        states = {t: m.get("State") for t, m in (models or endpoint.models()).items()}
        report.check("GPU eviction", bool(models) and states.get("holder_b.tar.gz") == "loaded"
                     and states.get("holder_a.tar.gz") != "loaded",
                     f"after holder_b: {states}")
        endpoint.invoke("holder_a.tar.gz", "X", x)
        states = {t: m.get("State") for t, m in endpoint.models().items()}
        report.check("GPU eviction before a known load",
                     states.get("holder_a.tar.gz") == "loaded"
                     and states.get("holder_b.tar.gz") != "loaded",
                     f"holder_a again (its GPU size known): {states}")
    with step(report, "507 when one model alone is too big"):
        try:
            endpoint.invoke("too_big.tar.gz", "X", x)
            report.check("507 when one model alone is too big", False, "the call succeeded")
        except ClientError as exc:
            error = exc.response.get("Error", {})
            original = exc.response.get("OriginalStatusCode")
            report.check("507 when one model alone is too big",
                         error.get("Code") == "ModelError" and original == 507,
                         f"{error.get('Code')} OriginalStatusCode={original}: "
                         f"{error.get('Message', '')[:200]}")


def check_metrics(report: Report, endpoint: Endpoint) -> None:
    import datetime

    import numpy as np

    burn = np.ones((1, 4), dtype=np.float32)
    with step(report, "GPU metrics in CloudWatch"):
        now = datetime.datetime.now(datetime.timezone.utc)
        found: dict[str, list[dict[str, Any]]] = {}

        def datapoints() -> bool:
            endpoint.invoke("burner.tar.gz", "INPUT__0", burn)  # keeps the GPU busy
            for metric in ("GPUUtilization", "GPUMemoryUtilization"):
                answer = endpoint.cloudwatch.get_metric_statistics(
                    Namespace="/aws/sagemaker/Endpoints", MetricName=metric,
                    Dimensions=[{"Name": "EndpointName", "Value": ENDPOINT},
                                {"Name": "VariantName", "Value": VARIANT}],
                    StartTime=now - datetime.timedelta(hours=1),
                    EndTime=now + datetime.timedelta(hours=1), Period=60,
                    Statistics=["Average", "Maximum"])
                found[metric] = answer["Datapoints"]
            return all(found.values())

        wait_for(datapoints, 60, interval_s=0.5)
        for metric, points in found.items():
            units = {p.get("Unit") for p in points}
            peak = max((p["Maximum"] for p in points), default=None)
            report.figure(f"{metric}_max", peak)
            report.check(f"{metric} in CloudWatch", bool(points) and units == {"Percent"}
                         and peak is not None and peak > 0,
                         f"{len(points)} datapoints, unit {sorted(u or '' for u in units)}, "
                         f"maximum {peak}")
    with step(report, "GPU metrics on /metrics"):
        text = endpoint.get("/metrics")
        lines = [line for line in text.splitlines() if line.startswith("sagemaker_gpu_")]
        names = {line.split("{")[0] for line in lines}
        report.check("GPU metrics on /metrics",
                     {"sagemaker_gpu_utilization_ratio",
                      "sagemaker_gpu_memory_utilization_ratio"} <= names,
                     "; ".join(lines[:4]) or "no sagemaker_gpu_* series")


def run(instance_type: str, gpu_budget: int, holder_bytes: int, too_big_bytes: int,
        report: Report) -> None:
    from emulator.server import EmulatorServer
    from emulator.settings import Settings

    device_lines = LogLines("TorchScript on")
    logging.getLogger("emulator").addHandler(device_lines)
    logging.getLogger("emulator").setLevel(logging.DEBUG)
    with tempfile.TemporaryDirectory(prefix="mme-gpu-check-") as tmp:
        work = Path(tmp)
        store = work / "store"
        store.mkdir()
        started = time.perf_counter()
        build_store(store, work / "build", holder_bytes, too_big_bytes)
        print(f"models built in {time.perf_counter() - started:.1f} s", flush=True)
        settings = Settings.from_env(
            env={}, model_data=str(store), port=0, cache_dir=work / "cache",
            instance_type=instance_type, gpu_memory_budget=gpu_budget, clock_scale=60.0)
        server = EmulatorServer(settings).start()
        try:
            endpoint = Endpoint(server.url)
            check_torchscript(report, endpoint, device_lines)
            check_gpu_budget(report, endpoint, gpu_budget)
            check_metrics(report, endpoint)
        finally:
            server.stop()


def parse_size(text: str) -> int:
    from emulator.settings import parse_size as parse

    try:
        size = parse(text)
    except ValueError:
        size = None
    if size is None or size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size such as 5GiB")
    return int(size)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instance-type", default="ml.g5.xlarge",
                        help="the endpoint's GPU instance type (default ml.g5.xlarge)")
    parser.add_argument("--gpu-budget", type=parse_size, default=5 * GIB,
                        help="the instance's GPU memory budget for models (default 5GiB: the "
                             "two 2.5GiB models do not fit together)")
    parser.add_argument("--holder-size", type=parse_size, default=5 * GIB // 2,
                        help="the GPU memory each of the two holder models takes (2.5GiB)")
    parser.add_argument("--too-big-size", type=parse_size, default=6 * GIB,
                        help="the GPU memory of the model larger than the budget (6GiB)")
    parser.add_argument("--report", type=Path, help="write the checks and figures as JSON")


def command(args: argparse.Namespace) -> int:
    report = Report()
    if not environment(report):
        print("mme gpu-check: needs an NVIDIA GPU that nvidia-smi, torch and NVML see",
              file=sys.stderr)
        code = 2
    else:
        run(args.instance_type, args.gpu_budget, args.holder_size, args.too_big_size, report)
        code = 1 if report.failed else 0
    summary = (f"{len(report.checks) - len(report.failed)} of {len(report.checks)} checks "
               f"passed" + (f"; failed: {', '.join(report.failed)}" if report.failed else ""))
    print(summary, flush=True)
    if args.report is not None:
        args.report.write_text(json.dumps({"checks": report.checks, "figures": report.figures,
                                           "summary": summary}, indent=2))
    return code


def add_subcommands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "gpu-check", help="check the GPU path (KIND_GPU, GPU memory, GPU metrics) on this GPU",
        description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_arguments(parser)
    parser.set_defaults(func=command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mme.gpu_check")
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
