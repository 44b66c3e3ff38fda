"""The CPU server's private folder: where its socket listens and the trainer's weight files pass, for its user alone.

vLLM's development endpoints, through which a CPU trainer sends its weights, have no authentication: `/collective_rpc`
calls any method of the server's workers by name. coba-trl's CPU server therefore listens on a Unix socket and nowhere
else, in a folder of its user's that no one else may open (mode 0700): connecting to a Unix socket needs the right to
enter every folder on its path, so other local users cannot reach the server at all.

- **Where.** `default_folder()`: `$XDG_RUNTIME_DIR/coba-trl` (the login's own runtime folder, private by definition),
  else `~/.cache/coba-trl`. Both sit in a folder only their user can write to, so no one else can create the name
  first (a fixed name in the shared temporary folder could be taken by another user, and every sync would then fail).
  Server and trainer derive it alike, so neither needs a setting; the server is told its folder at start.
- **The folder** is opened without following a link and checked on the open handle: a folder of this user's that no
  one else may enter (`open_private_folder`).
- **A weight file** is named by its bare name in that folder and opened once, relative to the folder's handle,
  without following a link and without blocking (a FIFO would block the reader): the open file must be a regular
  file of this user's with one link (a hard link to a file elsewhere has two) and a size between 1 byte and this
  machine's memory. Its bytes are read from that handle; nothing is opened again by its path (`read_weight_file`).
"""

from __future__ import annotations

import errno
import os
import stat

FOLDER_ENV = "COBA_TRL_SERVER_FOLDER"  # the folder a server is started with, for its worker extension
SOCKET_NAME = "vllm.sock"
WEIGHTS_PREFIX, WEIGHTS_SUFFIX = "weights-", ".safetensors"


def default_folder() -> str:
    """This user's folder for the CPU server: `$XDG_RUNTIME_DIR/coba-trl`, else `~/.cache/coba-trl` (module
    docstring)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "coba-trl")
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise PermissionError(
            "coba-trl's CPU server needs a private folder: set XDG_RUNTIME_DIR or HOME to a folder of yours, or pass "
            "--folder to the server and unix:FOLDER/vllm.sock as the trainer's vllm_server_base_url."
        )
    return os.path.join(home, ".cache", "coba-trl")


def make_private_folder(path: str) -> str:
    """Create `path` with mode 0700 where it is missing (its parent too, 0700), check it (`open_private_folder`) and
    that no one else can write to its parent (who could rename it away); returns its absolute path."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    info = os.stat(parent)
    if info.st_uid not in (os.getuid(), 0) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            f"{parent} is writable by other users: the CPU server's private folder {path} cannot be kept there. "
            "Pass --folder with a path inside a folder of yours."
        )
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    os.close(open_private_folder(path))
    return path


def open_private_folder(path: str) -> int:
    """A handle on the folder `path` (not a link), after checking on it that it is this user's and that no one else
    may enter it (mode 0700); raises PermissionError naming the fix otherwise."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError:  # a link (O_NOFOLLOW) or a file
        handle = None
    if handle is not None:
        info = os.fstat(handle)
        if info.st_uid == os.getuid() and not info.st_mode & 0o077:
            return handle
        os.close(handle)
    raise PermissionError(
        f"{path} must be a folder (not a link) of user {os.getuid()} that only it can open (mode 0700): the CPU "
        "server's socket and the trainer's weights pass through it. Remove it, or pass another --folder."
    )


def check_weight_file_name(name) -> str:
    """`name` when it is the bare name of a weight file (`weights-*.safetensors`, no folder), else raises."""
    if (
        not isinstance(name, str)
        or os.sep in name
        or "\0" in name
        or not (name.startswith(WEIGHTS_PREFIX) and name.endswith(WEIGHTS_SUFFIX))
    ):
        raise PermissionError(
            f"weight files are named by their bare name in the server's private folder "
            f"({WEIGHTS_PREFIX}*{WEIGHTS_SUFFIX}, no folder); refused: {name!r}."
        )
    return name


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def read_weight_file(folder: int, name: str) -> bytes:
    """The bytes of the weight file `name` in the folder whose handle is `folder`, read from one open handle after
    checking it (module docstring); raises PermissionError (or OSError) naming what was refused."""
    check_weight_file_name(name)
    try:
        handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=folder)
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symbolic link, not followed
            raise PermissionError(f"{name} is a link: weight files must be regular files; refused.") from None
        raise
    try:
        info = os.fstat(handle)
        limit = memory_bytes()
        checks = (
            (not stat.S_ISREG(info.st_mode), "not a regular file"),
            (info.st_uid != os.getuid(), f"owned by user {info.st_uid}, not {os.getuid()}"),
            (info.st_nlink != 1, f"{info.st_nlink} links to one file (a hard link to a file elsewhere)"),
            (info.st_size == 0, "empty"),
            (info.st_size > limit, f"{info.st_size} bytes, more than this machine's memory ({limit})"),
        )
        problem = next((what for failed, what in checks if failed), None)
        if problem:
            raise PermissionError(f"{name}: {problem}; not a weight file the trainer wrote, refused.")
        chunks, left = [], info.st_size
        while left:
            chunk = os.read(handle, min(left, 1 << 26))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left:
            raise OSError(f"{name} became shorter while it was read ({info.st_size - left} of {info.st_size} bytes).")
        return b"".join(chunks)
    finally:
        os.close(handle)
