"""The rules of ``mme lint`` and what one finding says (docs/lint.md: each with its evidence)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: str  # "error": SageMaker's Triton fails the load or every call; "warning": it may
    sagemaker: str  # what SageMaker would do
    fix: str


@dataclass(frozen=True)
class Finding:
    rule: Rule
    message: str
    source: str  # the tarball or folder linted
    file: str  # within the source ("" for the source itself)
    line: int | None = None
    severity: str = ""  # the rule's unless given

    @property
    def level(self) -> str:
        return self.severity or self.rule.severity

    def where(self) -> str:
        inside = f"!{self.file}" if self.file else ""
        return f"{self.source}{inside}{f':{self.line}' if self.line else ''}"


def _rules(*rules: Rule) -> dict[str, Rule]:
    return {r.id: r for r in rules}


RULES = _rules(
    Rule("MME001", "config-unparsable", "error",
         "Triton fails the model's load: its config.pbtxt is not a ModelConfig; InvokeEndpoint "
         "answers ModelError", "correct the config.pbtxt (text protobuf, Triton's ModelConfig)"),
    Rule("MME002", "no-model", "error",
         "Triton finds no model in the unpacked tarball; the load fails",
         "put <model>/config.pbtxt at the tarball's root"),
    Rule("MME003", "no-version-folder", "error",
         "Triton loads no version of the model and its load fails",
         "add a numbered version folder (<model>/1/ ...; an ensemble's may be empty)"),
    Rule("MME004", "odd-version-folder", "warning",
         "Triton ignores a sub-folder whose name is not a number or starts with 0 (`0`, `01`): "
         "that version is not served. A negative name (`-1`) is a version to Triton: where its "
         "policy loads it (alone, or `version_policy: all`) a Python model's stub exits importing "
         "it and the load never completes; else it is not served",
         "name version folders 1, 2, 3 ... without leading zeros or signs"),
    Rule("MME005", "ensemble-step-missing", "error",
         "the ensemble fails to load: a step names a model the tarball does not hold",
         "add that model's folder to the tarball"),
    Rule("MME006", "several-entry-models", "error",
         "several models could serve the TargetModel; SageMaker's Triton picks one",
         "package one model, or one ensemble with its steps, per tarball (a BLS model's callees "
         "are not loaded with it)"),
    Rule("MME007", "name-mismatch", "error",
         "Triton refuses a model whose folder name differs from the name in its config",
         "make the folder's name and the config's name the same"),
    Rule("MME008", "too-deep", "error",
         "the model folders are one level too deep: Triton finds no model at the tarball's root",
         "package the repository with its model folders at the root (`mme package REPO -o "
         "x.tar.gz`, layout flat)"),
    Rule("MME009", "model-name-unusable", "error",
         "Triton cannot take the model folder's name as a model name (a control character such "
         "as a newline): the load fails", "rename the folder (and the name in its config.pbtxt) "
         "with letters, digits, '_' or '-'"),
    Rule("MME101", "kind-gpu-without-gpu", "error",
         "on an instance type without a GPU the load fails: \"has kind KIND_GPU but no GPUs are "
         "available\"", "use KIND_CPU (or no instance_group) or a GPU instance type"),
    Rule("MME102", "gpus-beyond-instance", "error",
         "the load fails: the instance group names a GPU the instance type does not have",
         "list only GPUs 0 .. count-1 of the instance type, or leave `gpus` out"),
    Rule("MME103", "unknown-instance-type", "warning",
         "(lint) the instance type's GPUs are unknown, so KIND_GPU and `gpus` were not checked",
         "give an ml.* instance type SageMaker offers"),
    Rule("MME201", "bls-callee-missing", "error",
         "a Python model's BLS call names a model the tarball does not hold: each TargetModel is "
         "its own repository, so the call fails at inference",
         "add the called model's folder to the tarball"),
    Rule("MME202", "decoupled-on-mme", "error",
         "a decoupled model cannot answer InvokeEndpoint on a multi-model endpoint (SageMaker's "
         "Triton serves one response per request)",
         "remove model_transaction_policy { decoupled: true }, or serve it from a single-model "
         "endpoint with InvokeEndpointWithResponseStream"),
    Rule("MME203", "version-policy-all", "warning",
         "every version folder is loaded into memory, counted against the instance's memory",
         "ship one version per tarball, or use version_policy { latest { num_versions: 1 } }"),
    Rule("MME301", "env-missing", "error",
         "EXECUTION_ENV_PATH names an environment the tarball does not hold: the Python model "
         "fails to load", "add the conda-pack tarball at that path"),
    Rule("MME302", "env-python", "error",
         "the Python backend's stub of the image runs one Python; an environment packed for "
         "another fails: \"Failed to initialize Python stub\"",
         "pack the environment with the image's Python (or build a stub for yours)"),
    Rule("MME303", "env-glibcxx", "error",
         "a shared object needs a GLIBCXX_ version the image's libstdc++ lacks (\"GLIBCXX_3.4.N "
         "not found\"), or the environment's own libstdc++ is older than the stub needs",
         "build the environment against the image's libstdc++, or ship a libstdc++ at least as "
         "new as the image's in it"),
    Rule("MME304", "env-glibc", "error",
         "a shared object needs a GLIBC_ version newer than the image's glibc: the import fails",
         "build the environment on the image's Ubuntu (or older)"),
    Rule("MME305", "env-numpy2", "error",
         "the image's Python backend cannot take numpy 2: every output is answered \"output "
         "tensor shape does not match size of output\"",
         "pin numpy<2 in the environment, or target a release whose Python backend takes numpy 2"),
    Rule("MME306", "env-unreadable", "error",
         "the environment cannot be unpacked: the Python model fails to load",
         "re-create it with conda-pack (a .tar.gz)"),
    Rule("MME501", "model-memory-over-budget", "error",
         "the model does not fit in the instance's memory for models: its load fails, or evicts "
         "every other model and still fails [U: the exact error]",
         "a larger instance type (`mme plan` compares them), or a smaller model"),
    Rule("MME502", "does-not-load", "error",
         "(--measure) the model did not load on the embedded Triton; SageMaker's Triton refuses "
         "it too unless the reason is a difference of the embedded Triton (`mme lint` lists them)",
         "read the reason; `mme serve --model-data` and the load log show it in full"),
    Rule("MME401", "tensorrt-plan", "warning",
         "a TensorRT plan loads only on the TensorRT version that serialized it (\"Serialized "
         "Engine Version ... vs Current ...\"); lint cannot read a plan's version",
         "build the plan with the image's TensorRT (inside the image, or its trtexec)"),
)
