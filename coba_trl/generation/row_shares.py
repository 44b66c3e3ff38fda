"""Server-mode generation when processes hold different numbers of rows (pure Python, no vLLM needed).

Server mode is a collective: every process gathers its rows to process 0, which asks the server, and broadcasts the
completions. TRL's `VLLMGeneration.generate` then takes process p's completions at `p * len(prompts)`, which is right
only when every process holds as many rows as this one. TRL's tool loop breaks that: it regenerates only the rows
whose completion called a tool, so after the first turn each process holds its own number of rows, and a process
whose rows called no tool leaves the loop while the others still generate (and wait for it in the gather).

Before each server generation every process therefore shares a `Share`: whether it is still generating, its number
of rows, whether they carry images, and one row to pad with. Where the numbers differ, every process's rows are
padded to the largest share (`padding`), so that TRL's `p * len(prompts)` slice is right, and the padding is dropped
afterwards. With one completion per row the padding rows are never generated (`requests.GroupedClient` answers each
with an empty completion); with images, or several completions per row, they are copies of a real row, generated
and dropped. A process done with its tool loop joins the others' generations with no rows until no process is
generating.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Share:
    """What one process brings to a server generation."""

    generating: bool  # False: done with its tool loop, joining the others' generations with no rows
    rows: int
    num_generations: int
    has_images: bool
    pad_row: tuple | None  # (prompt ids, images) of its first row, None without rows


def share_of(prompts: list, images: list | None, num_generations: int, generating: bool = True) -> Share:
    """This process's `Share` of a generation of `prompts` (token ids) and `images` (per row, or None)."""
    has_images = images is not None and any(image is not None for image in images)
    pad_row = (prompts[0], None if images is None else images[0]) if prompts else None
    return Share(generating, len(prompts), num_generations, has_images, pad_row)


def padding(shares: list[Share], rank: int) -> tuple[list, list]:
    """Rows (prompt ids, images) that bring process `rank` to the largest share's number of rows: copies of the first
    row any process holds. Every process's rows are whole groups of `num_generations` identical rows, so a run of
    copies of one row keeps TRL's stride over them."""
    missing = max(share.rows for share in shares) - shares[rank].rows
    if not missing:
        return [], []
    prompt, image = next(share.pad_row for share in shares if share.pad_row is not None)
    return [prompt] * missing, [image] * missing
