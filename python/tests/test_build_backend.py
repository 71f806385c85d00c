"""Tests of the in-tree build backend (build_backend/rollstore_build.py).

They need no server. cmd/rollstore's TestPythonInstall installs the package
with pip into fresh virtual environments, offline; these check the backend's
parts pip does not: the pyproject.toml reader of Pythons without tomllib,
reproducible archives, and an sdist that builds the same wheel.
"""

import importlib.util
import os
import tarfile
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_backend(root, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "build_backend", "rollstore_build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


backend = load_backend(HERE, "rollstore_build_under_test")


class BuildBackend(unittest.TestCase):
    def test_no_requirements(self):
        for hook in (backend.get_requires_for_build_wheel, backend.get_requires_for_build_sdist,
                     backend.get_requires_for_build_editable):
            self.assertEqual(hook(None), [])

    def test_toml_subset(self):
        with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        got = backend.parse_toml_subset(text)
        try:
            import tomllib
        except ImportError:  # before Python 3.11
            self.assertEqual(got["build-system"]["requires"], [])
            self.assertEqual(got["project"]["name"], "rollstore")
        else:
            self.assertEqual(got, tomllib.loads(text))
        self.assertEqual(backend.parse_toml_subset('[a.b]\nk = "x # y" # c\nl = ["p", "q",]\nt = { u = "v" }\n'),
                         {"a": {"b": {"k": "x # y", "l": ["p", "q"], "t": {"u": "v"}}}})
        for bad in ('k = [\n"a"]\n', 'k = 1.5\n', 'k = """x"""\n', "k = 'x'\n", "[[a]]\n"):
            with self.assertRaises(ValueError, msg=bad):
                backend.parse_toml_subset(bad)

    def test_metadata_dir_matches_wheel(self):
        with tempfile.TemporaryDirectory() as d:
            dist_info = backend.prepare_metadata_for_build_wheel(d)
            name = backend.build_wheel(d, metadata_directory=os.path.join(d, dist_info))
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                for f in ("METADATA", "WHEEL"):
                    with open(os.path.join(d, dist_info, f), "rb") as fh:
                        self.assertEqual(z.read(dist_info + "/" + f), fh.read())

    def test_reproducible_and_sdist_self_contained(self):
        with tempfile.TemporaryDirectory() as d:
            w1 = backend.build_wheel(os.path.join(d, "w1"))
            w2 = backend.build_wheel(os.path.join(d, "w2"))
            with open(os.path.join(d, "w1", w1), "rb") as a, open(os.path.join(d, "w2", w2), "rb") as b:
                wheel = a.read()
                self.assertEqual(wheel, b.read(), "two builds of the same tree differ")

            sdist = backend.build_sdist(os.path.join(d, "sdist"))
            self.assertEqual(sdist, "rollstore-%s.tar.gz" % backend.package_version())
            with tarfile.open(os.path.join(d, "sdist", sdist)) as tar:
                names = tar.getnames()
                base = sdist[:-len(".tar.gz")]
                for want in ("PKG-INFO", "pyproject.toml", "README.md", "build_backend/rollstore_build.py",
                             "rollstore/__init__.py"):
                    self.assertIn(base + "/" + want, names)
                self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")], names)
                for m in tar.getmembers():
                    self.assertTrue(m.isfile() and not m.name.startswith("/") and ".." not in m.name.split("/"))
                    out = os.path.join(d, "unpacked", m.name)
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    with open(out, "wb") as fh:
                        fh.write(tar.extractfile(m).read())
            # The sdist's own backend builds the very same wheel.
            unpacked = load_backend(os.path.join(d, "unpacked", base), "rollstore_build_from_sdist")
            w3 = unpacked.build_wheel(os.path.join(d, "w3"))
            with open(os.path.join(d, "w3", w3), "rb") as c:
                self.assertEqual(c.read(), wheel, "the sdist builds another wheel than the tree")

    def test_editable(self):
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_editable(d)
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                pth = [n for n in z.namelist() if n.endswith(".pth")]
                self.assertEqual(len(pth), 1)
                self.assertEqual(z.read(pth[0]), b"import _rollstore_editable\n")
                hook = z.read("_rollstore_editable.py").decode()
                self.assertIn(repr(os.path.join(HERE, "rollstore")), hook)
                self.assertFalse([n for n in z.namelist() if n.startswith("rollstore/")])


if __name__ == "__main__":
    unittest.main()
