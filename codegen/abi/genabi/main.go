// Command genabi writes the generated sides of hvd's C ABI (see package
// codegen/abi) into a repository checkout:
//
//	go run ./codegen/abi/genabi [-root .] [-check]
//
// With -check it writes nothing and exits 1 when a committed file differs
// from what the spec generates.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/hvdorg/hvd/codegen/abi"
)

func main() {
	root := flag.String("root", ".", "repository root")
	check := flag.Bool("check", false, "only report stale files")
	flag.Parse()
	files, err := abi.Generate(&abi.HVD)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genabi:", err)
		os.Exit(1)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	stale := 0
	for _, p := range paths {
		full := filepath.Join(*root, p)
		old, _ := os.ReadFile(full)
		if bytes.Equal(old, files[p]) {
			continue
		}
		if *check {
			fmt.Fprintf(os.Stderr, "genabi: %s is stale; run `make generate`\n", p)
			stale++
			continue
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "genabi:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", p)
	}
	if stale > 0 {
		os.Exit(1)
	}
}
