// Package version holds hvd's release version, the one the Python package
// declares as hvd.__version__ (python/hvd/__init__.py) and `hvdrun
// --version` prints. A test keeps the two (and plugin/v1.SDKVersion) equal.
package version

// Version is hvd's release version (semantic versioning, no leading "v").
const Version = "0.1.0"
