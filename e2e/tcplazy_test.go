package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Real processes on TCP connecting on first use (HVD_TCP_FULL_MESH_MAX=1:
// every set of two or more): every collective, small (trees, recursive
// doubling) and large (rings), on the global set and on two sets that
// exclude ranks, at np 3 and 4, each result checked by the script. At np 4
// the ranks then hold fewer sockets than with full meshes (the knob takes
// effect).
func TestTCPConnectOnUse(t *testing.T) {
	pkg := pythonPackage(t)
	sockets := map[string]int{}
	for _, c := range []struct {
		np      int
		meshMax string
	}{{3, "1"}, {4, "1"}, {4, "64"}} {
		t.Run(fmt.Sprintf("np%d/max%s", c.np, c.meshMax), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin("hvdrun"), "-np", strconv.Itoa(c.np), python, "testdata/tcp_lazy.py")
			cmd.Env = append(os.Environ(), pyEnv(pkg, "HVD_BACKEND=tcp", "HVD_TCP_FULL_MESH_MAX="+c.meshMax)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			ok := regexp.MustCompile(`LAZY-OK rank (\d+) of \d+ sockets (\d+)`).FindAllStringSubmatch(string(out), -1)
			if len(ok) != c.np {
				t.Fatalf("%d of %d ranks finished:\n%s", len(ok), c.np, out)
			}
			if c.np == 4 {
				for _, m := range ok {
					n, _ := strconv.Atoi(m[2])
					sockets[c.meshMax] += n
				}
			}
		})
	}
	if lazy, mesh := sockets["1"], sockets["64"]; lazy == 0 || mesh == 0 || lazy >= mesh {
		t.Fatalf("np 4: %d sockets connecting on first use, %d with full meshes", lazy, mesh)
	}
}
