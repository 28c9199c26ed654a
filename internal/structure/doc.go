// Package structure holds no code: its test enforces the import rules of
// docs/architecture.md ("Who owns what, who may import whom") over every
// Go file of the module, build tags included, as python/tests/
// test_structure.py does for the Python package. A new package needs a
// row in the test's table before the test passes.
package structure
