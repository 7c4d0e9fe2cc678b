"""Numbers as the product's sentences and labels write them: a count with its noun in the right
number ("1 block", "2 blocks"), a size in bytes with the unit that reads best ("36 B", "160.0 KB"),
and the article a number takes when it is said ("an 8-step tree", "a 5-step tree"). One home for
the words around a number, so that no label reads "1 blocks/SM" or "0.0 KB"."""
from __future__ import annotations

from .gpus import KB, MB


def count(n: int | float, noun: str, plural: str | None = None) -> str:
    """``n`` and its noun, singular for exactly one: ``count(1, "block")`` = "1 block",
    ``count(16384, "block")`` = "16,384 blocks" (``plural`` where adding "s" is wrong)."""
    many = plural if plural is not None else f"{noun}s"
    number = f"{n:,}" if isinstance(n, int) else f"{n:,g}"
    return f"{number} {noun if n == 1 else many}"


def byte_size(n: int) -> str:
    """A size in bytes, to a tenth in the largest unit it fills (1 KB = 1,024 bytes, as the CUDA
    documentation counts shared memory): "36 B", "1,000 B", "1.0 KB", "160.0 KB", "1.5 MB"."""
    if n < KB:
        return f"{n:,} B"
    if n < MB:
        return f"{n / KB:,.1f} KB"
    return f"{n / MB:,.1f} MB"


def article(n: int) -> str:
    """The article of ``n`` said aloud: "an" where its name starts with a vowel (eight, eleven,
    eighteen, eighty…: "an 8-step tree", "an 11-way conflict"), else "a"."""
    digits = str(abs(int(n)))
    leading = digits[:len(digits) % 3 or 3]  # the group said first: 11 of 11,000, 8 of 8,192
    return "an" if leading.startswith("8") or leading in ("11", "18") else "a"
