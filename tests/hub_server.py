"""A Hugging Face Hub on the loopback address, for the real `huggingface_hub` and `datasets`
clients (point them at it with HF_ENDPOINT).

Why our own: olah 0.5.4, the maintained mirror server on PyPI, was tried first. Its dependency
fastapi-utils needs psutil<6 (the project pins 7.2.2), and in a venv of its own, serving local
git mirrors offline, it answers 404 to `GET /api/models/<repo>` (what `model_info` without a
revision asks) and `datasets.load_dataset` finds no dataset. hf-local-hub 3.0.0 needs a Go
binary its wheel does not ship. So this one is small, standard library only, and limited to the
endpoints the clients call for what the engine does:

    GET|HEAD /api/{models,datasets}/<repo>[/revision/<rev>]      repository info at a revision
    GET      /api/{models,datasets}/<repo>/tree/<rev>[/<path>]   files and folders
    POST     /api/{models,datasets}/<repo>/paths-info/<rev>      some paths' info
    GET|HEAD /[datasets/]<repo>/resolve/<rev>/<path>             a file (Range: resumes)
    POST     /api/repos/create                                   a repository (`create_repo`)
    POST     /api/validate-yaml                                  a README's metadata (accepted)
    POST     /api/{models,datasets}/<repo>/preupload/<rev>       upload modes (all "regular")
    POST     /api/{models,datasets}/<repo>/commit/<rev>          a commit (NDJSON, base64 files)

and the faults a user meets: a repository the hub does not have (404 RepoNotFound), a gated one
(its info answers, its files 401 GatedRepo without an accepted token), a revision it does not
have (404 RevisionNotFound) or cannot parse (400), a file whose connection drops part-way, a
write without an accepted token (401).

A repository is a list of snapshots: `commit` takes a folder (or a mapping of files), its commit
id is the SHA-1 of the parent and the files, and a branch points at it. It binds 127.0.0.1 only,
on a free port, and every socket has a timeout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

KINDS = {"models": "model", "datasets": "dataset"}
SOCKET_TIMEOUT_S = 10
# What git refuses in a ref name (git check-ref-format), as the hub refuses such a revision.
BAD_REVISION = re.compile(r"\.\.|[\s~^:?*\[\\]|@\{|^/|/$|//|\.lock$|^\.|/\.")


@dataclass
class Repo:
    kind: str  # "model" | "dataset"
    repo_id: str
    snapshots: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> files
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit
    gated: bool = False

    def commit_of(self, revision: str) -> str | None:
        if revision in self.snapshots:
            return revision
        return self.refs.get(revision)


@dataclass
class Drop:
    """Close the connection after `after` bytes of `path`, the next `times` downloads."""

    after: int
    times: int


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class HubServer:
    """The hub's state (repositories, faults, accepted tokens) and its HTTP server thread."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.drops: dict[tuple[str, str], Drop] = {}
        self.tokens: set[str] = set()
        self.requests: list[str] = []  # "METHOD path" of every request, in order
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.hub = self  # type: ignore[attr-defined]
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._http.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=SOCKET_TIMEOUT_S)

    def reset(self) -> HubServer:
        """The hub as started: no repositories, faults, tokens or requests (on the same
        address, so clients that read HF_ENDPOINT once keep reaching it)."""
        with self._lock:
            self.repos.clear()
            self.drops.clear()
            self.tokens.clear()
            self.requests.clear()
        return self

    # ------------------------------------------------------------------ what a test sets up

    def commit(
        self,
        repo_id: str,
        files: Path | Mapping[str, bytes],
        *,
        kind: str = "model",
        branch: str = "main",
    ) -> str:
        """A new snapshot of `repo_id` on `branch` (the repository is created if new)."""
        contents = _read_folder(files) if isinstance(files, Path) else dict(files)
        with self._lock:
            repo = self.repos.setdefault((kind, repo_id), Repo(kind, repo_id))
            digest = hashlib.sha1(repo.refs.get(branch, "").encode())
            for name in sorted(contents):
                digest.update(name.encode() + b"\0" + hashlib.sha1(contents[name]).digest())
            commit = digest.hexdigest()
            repo.snapshots[commit] = contents
            repo.refs[branch] = commit
        return commit

    def gate(self, repo_id: str, kind: str = "model") -> None:
        self.repos[(kind, repo_id)].gated = True

    def drop(self, repo_id: str, path: str, *, after: int, times: int) -> None:
        self.drops[(repo_id, path)] = Drop(after, times)

    # ------------------------------------------------------------------ answers

    def repo(self, kind: str, repo_id: str) -> Repo:
        repo = self.repos.get((kind, repo_id))
        if repo is None:
            raise HubError(404, "RepoNotFound", f"Repository Not Found for url: {repo_id}.")
        return repo

    def snapshot(self, repo: Repo, revision: str) -> tuple[str, dict[str, bytes]]:
        if BAD_REVISION.search(revision):
            raise HubError(400, None, f"Invalid rev id: {revision}")
        commit = repo.commit_of(revision)
        if commit is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit, repo.snapshots[commit]

    def may_read(self, repo: Repo, authorization: str | None) -> None:
        token = (authorization or "").removeprefix("Bearer ").strip()
        if repo.gated and token not in self.tokens:
            raise HubError(
                401,
                "GatedRepo",
                f"Access to {repo.kind} {repo.repo_id} is restricted. You must have access to "
                "it and be authenticated to access it. Please log in.",
            )

    def take_drop(self, repo_id: str, path: str) -> int | None:
        """Bytes to send before closing, when this download is to be cut."""
        with self._lock:
            drop = self.drops.get((repo_id, path))
            if drop is None or drop.times <= 0:
                return None
            drop.times -= 1
            return drop.after


def _read_folder(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _entry(path: str, content: bytes) -> dict[str, object]:
    return {
        "type": "file",
        "path": path,
        "size": len(content),
        "oid": hashlib.sha1(content).hexdigest(),
    }


def _folders(files: Mapping[str, bytes], under: str) -> list[str]:
    prefix = f"{under}/" if under else ""
    found = {
        prefix + name[len(prefix) :].split("/")[0]
        for name in files
        if name.startswith(prefix) and "/" in name[len(prefix) :]
    }
    return sorted(found)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass  # the test reads hub.requests, not stderr

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_POST(self) -> None:
        self._answer(send_body=True)

    def _answer(self, send_body: bool) -> None:
        url = urlsplit(self.path)
        self.hub.requests.append(f"{self.command} {url.path}")
        try:
            if url.path.startswith("/api/"):
                self._api(url.path[len("/api/") :], parse_qs(url.query), send_body)
            else:
                self._resolve(url.path.lstrip("/"), send_body)
        except HubError as error:
            self._json(error.status, {"error": error.message}, send_body, error=error)

    # ------------------------------------------------------------------ /api/...

    def _api(self, path: str, query: dict[str, list[str]], send_body: bool) -> None:
        kind_plural, _, rest = path.partition("/")
        if path == "repos/create":
            self._json(*self._create(), send_body)
            return
        if path == "validate-yaml":  # a README's metadata: accepted unchecked (tests check it)
            self._body()
            self._json(200, {"errors": [], "warnings": []}, send_body)
            return
        if kind_plural not in KINDS:
            raise HubError(404, None, f"Not Found: /api/{path}")
        repo_id, verb, tail = _split_repo(rest)
        repo = self.hub.repo(KINDS[kind_plural], repo_id)
        if verb in ("", "revision"):
            self._json(200, self._info(repo, unquote(tail) or "main"), send_body)
        elif verb == "tree":
            revision, _, under = tail.partition("/")
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            self._json(
                200, self._tree(repo, unquote(revision), unquote(under), recursive), send_body
            )
        elif verb == "paths-info":
            self._json(200, self._paths_info(repo, unquote(tail)), send_body)
        elif verb == "preupload":
            self._json(200, self._preupload(repo, unquote(tail)), send_body)
        elif verb == "commit":
            self._json(200, self._commit(repo, unquote(tail)), send_body)
        else:
            raise HubError(404, None, f"Not Found: /api/{path}")

    def _info(self, repo: Repo, revision: str) -> dict[str, object]:
        commit, files = self.hub.snapshot(repo, revision)
        return {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "cardData": {},
            "siblings": [{"rfilename": name, "size": len(files[name])} for name in sorted(files)],
        }

    def _tree(
        self, repo: Repo, revision: str, under: str, recursive: bool
    ) -> list[dict[str, object]]:
        _, files = self.hub.snapshot(repo, revision)
        prefix = f"{under.strip('/')}/" if under.strip("/") else ""
        if prefix and not any(name.startswith(prefix) for name in files):
            raise HubError(404, "EntryNotFound", f"{under} does not exist on {revision}")
        entries = [
            _entry(name, content)
            for name, content in sorted(files.items())
            if name.startswith(prefix) and (recursive or "/" not in name[len(prefix) :])
        ]
        folders = [
            {"type": "directory", "path": name, "oid": hashlib.sha1(name.encode()).hexdigest()}
            for name in _folders(files, under.strip("/"))
        ]
        return folders + entries

    def _paths_info(self, repo: Repo, revision: str) -> list[dict[str, object]]:
        _, files = self.hub.snapshot(repo, revision)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        asked = parse_qs(body).get("paths", [])
        return [_entry(p, files[p]) for p in asked if p in files]

    # ------------------------------------------------------------------ uploads (writes)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _may_write(self) -> None:
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if token not in self.hub.tokens:
            raise HubError(401, None, "Invalid credentials in Authorization header")

    def _create(self) -> tuple[int, dict[str, object]]:
        """`create_repo`: a new repository holds one commit (.gitattributes), as the hub's;
        an existing one answers 409 with its url (what `exist_ok=True` reads)."""
        self._may_write()
        asked = json.loads(self._body() or b"{}")
        repo_id = "/".join(p for p in (asked.get("organization"), asked["name"]) if p)
        kind = asked.get("type") or "model"
        url = {"url": f"{self.hub.endpoint}/{repo_id}", "name": repo_id}
        if (kind, repo_id) in self.hub.repos:
            return 409, {"error": "You already created this model repo", **url}
        self.hub.commit(repo_id, {".gitattributes": b"*.safetensors filter=lfs\n"}, kind=kind)
        return 200, url

    def _preupload(self, repo: Repo, revision: str) -> dict[str, object]:
        """Every file is uploaded inline ("regular"), in the commit request itself."""
        self._may_write()
        commit, _ = self.hub.snapshot(repo, revision)
        asked = json.loads(self._body() or b"{}")
        files = [
            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
            for f in asked.get("files", [])
        ]
        return {"files": files, "commitOid": commit}

    def _commit(self, repo: Repo, revision: str) -> dict[str, object]:
        """`create_commit`: NDJSON lines (a header, then files as base64) on top of revision."""
        self._may_write()
        _, files = self.hub.snapshot(repo, revision)
        contents = dict(files)
        for line in self._body().decode().splitlines():
            item = json.loads(line)
            value = item.get("value", {})
            if item.get("key") == "file":
                contents[value["path"]] = base64.b64decode(value["content"])
            elif item.get("key") == "deletedFile":
                contents.pop(value["path"], None)
        commit = self.hub.commit(repo.repo_id, contents, kind=repo.kind, branch=revision)
        url = f"{self.hub.endpoint}/{repo.repo_id}/commit/{commit}"
        return {"commitUrl": url, "commitOid": commit, "success": True}

    # ------------------------------------------------------------------ /<repo>/resolve/...

    def _resolve(self, path: str, send_body: bool) -> None:
        kind = "model"
        if path.startswith("datasets/"):
            kind, path = "dataset", path[len("datasets/") :]
        repo_id, verb, tail = _split_repo(path)
        if verb != "resolve":
            raise HubError(404, None, f"Not Found: /{path}")
        repo = self.hub.repo(kind, repo_id)
        revision, _, name = tail.partition("/")
        commit, files = self.hub.snapshot(repo, unquote(revision))
        self.hub.may_read(repo, self.headers.get("Authorization"))
        name = unquote(name)
        if name not in files:
            raise HubError(404, "EntryNotFound", f"{name} does not exist on {revision}")
        self._file(repo_id, name, files[name], commit, send_body)

    def _file(self, repo_id: str, name: str, content: bytes, commit: str, send_body: bool) -> None:
        start = _range_start(self.headers.get("Range"))
        part = content[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{hashlib.sha1(content).hexdigest()}"')
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Last-Modified", formatdate(usegmt=True))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        self.end_headers()
        if not send_body:
            return
        cut = self.hub.take_drop(repo_id, name)
        if cut is None:
            self.wfile.write(part)
            return
        self.wfile.write(part[:cut])
        self.wfile.flush()
        self.close_connection = True  # the rest never comes: the client sees a short body

    def _json(
        self, status: int, payload: object, send_body: bool, *, error: HubError | None = None
    ) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if error is not None:  # as the hub says what went wrong: huggingface_hub reads these
            if error.code:
                self.send_header("X-Error-Code", error.code)
            self.send_header("X-Error-Message", error.message)
        self.end_headers()
        if send_body:
            self.wfile.write(body)


def _split_repo(path: str) -> tuple[str, str, str]:
    """'org/name/verb/rest' or 'name/verb/rest' -> (repo id, verb, rest)."""
    parts = path.split("/")
    verbs = ("revision", "tree", "paths-info", "resolve", "preupload", "commit")
    if len(parts) > 1 and parts[1] not in verbs:
        repo_id, parts = "/".join(parts[:2]), parts[2:]
    else:
        repo_id, parts = parts[0], parts[1:]
    verb = parts[0] if parts else ""
    return repo_id, verb, "/".join(parts[1:])


def _range_start(header: str | None) -> int:
    match = re.fullmatch(r"bytes=(\d+)-", header or "")
    return int(match.group(1)) if match else 0
