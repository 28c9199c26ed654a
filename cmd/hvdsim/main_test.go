package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHvdsimPrintsTables(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-sizes", "16", "-tensors", "5", "-repeat", "1", "-q"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"| 16 | 2 |", "cached round flat", "elastic kill", "64 MiB allreduce"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestHvdsimBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-sizes", "16,x"}, {"-sizes", "1"}, {"-host-size", "0"}, {"-net-gbps", "0"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
