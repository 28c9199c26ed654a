package cpubind

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func mask(t *testing.T) []int {
	t.Helper()
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(0, &s); err != nil {
		t.Fatal(err)
	}
	return CPUs(s)
}

// Bind's modes, and the original mask given back when a later Init no
// longer binds (an elastic world that shrank on this host).
func TestBindModesAndRestore(t *testing.T) {
	all := mask(t)
	if len(all) < 2 {
		t.Skip("needs 2 allowed CPUs")
	}
	defer func() { // whatever happened, the test process gets its mask back
		var s unix.CPUSet
		for _, c := range all {
			s.Set(c)
		}
		setAll(&s)
		narrowed = false
	}()
	logf := func(string, ...any) {}
	n := len(all)
	check := func(what string, changed, wantChanged bool, want []int) {
		t.Helper()
		if got := mask(t); changed != wantChanged || !slices.Equal(got, want) {
			t.Fatalf("%s: changed %v (want %v), mask %v, want %v", what, changed, wantChanged, got, want)
		}
	}
	c, err := Bind("none", 0, n, logf)
	if err != nil {
		t.Fatal(err)
	}
	check("none", c, false, all)
	c, _ = Bind("auto", 0, n+1, logf) // more ranks than CPUs
	check("auto, oversubscribed", c, false, all)
	c, _ = Bind("auto", 0, n-1, logf) // fewer ranks than CPUs: auto leaves them
	check("auto, a CPU to spare", c, false, all)
	c, _ = Bind("auto", 1, n, logf) // one rank per CPU
	check("auto, one rank per CPU", c, true, []int{all[1]})
	c, _ = Bind("core", 0, n-1, logf) // core binds with CPUs to spare, from the original mask
	check("core after auto", c, true, []int{all[0]})
	c, _ = Bind("auto", 0, n-1, logf) // a later world no longer binds: the mask comes back
	check("auto, restored", c, true, all)
	c, _ = Bind("core", 0, n+1, logf)
	check("core, oversubscribed", c, false, all)
}
