"""One note line on `hive/state` (`notes/<id>.jsonl`): its fields, its size in tokens, its key.

A line is `{"category", "content", "issue", "agent", "at", "attempt", "tokens"}` (DESIGN §2): the
first five since the start, `attempt` (the issue's attempt that wrote it, 1-based; 0 when not an
attempt's: a person, the refinery) and `tokens` (the estimate below when it was written) added by
issue 34. Lines without the new fields read as attempt 0 and get their tokens estimated; a
fetched line's own `tokens` is never trusted for a budget: hive estimates again from the content.

`notes/archive/<id>.jsonl` holds the notes a prune archived (each line as it was, plus
`archived_at` and `archived_why`): still on the branch, merged like any notes file, listed by
`git hive notes --archived`, brought back by `git hive notes restore KEY`.
"""

from __future__ import annotations

import math

BYTES_PER_TOKEN = 3.5   # measured against a Claude BPE tokenizer: docs/PERFORMANCE.md, "Notes"
MAX_ATTEMPT = 1_000     # an attempt number past this is not one hive wrote: read as 0


def estimate_tokens(text: str) -> int:
    """The tokens a text costs in a prompt: UTF-8 bytes / 3.5, rounded up (over, not under)."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def key_of(issue: str, content: str) -> str:
    """A note's stable name: its issue file (`""` for the project's) and its content. The same
    note written twice, or merged back after a prune, has the same key."""
    import hashlib   # here: it loads OpenSSL, which a listing never needs

    digest = hashlib.sha256(f"{issue}\0{content}".encode("utf-8", "surrogatepass")).hexdigest()
    return "n" + digest[:11]


def attempt_of(value: object) -> int:
    """The `attempt` field of a line from anyone, as a bounded int (0 when absent or odd)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_ATTEMPT:
        return 0
    return value
