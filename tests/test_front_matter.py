"""The fast front-matter reader reads exactly what tomllib reads, or hands the text to tomllib.

The corpus: front matters `issue_file.render` writes (titles with quotes, backslashes, tabs,
non-ASCII, extra keys), hand-written ones in every TOML shape hive does not write itself, and
thousands of seeded mutations of both (bytes dropped, doubled, swapped, replaced by TOML's
special characters) — fetched state is hostile, so the odd inputs are the point.
"""

from __future__ import annotations

import random
import tomllib
from datetime import datetime, timezone

import pytest

from hive.errors import BadInput
from hive.state import front_matter, issue_file
from hive.state.issue_file import Issue

TITLES = ["Add JWT login", 'Quote " inside', "Back\\slash", "Tab\there", "Ünïcödé ✓ 日本語",
          "'single' quotes", "#not a comment", "= sign = here", "[brackets]", "{braces}", "trailing space "]


def rendered_fronts() -> list[str]:
    rng = random.Random(20)
    fronts = []
    for k in range(300):
        issue = Issue(
            id=f"hv-{k:06d}", title=rng.choice(TITLES) + f" {k}", status=rng.choice(issue_file.STATUSES),
            priority=rng.randrange(5), type=rng.choice(issue_file.TYPES),
            parent=rng.choice(["", "hv-aaaaaa"]), depends_on=rng.sample(["hv-bbbbbb", "hv-cccccc", "hv-dddddd"], rng.randrange(4)),
            labels=rng.sample(["auth", "api", 'we"ird', "ta\tb", "ünï"], rng.randrange(4)),
            assignee=rng.choice(["", "w-123abc"]), created="2026-11-30T10:00:00Z",
            updated=f"2026-12-{rng.randint(1, 28):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:00Z",
            extra=rng.choice([{}, {"estimate": 3}, {"owner": "someone"}, {"ratio": 0.5}, {"flag": True}]))
        front, _, _ = issue_file.split(issue_file.render(issue), "x")
        fronts.append(front)
    return fronts


HAND_WRITTEN = [
    'title = "x"\n# a comment\nstatus = "open"',
    'title = "x"  # trailing comment',
    'title="x"',
    'title = "x"\n\nstatus = "open"',
    'title = "x"\ntitle = "y"',
    'title = """multi\nline"""',
    "title = 'literal'",
    'title = "x"\npriority = -1',
    'title = "x"\npriority = +1',
    'title = "x"\npriority = 01',
    'title = "x"\npriority = 1_000',
    'title = "x"\npriority = 0x1f',
    'title = "x"\npriority = 99999999999999999999999',
    'title = "x"\ncreated = 2026-13-01T10:00:00Z',
    'title = "x"\ncreated = 2026-02-30T10:00:00Z',
    'title = "x"\ncreated = 2026-11-30T25:00:00Z',
    'title = "x"\ncreated = 2026-11-30T10:00:60Z',
    'title = "x"\ncreated = 2026-11-30 10:00:00Z',
    'title = "x"\ncreated = 2026-11-30T10:00:00+02:00',
    'title = "x"\ncreated = 2026-11-30T10:00:00.5Z',
    'title = "x"\ncreated = 2026-11-30T10:00:00z',
    'title = "x"\ncreated = 2026-11-30',
    'title = "x"\nlabels = ["a","b"]',
    'title = "x"\nlabels = ["a", "b",]',
    'title = "x"\nlabels = [ "a" ]',
    'title = "x"\nlabels = ["a", 1]',
    'title = "x"\nlabels = [["a"]]',
    'title = "x"\nlabels = ["a",\n"b"]',
    'title = "x"\nlabels = []',
    'title = "x"\nlabels = [ ]',
    'title = "x"\n[table]\nkey = 1',
    'title = "x"\ninline = {a = 1}',
    'title = "x"\nflag = true',
    'title = "x"\nratio = 1.5',
    '"title" = "quoted key"',
    'a.b = "dotted"',
    'title = "x\\u00e9"',
    'title = "x\\"y"',
    'title = "x\x01y"',
    'title = "x\x7fy"',
    'title = "x\ry"',
    'title = "x"\r\nstatus = "open"',
    'title = "unterminated',
    'title = ',
    ' = "no key"',
    'title = "x" extra',
    'title = "x"\n',
    '',
    '\n',
    'ti tle = "x"',
    'tïtle = "x"',
    'title = "x"\nstatus = "open"\nstatus = "done"',
]

SPECIALS = ['"', "'", "\\", "\n", "\r", "\t", "\x00", "#", "=", "[", "]", "{", "}", ",", " ", "T", "Z", ":", "-", "0", "9", "é"]


def mutations(fronts: list[str], count: int) -> list[str]:
    rng = random.Random(21)
    found = []
    for _ in range(count):
        text = rng.choice(fronts)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            kind = rng.randrange(4)
            if kind == 0:
                text = text[:at] + text[at + 1:]
            elif kind == 1:
                text = text[:at] + rng.choice(SPECIALS) + text[at:]
            elif kind == 2:
                text = text[:at] + rng.choice(SPECIALS) + text[at + 1:]
            else:
                text = text[:at] + text[at:at + 8] + text[at:]
        found.append(text)
    return found


def tomllib_reading(text: str) -> dict | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def same(a: object, b: object) -> bool:
    """Equal, and of the same types all the way down (1 == True, and naive == aware fails)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)   # type: ignore[union-attr,index]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))   # type: ignore[arg-type]
    if isinstance(a, datetime):
        return a == b and a.tzinfo == b.tzinfo and a.utcoffset() == b.utcoffset()   # type: ignore[union-attr]
    return a == b


def check(text: str) -> bool:
    """Whether the fast reader took `text`; fails the test if it read it otherwise than tomllib."""
    fast = front_matter.read(text)
    if fast is None:
        return False
    expected = tomllib_reading(text)
    assert expected is not None, f"fast reader accepted what tomllib refuses: {text!r}"
    assert same(fast, expected), f"fast reader differs from tomllib on {text!r}: {fast!r} != {expected!r}"
    return True


def test_hive_written_front_matter_is_read_fast_and_equal_to_tomllib() -> None:
    fronts = rendered_fronts()
    taken = [check(f) for f in fronts]
    # what render writes for plain values is the reader's whole point: most must take the fast way
    plain = [f for f in fronts if "\\" not in f and "ratio" not in f and "flag" not in f]
    assert all(check(f) for f in plain) and sum(taken) >= len(plain) > 50


@pytest.mark.parametrize("text", HAND_WRITTEN)
def test_other_shapes_are_left_to_tomllib_or_read_the_same(text: str) -> None:
    check(text)


def test_shapes_hive_does_not_write_go_to_tomllib() -> None:
    for text in ('title = "x"\n# c', 'title = "x"\ntitle = "y"', 'title = "x"\ncreated = 2026-02-30T10:00:00Z',
                 'title = "x\\"y"', "title = 'x'", 'title = "x"\nflag = true'):
        assert front_matter.read(text) is None, text


def test_mangled_front_matters_never_read_otherwise_than_tomllib() -> None:
    fronts = rendered_fronts() + [t for t in HAND_WRITTEN if t]
    corpus = mutations(fronts, 4000)
    taken = sum(check(text) for text in corpus)
    assert 0 < taken < len(corpus)     # both ways were exercised


def test_parse_reports_the_same_problems_either_way() -> None:
    # a file tomllib refuses still fails with file:line, whichever reader looked first
    with pytest.raises(BadInput, match=r"issues/hv-aaaaaa.md:3: broken TOML front matter"):
        issue_file.parse('+++\ntitle = "x"\ntitle = "y"\n+++\n', "hv-aaaaaa")
    issue = issue_file.parse('+++\ntitle = "x"\ncreated = 2026-11-30T10:00:00Z\n+++\nbody\n', "hv-aaaaaa")
    assert issue.created == "2026-11-30T10:00:00Z" and issue.title == "x"
    assert front_matter.read('created = 2026-11-30T10:00:00Z')["created"].tzinfo is timezone.utc


def test_the_layout_render_writes_is_matched_whole_and_read_as_tomllib_reads_it() -> None:
    rendered_layout = front_matter._rendered_matchers()[0]
    whole = [f for f in rendered_fronts() if rendered_layout(f) is not None]
    assert len(whole) > 10 and all(check(f) for f in whole)
    # the one-match way and the line-by-line way give the same dict, key order included
    for front in whole:
        assert list(front_matter.read(front).items()) == list(tomllib.loads(front).items())


def reference_split(text: str) -> tuple[str, str, int] | None:
    """`issue_file.split` as it was written before its fast path: line by line."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "+++":
        return None
    for number in range(1, len(lines)):
        if lines[number].rstrip("\r") == "+++":
            return "\n".join(lines[1:number]), "\n".join(lines[number + 1:]).lstrip("\n"), 2
    return None


def test_split_finds_the_same_front_matter_and_body_as_a_line_by_line_reading() -> None:
    files = [issue_file.render(Issue(id="hv-aaaaaa", title=f"t {k}", body=body))
             for k, body in enumerate(["", "one line\n", "+++\n", "a\n+++x\n+++\r\nb", "\n\n\nb\r\n"])]
    files += ["+++\n+++", "+++\n+++\r", "+++\n+++\r\r\nx", "+++\n+++ \nx\n+++\ny", "+++\r\na = 1\n+++\n",
              "\ufeff+++\na = 1\n+++\nbody", "+++\na = 1\n++++\n", "+++\na = 1", "+++", "+++\n", "x\n+++\n+++\n"]
    corpus = files + [text for text in mutations(files, 3000) if text]
    for text in corpus:
        expected = reference_split(text)
        if expected is None:
            with pytest.raises(BadInput):
                issue_file.split(text, "x")
        else:
            assert issue_file.split(text, "x") == expected, repr(text)


def test_format_time_writes_what_strftime_writes() -> None:
    rng = random.Random(23)
    for _ in range(3000):
        value = datetime(rng.choice([1, 999, 1000, 2026, 9999]), rng.randint(1, 12), rng.randint(1, 28),
                         rng.randrange(24), rng.randrange(60), rng.randrange(60),
                         rng.choice([0, 0, 1, 999999]), tzinfo=timezone.utc)
        assert issue_file.format_time(value) == value.strftime("%Y-%m-%dT%H:%M:%SZ"), value


def test_toml_depth_of_bytes_is_that_of_their_replacement_decoding() -> None:
    deep = "+++\ntitle = \"x\"\nnested = " + "[" * 20 + "]" * 20 + "\n+++\n"
    texts = [deep, deep.replace("[", "{", 5), "+++\na = \"[[[[\"\n+++\n" + "[" * 40, "[" * 30]
    corpus = [t.encode() for t in mutations(texts, 2000)]
    corpus += [b"\xff[" * 20, b"+++\n" + b"\xe2[" * 17 + b"\n+++\n", b"\xf0\x9f[[" * 10, b"\xc3" + b"[" * 17]
    assert any(issue_file.toml_depth(data) > issue_file.MAX_TOML_DEPTH for data in corpus)
    for data in corpus:
        assert issue_file.toml_depth(data) == issue_file.toml_depth(data.decode("utf-8", "replace")), data


def _tomlkit_update(front: str, changes: dict[str, object]) -> str:
    """`update_text`'s tomlkit path, taken whatever the fast path would do."""
    import tomlkit

    doc = tomlkit.parse(front)
    for key, value in changes.items():
        if value is None:
            if key in doc:
                del doc[key]
            continue
        doc[key] = issue_file._toml_value(key, value)
    return tomlkit.dumps(doc)


def _file(front: str) -> str:
    return f"+++\n{front.rstrip(chr(10))}\n+++\n\nbody\n"


FINALIZE = {"status": "finalized", "merged": "0810cca07cae9501cdae8026324ae9a68a3e3cc7", "landing": None}


@pytest.mark.parametrize("changes", [FINALIZE, {"status": "done", "landing": "ab" * 20},
                                     {"assignee": "w-123abc", "updated": "2026-12-03T10:00:00Z"}])
def test_a_new_key_and_a_deletion_of_an_absent_one_write_what_tomlkit_writes(changes: dict[str, object]) -> None:
    for front in rendered_fronts()[:60] + ['title = "x"\nstatus = "done"\n# a comment\n', 'title = "x"\n\n\n']:
        assert issue_file._replace_in_place(front, changes) is not None, front   # the fast path
        assert issue_file.update_text(_file(front), changes, "x") == _file(_tomlkit_update(front, changes)), front


def test_a_new_key_beside_a_table_or_a_deletion_of_a_present_one_goes_through_tomlkit() -> None:
    table = 'title = "x"\nstatus = "done"\n\n[extra]\nowner = "someone"\n'
    present = 'title = "x"\nstatus = "done"\nlanding = "old"\n'
    for front in (table, present):
        assert issue_file._replace_in_place(front, FINALIZE) is None
        text = issue_file.update_text(_file(front), FINALIZE, "x")
        assert text == _file(_tomlkit_update(front, FINALIZE))
        assert "landing" not in text and 'merged = "0810cca07cae' in text


def _tomlkit_render(issue: Issue) -> str:
    """`render`'s tomlkit path, taken whatever the plain path would do."""
    import tomlkit

    doc = tomlkit.document()
    for key in issue_file.KNOWN_FIELDS:
        value = getattr(issue, key)
        if key in issue_file.OPTIONAL_FIELDS and not value:
            continue
        doc[key] = issue_file._toml_value(key, value)
    for key, value in issue.extra.items():
        doc[key] = value
    body = issue.body if issue.body.endswith("\n") or not issue.body else issue.body + "\n"
    return f"+++\n{tomlkit.dumps(doc)}+++\n\n{body}"


def test_a_new_file_is_written_as_tomlkit_writes_it_with_or_without_tomlkit() -> None:
    """`render` without tomlkit when every value is plain: the same text, byte for byte; quotes,
    backslashes, control characters, other keys and other times go through tomlkit."""
    rng = random.Random(7)
    alphabet = "abcXYZ019 -_.:/é漢😀'`"

    def text() -> str:
        extra = '"\\\n\t\x7f' if rng.random() < 0.15 else ""
        return "".join(rng.choice(alphabet + extra) for _ in range(rng.randint(0, 24)))

    plain = 0
    for _ in range(400):
        issue = Issue(id="hv-abc123", title=text() or "t", status=rng.choice(["open", "done"]),
                      priority=rng.randint(0, 4), type="task", parent=rng.choice(["", "hv-epic01"]),
                      depends_on=[text() for _ in range(rng.randint(0, 3))],
                      labels=[text() for _ in range(rng.randint(0, 2))], touches=[text() for _ in range(rng.randint(0, 2))],
                      assignee=rng.choice(["", "w-1a2b3c"]), created="2026-11-30T10:00:00Z",
                      updated=rng.choice(["2026-12-01T11:22:33Z", "2026-12-01T11:22:33.5+01:00"]), body=text(),
                      extra=rng.choice([{}, {}, {"owner": "someone"}]))
        plain += issue_file._render_plain(issue) is not None
        assert issue_file.render(issue) == _tomlkit_render(issue)
        assert tomllib.loads(issue_file.split(issue_file.render(issue), "x")[0])["title"] == issue.title
    assert 40 < plain < 360   # both paths taken
