"""Before any training: a run that pushes to the Hub needs a token and a reachable Hub."""

from __future__ import annotations


def check_hub_access(push_to_hub: bool, hub_token: str | None) -> None:
    """Before any training: a run that pushes to the Hub needs a token and a reachable Hub."""
    if not push_to_hub:
        return
    from huggingface_hub import constants, get_token, whoami

    fix = "Log in with `hf auth login` (or set HF_TOKEN) on a machine with network access, or drop --push_to_hub."
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"push_to_hub is set, but HF_HUB_OFFLINE is set too, so nothing can reach the Hub. {fix}")
    token = hub_token or get_token()
    if token is None:
        raise ValueError(f"push_to_hub is set, but no Hugging Face token was found (hub_token, HF_TOKEN). {fix}")
    try:
        whoami(token=token)
    except Exception as error:
        raise ValueError(
            f"push_to_hub is set, but the Hub did not accept the token or could not be reached ({error}). {fix}"
        ) from error
