"""The check every `hive/state` tree from outside passes before hive adopts it (docs/SECURITY.md).

A tree is read as raw git objects — never through a checkout, never through pygit2's tree
objects, which choke on what git itself refuses to write (zero-padded modes) — and refused whole
at the first entry that breaks a rule:

- names: only the paths the layout defines (`layout.py`): `.gitattributes`, `context.md`,
  `PLAN.md` (a plan's), `issues/<id>.md`, `issues/archive/<xx>/<id>.md` (the shard of that id),
  `notes/<id>.jsonl`, `notes/project.jsonl`, the same in `notes/archive/` (pruned notes) and the
  `.gitkeep`s of `init`. The names a checkout
  could be led out of its folder with (`.`, `..`, `.git` in any case, `/`, `\\`, NUL, control characters) are named
  as such in the refusal;
- modes: folders (040000 written `40000`) and regular non-executable files (100644) only: no
  symlinks, gitlinks, executables, zero-padded or other modes;
- sizes: an issue file at most `issue_file.MAX_ISSUE_BYTES`, a notes file `MAX_NOTES_BYTES`,
  `context.md` `MAX_CONTEXT_BYTES`, and what one adoption brings in at most `MAX_INCOMING_BYTES`
  over `MAX_ENTRIES` entries (sizes read from object headers: nothing is inflated to measure it);
- TOML: an issue file's front matter nested deeper than `issue_file.MAX_TOML_DEPTH` (`tomllib`
  recurses: a few KB of `[[[[…` raised RecursionError).

Only what differs from an already trusted tree (the state adopted before) is looked at: equal
subtrees and equal entries are skipped, so checking a fetch costs what the fetch changed.
Content that breaks no rule but is invalid (broken TOML, a bad status) is adopted, and reported
by the index as a problem like a person's bad edit.
"""

from __future__ import annotations

import heapq
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hive.errors import HiveError, printable  # printable: also trust's own, for its callers
from hive.state import halves, layout, raw_trees
from hive.state.halves import batches
from hive.state.issue_file import MAX_ISSUE_BYTES, MAX_TOML_DEPTH, is_valid_id, toml_depth

if TYPE_CHECKING:
    import pygit2

TREE_MODE = b"40000"
BLOB_MODE = b"100644"
MAX_NOTES_BYTES = 8 << 20
MAX_CONTEXT_BYTES = 1 << 20
MAX_INCOMING_BYTES = 256 << 20        # issue files and context: the bench's 100k-issue queue is over 64 MiB
MAX_INCOMING_NOTES_BYTES = 64 << 20   # notes (each line a row in index.db: files may share one blob)
NOTES_BOUNDS = (f"a notes file holds at most {MAX_NOTES_BYTES} bytes and all of them {MAX_INCOMING_NOTES_BYTES}, "
                "the most another machine takes in")
MAX_ENTRIES = 125_000   # a real 100k-issue queue is ~100,300; memory is tested at this (docs/SECURITY.md)
MAX_NAME_BYTES = 255
MAX_COMMIT_BYTES = 64 << 10       # one commit's headers and message (hive writes a few hundred bytes)
MAX_NEW_COMMITS = 1_000_000       # commits one adoption brings (a fresh clone's whole history)
KEEP_READ_BYTES = 16 << 20        # of the issue files the check read, the bytes handed to the index
PLAN_FILE = "PLAN.md"
KEEP_FILE = ".gitkeep"
COMMIT, TREE, BLOB = 1, 2, 3   # git's object types (pygit2.enums.ObjectType): pygit2 not imported here

_SHARD = re.compile(r"[0-9a-z]{2}\Z")
_MODE_NAMES = {b"120000": "a symlink", b"160000": "a gitlink (submodule)", b"100755": "an executable file",
               b"100664": "a group-writable file mode"}


@dataclass(frozen=True)
class TreeRefused(Exception):
    """The first entry of a tree that breaks a rule: where, and which rule."""

    path: str
    rule: str

    def __str__(self) -> str:
        return f"{printable(self.path) or '/'}: {self.rule}"


class Untrusted(HiveError):
    """A commit from outside that hive refused to adopt: one line naming source, commit, path, rule."""

    def __init__(self, source: str, commit: str, refused: TreeRefused):
        self.source, self.commit, self.refused = source, commit, refused
        super().__init__(f"refused {source} at {commit[:12]}: {refused}")


def check_commit(repo: "pygit2.Repository", commit: str, trusted: str | None, *, source: str,
                 read: dict[str, bytes] | None = None) -> None:
    """Raise Untrusted unless the tree of `commit` keeps every rule; `trusted`: a commit whose
    tree was adopted already (its equal parts are not looked at again). `read`, when given, gets
    the bytes of every issue file the check read (by blob id), for a caller that reads them next:
    once is enough."""
    try:
        tree = _tree_of(repo, commit)
        base = _tree_of(repo, trusted) if trusted else None
    except Exception as exc:  # noqa: BLE001 - pygit2's errors: an unknown or broken object
        raise Untrusted(source, commit, TreeRefused("", f"not a readable commit ({exc})")) from None
    try:
        check_tree(repo, tree, base, read)
        check_history(repo, commit, trusted)
    except TreeRefused as refused:
        raise Untrusted(source, commit, refused) from None


def _tree_of(repo: "pygit2.Repository", commit: str) -> str:
    kind, data = repo.odb.read(commit)
    if kind != COMMIT or not data.startswith(b"tree "):
        raise ValueError(f"{commit} is not a commit")
    return data[5:45].decode("ascii")


_PARENT = re.compile(rb"^parent ([0-9a-f]{40})$", re.MULTILINE)
_COMMITTED = re.compile(rb"^committer [^\n]* (\d+) [+-]\d{4}$", re.MULTILINE)


def check_history(repo: "pygit2.Repository", tip: str, trusted: str | None) -> None:
    """Raise TreeRefused at the first commit reachable from `tip` and not from `trusted` whose
    object (headers and message) is over `MAX_COMMIT_BYTES`, measured from its header before it
    is read: the history readers (`log`, `cost`, `doctor`) read every commit whole. Newest
    first; what `trusted` reaches is found by walking it back as far as the new commits' times
    go (a clock off only makes the walk look at more, already checked, commits)."""
    commits = _Commits(repo)
    new: list[tuple[int, str]] = [(-commits.info(tip)[0], tip)]
    seen = {tip}
    known = _Reached(commits, trusted)
    while new:
        when, oid = heapq.heappop(new)
        if known.reaches(oid, -when):
            continue
        if len(seen) > MAX_NEW_COMMITS:
            raise TreeRefused(f"commit {oid}", f"more than {MAX_NEW_COMMITS} new commits in one state")
        for parent in commits.info(oid)[1]:
            if parent not in seen:
                seen.add(parent)
                heapq.heappush(new, (-commits.info(parent)[0], parent))


@dataclass
class _Commits:
    """Commit objects read as (commit time, parents), each measured from its header first. A
    shallow clone's cut commits (its `shallow` file, written by this machine's git) have no
    parents, as git reads them: the history beyond was never fetched."""

    repo: "pygit2.Repository"
    cache: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    shallow: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        try:
            with open(os.path.join(self.repo.path, "shallow"), encoding="ascii", errors="replace") as listed:
                self.shallow = frozenset(line.strip() for line in listed if line.strip())
        except OSError:
            self.shallow = frozenset()

    def info(self, oid: str) -> tuple[int, list[str]]:
        found = self.cache.get(oid)
        if found is None:
            data = self._read(oid)
            when = _COMMITTED.search(data)
            parents = [] if oid in self.shallow else [p.decode() for p in _PARENT.findall(data)]
            found = self.cache[oid] = (int(when.group(1)) if when else 0, parents)
        return found

    def _read(self, oid: str) -> bytes:
        try:
            kind, size = self.repo.odb.read_header(oid)
        except Exception:  # noqa: BLE001 - pygit2's errors: missing or unreadable
            raise TreeRefused(f"commit {oid}", "a commit that is missing") from None
        if kind != COMMIT:
            raise TreeRefused(f"commit {oid}", "a parent that is not a commit")
        if size > MAX_COMMIT_BYTES:
            raise TreeRefused(f"commit {oid}", f"{size} bytes of headers and message, over the limit "
                                               f"of {MAX_COMMIT_BYTES}")
        return self.repo.odb.read(oid)[1]


class _Reached:
    """The commits `trusted` reaches, walked back (newest first) only as far as asked."""

    def __init__(self, commits: _Commits, trusted: str | None):
        self.commits = commits
        self.seen = {trusted} if trusted else set()
        self.todo = [(-self._info(trusted)[0], trusted)] if trusted else []

    def _info(self, oid: str) -> tuple[int, list[str]]:
        try:
            return self.commits.info(oid)
        except TreeRefused:   # adopted before commits were measured: not walked through
            return 0, []

    def reaches(self, oid: str, when: int) -> bool:
        while self.todo and -self.todo[0][0] >= when and oid not in self.seen:
            _, older = heapq.heappop(self.todo)
            for parent in self._info(older)[1]:
                if parent not in self.seen:
                    self.seen.add(parent)
                    heapq.heappush(self.todo, (-self._info(parent)[0], parent))
        return oid in self.seen


@dataclass
class _Budget:
    total_bytes: int = 0
    notes_bytes: int = 0
    entries: int = 0
    read: dict[str, bytes] | None = None   # the issue files read, kept for the caller
    issue_files: list[tuple[str, str, int]] = field(default_factory=list)   # (path, blob, size): read after the walk


def check_tree(repo: "pygit2.Repository", tree: str, trusted: str | None = None,
               read: dict[str, bytes] | None = None) -> None:
    """Raise TreeRefused at the first entry of `tree` that breaks a rule (module docstring)."""
    budget = _Budget(read=read)
    _check_folder(repo, "", tree, trusted, budget)
    _check_depths(repo, budget)


def _records(repo: "pygit2.Repository", path: str, tree: str) -> list[bytes]:
    """The entry records of a tree object (`raw_trees`), parsed strictly."""
    try:
        return raw_trees.records(repo.odb, tree)
    except raw_trees.MalformedTree:
        raise TreeRefused(path, "a malformed tree object") from None
    except raw_trees.NotATree:
        raise TreeRefused(path, "a folder entry that is not a tree object") from None
    except Exception:  # noqa: BLE001 - pygit2's errors: missing or unreadable
        raise TreeRefused(path, "a folder whose tree object is missing") from None


def _check_folder(repo: "pygit2.Repository", folder: str, tree: str, trusted: str | None,
                  budget: _Budget) -> None:
    if tree == trusted:
        return
    entries = _records(repo, folder, tree)
    budget.entries += len(entries)
    if budget.entries > MAX_ENTRIES:
        raise TreeRefused(folder, f"more than {MAX_ENTRIES} entries")
    changed, replaced = entries, {}
    if trusted:   # only the entries not adopted before are looked at
        before = set(_records(repo, folder, trusted))
        changed = [record for record in entries if record not in before]
        replaced = {name: (mode, raw_id) for mode, name, raw_id in map(raw_trees.split, before.difference(entries))}
    for record in changed:
        mode, raw_name, raw_id = raw_trees.split(record)
        name = _check_name(folder, raw_name)
        path = folder + name
        kind = _check_mode(path, mode)
        _check_place(folder, name, kind)
        oid = raw_id.hex()
        if kind == "tree":
            was = replaced.get(raw_name)
            sub_trusted = was[1].hex() if was is not None and was[0] == TREE_MODE else None
            _check_folder(repo, path + "/", oid, sub_trusted, budget)
        else:
            _check_file(repo, path, oid, budget)


def _check_name(folder: str, raw: bytes) -> str:
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TreeRefused(folder + raw.decode("utf-8", "replace"), "a name that is not UTF-8") from None
    path = folder + name
    if name in ("", ".", ".."):
        raise TreeRefused(path, f"the name {name!r}")
    if name.casefold().rstrip(". ") == ".git":
        raise TreeRefused(path, "a name git keeps for itself (.git)")
    if "/" in name or "\\" in name:
        raise TreeRefused(path, "a name with a slash or backslash")
    if not name.isprintable():
        raise TreeRefused(path, "a name with NUL or control characters")
    if len(raw) > MAX_NAME_BYTES:
        raise TreeRefused(path, f"a name longer than {MAX_NAME_BYTES} bytes")
    return name


def _check_mode(path: str, mode: bytes) -> str:
    if mode == TREE_MODE:
        return "tree"
    if mode == BLOB_MODE:
        return "blob"
    what = _MODE_NAMES.get(mode) or (f"a zero-padded mode {mode.decode()}" if mode.startswith(b"0")
                                      else f"the mode {mode.decode()}")
    raise TreeRefused(path, f"{what}: only folders and regular files (100644)")


def _check_place(folder: str, name: str, kind: str) -> None:
    """Whether the layout defines a `kind` entry `name` in `folder`."""
    if folder == "":
        # PLAN.md: a plan branch's, also on hive/state once a plan is merged on a code host
        wanted = {layout.ATTRIBUTES_FILE: "blob", layout.CONTEXT_FILE: "blob", layout.ISSUES_DIR: "tree",
                  layout.NOTES_DIR: "tree", PLAN_FILE: "blob"}
        ok = wanted.get(name) == kind
    elif folder == layout.ISSUES_DIR + "/":
        ok = (kind == "tree" and folder + name == layout.ARCHIVE_DIR) or (kind == "blob" and _is_issue_name(name))
    elif folder == layout.ARCHIVE_DIR + "/":
        ok = kind == "tree" and bool(_SHARD.match(name))
    elif folder.startswith(layout.ARCHIVE_DIR + "/") and folder.count("/") == 3:
        ok = kind == "blob" and (name == KEEP_FILE or (
            name.endswith(".md") and is_valid_id(name[:-3]) and layout.archive_path(name[:-3]) == folder + name))
    elif folder in (layout.NOTES_DIR + "/", layout.NOTES_ARCHIVE_DIR + "/"):
        ok = (kind == "tree" and folder + name == layout.NOTES_ARCHIVE_DIR) or (kind == "blob" and (
            name == KEEP_FILE or (name.endswith(".jsonl") and (is_valid_id(name[:-6]) or name[:-6] == layout.PROJECT_NOTES))))
    else:
        ok = False
    if not ok:
        what = "folder" if kind == "tree" else "file"
        raise TreeRefused(folder + name, f"a {what} the hive/state layout does not define")


def _is_issue_name(name: str) -> bool:
    return name == KEEP_FILE or (name.endswith(".md") and is_valid_id(name[:-3]))


def _check_file(repo: "pygit2.Repository", path: str, oid: str, budget: _Budget) -> None:
    try:
        kind, size = repo.odb.read_header(oid)
    except Exception:  # noqa: BLE001 - pygit2's errors: missing or unreadable
        raise TreeRefused(path, "a file whose blob is missing") from None
    if kind != BLOB:
        raise TreeRefused(path, "a file entry that is not a blob")
    if path.endswith(".md") and path.startswith(layout.ISSUES_DIR + "/"):
        limit = MAX_ISSUE_BYTES
    elif path.startswith(layout.NOTES_DIR + "/"):
        limit = MAX_NOTES_BYTES
    else:
        limit = MAX_CONTEXT_BYTES
    if size > limit:
        raise TreeRefused(path, f"{size} bytes, over the limit of {limit}")
    if limit == MAX_NOTES_BYTES:
        budget.notes_bytes += size
        if budget.notes_bytes > MAX_INCOMING_NOTES_BYTES:
            raise TreeRefused(path, f"more than {MAX_INCOMING_NOTES_BYTES} bytes of new notes in one state")
    else:
        budget.total_bytes += size
        if budget.total_bytes > MAX_INCOMING_BYTES:
            raise TreeRefused(path, f"more than {MAX_INCOMING_BYTES} bytes of new files in one state")
    if limit == MAX_ISSUE_BYTES:
        budget.issue_files.append((path, oid, size))
    if path == layout.ATTRIBUTES_FILE and repo.odb.read(oid)[1] != layout.ATTRIBUTES.encode():
        raise TreeRefused(path, "attributes other than hive's own (merge=hive for issues and notes)")


def _check_depths(repo: "pygit2.Repository", budget: _Budget) -> None:
    """The TOML depth of every issue file the walk found, read in two processes when there are
    many (a queue taken in whole: inflating 100k blobs from a pack is most of its check), in
    batches of at most `BATCH_BYTES` so that memory stays flat; the bytes of the first
    `KEEP_READ_BYTES` go to the caller (`budget.read`), the rest it reads again."""
    opened: dict[int, "pygit2.Repository"] = {os.getpid(): repo}
    kept = 0

    def measured(item: tuple[str, str, bool]) -> tuple[bytes, int]:
        own = opened.get(os.getpid())
        if own is None:   # a forked child: a repository of its own, not one shared with its parent
            own = opened[os.getpid()] = type(repo)(repo.path)
        data = own.odb.read(item[1])[1]
        return data if item[2] else b"", toml_depth(data)

    for batch in batches(budget.issue_files, lambda item: item[2]):
        items = []
        for path, oid, size in batch:
            keep = budget.read is not None and kept + size <= KEEP_READ_BYTES
            kept += size if keep else 0
            items.append((path, oid, keep))
        for (path, oid, keep), (data, depth) in zip(items, halves.map_halves(measured, items)):
            if depth > MAX_TOML_DEPTH:
                raise TreeRefused(path, f"TOML nested {depth} deep (at most {MAX_TOML_DEPTH})")
            if keep and budget.read is not None:
                budget.read[oid] = data
