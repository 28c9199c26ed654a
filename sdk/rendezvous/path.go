package rendezvous

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// EpochScope returns the scope name used on the wire for scope at the given
// rendezvous epoch: the plain scope at epoch 0 (so that Horovod workers, which
// know nothing about epochs, meet ours in "global", "local_<host>",
// "cross_<n>"), and "<scope>.e<epoch>" for epoch > 0. A launcher that calls
// Server.Init for a later round names the plan scopes with this function.
// Negative epochs are treated as 0.
func EpochScope(scope string, epoch int) string {
	if epoch <= 0 {
		return scope
	}
	return scope + ".e" + strconv.Itoa(epoch)
}

// keyPath builds the escaped request path "/<scope>/<key>". Each part is
// escaped as one path segment, so a '/' inside a key becomes %2F.
func keyPath(scope, key string) string {
	return "/" + url.PathEscape(scope) + "/" + url.PathEscape(key)
}

// parsePath splits an escaped request path "/<scope>/<key>" into its
// unescaped scope and key. Both must be non-empty and there must be exactly
// two segments (Horovod's server answers 400 to fewer).
func parsePath(escaped string) (scope, key string, err error) {
	rest, ok := strings.CutPrefix(escaped, "/")
	if !ok {
		return "", "", fmt.Errorf("path %q does not start with '/'", escaped)
	}
	rawScope, rawKey, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", fmt.Errorf("path %q is not /<scope>/<key>", escaped)
	}
	if strings.Contains(rawKey, "/") {
		return "", "", fmt.Errorf("path %q has more than two segments; escape '/' inside keys as %%2F", escaped)
	}
	if scope, err = url.PathUnescape(rawScope); err != nil {
		return "", "", fmt.Errorf("path %q: bad scope escaping: %v", escaped, err)
	}
	if key, err = url.PathUnescape(rawKey); err != nil {
		return "", "", fmt.Errorf("path %q: bad key escaping: %v", escaped, err)
	}
	if scope == "" {
		return "", "", fmt.Errorf("path %q has an empty scope", escaped)
	}
	if key == "" {
		return "", "", fmt.Errorf("path %q has an empty key", escaped)
	}
	return scope, key, nil
}
