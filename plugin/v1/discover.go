package plugin

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinaryName is the file name of a framework's plugin binary.
func BinaryName(framework string) string { return "hvd-plugin-" + framework }

// SumsFile is the checksum list next to plugin binaries, in sha256sum's
// format ("<hex>  <file name>"); `make plugins` writes it.
const SumsFile = "SHA256SUMS"

// ReadSums reads dir/SHA256SUMS into file name → checksum.
func ReadSums(dir string) (map[string][]byte, error) {
	p := filepath.Join(dir, SumsFile)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("reading plugin checksums: %w (build the plugins with `make plugins`, which writes it)", err)
	}
	defer f.Close()
	sums := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s:%d: want \"<sha256>  <file>\", got %q", p, n, line)
		}
		sum, err := hex.DecodeString(fields[0])
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("%s:%d: %q is not a SHA-256 in hex", p, n, fields[0])
		}
		sums[strings.TrimPrefix(fields[1], "*")] = sum
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return sums, nil
}

// WriteSums writes dir/SHA256SUMS for the named files in dir.
func WriteSums(dir string, names ...string) error {
	var b strings.Builder
	for _, n := range names {
		sum, err := FileChecksum(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%x  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}

// Find locates a framework's plugin binary in dir and its expected
// checksum from dir/SHA256SUMS, and verifies the binary against it.
// Errors wrap ErrPluginNotFound or ErrChecksumMismatch.
func Find(dir, framework string) (path string, sum []byte, err error) {
	name := BinaryName(framework)
	path = filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", nil, fmt.Errorf("%w: no %s in %s (build it with `make plugins`, or pass --plugin-dir)", ErrPluginNotFound, name, dir)
	}
	sums, err := ReadSums(dir)
	if err != nil {
		return "", nil, err
	}
	sum, ok := sums[name]
	if !ok {
		return "", nil, fmt.Errorf("%w: %s has no entry in %s", ErrChecksumMismatch, name, filepath.Join(dir, SumsFile))
	}
	if err := VerifyChecksum(path, sum); err != nil {
		return "", nil, err
	}
	return path, sum, nil
}
