"""The batch-composition stage's trials as the record half knows them, none of it sending a request:
the text the other prompts are cut from (`other_texts`), the prompts of one trial (`trial_prompts`,
deterministic: a rerun sends the same batches), the requests a profile plans (`planned`) and the
stage's inputs checked before a bench starts (`_inputs`). `suite.stages.batch.run` sends the trials;
a mode's answers are compared with the reference by `suite.stages.batch.result`."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from suite.stages.batch.result import Mode
from suite.stages.batch.settings import batch_prompt, settings

if TYPE_CHECKING:
    from suite.profiles import Profile

# The other prompts' lengths in characters, from a few words to a few pages: a batch mixes
# prefill-heavy and decode-heavy requests (cycled, then shuffled per trial).
OTHER_LENGTHS = (40, 160, 600, 1400, 2400)


def other_texts() -> str:
    """The text the other prompts are cut from: the shipped extraction documents, joined."""
    from suite.stages.extraction import load_documents

    return "\n\n".join(s.text.strip() for d in load_documents() for s in d.sections)


def trial_prompts(mode: Mode, trial: int, target: str, size: int, corpus: str,
                  seed: int = 0) -> tuple[list[str], int, int | None]:
    """The prompts of one trial in sending order, the target's place, and (prefix mode) the
    longest shared prefix. Deterministic in (mode, trial, seed): a rerun sends the same batches."""
    if mode == "single" or size <= 1:
        return [target], 0, None
    rng = random.Random(f"{seed}:{mode}:{trial}")
    n_other = size - 1
    others: list[str] = []
    shared: list[int] = []
    for k in range(n_other):
        length = OTHER_LENGTHS[(trial + k) % len(OTHER_LENGTHS)]
        start = rng.randrange(0, max(1, len(corpus) - length))
        piece = corpus[start:start + length]
        if mode == "prefix":
            # a shared prefix from the first word to the whole target, then other text
            cut = max(1, round(len(target) * (k + 1) / n_other))
            cut = min(len(target), cut)
            shared.append(cut)
            piece = target[:cut] + (" " if cut < len(target) else "\n") + piece
        others.append(piece)
    position = (trial * 7 + 3) % size if size > 1 else 0
    prompts = others[:position] + [target] + others[position:]
    return prompts, position, max(shared) if shared else None


def planned(profile: Profile) -> int:
    own = settings(profile)
    sizes = own.sizes or [2]
    per_mode = sum(sizes[t % len(sizes)] for t in range(own.trials))
    return own.trials + 2 * per_mode


def _inputs(profile: Profile) -> object:
    other_texts()
    return batch_prompt(profile)
