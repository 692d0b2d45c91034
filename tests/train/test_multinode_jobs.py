"""Cluster job files (`python -m trainers cluster sbatch|k8s <config>`): the sbatch script is valid bash and, run
under stand-ins for srun and scontrol, starts one launcher a node with that node's rank and the first node as the
main address; the Kubernetes Job gives each pod its completion index as rank; bad layouts are refused by name."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainers.__main__ import main
from trainers.core.options import config_from_dict, load_config
from trainers.core.options.validation import option_issues


@pytest.fixture(params=["10.0.0.1", ""], ids=["address in the config", "no address in the config"])
def config(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    shared = tmp_path / "shared storage"
    shared.mkdir()
    path = shared / "my run.toml"
    config_from_dict("lora", {"num_processes": 2, "num_machines": 3, "main_process_ip": request.param,
                              "main_process_port": 29555, "output_dir": str(shared / "out")}).save(path)
    return path


def executable(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def test_sbatch_script_starts_one_launcher_a_node_with_its_rank(config: Path, tmp_path: Path) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    # srun --nodes=N ... CMD: run CMD once a node, as SLURM does, with that node's SLURM_NODEID
    executable(bin_dir / "srun", "#!/bin/bash\nnodes=1\nwhile [[ $1 == --* ]]; do [[ $1 == --nodes=* ]] && "
               "nodes=${1#--nodes=}; shift; done\nfor ((i = 0; i < nodes; i++)); do SLURM_NODEID=$i \"$@\"; done\n")
    executable(bin_dir / "scontrol", "#!/bin/bash\nprintf 'gpu-a\\ngpu-b\\ngpu-c\\n'\n")
    python = executable(tmp_path / "python", f"#!{sys.executable}\nimport json, sys\n"
                        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    script, run_dir = tmp_path / "job.sbatch", config.parent / "runs" / "run 1"
    assert main(["cluster", "sbatch", str(config), "--run-dir", str(run_dir), "--python", str(python),
                 "--out", str(script)]) == 0
    text = script.read_text()
    assert "#SBATCH --nodes=3" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=2" in text
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0

    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "gpu-[a-c]"}
    ran = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    launches = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [a[a.index("--machine_rank") + 1] for a in launches] == ["0", "1", "2"]
    named = bool(load_config("lora", config).main_process_ip)
    for argv in launches:
        assert argv[:3] == ["-m", "trainers.train.launcher", "--multi_gpu"]
        trainer = argv.index("-m", 1)
        flags = dict(zip(argv[3:trainer:2], argv[4:trainer:2]))
        assert (flags["--num_processes"], flags["--num_machines"], flags["--main_process_ip"]) == ("6", "3", "gpu-a")
        assert flags["--main_process_port"] == "29555" and "--num_cpu_threads_per_process" not in flags
        assert argv[trainer:trainer + 7] == ["-m", "trainers", "lora", "--config", str(config), "--run-dir",
                                             str(run_dir)]
        # a config without the address is handed the scheduler's, so each node's trainer does not refuse it
        overrides = argv[trainer + 7:]
        assert overrides == ([] if named else ["--set", "main_process_ip=gpu-a"])
        node = load_config("lora", config, overrides[1::2])
        assert not [i for i in option_issues(node, check_paths=False) if i.field == "main_process_ip"]
    assert run_dir.is_dir(), "the script makes the run folder on the shared storage"


def test_k8s_job_gives_each_pod_its_index_as_rank(config: Path, tmp_path: Path, capsys) -> None:
    assert main(["cluster", "k8s", str(config), "--nodes", "2", "--processes", "8", "--image", "me/atelier:1",
                 "--set", 'distributed_backend="fsdp"']) == 0
    service, job = yaml.safe_load_all(capsys.readouterr().out)
    name = job["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and job["spec"]["template"]["spec"]["subdomain"] == name
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    pod = job["spec"]["template"]["spec"]["containers"][0]
    assert pod["image"] == "me/atelier:1" and pod["resources"]["limits"]["nvidia.com/gpu"] == 4
    command = pod["command"][-1]
    assert '--machine_rank "$JOB_COMPLETION_INDEX"' in command and f"--main_process_ip {name}-0.{name}" in command
    assert "--rdzv_backend c10d -m trainers lora" in command and "--num_processes 8 --num_machines 2" in command
    written = yaml.safe_load((config.parent / "accelerate.yaml").read_text())  # FSDP: the launchers read it
    assert written["distributed_type"] == "FSDP" and (written["num_processes"], written["num_machines"]) == (8, 2)
    assert f"--config_file '{config.parent / 'accelerate.yaml'}'" in command


def test_processes_that_do_not_split_over_the_nodes_are_refused(config: Path, capsys) -> None:
    assert main(["cluster", "sbatch", str(config), "--nodes", "4", "--processes", "6"]) == 2
    err = capsys.readouterr().err
    assert "6 processes do not split evenly over 4 node(s)" in err and "multiple of 4" in err


def test_show_command_panel_checks_the_main_address_and_offers_job_files(tmp_path: Path) -> None:
    import socket

    from gui.multinode import machines_panel
    from trainers.core.launch import accelerate_command

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = config_from_dict("lora", {"num_processes": 2, "num_machines": 2, "main_process_ip": "127.0.0.1",
                                        "main_process_port": port})
        config, run_dir = tmp_path / "cmd" / "config.toml", tmp_path / "runs" / "r1"
        config.parent.mkdir()
        panel = machines_panel(cfg, accelerate_command(cfg, config, run_dir), config, run_dir)
        assert panel.text.startswith(f"# PROBLEM main_process_port: port {port} on 127.0.0.1 is in use")
        elsewhere = machines_panel(cfg.replace(machine_rank=1), [], config, run_dir)  # shown on machine 1
        assert elsewhere.text.startswith(f"# checked from this machine: 127.0.0.1:{port} answers (machine 0 is")
    assert "# machine 1 (copy" in panel.text and "--machine_rank 1 --main_process_ip 127.0.0.1" in panel.text
    assert [Path(f).name for f in panel.files] == ["r1.sbatch", "r1.k8s.yaml"]
    assert subprocess.run(["bash", "-n", panel.files[0]]).returncode == 0
    unknown = machines_panel(cfg.replace(main_process_ip="no-such-host.invalid"), [], config, run_dir)
    assert unknown.text.startswith("# PROBLEM main_process_ip: 'no-such-host.invalid' does not resolve")


def test_the_launcher_names_an_unreachable_main_address_before_starting(capsys) -> None:
    from trainers.train.launcher import main as launch

    code = launch(["--multi_gpu", "--num_processes", "2", "--num_machines", "2", "--machine_rank", "1",
                   "--main_process_ip", "no-such-host.invalid", "--main_process_port", "29500", "-m", "trainers",
                   "lora"])
    assert code == 2 and "main_process_ip: 'no-such-host.invalid' does not resolve" in capsys.readouterr().err
