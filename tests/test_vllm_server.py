"""CoBA rounds requested from a real vLLM server (vLLM's CPU build, started with the README's command) through TRL's
`VLLMClient` (on the server's Unix socket), with the trainer's weights synced into the server before every round
(`CPUWeightSync`); and what another local user can do to that server: nothing.

The server holds the demo's model shape (`python -m coba_trl.demo.model`); each trainer sends its weights before its
first generation. Every prompt must get exactly its group size, asked for as one request per distinct group size
with n = that size, and TRL's importance-sampling ratio must stay near 1 at every step: a completion mapped to
another row, logprobs out of line, or weights other than the trainer's (a LoRA adapter left unmerged) would push it
far off.
"""

import contextlib
import json
import os
import pwd
import socket
from collections import Counter

import pytest
import torch
from peft import LoraConfig
from scripts.refill_runs import SpendingRecorder, assert_refill_logged, settled_reward
from scripts.tiny_coba import prompt_dataset
from scripts.vllm_runs import RATIO_BOUND, RoundWatch, assert_vllm_followed_the_trainer, coba_trainer, ratio_extremes

import coba_trl.generation.cpu_weights as cpu_weights
from coba_trl.generation.cpu_weights import CPUWeightSyncClient
from coba_trl.generation.private_folder import FOLDER_ENV
from coba_trl.generation.unix_http import socket_of

pytestmark = pytest.mark.vllm


def expected_requests(sizes: list[int]) -> list[tuple[int, int]]:
    """One request per distinct group size n, listing the prompts with n rows: (n, number of prompts), by n."""
    return sorted(Counter(sizes).items())


@pytest.mark.parametrize("two_phase", [False, True], ids=["one-phase", "two-phase"])
def test_server_generates_each_group_with_the_trainers_weights(tmp_path, vllm_server, two_phase):
    base_url, model_dir = vllm_server
    watch = RoundWatch()
    trainer = coba_trainer(
        model_dir, str(tmp_path), watch, vllm_mode="server", vllm_server_base_url=base_url, two_phase_rounds=two_phase
    )
    trainer.train()
    assert_vllm_followed_the_trainer(trainer, watch)
    min_generations = trainer.args.min_generations
    for planned, requests in zip(watch.planned, watch.requests, strict=True):
        sizes = list(planned.values())
        if two_phase:  # phase 1 screens every prompt with min_generations rows, phase 2 asks for the rest
            rest = [size - min_generations for size in sizes if size > min_generations]
            expected = [(min_generations, len(sizes))] + expected_requests(rest)
        else:
            expected = expected_requests(sizes)
        assert requests == expected


def test_server_refills_with_the_trainers_weights(tmp_path, vllm_server):
    # Refill with skipping against the server: the extra phases are further requests, every trained row has spread,
    # and the server samples as the trainer computes (the ratio bound).
    base_url, model_dir = vllm_server
    trainer = coba_trainer(
        model_dir,
        str(tmp_path),
        RoundWatch(),
        reward=settled_reward,
        train_dataset=prompt_dataset(12),
        vllm_mode="server",
        vllm_server_base_url=base_url,
        zero_variance_groups="refill",
        skip_settled_prompts=True,
    )
    recorder = SpendingRecorder(trainer)
    trainer.train()
    assert_refill_logged(trainer, recorder)
    extremes = ratio_extremes(trainer)
    assert all(1 - RATIO_BOUND <= low and high <= 1 + RATIO_BOUND for low, high in extremes), extremes


def test_server_samples_from_the_merged_lora_weights(tmp_path, vllm_server, monkeypatch):
    # TRL merges the adapter into the weights it sends and unmerges it in place afterwards: the file the server loads
    # must hold the merged weights, and the server then samples as the trainer computes (the ratio bound).
    base_url, model_dir = vllm_server
    watch, files = RoundWatch(), []
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = coba_trainer(
        model_dir, str(tmp_path), watch, peft_config=lora, vllm_mode="server", vllm_server_base_url=base_url
    )
    q_proj = trainer.model.get_submodule("base_model.model.model.layers.0.self_attn.q_proj")
    save_file = cpu_weights.save_file

    def keep(weights, path):  # what each sync writes, beside the trainer's base and merged weights at that moment
        base = q_proj.base_layer.weight.detach().clone()
        files.append(
            (
                weights["model.layers.0.self_attn.q_proj.weight"].clone(),
                base,
                base + q_proj.get_delta_weight("default"),
            )
        )
        save_file(weights, path)

    monkeypatch.setattr(cpu_weights, "save_file", keep)
    trainer.train()
    assert_vllm_followed_the_trainer(trainer, watch)
    assert len(files) == len(watch.planned)  # one sync per round
    for sent, _, merged in files:
        torch.testing.assert_close(sent, merged)
    sent, base, merged = files[-1]
    assert (merged - base).norm() > 0.05 * base.norm()  # the adapter did move the weights the server samples from


def test_the_server_refuses_weight_files_from_elsewhere(vllm_server):
    # Only bare names in its private folder: a path is refused, answered and not raised (an error raised in a worker
    # would stop the server), and the server keeps serving.
    base_url, model_dir = vllm_server
    client = CPUWeightSyncClient(base_url=base_url)
    path = f"{model_dir}/model.safetensors"
    refused = client.session.post(
        f"{client.base_url}/collective_rpc", json={"method": cpu_weights.LOAD_METHOD, "args": [path]}
    )
    assert refused.status_code == 200
    (answer,) = refused.json()["results"]
    assert (
        answer["error"].startswith("PermissionError: weight files are named by their bare name")
        and path in answer["error"]
    )
    (completion,) = client.generate(prompts=[[50, 43, 51, 61]], max_tokens=2)["completion_ids"]
    assert len(completion) == 2


def listening_tcp_ports(folder: str) -> list[int]:
    """The TCP ports the server started on `folder` listens on, in all its processes (found by their environment)."""
    inodes = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if f"{FOLDER_ENV}={folder}".encode() not in handle.read().split(b"\0"):
                    continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                inodes.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            for line in handle.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and f"socket:[{fields[9]}]" in inodes:  # LISTEN
                    ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def as_nobody(attempt):
    """What `attempt()` returns (JSON), run in a child process as user nobody: another local user."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no torch, no threads of the parent's, only sockets
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            result = attempt()
        except BaseException as error:
            result = f"raised {type(error).__name__}: {error}"
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        result = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return result


def _has_nobody() -> bool:
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return True


@pytest.mark.skipif(os.geteuid() != 0 or not _has_nobody(), reason="acting as user nobody needs root and that user")
def test_another_local_user_cannot_call_the_server(vllm_server, tmp_path):
    # Another local user tries what vLLM's development endpoint allows (`/collective_rpc` calls any worker method):
    # writing the served weights into a folder of theirs, and loading weights from it. The server's socket cannot be
    # opened, and none of the TCP ports its processes listen on (torch's, between its own processes) speaks HTTP.
    base_url, _ = vllm_server
    socket_path = socket_of(base_url)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    theirs.chmod(0o777)
    calls = [
        {"method": "save_sharded_state", "kwargs": {"path": str(theirs)}},
        {"method": "reload_weights", "kwargs": {"weights_path": str(theirs)}},
    ]
    ports = listening_tcp_ports(os.path.dirname(socket_path))
    assert 8000 not in ports

    def attempt():
        answers = {}
        for index, call in enumerate(calls):
            body = json.dumps(call)
            request = (
                f"POST /collective_rpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
            ).encode()
            for where in [socket_path, *ports]:
                family = socket.AF_UNIX if where == socket_path else socket.AF_INET
                with socket.socket(family, socket.SOCK_STREAM) as sock:
                    sock.settimeout(3)
                    try:
                        sock.connect(where if where == socket_path else ("127.0.0.1", where))
                        sock.sendall(request)
                        answer = sock.recv(64).decode(errors="replace")
                    except OSError as error:
                        answer = type(error).__name__
                answers[f"{index} {where}"] = answer
        return answers

    answers = as_nobody(attempt)
    assert answers[f"0 {socket_path}"] == answers[f"1 {socket_path}"] == "PermissionError"
    assert not any(answer.startswith("HTTP") for answer in answers.values()), answers
    assert list(theirs.iterdir()) == []  # nothing written there
    client = CPUWeightSyncClient(base_url=base_url)  # and the server still serves its user
    (completion,) = client.generate(prompts=[[50, 43, 51, 61]], max_tokens=2)["completion_ids"]
    assert len(completion) == 2
