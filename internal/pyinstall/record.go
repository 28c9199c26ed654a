package pyinstall

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
)

// RecordEntry is one row of a dist-info RECORD: a path relative to
// site-packages, "sha256=<urlsafe base64, no padding>" and the size in
// bytes. RECORD's own row has neither hash nor size.
type RecordEntry struct {
	Path string
	Hash string
	Size int64
}

// HashBytes returns data's RECORD hash.
func HashBytes(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// HashFile returns the RECORD hash and size of the file at path.
func HashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return "sha256=" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), n, nil
}

// ParseRecord reads a RECORD (CSV, as pip writes and reads it).
func ParseRecord(data []byte) ([]RecordEntry, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("RECORD: %w", err)
	}
	out := make([]RecordEntry, 0, len(rows))
	for i, row := range rows {
		if len(row) != 3 {
			return nil, fmt.Errorf("RECORD line %d: want 3 fields (path,hash,size), got %d", i+1, len(row))
		}
		e := RecordEntry{Path: row[0], Hash: row[1]}
		if row[2] != "" {
			if e.Size, err = strconv.ParseInt(row[2], 10, 64); err != nil {
				return nil, fmt.Errorf("RECORD line %d: size %q: %v", i+1, row[2], err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// FormatRecord writes entries sorted by path, then recordPath's own row
// ("<dist-info>/RECORD,,") last.
func FormatRecord(entries []RecordEntry, recordPath string) []byte {
	sorted := append([]RecordEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	for _, e := range sorted {
		if e.Path == recordPath {
			continue
		}
		size := ""
		if e.Hash != "" {
			size = strconv.FormatInt(e.Size, 10)
		}
		_ = w.Write([]string{e.Path, e.Hash, size})
	}
	_ = w.Write([]string{recordPath, "", ""})
	w.Flush()
	return b.Bytes()
}
