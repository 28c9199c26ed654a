package launch

import (
	"strings"
	"testing"
)

// --encrypt alone means cross-host, --encrypt=MODE chooses; the value never
// comes from the next argument (that is the command), and workers get it
// as HVD_ENCRYPT.
func TestEncryptFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		cmd  string
	}{
		{[]string{"-np", "2", "train.py"}, "", "train.py"},
		{[]string{"-np", "2", "--encrypt", "train.py"}, "cross-host", "train.py"},
		{[]string{"-np", "2", "--encrypt=all", "train.py"}, "all", "train.py"},
		{[]string{"-np", "2", "--encrypt=cross-host", "all"}, "cross-host", "all"},
		{[]string{"-np", "2", "--encrypt", "--encrypt=off", "x"}, "off", "x"},
	} {
		o, err := ParseArgs(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.Encrypt != tc.want || o.Command[0] != tc.cmd {
			t.Errorf("%v: Encrypt %q command %v, want %q %q", tc.args, o.Encrypt, o.Command, tc.want, tc.cmd)
		}
		got := ""
		for _, kv := range JobEnv(o, "a", 1) {
			if kv.Key == "HVD_ENCRYPT" {
				got = kv.Value
			}
		}
		if got != tc.want {
			t.Errorf("%v: HVD_ENCRYPT=%q, want %q", tc.args, got, tc.want)
		}
	}
	for _, bad := range []string{"--encrypt=yes", "--encrypt=", "--encrypt=ALL"} {
		_, err := ParseArgs([]string{"-np", "2", bad, "x"})
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "cross-host, all or off") {
			t.Errorf("%s: got %v", bad, err)
		}
	}
	if u := Usage(); !strings.Contains(u, "--encrypt[=cross-host|all|off]") {
		t.Errorf("usage does not show --encrypt[=...]:\n%s", u)
	}
}
