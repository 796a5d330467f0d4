"""Edges of the executors' option checks: values an option accepted although its backend refuses them
or reads them otherwise (a job on another Slurm cluster, a zero time limit, what the Kubernetes API
server validates, an NCCL value NCCL would misread, a replay delay of "5"), and `--executor-option`
values taken as the user typed them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from autotuner.cli.commands import _executor_options
from autotuner.executors import (
    KubernetesOptions,
    LaunchRequest,
    ReplayOptions,
    SlurmOptions,
    validate_options,
)
from autotuner.executors.slurm.executor import SlurmError, SlurmExecutor
from tests.helpers import LANDSCAPE
from tests.helpers import TINY_SPEC as SPEC

IMAGE = "registry.example.com/nccl-autotuner-trial:0.1.0"


def k8s(**options) -> KubernetesOptions:
    return KubernetesOptions.parse({"image": IMAGE, **options})


# ------------------------------------------------------------------------------ Slurm: other clusters


@pytest.mark.parametrize(
    "arg",
    ["--clusters=other", "--clusters=a,b", "--cluster=other", "--clust=other", "--clu=other", "--clusters",
     "-M", "-Mother", "-M=other"],
)  # fmt: skip
def test_sbatch_args_that_send_the_job_to_another_cluster_are_refused(arg):
    # the job would be followed (squeue, scontrol, sacct) and cancelled (scancel) on the default cluster
    with pytest.raises(
        ValueError, match=r"sbatch_args.*multi-cluster submission is not supported.*on that cluster"
    ):
        SlurmOptions.parse({"sbatch_args": [arg]})


def test_cluster_constraint_and_other_c_options_stay_allowed():
    args = ("--cluster-constraint=efa", "--comment=tuning", "--contiguous")
    assert SlurmOptions.parse({"sbatch_args": list(args)}).sbatch_args == args


class _Sbatch:
    """subprocess.run for one sbatch answer; records every command."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[list[str]] = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        out = self.answer if argv[0] == "sbatch" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_a_job_id_on_another_cluster_is_refused_not_followed_on_the_default_one(tmp_path, monkeypatch):
    fake = _Sbatch("4242;other\n")
    monkeypatch.setattr("autotuner.executors.slurm.executor.subprocess.run", fake)
    launch = LaunchRequest(name="s1-l1", spec=SPEC, env={}, workdir=tmp_path, python="/opt/py/bin/python",
                           timeout_s=60)  # fmt: skip
    executor = SlurmExecutor(gpus_per_node=0)
    with pytest.raises(
        SlurmError, match=r"job 4242 on cluster 'other'.*multi-cluster submission is not supported"
    ):
        executor.submit(launch)
    assert not (tmp_path / "job_id").exists()
    # the job sbatch queued there is cancelled there, not left to run with no one following it
    assert fake.calls[-1] == ["scancel", "--clusters=other", "4242"]
    for call in (executor.describe, executor.cancel):
        with pytest.raises(ValueError, match="multi-cluster submission is not supported"):
            call("4242;other", launch)


# ------------------------------------------------------------------------------ Slurm: time limit


@pytest.mark.parametrize("zero", ["0", "00", "0:0", "0:00", "0:00:00", "00:00:00", "0-0", "0-00", "0-0:0",
                                  "0-00:00:00"])  # fmt: skip
def test_every_spelling_of_a_zero_time_limit_is_refused(zero):
    # sbatch reads --time=0 as no limit at all: the backstop would be gone
    with pytest.raises(ValueError, match=rf"time_limit='{zero}': .*zero.*no limit"):
        SlurmOptions.parse({"time_limit": zero})


@pytest.mark.parametrize("limit", ["1", "0:30", "0:01:00", "0-1", "1-00:00:00", "UNLIMITED", 1])
def test_short_time_limits_that_are_not_zero_are_kept(limit):
    assert SlurmOptions.parse({"time_limit": limit}).time_limit == limit


# ------------------------------------------------------------------------------ Slurm: fixed exports


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NCCL_BUFFSIZE": "4MB"}, r"NCCL_BUFFSIZE='4MB'.*would read 4"),
        ({"OFI_NCCL_PROTOCOL": "rdma2"}, r"OFI_NCCL_PROTOCOL='rdma2'"),
        ({"FI_EFA_USE_DEVICE_RDMA": "yes"}, r"FI_EFA_USE_DEVICE_RDMA='yes'"),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "9"}, r"TORCH_NCCL_ASYNC_ERROR_HANDLING='9'"),
    ],
)
def test_fixed_exports_of_registered_variables_get_the_registrys_value_checks(env, message):
    with pytest.raises(ValueError, match=rf"^slurm executor option env=.*: {message}"):
        SlurmOptions.parse({"env": env})


def test_fixed_exports_the_fabric_needs_stay_settable():
    env = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_BUFFSIZE": "4194304",
           "LD_LIBRARY_PATH": "/opt/aws-ofi-nccl/lib", "HF_HOME": "/fsx/hf", "NCCL_SOME_NEWER_KNOB": "4MB",
           # a site's own text and list syntax: exported quoted (aws-ofi-nccl <= 1.11 takes only this name)
           "NCCL_NET": "AWS Libfabric", "NCCL_ALGO": "allreduce:tree"}  # fmt: skip
    assert SlurmOptions.parse({"env": env}).env == env
    with pytest.raises(ValueError, match="LD_PRELOAD: not settable"):
        SlurmOptions.parse({"env": {"LD_PRELOAD": "/tmp/x.so"}})


# ------------------------------------------------------------------------------ Kubernetes: tolerations


@pytest.mark.parametrize(
    ("toleration", "message"),
    [
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30},
         "tolerationSeconds only with effect NoExecute"),
        ({"key": "k", "operator": "Exists", "tolerationSeconds": 30}, "tolerationSeconds only with effect NoExecute"),
        ({"operator": "Equal", "value": "x", "effect": "NoSchedule"}, "operator Exists when key is empty"),
        ({"effect": "NoSchedule"}, "operator Exists when key is empty"),
        ({"key": "", "operator": "Equal"}, "operator Exists when key is empty"),
        ({"key": "k", "operator": "Exists", "value": "x"}, "no value with operator Exists"),
        ({"key": "k", "value": "a b/c", "effect": "NoSchedule"}, "value 'a b/c'.*label value"),
        ({"key": "k", "value": "v" * 64}, "label value"),
        ({"key": "bad key!", "operator": "Exists"}, "key 'bad key!'.*qualified name"),
        ({"key": "a..b/k", "operator": "Exists"}, "qualified name"),
        ({"key": "k" * 64, "operator": "Exists"}, "qualified name"),
    ],
)  # fmt: skip
def test_tolerations_the_api_server_refuses_are_refused(toleration, message):
    with pytest.raises(ValueError, match=rf"^kubernetes executor option tolerations=.*{message}"):
        k8s(tolerations=[toleration])


def test_tolerations_the_api_server_takes_are_kept():
    tolerations = [
        {"operator": "Exists"},  # every taint
        {"operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "tuning", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": ""},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
    ]  # fmt: skip
    assert k8s(tolerations=tolerations).tolerations == tolerations


# ------------------------------------------------------------------------------ Kubernetes: huge pages


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (512, r"hugepages_2mi=512: 512 bytes .*a multiple of 2Mi.*'1024Mi' for 512 pages"),
        ("512", r"hugepages_2mi='512': 512 bytes .*a multiple of 2Mi"),
        ("3Mi", r"hugepages_2mi='3Mi': .*a multiple of 2Mi"),
        ("1Mi", r"hugepages_2mi=.*a multiple of 2Mi"),
        ("1G", r"hugepages_2mi=.*a multiple of 2Mi"),  # 10^9 bytes
        ("2500m", r"hugepages_2mi=.*a multiple of 2Mi"),
    ],
)
def test_huge_pages_that_are_not_whole_2mi_pages_are_refused(value, message):
    with pytest.raises(ValueError, match=rf"^kubernetes executor option {message}"):
        k8s(hugepages_2mi=value, memory="64Gi")


@pytest.mark.parametrize(("value", "rendered"), [("5120Mi", "5120Mi"), ("1Gi", "1Gi"), ("2.5Gi", "2.5Gi"),
                                                 (1 << 30, "1073741824"), ("2097152", "2097152")])  # fmt: skip
def test_huge_pages_in_whole_2mi_pages_are_kept_as_a_quantity(value, rendered):
    assert k8s(hugepages_2mi=value, memory="64Gi").hugepages_2mi == rendered


# ------------------------------------------------------------------------------ Kubernetes: names


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(service_account="a" * 254), "service_account='aaa.*at most 253"),
        (dict(service_account="a..b"), "service_account"),
        (dict(node_selector={"a" * 254 + "/k": "v"}), "node_selector=.*qualified name"),
        (dict(node_selector={"a..b/k": "v"}), "node_selector=.*qualified name"),
        (dict(node_selector={"/k": "v"}), "node_selector=.*qualified name"),
        (dict(node_selector={"k" * 64: "v"}), "node_selector=.*qualified name"),
        (dict(node_selector={"pool": "a b"}), "node_selector=.*label value"),
        (dict(node_selector={"pool": "-x"}), "node_selector=.*label value"),
        (dict(python="   "), "python"),
        (dict(python=" python"), "python"),
        (dict(python="python\n"), "python"),
        (dict(image="Registry/Trial:TAG"), "image"),
        (dict(image="Trial:1"), "image"),
        (dict(image=" "), "image"),
        (dict(image="img:1 "), "image"),
        (dict(image="img:"), "image"),
        (dict(image="a//b:1"), "image"),
        (dict(image="img@sha256:abc"), "image"),
    ],
)
def test_names_the_api_server_or_the_kubelet_refuse_are_refused(options, message):
    with pytest.raises(ValueError, match=rf"^kubernetes executor option {message}"):
        k8s(**options)


def test_names_the_api_server_takes_are_kept():
    o = k8s(service_account="a" * 253, node_selector={"a" * 253 + "/" + "k" * 63: "v" * 63, "pool": ""},
            python="/opt/conda/bin/python3")  # fmt: skip
    assert (o.service_account, o.python) == ("a" * 253, "/opt/conda/bin/python3")
    for image in ["r/t:1", "img", "localhost:5000/team/trial:v1.2", "nvcr.io/nvidia/pytorch:24.01-py3",
                  "Registry.Example.com/trial:TAG", "123456789012.dkr.ecr.us-west-2.amazonaws.com/t@sha256:" + "a" * 64,
                  "ghcr.io/o/r/t:1@sha256:" + "0" * 64, "a__b/c-d.e:x"]:  # fmt: skip
        assert k8s(image=image).image == image


# ------------------------------------------------------------------------------ Kubernetes: run_as_user


@pytest.mark.parametrize("uid", [0, -1, 2**31, "1000", True, 1000.0, [1000]])
def test_run_as_user_is_a_non_root_uid_the_api_server_takes(uid):
    # 0 is root, what the option avoids; the API server keeps uids in an int32 (and takes no string)
    with pytest.raises(
        ValueError,
        match=r"^kubernetes executor option run_as_user=.*: expected an integer uid from 1 to 2147483647",
    ):
        k8s(run_as_user=uid)


@pytest.mark.parametrize("uid", [1, 1000, 2**31 - 1, None])
def test_run_as_user_in_range_is_kept(uid):
    assert k8s(run_as_user=uid).run_as_user == uid


# ------------------------------------------------------------------------------ replay


@pytest.mark.parametrize("delay", ["5", True, float("inf"), float("nan"), -1, 1e9])
def test_replay_delay_is_a_finite_number_of_seconds(delay):
    with pytest.raises(ValueError, match=r"^replay executor option delay_s=.*seconds from 0 to 3600"):
        ReplayOptions.parse({"landscape": str(LANDSCAPE), "delay_s": delay})


@pytest.mark.parametrize("delay", [0, 2, 0.5, 3600])
def test_replay_delay_in_range_is_kept(delay):
    assert ReplayOptions.parse({"landscape": str(LANDSCAPE), "delay_s": delay}).delay_s == delay


# ------------------------------------------------------------------------------ --executor-option k=v


@pytest.mark.parametrize(
    ("executor", "item", "value"),
    [
        ("slurm", "account=12345", "12345"),
        ("slurm", "qos=2", "2"),
        ("slurm", "partition=2024", "2024"),
        ("slurm", "account=null", "null"),  # the account named null, not "no account"
        ("slurm", "account=true", "true"),
        ("slurm", 'account="ml"', "ml"),  # a JSON string still reads as that string
        ("slurm", "partition=gpu", "gpu"),
        ("slurm", "time_limit=30", "30"),
        ("slurm", "gpus_per_node=8", 8),
        ("slurm", "exclusive=false", False),
        ("slurm", "queue_timeout_s=60.5", 60.5),
        ("slurm", 'sbatch_args=["--mem=0"]', ("--mem=0",)),
        ("slurm", 'env={"FI_PROVIDER": "efa"}', {"FI_PROVIDER": "efa"}),
        ("kubernetes", "namespace=1234", "1234"),
        ("kubernetes", "in_cluster=true", True),
        ("kubernetes", 'tolerations=[{"operator": "Exists"}]', [{"operator": "Exists"}]),
        ("kubernetes", "memory=64Gi", "64Gi"),
        ("replay", "delay_s=5", 5),
        ("local", "nodes=hostids", "hostids"),
    ],
)
def test_executor_option_values_are_taken_as_the_option_reads_them(executor, item, value):
    key = item.partition("=")[0]
    least = {"kubernetes": {"image": IMAGE}, "replay": {"landscape": str(LANDSCAPE)}}.get(executor, {})
    options = _executor_options([item], None)
    assert getattr(validate_options(executor, {**least, **options}), key) == value


def test_executor_option_values_of_the_wrong_kind_are_still_refused_naming_the_option():
    with pytest.raises(ValueError, match="gpus_per_node='eight': expected an integer"):
        validate_options("slurm", _executor_options(["gpus_per_node=eight"], None))
    with pytest.raises(ValueError, match="sbatch_args='--mem=0': expected a list"):
        validate_options("slurm", _executor_options(["sbatch_args=--mem=0"], None))
    assert _executor_options(["unknown_thing=12"], None) == {"unknown_thing": 12}  # refused later, by name
    assert _executor_options([], Path("x.json")) == {"landscape": str(Path("x.json").absolute())}


@pytest.mark.parametrize("arg", ["--hold", "--test-only", "--help", "--usage", "--begin=now+1hour", "--hol"])
def test_sbatch_args_that_would_run_nothing_now_are_refused(arg):
    with pytest.raises(ValueError, match="the launch would not run now"):
        validate_options("slurm", {"sbatch_args": [arg]})
