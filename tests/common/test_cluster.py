import json

import pytest

from common.launch import cluster, environment, ports
from common.launch.hostlist import (
    HostlistError,
    expand_hostlist,
    expand_tasks_per_node,
    ranks_to_hosts,
)


@pytest.mark.parametrize(
    "compressed, expanded",
    [
        ("node1", ["node1"]),
        ("a,b,c", ["a", "b", "c"]),
        ("gpu-[01-03,7],cpu9", ["gpu-01", "gpu-02", "gpu-03", "gpu-7", "cpu9"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("n[001-002],m[5]", ["n001", "n002", "m5"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("c[3,1]", ["c3", "c1"]),  # SLURM's order is kept, not sorted
        ("x-[1-2].ib", ["x-1.ib", "x-2.ib"]),
        # scontrol show hostnames (SLURM 22.05) varies the last bracket fastest, then the
        # others from the first on; whitespace separates as commas do
        ("n[1-2]x[3-4]y[5-6]", "n1x3y5 n1x3y6 n2x3y5 n2x3y6 n1x4y5 n1x4y6 n2x4y5 n2x4y6".split()),
        ("a b,c", ["a", "b", "c"]),
        ("  a\tb ", ["a", "b"]),
    ],
)
def test_hostlist_expansion(compressed, expanded):
    assert expand_hostlist(compressed) == expanded


@pytest.mark.parametrize("bad", ["", "n[1-", "n]1[", "n[1-2[3]]", "n[a-b]", "n[5-3]", "a,,b"])
def test_bad_hostlists_are_refused(bad):
    with pytest.raises(HostlistError):
        expand_hostlist(bad)


def test_huge_hostlists_are_refused_before_they_fill_memory():
    assert len(expand_hostlist("n[0-65535]")) == 65_536  # SLURM's largest range
    with pytest.raises(HostlistError, match="more than 65,536 hosts"):
        expand_hostlist("n[0-99999999]")  # grew to 24 GB before the bound
    with pytest.raises(HostlistError, match="more than 1,048,576 hosts"):
        expand_hostlist("a[0-2047]b[0-1023]")


@pytest.mark.parametrize(
    "compressed, expanded",
    [
        ("4", [4]),
        ("2(x3),1", [2, 2, 2, 1]),
        ("1,3(x2)", [1, 3, 3]),
        ("8(x1)", [8]),
    ],
)
def test_tasks_per_node_expansion(compressed, expanded):
    assert expand_tasks_per_node(compressed) == expanded


@pytest.mark.parametrize("bad", ["", "2(3)", "x2", "0", "2(x0)", "2,,1"])
def test_bad_task_counts_are_refused(bad):
    with pytest.raises(HostlistError):
        expand_tasks_per_node(bad)


def test_rank_order_follows_the_distribution():
    assert ranks_to_hosts(["a", "b"], [2, 1], "block") == ("a", "a", "b")
    assert ranks_to_hosts(["a", "b"], [2, 1], "cyclic:block") == ("a", "b", "a")
    with pytest.raises(HostlistError, match="only block and cyclic"):
        ranks_to_hosts(["a", "b"], [2, 1], "arbitrary")


def slurm_env(procid, localid, node, **extra):
    env = {
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(localid),
        "SLURM_STEP_NUM_TASKS": "7",
        "SLURM_STEP_NODELIST": "gpu-[01-03,7]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
        "SLURM_JOB_ID": "123456",
        "SLURMD_NODENAME": node,
        "SLURM_GPUS_ON_NODE": "2",
    }
    env.update(extra)
    return env


def test_spec_and_tf_config_from_a_slurm_step():
    spec = environment.from_environment(slurm_env(3, 1, "gpu-02"))
    assert (spec.launcher, spec.rank, spec.local_rank, spec.world_size) == ("slurm", 3, 1, 7)
    assert spec.node == "gpu-02" and spec.local_world_size == 2
    assert spec.hosts == ("gpu-01",) * 2 + ("gpu-02",) * 2 + ("gpu-03",) * 2 + ("gpu-7",)
    assert spec.launch_id == "job123456"
    base = ports.slurm_port_base("123456")
    assert (spec.master_addr, spec.master_port) == ("gpu-01", base)
    environ = {}
    cluster.write_tf_config(spec, environ)
    config = json.loads(environ["TF_CONFIG"])
    assert config["task"] == {"type": "worker", "index": 3}
    assert config["cluster"]["worker"] == [
        f"gpu-01:{base + 1}",
        f"gpu-01:{base + 2}",
        f"gpu-02:{base + 1}",
        f"gpu-02:{base + 2}",
        f"gpu-03:{base + 1}",
        f"gpu-03:{base + 2}",
        f"gpu-7:{base + 1}",
    ]
    # every task of the step derives the same worker list
    last = environment.from_environment(slurm_env(6, 0, "gpu-7"))
    assert last.tf_config()["cluster"] == config["cluster"] and last.local_world_size == 1


def test_cyclic_distribution_maps_ranks_round_robin():
    env = slurm_env(1, 0, "gpu-02", SLURM_DISTRIBUTION="cyclic")
    spec = environment.from_environment(env)
    assert spec.hosts[:5] == ("gpu-01", "gpu-02", "gpu-03", "gpu-7", "gpu-01")


def test_ports_differ_between_jobs_and_steps_and_stay_out_of_the_ephemeral_range():
    linux = (32768, 60999)
    first, windows = ports.port_windows(linux)
    assert (first, windows) == (10000, (32768 - 10000) // 64)
    bases = {ports.slurm_port_base(str(job), ephemeral=linux) for job in range(windows)}
    assert len(bases) == windows  # every job of a run of `windows` ids has its own window
    assert min(bases) >= 10000 and max(bases) + ports.PORT_SPAN <= 32768
    steps = {ports.slurm_port_base("77", str(step), ephemeral=linux) for step in range(4)}
    assert len(steps) == 4  # steps of one job, running at once, do not collide
    # an ephemeral range that starts low leaves the ports above it
    assert ports.port_windows((1024, 40000)) == (40001, (65536 - 40001) // 64)
    with pytest.raises(ports.PortError, match="leaves no room"):
        ports.port_windows((1024, 65535))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"SLURM_STEP_NUM_TASKS": "8"}, "adds up to 7 tasks, SLURM_STEP_NUM_TASKS says 8"),
        ({"SLURM_STEP_NODELIST": "gpu-[01-03]"}, "names 3 nodes but .* task counts for 4"),
        ({"SLURM_LOCALID": "0"}, "SLURM_LOCALID=0 but rank 3 is task 1 on gpu-02"),
        (
            {"SLURMD_NODENAME": "gpu-03"},
            "SLURM_PROCID=3 belongs on gpu-02 .* SLURMD_NODENAME=gpu-03",
        ),
        ({"SLURM_PROCID": "9"}, r"rank 9 is outside 0..6"),
        ({"SLURM_PROCID": "three"}, "SLURM_PROCID='three' is not an integer"),
        ({"SLURM_JOB_ID": ""}, "SLURM_JOB_ID is not set"),
        ({"SLURM_STEP_NODELIST": "gpu-[01-"}, "unbalanced"),
    ],
)
def test_inconsistent_slurm_variables_are_named(change, message):
    with pytest.raises(cluster.ClusterError, match=message):
        environment.from_environment(slurm_env(3, 1, "gpu-02", **change))


def test_torchrun_variables_win_over_slurm_and_have_no_tf_config():
    env = {
        **slurm_env(0, 0, "gpu-01"),
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "gpu-01",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "abc",
    }
    spec = environment.from_environment(env)
    assert (spec.launcher, spec.rank, spec.local_rank, spec.world_size) == ("torchrun", 5, 1, 8)
    assert (spec.master_port, spec.launch_id) == (29500, "abc")
    with pytest.raises(cluster.ClusterError, match="cannot be built"):
        spec.tf_config()
    with pytest.raises(cluster.ClusterError, match="RANK=8 is outside|rank 8 is outside"):
        environment.from_environment({**env, "RANK": "8"})


def test_no_launcher_means_one_local_process():
    spec = environment.from_environment({})
    assert (spec.launcher, spec.rank, spec.world_size, spec.is_chief) == ("single", 0, 1, True)
    assert spec.tf_config()["cluster"]["worker"] == [f"localhost:{spec.tf_ports[0]}"]


def test_one_process_gets_no_tf_config():
    """One worker must not start TensorFlow's gRPC server: TF_CONFIG is removed, not written."""
    environ = {"TF_CONFIG": "{}"}
    cluster.write_tf_config(environment.from_environment({}), environ)
    assert "TF_CONFIG" not in environ


def test_stamps_drawn_in_the_same_second_differ():
    stamps = {cluster.unique_stamp() for _ in range(50)}
    assert len(stamps) == 50


TFJOB = {
    "cluster": {"chief": ["job-chief-0.ns.svc:2222"], "worker": ["job-worker-0.ns.svc:2222"]},
    "task": {"type": "worker", "index": 0},
    "environment": "cloud",
}


def test_a_tfjob_tf_config_alone_is_a_cluster_with_the_chief_as_rank_0():
    spec = environment.from_environment({"TF_CONFIG": json.dumps(TFJOB)})
    assert (spec.launcher, spec.rank, spec.world_size, spec.local_world_size) == (
        "tf_config",
        1,
        2,
        1,
    )
    assert spec.hosts == ("job-chief-0.ns.svc", "job-worker-0.ns.svc")
    assert (spec.master_addr, spec.master_port, spec.tf_ports) == (
        "job-chief-0.ns.svc",
        2223,
        (2222, 2222),
    )
    chief = {**TFJOB, "task": {"type": "chief", "index": 0}}
    assert environment.from_environment({"TF_CONFIG": json.dumps(chief)}).rank == 0
    workers_only = {"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"index": 2}}
    spec = environment.from_environment({"TF_CONFIG": json.dumps(workers_only), "MASTER_PORT": "9"})
    assert (spec.rank, spec.world_size, spec.master_addr, spec.master_port) == (2, 3, "a", 9)


def test_the_rendezvous_port_of_a_tf_config_is_one_no_task_uses():
    """Rank 0's port + 1, unless a task takes it: two workers of one host at consecutive ports
    collided there (the next worker's TensorFlow server could not start)."""

    def port_of(workers: list[str]) -> int:
        config = {"cluster": {"worker": workers}, "task": {"index": 0}}
        return environment.from_environment({"TF_CONFIG": json.dumps(config)}).master_port

    assert port_of(["h:2222", "h:2223"]) == 2224
    assert port_of(["h:2222", "h:2223", "h:2224", "i:2226"]) == 2225
    assert port_of(["h:65534", "h:65535"]) == 65533  # none above: the first free below


@pytest.mark.parametrize(
    "config, message",
    [
        ({**TFJOB, "task": {"type": "worker", "index": 3}}, "task worker 3 is not in its cluster"),
        ({**TFJOB, "task": {"type": "ps", "index": 0}}, "names ps tasks"),
        (
            {"cluster": {**TFJOB["cluster"], "evaluator": ["e:1"]}, "task": {"index": 0}},
            "evaluator",
        ),
        ({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"index": 0}}, "at most one chief"),
        ({"cluster": {"worker": ["a"]}, "task": {"index": 0}}, "'a' is not host:port"),
    ],
)
def test_a_tf_config_that_cannot_be_trained_is_named(config, message):
    with pytest.raises(cluster.ClusterError, match=message):
        environment.from_environment({"TF_CONFIG": json.dumps(config)})
