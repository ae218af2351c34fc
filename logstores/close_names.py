"""Close matches of a store name that resolves to nothing, for "Did you mean ...?" hints.

Names come in two shapes: short names (aliases such as ``s3-single-driver``, plugin names) and
class paths (``io.delta.storage.S3SingleDriverLogStore``, ``logstores.s3:S3LogStore``). Short names
are compared whole with :mod:`difflib`. A class path is compared by its class name, the part after
the last ``.`` or ``:``: every store class ends in ``LogStore``, so two class names are close when
what comes before that suffix is (``GCS`` and ``HDFS`` are not, however alike ``GCSLogStore`` and
``HDFSLogStore`` look to a plain ratio), or when the whole class names are nearly equal (a typo in
the suffix). Packages only rank the matches: ``io.delta.storage.S3LogStore`` gets
``logstores.s3.S3LogStore``, and no other store whose path merely shares the package.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

SUFFIX = "logstore"
SHORT_NAME_CUTOFF = 0.6  # difflib's default
STEM_CUTOFF = 0.75
CLASS_NAME_CUTOFF = 0.9
SUFFIX_CUTOFF = 0.8


def close_matches(name: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` candidates close to ``name``, best first, compared without regard to case."""
    name = name.strip()
    scored: list[tuple[float, float, str]] = []
    for candidate in dict.fromkeys(candidates):
        score = _score(name.lower(), candidate.lower())
        if score is not None:
            scored.append((*score, candidate))
    scored.sort(key=lambda entry: (-entry[0], -entry[1], entry[2]))
    return [candidate for _, _, candidate in scored[:limit]]


def _score(name: str, candidate: str) -> tuple[float, float] | None:
    """(closeness of the class names, of the whole names), or None when not close."""
    whole = _ratio(name, candidate)
    if not _is_path(name) and not _is_path(candidate):
        return (whole, whole) if whole >= SHORT_NAME_CUTOFF else None
    name_class, candidate_class = _class_name(name), _class_name(candidate)
    stems = _ratio(_stem(name_class), _stem(candidate_class))
    classes = _ratio(name_class, candidate_class)
    if stems >= STEM_CUTOFF or classes >= CLASS_NAME_CUTOFF:
        return max(stems, classes), whole
    return None


def _is_path(name: str) -> bool:
    return "." in name or ":" in name


def _class_name(name: str) -> str:
    return name.replace(":", ".").rsplit(".", 1)[-1]


def _stem(class_name: str) -> str:
    """``class_name`` without its ``LogStore`` suffix, also when the suffix is misspelled."""
    best, cut = 0.0, len(class_name)
    for index, char in enumerate(class_name):
        if char == SUFFIX[0]:
            ratio = _ratio(class_name[index:], SUFFIX)
            if ratio >= best:
                best, cut = ratio, index
    return class_name[:cut] if best >= SUFFIX_CUTOFF else class_name


def _ratio(first: str, second: str) -> float:
    return difflib.SequenceMatcher(None, first, second).ratio()
