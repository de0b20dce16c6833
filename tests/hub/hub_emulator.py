#!/usr/bin/env python3
"""hub_emulator.py - a strict local Hugging Face Hub for tests (Python standard library only).

Two HTTP servers on loopback, random ports:
  * the Hub      http://127.0.0.1:P   (API, /resolve/, LFS batch, commits, verify)
  * the "CDN"    http://127.0.0.2:Q   (LFS downloads and presigned uploads). A different host,
                 so a client that forwards the token across a redirect is caught: the CDN
                 answers 400 X-Error-Code: AuthLeak to any request carrying Authorization.

Implements (docs/ecosystem.md section 1): HEAD/GET /{repo}/resolve/{rev}/{path} with X-Repo-Commit,
ETag, X-Linked-Etag, X-Linked-Size, 302 for LFS files, Range/206; GET /api/models/{repo}[/revision/{rev}],
/tree/{rev}[/{path}] with Link pagination, /refs; GET /api/models (search, author, filter on the tags
derived from each repo's root README.md front matter, limit, sort, expand/full, Link pagination);
POST /api/repos/create; POST /api/models/{repo}/branch/{branch}; POST .../preupload/{rev};
POST /{repo}.git/info/lfs/objects/batch (basic + multipart), PUT uploads (sha256 checked), multipart
completion, verify; POST .../commit/{rev} (NDJSON, strict base64, lfsFile oids, parentCommit -> 412).
Errors carry X-Error-Code / X-Error-Message / X-Request-Id.

Control (tests only): POST /_emu/fault {"method","path_re","kind","count","retry_after"} with kind in
500 | 429 | drop (close mid-body) | drop_headers (close before any answer) | wrong_hash (flip a byte) |
advance (another commit lands on main of fault["repo"] first) | redirect (to fault["location"]: for an
LFS file's /resolve/ it replaces the CDN URL, with the Hub headers kept; elsewhere a bare 302) |
any_revision (model info answers an unknown revision with main's commit, as a hostile server might) |
drip (send the body one byte every fault["interval"] seconds, default 0.8);
GET /_emu/log (requests seen: method, host, path, range, auth); POST /_emu/clear_log.

Usage: hub_emulator.py --port-file F [--token T] [--page-size N] [--multipart-threshold BYTES]
       [--chunk-size BYTES]. Writes {"endpoint":..., "cdn":...} to F once both servers listen.
"""
import argparse
import base64
import binascii
import datetime
import hashlib
import json
import re
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_MIME = "application/vnd.git-lfs+json"
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".h5", ".zst", ".npy")
HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def git_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(oid, size):
    return ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (oid, size)).encode()


def valid_path(p):
    return bool(p) and not p.startswith("/") and all(c not in ("", ".", "..") for c in p.split("/"))


class HubError(Exception):
    def __init__(self, status, code, message, commit=None):
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.token = args.token
        self.page_size = args.page_size
        self.multipart_threshold = args.multipart_threshold
        self.chunk_size = args.chunk_size
        self.repos = {}      # repo_id -> {"private", "branches": {name: sha}, "commits": {sha: {...}}}
        self.lfs = {}        # oid -> bytes
        self.parts = {}      # (oid, n) -> bytes
        self.faults = []
        self.log = []
        self.counter = 0
        self.endpoint = self.cdn = None

    def next_id(self):
        with self.lock:
            self.counter += 1
            return "emu-%06d" % self.counter

    def take_fault(self, method, path):
        with self.lock:
            for f in self.faults:
                if f["count"] > 0 and f.get("method", method) == method and re.search(f["path_re"], path):
                    f["count"] -= 1
                    return f
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hub-emulator/1"
    state = None  # set per server class
    is_cdn = False

    def log_message(self, fmt, *args):  # quiet
        pass

    # ---- plumbing -------------------------------------------------------------------
    def body(self):
        n = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise HubError(411, "LengthRequired", "chunked request bodies are not accepted")
        return self.rfile.read(int(n)) if n else b""

    def send(self, status, body=b"", headers=None, ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("X-Request-Id", self.request_id)
        if ctype and body:
            self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def error(self, e):
        h = {"X-Error-Code": e.code, "X-Error-Message": e.message}
        if e.commit:
            h["X-Repo-Commit"] = e.commit
        self.send(e.status, {"error": e.message}, h)

    def auth(self):
        """None when anonymous; raises on a bad token."""
        a = self.headers.get("Authorization")
        if a is None:
            return None
        if a != "Bearer " + self.state.token:
            raise HubError(401, "InvalidCredentials", "Invalid credentials in Authorization header")
        return a

    def need_auth(self):
        if self.auth() is None:
            raise HubError(401, "Unauthorized", "This operation needs a token")

    def dispatch(self):
        st = self.state
        self.request_id = st.next_id()
        raw = self.path
        path = urllib.parse.urlsplit(raw).path
        with st.lock:
            st.log.append({"method": self.command, "host": self.headers.get("Host", ""), "path": raw,
                           "range": self.headers.get("Range"), "auth": self.headers.get("Authorization") is not None,
                           "cdn": self.is_cdn})
        try:
            if path.startswith("/_emu/"):
                return self.control(path)
            if not self.headers.get("User-Agent"):
                raise HubError(400, "BadRequest", "missing User-Agent")
            fault = st.take_fault(self.command, raw)
            if fault and fault["kind"] in ("500", "429"):
                h = {"X-Error-Message": "injected fault"}
                if fault["kind"] == "429":
                    h["Retry-After"] = fault.get("retry_after", 1)
                self.body() if self.command in ("POST", "PUT") else None
                return self.send(int(fault["kind"]), {"error": "injected"}, h)
            if fault and fault["kind"] == "advance":  # someone else commits first (parentCommit race)
                with st.lock:
                    r = st.repos[fault["repo"]]
                    head = r["branches"]["main"]
                    r["branches"]["main"] = self.new_commit(r, head, dict(r["commits"][head]["files"]), "race")
                fault = None
            if fault and fault["kind"] == "drop_headers":
                self.close_connection = True
                return
            if fault and fault["kind"] == "redirect" and "/resolve/" not in path:
                return self.send(302, b"", {"Location": fault["location"]}, ctype=None)
            self.fault = fault
            if self.is_cdn:
                return self.cdn_route(path)
            return self.hub_route(path)
        except HubError as e:
            return self.error(e)

    do_GET = do_HEAD = do_POST = do_PUT = lambda self: self.dispatch()

    def control(self, path):
        st = self.state
        if path == "/_emu/fault" and self.command == "POST":
            f = json.loads(self.body())
            f.setdefault("count", 1)
            with st.lock:
                st.faults.append(f)
            return self.send(200, {"ok": True})
        if path == "/_emu/log":
            with st.lock:
                return self.send(200, list(st.log))
        if path == "/_emu/clear_log" and self.command == "POST":
            self.body()
            with st.lock:
                st.log.clear()
                st.faults.clear()
            return self.send(200, {"ok": True})
        raise HubError(404, "NotFound", "unknown control path")

    # ---- repos ------------------------------------------------------------------------
    def repo(self, repo_id, write=False):
        r = self.state.repos.get(repo_id)
        authed = self.auth() is not None
        if r is None or (r["private"] and not authed):
            raise HubError(401 if not authed else 404, "RepoNotFound", "Repository Not Found for url: " + self.path)
        if write and not authed:
            raise HubError(401, "Unauthorized", "You must be authenticated to write")
        return r

    def commit_of(self, r, rev):
        if rev in r["branches"]:
            return r["branches"][rev]
        if HEX40.match(rev) and rev in r["commits"]:
            return rev
        raise HubError(404, "RevisionNotFound", "Invalid rev id: " + rev)

    def send_bytes(self, data, headers, allow_range=True):
        """GET/HEAD a byte string with Range support and the drop / wrong_hash faults."""
        n = len(data)
        status, start = 200, 0
        rng = self.headers.get("Range")
        if rng and allow_range:
            m = re.match(r"^bytes=(\d+)-$", rng)
            if not m:
                raise HubError(400, "BadRange", "unsupported Range " + rng)
            start = int(m.group(1))
            if start >= n:
                return self.send(416, b"", dict(headers, **{"Content-Range": "bytes */%d" % n}), ctype=None)
            status = 206
            headers = dict(headers, **{"Content-Range": "bytes %d-%d/%d" % (start, n - 1, n)})
        chunk = data[start:]
        fault = getattr(self, "fault", None)
        if fault and fault["kind"] == "wrong_hash" and chunk:
            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
        headers = dict(headers, **{"Content-Length": str(len(chunk)), "Accept-Ranges": "bytes"})
        self.send_response(status)
        self.send_header("X-Request-Id", self.request_id)
        self.send_header("Content-Type", "application/octet-stream")
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.end_headers()
        if self.command == "HEAD":
            return
        if fault and fault["kind"] == "drop":
            self.wfile.write(chunk[: max(1, len(chunk) // 2)])
            self.wfile.flush()
            self.close_connection = True
            return
        if fault and fault["kind"] == "drip":  # alive, but slower than any useful transfer
            for i in range(len(chunk)):
                self.wfile.write(chunk[i:i + 1])
                self.wfile.flush()
                time.sleep(fault.get("interval", 0.8))
            return
        self.wfile.write(chunk)

    def resolve(self, repo_id, rev, fpath):
        st = self.state
        with st.lock:
            r = self.repo(repo_id)
            sha = self.commit_of(r, rev)
            e = r["commits"][sha]["files"].get(fpath)
        if e is None:
            raise HubError(404, "EntryNotFound", "%s does not exist at %s" % (fpath, sha), commit=sha)
        base = {"X-Repo-Commit": sha, "ETag": '"%s"' % e["oid"]}
        if e["lfs"]:
            url = "%s/lfs/%s?sig=%s" % (st.cdn, e["lfs"], secrets.token_hex(8))
            fault = getattr(self, "fault", None)
            if fault and fault["kind"] == "redirect":
                url = fault["location"]
            h = dict(base, **{"X-Linked-Etag": '"%s"' % e["lfs"], "X-Linked-Size": e["size"], "Location": url})
            return self.send(302, b"", h, ctype=None)
        return self.send_bytes(e["data"], base)

    def hub_route(self, path):
        parts = [urllib.parse.unquote(p) for p in path.split("/")[1:]]
        m = self.command
        if len(parts) >= 5 and parts[2] == "resolve" and m in ("GET", "HEAD"):
            return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        if parts == ["api", "models"] and m == "GET":
            return self.list_models()
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id, rest = parts[2] + "/" + parts[3], parts[4:]
            if m == "GET" and (not rest or rest[0] == "revision"):
                return self.info(repo_id, "/".join(rest[1:]) if rest else "main")
            if m == "GET" and rest and rest[0] == "tree" and len(rest) >= 2:
                return self.tree(repo_id, rest[1], "/".join(rest[2:]))
            if m == "GET" and rest == ["refs"]:
                return self.refs(repo_id)
            if m == "POST" and len(rest) == 2 and rest[0] == "branch":
                return self.create_branch(repo_id, rest[1])
            if m == "POST" and len(rest) == 2 and rest[0] == "preupload":
                return self.preupload(repo_id, rest[1])
            if m == "POST" and len(rest) == 2 and rest[0] == "commit":
                return self.commit(repo_id, rest[1])
        if path == "/api/repos/create" and m == "POST":
            return self.create()
        if len(parts) == 6 and parts[1].endswith(".git") and parts[2:] == ["info", "lfs", "objects", "batch"]:
            return self.batch(parts[0] + "/" + parts[1][:-4])
        if len(parts) == 2 and parts[0] == "lfs-verify" and m == "POST":
            return self.verify(parts[1])
        if len(parts) == 2 and parts[0] == "lfs-complete" and m == "POST":
            return self.complete(parts[1])
        raise HubError(404, "NotFound", "no route for %s %s" % (m, path))

    def info(self, repo_id, rev):
        with self.state.lock:
            r = self.repo(repo_id)
            fault = getattr(self, "fault", None)
            if fault and fault["kind"] == "any_revision" and rev not in r["branches"]:
                rev = "main"
            sha = self.commit_of(r, rev)
            c = r["commits"][sha]
            blobs = "blobs=true" in urllib.parse.urlsplit(self.path).query.lower()
            sib = []
            for p in sorted(c["files"]):
                e = c["files"][p]
                d = {"rfilename": p}
                if blobs:
                    d.update({"blobId": e["oid"], "size": e["size"]})
                    if e["lfs"]:
                        d["lfs"] = {"sha256": e["lfs"], "size": e["size"],
                                    "pointerSize": len(lfs_pointer(e["lfs"], e["size"]))}
                sib.append(d)
            out = {"id": repo_id, "modelId": repo_id, "sha": sha, "private": r["private"],
                   "lastModified": c["date"], "siblings": sib, "tags": [], "gated": False, "disabled": False}
        self.send(200, out)

    def entry_json(self, p, e):
        d = {"type": "file", "path": p, "oid": e["oid"], "size": e["size"]}
        if e["lfs"]:
            d["lfs"] = {"oid": e["lfs"], "size": e["size"], "pointerSize": len(lfs_pointer(e["lfs"], e["size"]))}
        return d

    def tree(self, repo_id, rev, prefix):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        recursive = q.get("recursive", ["false"])[0].lower() == "true"
        cursor = int(q.get("cursor", ["0"])[0])
        with self.state.lock:
            r = self.repo(repo_id)
            sha = self.commit_of(r, rev)
            files = r["commits"][sha]["files"]
            items, dirs = [], set()
            pre = prefix + "/" if prefix else ""
            if prefix and prefix not in files and not any(p.startswith(pre) for p in files):
                raise HubError(404, "EntryNotFound", "%s does not exist at %s" % (prefix, sha), commit=sha)
            for p in sorted(files):
                if not p.startswith(pre):
                    continue
                rel = p[len(pre):].split("/")
                for i in range(1, len(rel)):
                    d = pre + "/".join(rel[:i])
                    if (recursive or i == 1) and d not in dirs:
                        dirs.add(d)
                        items.append({"type": "directory", "path": d, "oid": hashlib.sha1(d.encode()).hexdigest()})
                if recursive or len(rel) == 1:
                    items.append(self.entry_json(p, files[p]))
        page = items[cursor:cursor + self.state.page_size]
        h = {}
        if cursor + self.state.page_size < len(items):
            nq = dict((k, v[0]) for k, v in q.items())
            nq["cursor"] = str(cursor + self.state.page_size)
            nxt = "%s%s?%s" % (self.state.endpoint, urllib.parse.urlsplit(self.path).path, urllib.parse.urlencode(nq))
            h["Link"] = '<%s>; rel="next"' % nxt
        self.send(200, page, h)

    def refs(self, repo_id):
        with self.state.lock:
            r = self.repo(repo_id)
            br = [{"name": b, "ref": "refs/heads/" + b, "targetCommit": s} for b, s in sorted(r["branches"].items())]
        self.send(200, {"branches": br, "converts": [], "tags": []})

    def create_branch(self, repo_id, branch):
        raw = self.body()
        try:
            b = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise HubError(400, "BadRequest", "body is not JSON")
        if not isinstance(b, dict):
            raise HubError(400, "BadRequest", "body must be a JSON object")
        if (not re.match(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$", branch) or ".." in branch or "//" in branch
                or branch.endswith(("/", ".lock")) or branch.startswith("refs/") or HEX40.match(branch)):
            raise HubError(400, "BadRequest", "Invalid reference for a branch: " + branch)
        with self.state.lock:
            r = self.repo(repo_id, write=True)
            if branch in r["branches"]:
                raise HubError(409, "Conflict", "Reference already exists: refs/heads/" + branch)
            start = b.get("startingPoint")
            r["branches"][branch] = self.commit_of(r, start) if start is not None else r["branches"]["main"]
        self.send(200, b"", ctype=None)

    # ---- model search (GET /api/models) -------------------------------------------------
    @staticmethod
    def front_matter(text):
        """The YAML front matter of a model card, for the keys the Hub indexes: scalars, flow
        lists [a, b] and block lists (- item). Anything fancier is out of scope."""
        lines = text.split("\n")
        if not lines or lines[0].strip() != "---":
            return {}
        out, key = {}, None
        for ln in lines[1:]:
            if ln.strip() == "---":
                return out
            if ln.startswith(("- ", "  - ")) and key is not None:
                out.setdefault(key, [])
                if isinstance(out[key], list):
                    out[key].append(ln.split("- ", 1)[1].strip().strip("'\""))
                continue
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_-]*):\s*(.*)$", ln)
            if not m:
                continue
            key, v = m.group(1), m.group(2).strip()
            if v.startswith("[") and v.endswith("]"):
                out[key] = [x.strip().strip("'\"") for x in v[1:-1].split(",") if x.strip()]
            elif v:
                out[key] = v.strip("'\"")
        return {}  # no closing '---'

    def model_entry(self, repo_id, r):
        """What the Hub indexes of a repo: tags from the root README.md front matter (card tags, the
        library, license:X, base_model:ID per base model), as the real Hub derives them."""
        head = r["branches"]["main"]
        c = r["commits"][head]
        readme = c["files"].get("README.md")
        card = self.front_matter(readme["data"].decode("utf-8", "replace")) if readme and readme["data"] else {}
        aslist = lambda v: v if isinstance(v, list) else ([v] if isinstance(v, str) else [])
        tags = list(aslist(card.get("tags")))
        lib = card.get("library_name") if isinstance(card.get("library_name"), str) else None
        if lib and lib not in tags:
            tags.insert(0, lib)
        tags += ["base_model:" + b for b in aslist(card.get("base_model"))]
        tags += ["license:" + x for x in aslist(card.get("license"))]
        d = {"_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
             "author": repo_id.split("/")[0], "private": r["private"], "likes": 0, "downloads": 0,
             "trendingScore": 0, "tags": tags, "createdAt": r["created"], "lastModified": c["date"], "sha": head,
             "gated": False, "disabled": False, "siblings": [{"rfilename": p} for p in sorted(c["files"])]}
        if lib:
            d["library_name"] = lib
        return d

    DEFAULT_FIELDS = ("_id", "id", "likes", "trendingScore", "private", "downloads", "tags", "library_name",
                      "createdAt", "modelId")
    EXPANDABLE = ("author", "createdAt", "disabled", "downloads", "gated", "lastModified", "library_name", "likes",
                  "private", "sha", "siblings", "tags", "trendingScore")

    def list_models(self):
        """GET /api/models: search (substring of the id), author, filter (every one a tag, ANDed),
        sort (lastModified | createdAt, newest first; default: by id), limit (page size), expand /
        full (the fields), cursor pagination through the Link header. Private repos need the token."""
        st = self.state
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        one = lambda k: q.get(k, [None])[-1]
        search, author, sort = one("search"), one("author"), one("sort")
        filters = q.get("filter", [])
        expand = q.get("expand", []) + q.get("expand[]", [])
        bad = [e for e in expand if e not in self.EXPANDABLE]
        if bad:
            raise HubError(400, "BadRequest", "invalid expand value(s): %s" % ", ".join(bad))
        try:
            limit = int(one("limit")) if one("limit") is not None else None
            cursor = int(one("cursor") or 0)
        except ValueError:
            raise HubError(400, "BadRequest", "limit and cursor must be integers")
        if limit is not None and not 0 < limit <= 1000:
            raise HubError(400, "BadRequest", "limit must be between 1 and 1000")
        if sort not in (None, "lastModified", "createdAt"):
            raise HubError(400, "BadRequest", "unsupported sort " + sort)
        authed = self.auth() is not None
        with st.lock:
            found = [self.model_entry(rid, r) for rid, r in sorted(st.repos.items()) if authed or not r["private"]]
        found = [d for d in found
                 if (not search or search.lower() in d["id"].lower())
                 and (not author or d["author"].lower() == author.lower())
                 and all(f in d["tags"] for f in filters)]
        if sort:
            found.sort(key=lambda d: d[sort], reverse=True)
        fields = self.DEFAULT_FIELDS
        if expand:
            fields = ("_id", "id") + tuple(expand)
        elif one("full") in ("true", "True", "1"):
            fields = self.DEFAULT_FIELDS + ("author", "lastModified", "sha", "siblings", "gated", "disabled")
        page_size = min(limit or 1000, st.page_size)
        page = [{k: d[k] for k in fields if k in d} for d in found[cursor:cursor + page_size]]
        h = {}
        if cursor + page_size < len(found):
            nq = [(k, v) for k, vs in q.items() if k != "cursor" for v in vs] + [("cursor", str(cursor + page_size))]
            h["Link"] = '<%s/api/models?%s>; rel="next"' % (st.endpoint, urllib.parse.urlencode(nq))
        self.send(200, page, h)

    def new_commit(self, r, parent, files, summary):
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        sha = hashlib.sha1(("%s|%s|%s|%s" % (parent, summary, date, secrets.token_hex(8))).encode()).hexdigest()
        r["commits"][sha] = {"files": files, "parent": parent, "summary": summary, "date": date}
        return sha

    def create(self):
        self.need_auth()
        try:
            b = json.loads(self.body())
        except ValueError:
            raise HubError(400, "BadRequest", "body is not JSON")
        name, org = b.get("name"), b.get("organization")
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
            raise HubError(400, "BadRequest", "invalid repo name")
        if b.get("type", "model") != "model":
            raise HubError(400, "BadRequest", "only model repos are emulated")
        if "visibility" in b and b["visibility"] not in ("public", "private", "protected"):
            raise HubError(400, "BadRequest", "bad visibility")
        private = bool(b.get("private")) or b.get("visibility") == "private"
        repo_id = "%s/%s" % (org or "emulator-user", name)
        st = self.state
        with st.lock:
            if repo_id in st.repos:
                return self.send(409, {"error": "You already created this model repo", "url": st.endpoint + "/" + repo_id})
            r = {"private": private, "branches": {}, "commits": {},
                 "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")}
            ga = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
            files = {".gitattributes": {"data": ga, "lfs": None, "size": len(ga), "oid": git_sha1(ga)}}
            r["branches"]["main"] = self.new_commit(r, None, files, "initial commit")
            st.repos[repo_id] = r
        self.send(200, {"url": st.endpoint + "/" + repo_id, "name": repo_id, "id": repo_id})

    def preupload(self, repo_id, rev):
        try:
            b = json.loads(self.body())
        except ValueError:
            raise HubError(400, "BadRequest", "body is not JSON")
        if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
            raise HubError(400, "BadRequest", "preupload wants Content-Type: application/json")
        with self.state.lock:
            r = self.repo(repo_id, write=True)
            files = r["commits"][self.commit_of(r, rev)]["files"]
        out = []
        if not isinstance(b.get("files"), list) or not 0 < len(b["files"]) <= 256:
            raise HubError(400, "BadRequest", "files must be a list of 1..256 entries")
        for f in b["files"]:
            p, size, sample = f.get("path"), f.get("size"), f.get("sample")
            if not isinstance(p, str) or not valid_path(p) or not isinstance(size, int) or size < 0:
                raise HubError(400, "BadRequest", "bad preupload entry %r" % (f,))
            try:
                raw = base64.b64decode(sample, validate=True)
            except (binascii.Error, TypeError):
                raise HubError(400, "BadRequest", "sample of %s is not base64" % p)
            if len(raw) != min(size, 512):
                raise HubError(400, "BadRequest", "sample of %s has %d bytes, want %d" % (p, len(raw), min(size, 512)))
            lfs = size > 0 and (p.endswith(LFS_SUFFIXES) or size > 10 * 1024 * 1024 or b"\0" in raw)
            d = {"path": p, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False}
            e = files.get(p)
            if e is not None:
                d["oid"] = e["lfs"] if e["lfs"] else e["oid"]
            out.append(d)
        self.send(200, {"files": out, "commitOid": self.commit_of(r, rev)})

    def batch(self, repo_id):
        if self.headers.get("Content-Type", "").split(";")[0] != LFS_MIME or LFS_MIME not in self.headers.get("Accept", ""):
            raise HubError(400, "BadRequest", "LFS batch needs Accept and Content-Type " + LFS_MIME)
        b = json.loads(self.body())
        st = self.state
        with st.lock:
            self.repo(repo_id, write=True)
        if b.get("operation") != "upload" or "basic" not in b.get("transfers", []) or b.get("hash_algo") != "sha256":
            raise HubError(400, "BadRequest", "bad batch request %r" % {k: b.get(k) for k in ("operation", "transfers", "hash_algo")})
        multipart = "multipart" in b["transfers"]
        objs, transfer = [], "basic"
        for o in b.get("objects", []):
            oid, size = o.get("oid"), o.get("size")
            if not isinstance(oid, str) or not HEX64.match(oid) or not isinstance(size, int):
                objs.append({"oid": oid, "size": size, "error": {"code": 422, "message": "bad oid or size"}})
                continue
            d = {"oid": oid, "size": size, "authenticated": True}
            with st.lock:
                stored = oid in st.lfs
            if not stored:
                verify = {"href": "%s/lfs-verify/%s" % (st.endpoint, oid)}
                if multipart and size >= st.multipart_threshold:
                    transfer = "multipart"
                    n = (size + st.chunk_size - 1) // st.chunk_size
                    hdr = {"chunk_size": str(st.chunk_size)}
                    for i in range(1, n + 1):
                        hdr["%05d" % i] = "%s/part/%s/%d?sig=%s" % (st.cdn, oid, i, secrets.token_hex(4))
                    d["actions"] = {"upload": {"href": "%s/lfs-complete/%s" % (st.endpoint, oid), "header": hdr},
                                    "verify": verify}
                else:
                    d["actions"] = {"upload": {"href": "%s/upload/%s?sig=%s" % (st.cdn, oid, secrets.token_hex(4))},
                                    "verify": verify}
            objs.append(d)
        self.send(200, {"transfer": transfer, "objects": objs}, ctype=LFS_MIME)

    def verify(self, oid):
        self.need_auth()
        b = json.loads(self.body())
        with self.state.lock:
            data = self.state.lfs.get(oid)
        if data is None or b.get("oid") != oid or b.get("size") != len(data):
            raise HubError(404, "ObjectNotFound", "LFS object %s not stored (or wrong size)" % oid)
        self.send(200, {"ok": True})

    def complete(self, oid):
        self.need_auth()
        b = json.loads(self.body())
        st = self.state
        with st.lock:
            parts = sorted(b.get("parts", []), key=lambda p: p["partNumber"])
            data = b""
            for i, p in enumerate(parts, 1):
                blob = st.parts.get((oid, i))
                if p.get("partNumber") != i or blob is None or p.get("etag") != hashlib.md5(blob).hexdigest():
                    raise HubError(400, "BadPart", "part %d missing or etag mismatch" % i)
                data += blob
            if hashlib.sha256(data).hexdigest() != oid or b.get("oid") != oid:
                raise HubError(400, "HashMismatch", "assembled object does not hash to %s" % oid)
            st.lfs[oid] = data
        self.send(200, {"ok": True})

    def commit(self, repo_id, rev):
        if self.headers.get("Content-Type", "").split(";")[0] != "application/x-ndjson":
            raise HubError(400, "BadRequest", "commit wants Content-Type: application/x-ndjson")
        lines = [ln for ln in self.body().split(b"\n") if ln.strip()]
        try:
            items = [json.loads(ln) for ln in lines]
        except ValueError:
            raise HubError(400, "BadRequest", "commit body is not NDJSON")
        if not items or items[0].get("key") != "header" or not isinstance(items[0].get("value", {}).get("summary"), str):
            raise HubError(400, "BadRequest", "first NDJSON line must be the header with a summary")
        hdr = items[0]["value"]
        st = self.state
        with st.lock:
            r = self.repo(repo_id, write=True)
            if rev not in r["branches"]:
                raise HubError(404, "RevisionNotFound", "Invalid rev id: " + rev)
            head = r["branches"][rev]
            parent = hdr.get("parentCommit")
            if parent is not None and parent != head:
                raise HubError(412, "PreconditionFailed", "A commit has happened since. Please refresh and try again.")
            files = dict(r["commits"][head]["files"])
            for it in items[1:]:
                k, v = it.get("key"), it.get("value", {})
                p = v.get("path")
                if not isinstance(p, str) or not valid_path(p):
                    raise HubError(400, "BadRequest", "bad path %r" % (p,))
                if k == "file":
                    if v.get("encoding") != "base64":
                        raise HubError(400, "BadRequest", "file entries need encoding base64")
                    try:
                        data = base64.b64decode(v.get("content", ""), validate=True)
                    except (binascii.Error, TypeError):
                        raise HubError(400, "BadRequest", "content of %s is not valid base64" % p)
                    files[p] = {"data": data, "lfs": None, "size": len(data), "oid": git_sha1(data)}
                elif k == "lfsFile":
                    oid, size = v.get("oid"), v.get("size")
                    if v.get("algo") != "sha256" or oid not in st.lfs or len(st.lfs[oid]) != size:
                        raise HubError(422, "LfsObjectMissing", "LFS object %s (%r bytes) was not uploaded" % (oid, size))
                    files[p] = {"data": None, "lfs": oid, "size": size, "oid": git_sha1(lfs_pointer(oid, size))}
                elif k == "deletedFile":
                    if files.pop(p, None) is None:
                        raise HubError(404, "EntryNotFound", "cannot delete missing %s" % p)
                else:
                    raise HubError(400, "BadRequest", "unknown NDJSON key %r" % (k,))
            sha = self.new_commit(r, head, files, hdr["summary"])
            r["branches"][rev] = sha
        self.send(200, {"success": True, "commitOid": sha,
                        "commitUrl": "%s/%s/commit/%s" % (st.endpoint, repo_id, sha)})

    # ---- CDN ----------------------------------------------------------------------------
    def cdn_route(self, path):
        if self.headers.get("Authorization") is not None:
            raise HubError(400, "AuthLeak", "the CDN got an Authorization header (token leaked across hosts)")
        parts = path.split("/")[1:]
        st = self.state
        if len(parts) == 2 and parts[0] == "lfs" and self.command in ("GET", "HEAD"):
            with st.lock:
                data = st.lfs.get(parts[1])
            if data is None:
                raise HubError(404, "NotFound", "no such object")
            return self.send_bytes(data, {"ETag": '"%s"' % hashlib.md5(data).hexdigest()})
        if len(parts) == 2 and parts[0] == "upload" and self.command == "PUT":
            data = self.body()
            if hashlib.sha256(data).hexdigest() != parts[1]:
                raise HubError(400, "HashMismatch", "uploaded bytes do not hash to %s" % parts[1])
            with st.lock:
                st.lfs[parts[1]] = data
            return self.send(200, b"", {"ETag": '"%s"' % hashlib.md5(data).hexdigest()}, ctype=None)
        if len(parts) == 3 and parts[0] == "part" and self.command == "PUT":
            data = self.body()
            with st.lock:
                st.parts[(parts[1], int(parts[2]))] = data
            return self.send(200, b"", {"ETag": '"%s"' % hashlib.md5(data).hexdigest()}, ctype=None)
        raise HubError(404, "NotFound", "no CDN route for %s %s" % (self.command, path))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # clients hanging up on purpose are not errors
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--token", default="hf_emulator_token")
    ap.add_argument("--page-size", type=int, default=1000)
    ap.add_argument("--multipart-threshold", type=int, default=1 << 62)
    ap.add_argument("--chunk-size", type=int, default=5 << 20)
    args = ap.parse_args()
    state = State(args)
    hub_h = type("HubHandler", (Handler,), {"state": state, "is_cdn": False})
    cdn_h = type("CdnHandler", (Handler,), {"state": state, "is_cdn": True})
    hub = Server(("127.0.0.1", 0), hub_h)
    cdn = Server(("127.0.0.2", 0), cdn_h)
    hub.daemon_threads = cdn.daemon_threads = True
    state.endpoint = "http://127.0.0.1:%d" % hub.server_address[1]
    state.cdn = "http://127.0.0.2:%d" % cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    with open(args.port_file + ".tmp", "w") as f:
        json.dump({"endpoint": state.endpoint, "cdn": state.cdn}, f)
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    hub.serve_forever()


if __name__ == "__main__":
    main()
