package launch

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args string
		want Options
	}{
		{"minimal", "-np 2 python train.py",
			Options{NumProc: 2, Command: []string{"python", "train.py"}}},
		{"long equals and dashdash", "--num-proc=3 -- python -u x.py --verbose",
			Options{NumProc: 3, Command: []string{"python", "-u", "x.py", "--verbose"}}},
		{"single dash equals", "-np=4 -H=a:2,b:2 cmd",
			Options{NumProc: 4, Hosts: "a:2,b:2", Command: []string{"cmd"}}},
		{"attached short values", "-Ha:2 -p2222 -ikey -xFOO=1 -np 2 cmd",
			Options{NumProc: 2, Hosts: "a:2", SSHPort: 2222, SSHIdentityFile: "key", Env: []string{"FOO=1"}, Command: []string{"cmd"}}},
		{"hosts long", "--hosts a:1 -np 1 cmd",
			Options{NumProc: 1, Hosts: "a:1", Command: []string{"cmd"}}},
		{"hostfile both spellings", "-hostfile f1 --hostfile f2 -np 1 cmd",
			Options{NumProc: 1, Hostfile: "f2", Command: []string{"cmd"}}},
		{"x repeats in order", "-x FOO -x BAR=a=b -x=BAZ=2 -np 1 cmd",
			Options{NumProc: 1, Env: []string{"FOO", "BAR=a=b", "BAZ=2"}, Command: []string{"cmd"}}},
		{"ssh flags, last wins", "-p 22 --ssh-port 2200 -i a --ssh-identity-file b -np 1 cmd",
			Options{NumProc: 1, SSHPort: 2200, SSHIdentityFile: "b", Command: []string{"cmd"}}},
		{"all knobs",
			"-np 8 --start-timeout 5 --output-filename out --verbose --timeline-filename tl.json " +
				"--fusion-threshold-mb 32 --cycle-time-ms 2.5 --network-interfaces eth0,ib0 " +
				"--gloo-timeout-seconds 60 --cache-capacity 0 --log-level debug --gloo --disable-cache cmd a",
			Options{NumProc: 8, StartTimeout: 5 * time.Second, OutputDir: "out", Verbose: true,
				TimelineFilename: "tl.json", FusionThresholdMB: ptr(32.0), CycleTimeMS: ptr(2.5),
				NetworkInterfaces: []string{"eth0", "ib0"}, GlooTimeout: ptr(60), CacheCapacity: ptr(0),
				LogLevel: "DEBUG", Gloo: true, Command: []string{"cmd", "a"}}},
		{"autotune", "-np 2 --autotune --autotune-log-file at.csv --autotune-warmup-samples 0 --autotune-steps-per-sample 3 " +
			"--autotune-bayes-opt-max-samples 12 --autotune-gaussian-process-noise 0.5 cmd",
			Options{NumProc: 2, Autotune: Autotune{On: true, LogFile: "at.csv", WarmupSamples: ptr(0), StepsPerSample: ptr(3),
				MaxSamples: ptr(12), Noise: ptr(0.5)}, Command: []string{"cmd"}}},
		{"network-interface repeats", "--network-interface a --network-interface b -np 1 cmd",
			Options{NumProc: 1, NetworkInterfaces: []string{"a", "b"}, Command: []string{"cmd"}}},
		{"flags after the command belong to it", "-np 1 python --verbose -np 3",
			Options{NumProc: 1, Command: []string{"python", "--verbose", "-np", "3"}}},
		{"dash alone is a command", "-np 1 - x",
			Options{NumProc: 1, Command: []string{"-", "x"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(strings.Fields(tt.args))
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tt.args, err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("ParseArgs(%q)\n got %+v\nwant %+v", tt.args, *got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		args    string
		wantMsg string
	}{
		{"", "-np/--num-proc is required"},
		{"python x.py", "-np/--num-proc is required"},
		{"-np 2", "no command given"},
		{"-np 2 --", "no command given"},
		{"-np", "flag -np needs a value"},
		{"-np 0 cmd", `-np "0": want a positive integer`},
		{"--num-proc x cmd", `--num-proc "x": want a positive integer`},
		{"--bogus -np 1 cmd", "unknown flag --bogus"},
		{"-bogus -np 1 cmd", "unknown flag -bogus"},
		{"--verbose=1 -np 1 cmd", "flag --verbose takes no value"},
		{"-H a:1 --hostfile f -np 1 cmd", "mutually exclusive"},
		{"-x 1BAD -np 1 cmd", `"1BAD" is not a valid environment variable name`},
		{"-x A-B=1 -np 1 cmd", `"A-B" is not a valid environment variable name`},
		{"-p 0 -np 1 cmd", "want a port number"},
		{"--ssh-port 70000 -np 1 cmd", "want a port number"},
		{"--log-level loud -np 1 cmd", "want one of TRACE, DEBUG"},
		{"--fusion-threshold-mb -1 -np 1 cmd", "want a non-negative number"},
		{"--cycle-time-ms NaN -np 1 cmd", "want a non-negative number"},
		{"--cache-capacity -2 -np 1 cmd", "want a non-negative integer"},
		{"--autotune-gaussian-process-noise 1.5 -np 1 cmd", "want a number from 0 to 1"},
		{"--autotune-steps-per-sample 0 -np 1 cmd", "want a positive integer"},
		{"--autotune-warmup-samples -1 -np 1 cmd", "want a non-negative integer"},
		{"--start-timeout 0 -np 1 cmd", "want a positive integer"},
		{"--network-interfaces eth0,,ib0 -np 1 cmd", "want comma-separated interface names"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			_, err := ParseArgs(strings.Fields(tt.args))
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("ParseArgs(%q) = %v, want a usage error", tt.args, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("ParseArgs(%q) error %q does not contain %q", tt.args, err, tt.wantMsg)
			}
			if ExitCode(err) != 2 {
				t.Errorf("ExitCode = %d, want 2", ExitCode(err))
			}
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	for _, a := range []string{"-h", "--help"} {
		if _, err := ParseArgs([]string{a}); !errors.Is(err, ErrHelp) || ExitCode(err) != 0 {
			t.Errorf("ParseArgs(%s) = %v, want ErrHelp (exit 0)", a, err)
		}
	}
}

func TestUsageListsEveryFlag(t *testing.T) {
	u := Usage()
	for _, d := range flagDefs {
		for _, n := range d.names {
			if !strings.Contains(u, n) {
				t.Errorf("usage does not mention %s", n)
			}
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{ErrHelp, 0},
		{usageErrorf("x"), 2},
		{configErrorf("x"), 2},
		{&ExitError{Code: 137}, 137},
		{errors.New("other"), 1},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func FuzzParseArgs(f *testing.F) {
	f.Add("-np 2 -H a:1,b:1 -x FOO -x=B=2 --verbose -- cmd")
	f.Add("-Ha:2 -p22 --num-proc=2 cmd")
	f.Add("--log-level=info -np 1 --fusion-threshold-mb 1.5 c")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseArgs(strings.Fields(s))
		if err != nil {
			if !errors.Is(err, ErrUsage) && !errors.Is(err, ErrHelp) {
				t.Fatalf("ParseArgs(%q): error %v is neither usage nor help", s, err)
			}
			return
		}
		if o.NumProc <= 0 || len(o.Command) == 0 {
			t.Fatalf("ParseArgs(%q) accepted %+v", s, o)
		}
	})
}

// An empty -H is not "run on localhost", and a repeated -H does not
// silently keep only the last: both are usage errors.
func TestParseArgsHostsGivenOnceAndNotEmpty(t *testing.T) {
	for _, args := range [][]string{
		{"-H", "", "-np", "1", "cmd"},
		{"-H", "  ", "-np", "1", "cmd"},
		{"-H", "a:1", "-H", "b:1", "-np", "2", "cmd"},
		{"--hosts", "a:1", "-H", "a:1", "-np", "1", "cmd"},
		{"--hostfile", "", "-np", "1", "cmd"},
	} {
		_, err := ParseArgs(args)
		if !errors.Is(err, ErrUsage) || ExitCode(err) != 2 {
			t.Errorf("ParseArgs(%q) = %v, want a usage error", args, err)
		}
	}
	if o, err := ParseArgs([]string{"-H", "a:1,b:1", "-np", "2", "cmd"}); err != nil || o.Hosts != "a:1,b:1" {
		t.Fatalf("a single -H: %+v %v", o, err)
	}
}
