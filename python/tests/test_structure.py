"""The hvd package's structure, read from its sources (nothing is imported,
no library is loaded): run as one plain process,
HVD_TEST_NO_INIT=1 python3 -m pytest python/tests/test_structure.py.

It checks, over every module of python/hvd (hvd.tensorflow, hvd.keras and
hvd.mxnet included: the plugins write them as they are, with a rendered
_plugin.py that is not scanned):

- the import graph of hvd.* is acyclic, counting imports at module level and
  inside functions and classes alike (a function-level import is how a cycle
  hides);
- imports follow the layers: hvd.common imports no framework package, a
  framework package imports hvd.common (and the generated ones hvd.numpy),
  never another framework;
- no module uses another module's underscore names (``from hvd.x import
  _y``, ``hvd.x._y``, ``m._y`` for an imported module m, reading or
  assigning), except a package's private module imported by its own package
  (hvd.common._abi, the generated ctypes layer, inside hvd.common);
- Horovod's private names that tests written for Horovod reach into exist
  where they look for them (mpi_ops._basics, mpi_ops._handle_map).

Edges: ``import a.b`` and ``from a import b`` (b a module) point at a.b;
``from a import name`` points at a, whose namespace supplies the name. The
implicit import of a module's parent package is not an edge (every
``hvd.torch.x`` would otherwise form a cycle with ``hvd.torch``).
"""
import ast
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.normpath(os.path.join(HERE, '..'))  # holds hvd/

# Which top-level parts of hvd each part may import (besides itself).
LAYERS = {
    'hvd': {'hvd.runner'},
    'hvd.runner': set(),
    'hvd.common': set(),
    'hvd.torch': {'hvd.common'},
    'hvd.numpy': {'hvd.common'},
    'hvd.tensorflow': {'hvd.common', 'hvd.numpy'},
    'hvd.mxnet': {'hvd.common', 'hvd.numpy'},
    'hvd.keras': {'hvd.tensorflow'},  # Horovod's other name for hvd.tensorflow.keras
    'hvd._driver': {'hvd.common', 'hvd.runner'},  # what Spark and Ray share: store, worker, agents, elastic driver
    'hvd.spark': {'hvd._driver', 'hvd.runner'},
    'hvd.ray': {'hvd._driver', 'hvd.common', 'hvd.runner'},
}

# Horovod's private names, defined for tests written for Horovod
# (docs/python.md, "Horovod's private names"); never used across hvd's own
# modules, but they must exist.
HOROVOD_PRIVATE = {
    'hvd.torch.mpi_ops': {'_basics', '_handle_map'},
    'hvd.numpy.mpi_ops': {'_basics', '_handle_map'},
    'hvd.numpy': {'_handle_map'},
    'hvd.tensorflow': {'_executing_eagerly'},
}


def module_name(relpath):
    parts = os.path.splitext(relpath)[0].split(os.sep)
    if parts[-1] == '__init__':
        parts = parts[:-1]
    return '.'.join(parts)


def package_sources():
    """{module: (source, is_package)} of python/hvd."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(os.path.join(PKG_ROOT, 'hvd')):
        dirnames[:] = sorted(d for d in dirnames if d != '__pycache__')
        for fn in sorted(filenames):
            if fn.endswith('.py'):
                rel = os.path.relpath(os.path.join(dirpath, fn), PKG_ROOT)
                with open(os.path.join(PKG_ROOT, rel)) as f:
                    out[module_name(rel)] = (f.read(), fn == '__init__.py')
            elif fn.endswith(('.c', '.cpp')):  # a C/C++ extension module (hvd/common/_fastpath.c): no Python imports
                out[module_name(os.path.relpath(os.path.join(dirpath, fn), PKG_ROOT))] = ('', False)
    return out


def private(name):
    return name.startswith('_') and not (name.startswith('__') and name.endswith('__'))


def parent(module):
    return module.rsplit('.', 1)[0] if '.' in module else ''


class Analysis:
    """Imports and private accesses of a set of hvd modules."""

    def __init__(self, sources):
        self.sources = sources  # {module: (source, is_package)}
        self.modules = set(sources)
        self.edges = {m: {} for m in sources}  # module -> {imported module: first line}
        self.problems = []  # private accesses, as messages
        for mod, (src, is_pkg) in sorted(sources.items()):
            self._scan(mod, is_pkg, ast.parse(src, filename=mod))

    def _resolve(self, mod, is_pkg, node):
        if not node.level:
            return node.module or ''
        base = mod if is_pkg else parent(mod)
        for _ in range(node.level - 1):
            base = parent(base)
        return base + ('.' + node.module if node.module else '')

    def _private_module_ok(self, importer, target):
        """A private module (hvd.common._abi) may be imported by its own package."""
        owner = parent(target)
        return importer == owner or importer.startswith(owner + '.')

    def _edge(self, mod, target, line):
        if target in self.modules and target != mod:
            self.edges[mod].setdefault(target, line)

    def _scan(self, mod, is_pkg, tree):
        bound = {}  # local name -> the hvd module it is bound to (or 'hvd' for `import hvd.x`)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if not a.name.startswith('hvd'):
                        continue
                    self._edge(mod, a.name, node.lineno)
                    self._check_module_path(mod, a.name, node.lineno)
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound[a.name.split('.')[0]] = a.name.split('.')[0]
            elif isinstance(node, ast.ImportFrom):
                src = self._resolve(mod, is_pkg, node)
                if not (src == 'hvd' or src.startswith('hvd.')):
                    continue
                for a in node.names:
                    sub = src + '.' + a.name
                    if sub in self.modules:
                        self._edge(mod, sub, node.lineno)
                        self._check_module_path(mod, sub, node.lineno)
                        bound[a.asname or a.name] = sub
                        continue
                    self._edge(mod, src, node.lineno)
                    if a.name == '*':
                        continue
                    if private(a.name):
                        self.problems.append('%s:%d: from %s import %s: another module\'s private name'
                                             % (mod, node.lineno, src, a.name))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not private(node.attr):
                continue
            target = self._dotted(node.value, bound)
            if target is None:
                continue
            full = target + '.' + node.attr
            if full in self.modules:
                if not self._private_module_ok(mod, full):
                    self.problems.append('%s:%d: %s: a private module of another package' % (mod, node.lineno, full))
            elif target != mod:
                self.problems.append('%s:%d: %s: another module\'s private name' % (mod, node.lineno, full))

    def _check_module_path(self, mod, target, line):
        parts = target.split('.')
        for i in range(1, len(parts)):
            if private(parts[i]):
                prefix = '.'.join(parts[:i + 1])
                if not self._private_module_ok(mod, prefix):
                    self.problems.append('%s:%d: imports %s: a private module of another package' % (mod, line, prefix))
                return

    def _dotted(self, expr, bound):
        """The hvd module an expression names (m, hvd.x.y), or None."""
        if isinstance(expr, ast.Name):
            return bound.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = self._dotted(expr.value, bound)
            if base is None:
                return None
            full = base + '.' + expr.attr
            return full if full in self.modules else None
        return None

    def cycles(self):
        """Every cycle found by a depth-first search, as module lists."""
        found, state, stack = [], {}, []

        def visit(m):
            state[m] = 1
            stack.append(m)
            for n in sorted(self.edges[m]):
                if state.get(n) == 1:
                    found.append(stack[stack.index(n):] + [n])
                elif n not in state:
                    visit(n)
            stack.pop()
            state[m] = 2

        for m in sorted(self.edges):
            if m not in state:
                visit(m)
        return found

    def describe(self, cycle):
        return ' -> '.join('%s (line %d)' % (a, self.edges[a][b]) for a, b in zip(cycle, cycle[1:])) + ' -> ' + cycle[-1]


def part(module):
    """The layer a module belongs to: hvd, hvd.common, hvd.torch, ..."""
    parts = module.split('.')
    return '.'.join(parts[:2])


@pytest.fixture(scope='module')
def analysis():
    return Analysis(package_sources())


def test_sources_found(analysis):
    for m in ('hvd', 'hvd.common.basics', 'hvd.common.process_sets', 'hvd.common.collectives', 'hvd.torch.mpi_ops',
              'hvd.numpy.mpi_ops', 'hvd.tensorflow', 'hvd.mxnet'):
        assert m in analysis.modules, m
    assert analysis.edges['hvd.torch.mpi_ops'], 'no imports found: the scanner is broken'


def test_import_graph_is_acyclic(analysis):
    cycles = analysis.cycles()
    assert not cycles, 'import cycles in hvd:\n' + '\n'.join(analysis.describe(c) for c in cycles)


def test_imports_follow_the_layers(analysis):
    bad = []
    for m, targets in sorted(analysis.edges.items()):
        for t, line in sorted(targets.items()):
            if part(t) != part(m) and part(t) not in LAYERS[part(m)]:
                bad.append('%s:%d imports %s (%s may import %s)' % (m, line, t, part(m),
                                                                   sorted(LAYERS[part(m)]) or 'nothing else in hvd'))
    assert not bad, '\n'.join(bad)


def test_no_private_access_across_modules(analysis):
    assert not analysis.problems, '\n'.join(analysis.problems)


def test_horovod_private_names_defined(analysis):
    for mod, names in HOROVOD_PRIVATE.items():
        tree = ast.parse(analysis.sources[mod][0])
        defined = set()
        for node in tree.body:
            if isinstance(node, ast.Assign):
                defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ImportFrom):
                defined.update(a.asname or a.name for a in node.names)
        assert names <= defined, '%s lacks %s' % (mod, sorted(names - defined))


# The checks themselves, on made-up modules: each kind of fault is found.

def fake(**mods):
    return Analysis({name.replace('__', '.'): (src, pkg) for name, (src, pkg) in mods.items()})


def test_scanner_finds_a_function_level_cycle():
    a = fake(hvd__common__basics=('from hvd.common import loader\ndef init():\n    from hvd.common import process_sets\n', False),
             hvd__common__process_sets=('from hvd.common import basics\n', False),
             hvd__common__loader=('', False))
    assert [c[0] for c in a.cycles()] == ['hvd.common.basics']
    assert 'hvd.common.process_sets (line 1) -> hvd.common.basics' in a.describe(a.cycles()[0])


def test_scanner_finds_a_package_cycle():
    # hvd.numpy re-exporting mpi_ops, which took its names from hvd.numpy
    a = fake(hvd__numpy=('from hvd.numpy import mpi_ops\n', True), hvd__numpy__mpi_ops=('from hvd.numpy import *\n', False))
    assert a.cycles() == [['hvd.numpy', 'hvd.numpy.mpi_ops', 'hvd.numpy']]
    ok = fake(hvd__torch=('from hvd.torch import mpi_ops\n', True), hvd__torch__mpi_ops=('from hvd.torch.x import f\n', False),
              hvd__torch__x=('', False))
    assert ok.cycles() == []


def test_scanner_finds_private_access():
    a = fake(
        hvd__common=('', True),
        hvd__common___abi=('_lib = None\n', False),
        hvd__common__process_sets=('def _set_id(p):\n    pass\n', False),
        hvd__common__loader=('from hvd.common import _abi\n_abi._lib = 1\n', False),
        hvd__torch__mpi_ops=('from hvd.common.process_sets import _set_id\n'
                             'from hvd.common import process_sets as ps, _abi\n'
                             'import hvd.common.process_sets\n'
                             'def f():\n    ps._set_id(0)\n    hvd.common.process_sets._set_id(1)\n', False),
        hvd__numpy=('import hvd.common._abi as abi\nx = abi.DTYPE_INT8\n', True),
    )
    got = sorted(p.split(': ', 1)[0] for p in a.problems)
    assert got == ['hvd.common.loader:2', 'hvd.numpy:1', 'hvd.torch.mpi_ops:1', 'hvd.torch.mpi_ops:2',
                   'hvd.torch.mpi_ops:5', 'hvd.torch.mpi_ops:6'], a.problems
