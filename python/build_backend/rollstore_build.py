"""The in-tree PEP 517 build backend of the rollstore Python client.

It uses the standard library only and needs nothing from a package index,
so `pip install ./python` works offline (with pip's build isolation on: the
isolated environment has nothing to install). pyproject.toml names it:

    [build-system]
    requires = []
    build-backend = "rollstore_build"
    backend-path = ["build_backend"]

What it builds, from pyproject.toml's [project] table (the name,
description and dependencies; the version is rollstore/__init__.py's
__version__, so that the installed package can tell it):

- a pure-Python wheel, py3-none-any: the rollstore package's .py files and
  a .dist-info with METADATA (core metadata 2.1), WHEEL (Root-Is-Purelib:
  true) and RECORD (sha256 and size of every file);
- an sdist, name-version.tar.gz: pyproject.toml, README.md, the package,
  the tests and this backend, with PKG-INFO;
- an editable wheel (PEP 660): the .dist-info and a .pth file whose import
  hook finds the rollstore package in the source tree (only it: nothing
  else of the tree lands on sys.path).

Archives are reproducible: sorted entries, fixed permissions and a fixed
timestamp (SOURCE_DATE_EPOCH if set, else 1980-01-01).
"""

import base64
import csv
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

# The source tree: this file is build_backend/rollstore_build.py in it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "rollstore"
GENERATOR = "rollstore_build (in-tree)"
# What the sdist carries besides the package (directories recursively).
SDIST_EXTRA = ["pyproject.toml", "README.md", "build_backend", "tests"]


# pyproject.toml.

def _load_toml(text):
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return parse_toml_subset(text)
    return tomllib.loads(text)


_KEY = r"[A-Za-z0-9_-]+"
_STRING = r'"(?:[^"\\]|\\.)*"'


def _toml_string(s):
    # A basic string: the escapes JSON has, which covers what pyproject.toml uses.
    import json
    return json.loads(s)


def _toml_value(v, where):
    v = v.strip()
    if re.fullmatch(_STRING, v):
        return _toml_string(v)
    if v in ("true", "false"):
        return v == "true"
    if re.fullmatch(r"-?[0-9]+", v):
        return int(v)
    if v.startswith("[") and v.endswith("]"):
        inner = v[1:-1].strip().rstrip(",").strip()
        if not inner:
            return []
        items = re.findall(_STRING, inner)
        if re.sub(r"\s*,\s*", ",", inner) != ",".join(items):
            raise ValueError("pyproject.toml: %s: only arrays of strings are understood" % where)
        return [_toml_string(s) for s in items]
    if v.startswith("{") and v.endswith("}"):
        out = {}
        inner = v[1:-1].strip()
        for m in re.finditer(r"\s*(%s)\s*=\s*(%s)\s*(,|$)" % (_KEY, _STRING), inner):
            out[m.group(1)] = _toml_string(m.group(2))
        if inner and not out:
            raise ValueError("pyproject.toml: %s: only inline tables of strings are understood" % where)
        return out
    raise ValueError("pyproject.toml: %s: value %r is not understood" % (where, v))


def parse_toml_subset(text):
    """The subset of TOML this project's pyproject.toml uses, for Pythons
    without tomllib (before 3.11): [tables], dotted table names, key = basic
    string, integer, boolean, one-line array of strings or one-line inline
    table of strings, and comments. Anything else raises rather than being
    misread."""
    doc = {}
    cur = doc
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[\s*(%s(?:\s*\.\s*%s)*)\s*\]\s*(#.*)?" % (_KEY, _KEY), line)
        if m:
            cur = doc
            for part in m.group(1).split("."):
                cur = cur.setdefault(part.strip(), {})
            continue
        m = re.fullmatch(r"(%s)\s*=\s*(.*?)\s*" % _KEY, line)
        if not m:
            raise ValueError("pyproject.toml:%d: %r is not understood" % (n, raw))
        value = m.group(2)
        # A trailing comment, outside strings.
        stripped = re.sub(_STRING, lambda s: "x" * len(s.group(0)), value)
        if "#" in stripped:
            value = value[:stripped.index("#")].rstrip()
        cur[m.group(1)] = _toml_value(value, "line %d" % n)
    return doc


def project():
    """pyproject.toml's [project] table."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        p = _load_toml(f.read())["project"]
    dynamic = p.get("dynamic", [])
    if set(dynamic) - {"version"}:
        raise ValueError("pyproject.toml: rollstore_build takes only the version as dynamic")
    if "version" in dynamic:
        p["version"] = package_version()
    return p


def package_version():
    """The package's __version__, read from its __init__.py (not imported:
    the build must not depend on what importing it needs)."""
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__\s*=\s*"([^"]+)"\s*$', f.read(), re.M)
    if not m:
        raise ValueError("%s/__init__.py sets no __version__ = \"...\"" % PACKAGE)
    return m.group(1)


def _normalized(name):
    # The distribution name as file names spell it (PEP 427, PEP 503).
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist(p):
    return "%s-%s" % (_normalized(p["name"]), p["version"])


def metadata(p):
    """Core metadata 2.1 (METADATA in a wheel, PKG-INFO in an sdist)."""
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % p["name"],
        "Version: %s" % p["version"],
    ]
    if p.get("description"):
        lines.append("Summary: %s" % p["description"])
    lic = p.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: %s" % lic["text"])
    if p.get("requires-python"):
        lines.append("Requires-Python: %s" % p["requires-python"])
    for req in p.get("dependencies", []):
        lines.append("Requires-Dist: %s" % req)
    for extra, reqs in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        for req in reqs:
            lines.append('Requires-Dist: %s ; extra == "%s"' % (req, extra))
    body = ""
    readme = p.get("readme")
    if readme:
        if not isinstance(readme, str) or not readme.endswith(".md"):
            raise ValueError("pyproject.toml: readme: rollstore_build takes a .md file name")
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: true\nTag: py3-none-any\n" % GENERATOR).encode()


# Archives.

def _epoch():
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)  # zip starts at 1980


def _tree(top):
    """The files under ROOT/top to ship, relative to ROOT, sorted: no
    bytecode, no editor or OS leftovers."""
    path = os.path.join(ROOT, top)
    if os.path.isfile(path):
        return [top]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for name in filenames:
            if name.endswith((".pyc", ".pyo", "~")) or name.startswith("."):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/"))
    return sorted(out)


def _package_files():
    files = [f for f in _tree(PACKAGE) if f.endswith(".py")]
    if PACKAGE + "/__init__.py" not in files:
        raise FileNotFoundError("%s/__init__.py not found under %s" % (PACKAGE, ROOT))
    return files


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _write_wheel(wheel_directory, entries, p):
    """Write a wheel of entries ((name in the archive, bytes), in order)
    plus the .dist-info, and return its file name."""
    dist_info = _dist(p) + ".dist-info"
    entries = list(entries) + [
        (dist_info + "/METADATA", metadata(p)),
        (dist_info + "/WHEEL", _wheel_file()),
    ]
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for name, data in entries:
        w.writerow([name, _record_hash(data), str(len(data))])
    w.writerow([dist_info + "/RECORD", "", ""])
    entries.append((dist_info + "/RECORD", record.getvalue().encode("utf-8")))

    name = _dist(p) + "-py3-none-any.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, name)
    stamp = time.gmtime(_epoch())[:6]
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = (0o100644 & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    return name


def _read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


# PEP 517 hooks.

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = project()
    dist_info = _dist(p) + ".dist-info"
    d = os.path.join(metadata_directory, dist_info)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "wb") as f:
        f.write(metadata(p))
    with open(os.path.join(d, "WHEEL"), "wb") as f:
        f.write(_wheel_file())
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = project()
    return _write_wheel(wheel_directory, [(f, _read(f)) for f in _package_files()], p)


_EDITABLE_HOOK = '''"""Finds the rollstore package of an editable install in its source tree."""
import importlib.abc
import importlib.util
import sys

SOURCE = %r


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != %r:
            return None
        return importlib.util.spec_from_file_location(
            name, SOURCE + "/__init__.py", submodule_search_locations=[SOURCE])


sys.meta_path.append(_Finder())
'''


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    p = project()
    _package_files()  # the package is there
    module = "_%s_editable" % _normalized(p["name"])
    hook = _EDITABLE_HOOK % (os.path.join(ROOT, PACKAGE), PACKAGE)
    entries = [
        (module + ".py", hook.encode("utf-8")),
        ("__editable__.%s.pth" % _dist(p), ("import %s\n" % module).encode("utf-8")),
    ]
    return _write_wheel(wheel_directory, entries, p)


def build_sdist(sdist_directory, config_settings=None):
    p = project()
    base = _dist(p)
    files = []
    for top in [PACKAGE] + SDIST_EXTRA:
        files.extend(_tree(top))
    files = sorted(set(files))
    entries = [(base + "/" + f, _read(f)) for f in files]
    entries.append((base + "/PKG-INFO", metadata(p)))
    entries.sort()

    name = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    path = os.path.join(sdist_directory, name)
    tmp = path + ".tmp"
    mtime = _epoch()
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for arcname, data in entries:
                    info = tarfile.TarInfo(arcname)
                    info.size, info.mtime, info.mode = len(data), mtime, 0o644
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
    return name
