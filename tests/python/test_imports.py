"""poolkit._imports.on_import: a setting of another package's module made once that module is
imported, never importing it itself (no GPU, no torch: a package written for the test)."""
import importlib
import os
import sys
import tempfile
import textwrap
import unittest

from poolkit import _imports


class OnImport(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.name = f"pkg_{id(self)}"
        package = os.path.join(self.folder.name, self.name)
        os.makedirs(package)
        with open(os.path.join(package, "__init__.py"), "w") as f:
            f.write("")
        with open(os.path.join(package, "config.py"), "w") as f:
            f.write(textwrap.dedent("""
                class triton:
                    cudagraph_trees = True
                seen_at_import = triton.cudagraph_trees
                """))
        with open(os.path.join(package, "broken.py"), "w") as f:
            f.write("raise ImportError('broken on purpose')\n")
        sys.path.insert(0, self.folder.name)
        self.finders = list(sys.meta_path)

    def tearDown(self):
        sys.path.remove(self.folder.name)
        for name in [n for n in sys.modules if n == self.name or n.startswith(self.name + ".")]:
            del sys.modules[name]
        sys.meta_path[:] = self.finders
        self.folder.cleanup()

    @staticmethod
    def trees_off(module):
        module.triton.cudagraph_trees = False

    def test_the_setting_follows_the_modules_own_code_and_nothing_is_imported_before(self):
        _imports.on_import(f"{self.name}.config", self.trees_off)
        self.assertNotIn(f"{self.name}.config", sys.modules)
        config = importlib.import_module(f"{self.name}.config")
        self.assertTrue(config.seen_at_import)  # its own code ran first, unchanged
        self.assertFalse(config.triton.cudagraph_trees)
        self.assertEqual(sys.meta_path, self.finders)  # the finder is gone once used
        self.assertIsNotNone(config.__spec__.loader.get_source(config.__name__))

    def test_a_module_already_imported_is_set_at_once(self):
        config = importlib.import_module(f"{self.name}.config")
        _imports.on_import(f"{self.name}.config", self.trees_off)
        self.assertFalse(config.triton.cudagraph_trees)
        self.assertEqual(sys.meta_path, self.finders)

    def test_a_setting_that_fails_does_not_fail_the_import(self):
        def fails(_module):
            raise AttributeError("no such setting")
        _imports.on_import(f"{self.name}.config", fails)
        config = importlib.import_module(f"{self.name}.config")
        self.assertTrue(config.triton.cudagraph_trees)

    def test_a_module_that_fails_to_import_fails_as_it_would_and_sets_nothing(self):
        called = []
        _imports.on_import(f"{self.name}.broken", called.append)
        with self.assertRaisesRegex(ImportError, "broken on purpose"):
            importlib.import_module(f"{self.name}.broken")
        self.assertEqual(called, [])
        self.assertEqual(sys.meta_path, self.finders)

    def test_other_imports_pass_by(self):
        called = []
        _imports.on_import(f"{self.name}.config", called.append)
        importlib.import_module(self.name)
        self.assertEqual(called, [])
        self.assertEqual(len(sys.meta_path), len(self.finders) + 1)


if __name__ == "__main__":
    unittest.main()
