"""What another local user could try against the CPU server's weight route, without vLLM: a link flipped in the
folder's path while the server loads, a FIFO or a link in the folder, a hard link to a file elsewhere, the folder's
name taken first; and the server command, which listens on a socket in that private folder and nowhere else."""

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import coba_trl.generation.cpu_weights as cpu_weights
from coba_trl.generation import cpu_server
from coba_trl.generation.cpu_weights import EXTENSION, CPUWeightSync, CPUWeightSyncClient, client_base_url
from coba_trl.generation.private_folder import (
    FOLDER_ENV,
    SOCKET_NAME,
    default_folder,
    make_private_folder,
    open_private_folder,
)
from coba_trl.generation.unix_http import socket_of, socket_url

NAME = "weights-a.safetensors"


@pytest.fixture
def extension(monkeypatch):
    """The server's extension, its engine's loader replaced by a list of the weights it was handed."""
    loaded = []
    monkeypatch.setattr(cpu_weights, "load_weights", lambda runner, weights: loaded.append(dict(weights)))
    extension = CPUWeightSync()
    extension.model_runner, extension.loaded = None, loaded
    return extension


def weight_file(path, value: float) -> None:
    save_file({"w": torch.full((4,), value)}, str(path))


def test_a_link_flipped_in_the_folders_path_never_loads_a_file_elsewhere(tmp_path, extension, monkeypatch):
    # The folder's path runs through a link that flips between this user's private folder and another folder
    # (readable by others, as another user's would be) holding a file of the same name: whatever the timing, the
    # file loaded is the private one, or none (refused).
    private = make_private_folder(str(tmp_path / "mine" / "server"))
    weight_file(os.path.join(private, NAME), 1.0)
    elsewhere = tmp_path / "theirs" / "server"
    elsewhere.mkdir(parents=True, mode=0o755)
    weight_file(elsewhere / NAME, 2.0)
    link = tmp_path / "link"
    os.symlink(tmp_path / "mine", link)
    monkeypatch.setenv(FOLDER_ENV, str(link / "server"))
    flip = f"""
import os
link, turn = {str(link)!r}, 0
while True:
    turn = 1 - turn
    os.symlink({str(tmp_path)!r} + ("/mine", "/theirs")[turn], link + ".next")
    os.replace(link + ".next", link)
"""
    flipper = subprocess.Popen([sys.executable, "-c", flip])  # another process, as another user's would be
    try:
        answers = [extension.coba_load_weights_file(NAME) for _ in range(2000)]
    finally:
        flipper.kill()
        flipper.wait()
    refused = sum("error" in answer for answer in answers)
    assert refused and extension.loaded  # the flips met the loads
    assert all(weights["w"].eq(1.0).all() for weights in extension.loaded)


def test_links_and_fifos_in_the_folder_are_refused_at_once(tmp_path, extension, monkeypatch):
    private = make_private_folder(str(tmp_path / "server"))
    monkeypatch.setenv(FOLDER_ENV, private)
    for outside in ("linked", "hard-linked"):
        weight_file(tmp_path / f"{outside}.safetensors", 2.0)
    os.symlink(tmp_path / "linked.safetensors", os.path.join(private, "weights-link.safetensors"))
    os.link(tmp_path / "hard-linked.safetensors", os.path.join(private, "weights-hard.safetensors"))  # 2 links
    os.mkfifo(os.path.join(private, "weights-fifo.safetensors"))  # opened for reading, it would wait for a writer
    answers = {}
    for name in ("weights-link.safetensors", "weights-hard.safetensors", "weights-fifo.safetensors"):
        caller = threading.Thread(
            target=lambda name=name: answers.update({name: extension.coba_load_weights_file(name)})
        )
        caller.start()
        caller.join(timeout=60)  # a call that blocks never answers (and would hold the server)
        blocked = caller.is_alive()
        if blocked:  # let it go: open the FIFO's other end
            os.close(os.open(os.path.join(private, name), os.O_WRONLY | os.O_NONBLOCK))
            caller.join()
        assert not blocked, name
    assert answers["weights-link.safetensors"]["error"].endswith(
        "is a link: weight files must be regular files; refused."
    )
    assert "2 links to one file (a hard link to a file elsewhere)" in answers["weights-hard.safetensors"]["error"]
    assert "not a regular file" in answers["weights-fifo.safetensors"]["error"]
    assert extension.loaded == []


def test_only_bare_names_in_the_folder_are_loaded(tmp_path, extension, monkeypatch):
    # The server's development endpoint takes any string: a path, a `..` or a subfolder is refused before any open.
    private = make_private_folder(str(tmp_path / "server"))
    monkeypatch.setenv(FOLDER_ENV, private)
    weight_file(tmp_path / NAME, 2.0)
    for name in (str(tmp_path / NAME), f"../{NAME}", f"sub/{NAME}", "/etc/passwd", "..", "weights-.safetensors\0"):
        error = extension.coba_load_weights_file(name)["error"]
        assert error.startswith("PermissionError: weight files are named by their bare name") and repr(name) in error
    assert extension.loaded == []


def test_a_folder_taken_under_the_old_fixed_name_does_not_stop_the_sync(tmp_path, extension, monkeypatch):
    # Another user could create `coba-trl-weights-<uid>` in the shared temporary folder first. The server's folder
    # is under this user's own runtime folder (or home), which no one else can write to.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for taken in (f"coba-trl-weights-{os.getuid()}", f"coba-trl-{os.getuid()}", "coba-trl"):
        (tmp_path / taken).mkdir(mode=0o777)  # taken: open to all, and another user's where the test can say so
        if os.getuid() == 0:
            os.chown(tmp_path / taken, 65534, 65534)
    folder = make_private_folder(default_folder())  # as the server command does at start
    monkeypatch.setenv(FOLDER_ENV, folder)
    client = object.__new__(CPUWeightSyncClient)  # the trainer's: this user's default socket, and its folder
    client.socket_path = socket_of(client_base_url(None, "0.0.0.0", 8000))
    client.folder, client.base_url = os.path.dirname(client.socket_path), socket_url(client.socket_path)
    client._post = lambda url, json: {"results": [extension.coba_load_weights_file(*json["args"])]}
    client.update_named_params(None, iter([("w", torch.ones(3))]))
    assert [list(weights) for weights in extension.loaded] == [["w"]]


def test_the_folder_is_this_users_alone(tmp_path):
    folder = make_private_folder(str(tmp_path / "server"))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    os.chmod(folder, 0o750)  # others (its group) could enter it
    with pytest.raises(PermissionError, match=r"must be a folder \(not a link\) of user \d+ that only it can open"):
        open_private_folder(folder)
    os.rmdir(folder)
    os.symlink(make_private_folder(str(tmp_path / "real")), folder)  # a link, even to a private folder
    with pytest.raises(PermissionError, match="not a link"):
        make_private_folder(folder)
    (tmp_path / "shared").mkdir(mode=0o777)
    os.chmod(tmp_path / "shared", 0o1777)  # like /tmp: another user could rename the folder away, or take its name
    with pytest.raises(PermissionError, match="shared is writable by other users"):
        make_private_folder(str(tmp_path / "shared" / "server"))


@pytest.fixture
def started(monkeypatch):
    """What the server command would run: (command, environment, umask), instead of running it."""
    calls, umask = [], os.umask(0o022)

    def execve(path, command, env):  # with the umask the server would start with
        calls.append((command, env, os.umask(umask)))

    monkeypatch.setattr(os, "execve", execve)
    yield calls
    os.umask(umask)


@pytest.fixture
def short_tmp_path():
    """A temporary folder with a short path: pytest's `tmp_path` grows with its run counter and the test's name, and
    can pass the length a Unix socket's path may have."""
    folder = tempfile.mkdtemp(prefix="coba")
    yield Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_the_server_command_listens_on_a_socket_in_the_private_folder_only(short_tmp_path, started, monkeypatch):
    tmp_path = short_tmp_path
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert (
        cpu_server.server_command("outputs/demo-model")
        == "python -m coba_trl.generation.cpu_server outputs/demo-model"
    )
    cpu_server.main(["outputs/demo-model", "--max-model-len", "64"])
    ((command, env, umask),) = started
    folder = str(tmp_path / "coba-trl")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env[FOLDER_ENV] == env["VLLM_RPC_BASE_PATH"] == folder
    assert umask == 0o077  # what vLLM creates (its own sockets among them) is this user's alone
    assert command[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "outputs/demo-model"]
    flags = dict(zip(command[5::2], command[6::2], strict=True))
    assert flags["--uds"] == os.path.join(folder, SOCKET_NAME)  # vLLM then listens on no TCP port
    assert flags["--worker-extension-cls"] == EXTENSION and flags["--max-model-len"] == "64"
    for flag in ("--host", "--port", "--uds"):
        with pytest.raises(SystemExit) as refused:
            cpu_server.main(["outputs/demo-model", flag, "x"])
        assert refused.value.code == 2


def test_the_server_command_replaces_a_dead_servers_socket_and_refuses_a_live_one(short_tmp_path, started):
    folder = make_private_folder(str(short_tmp_path / "server"))
    path = os.path.join(folder, SOCKET_NAME)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(path)  # left behind: no server listens on it
    cpu_server.main(["model", "--folder", folder])
    assert len(started) == 1 and not os.path.exists(path)
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(path)
        live.listen()
        with pytest.raises(SystemExit, match=f"a vLLM server already listens on {path}"):
            cpu_server.main(["model", "--folder", folder])
    assert len(started) == 1
