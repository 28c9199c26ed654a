package launch

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestExportable(t *testing.T) {
	for k, want := range map[string]bool{
		"PATH": true, "HOROVOD_FUSION_THRESHOLD": true, "CUDA_VISIBLE_DEVICES": true,
		"BASH_FUNC_foo%%": false, "OLDPWD": false, "HOROVOD_SECRET_KEY": false, "HVD_SECRET_KEY": false,
	} {
		if got := Exportable(k); got != want {
			t.Errorf("Exportable(%s) = %v, want %v", k, got, want)
		}
	}
}

func TestExtraEnv(t *testing.T) {
	environ := []string{"FOO=from-env", "EMPTY=", "FOO=later"}
	got, err := ExtraEnv([]string{"FOO", "BAR=x=y", "EMPTY", "BAR=z"}, environ)
	want := []KV{{"FOO", "later"}, {"BAR", "z"}, {"EMPTY", ""}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ExtraEnv = %v, %v; want %v", got, err, want)
	}
	if _, err := ExtraEnv([]string{"MISSING"}, environ); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "MISSING is not set") {
		t.Errorf("ExtraEnv(MISSING) = %v", err)
	}
	if _, err := ExtraEnv([]string{"HOROVOD_SECRET_KEY=x"}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("ExtraEnv(secret) = %v", err)
	}
}

func TestJobEnv(t *testing.T) {
	t.Setenv("HVD_BIND_TO", "")
	o := &Options{}
	got := JobEnv(o, "10.0.0.1", 1234)
	want := []KV{
		{"HOROVOD_CONTROLLER", "gloo"}, {"HOROVOD_CPU_OPERATIONS", "gloo"},
		{"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"}, {"HOROVOD_GLOO_RENDEZVOUS_PORT", "1234"},
		{"HVD_BIND_TO", "auto"}, {"PYTHONUNBUFFERED", "1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JobEnv(defaults) = %v\nwant %v", got, want)
	}
	// No --bind-to while hvdrun's environment sets HVD_BIND_TO: the
	// workers inherit it; --bind-to none is written as such.
	t.Setenv("HVD_BIND_TO", "none")
	for _, c := range []struct{ flag, want string }{{"", ""}, {"none", "none"}, {"auto", "auto"}} {
		got := ""
		for _, kv := range JobEnv(&Options{BindTo: c.flag}, "a", 1) {
			if kv.Key == "HVD_BIND_TO" {
				got = kv.Value
			}
		}
		if got != c.want {
			t.Errorf("JobEnv(--bind-to %q, HVD_BIND_TO=none in the environment): HVD_BIND_TO=%q, want %q", c.flag, got, c.want)
		}
	}

	o = &Options{NetworkInterfaces: []string{"eth0", "ib0"}, GlooTimeout: ptr(60),
		FusionThresholdMB: ptr(1.5), CycleTimeMS: ptr(2.5), CacheCapacity: ptr(0),
		TimelineFilename: "/tmp/tl.json", LogLevel: "DEBUG", StartTimeout: 7 * time.Second,
		HierAllreduce: ptr(false), HierAllgather: ptr(true), BindTo: "core",
		Autotune: Autotune{On: true, LogFile: "/tmp/at.csv", WarmupSamples: ptr(0), StepsPerSample: ptr(4), MaxSamples: ptr(9), Noise: ptr(0.25)}}
	m := map[string]string{}
	for _, kv := range JobEnv(o, "a", 1) {
		m[kv.Key] = kv.Value
	}
	for k, v := range map[string]string{
		"HOROVOD_GLOO_IFACE": "eth0", "NCCL_SOCKET_IFNAME": "eth0,ib0", "HOROVOD_GLOO_TIMEOUT_SECONDS": "60",
		"HOROVOD_FUSION_THRESHOLD": "1572864", "HOROVOD_CYCLE_TIME": "2.5", "HOROVOD_CACHE_CAPACITY": "0",
		"HOROVOD_TIMELINE": "/tmp/tl.json", "HOROVOD_LOG_LEVEL": "DEBUG", "HOROVOD_START_TIMEOUT": "7",
		"HOROVOD_HIERARCHICAL_ALLREDUCE": "0", "HOROVOD_HIERARCHICAL_ALLGATHER": "1", "HVD_BIND_TO": "core",
		"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": "/tmp/at.csv", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
		"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "4", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "9",
		"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.25",
	} {
		if m[k] != v {
			t.Errorf("JobEnv: %s = %q, want %q", k, m[k], v)
		}
	}
}

func TestLocalEnv(t *testing.T) {
	environ := []string{"PATH=/bin", "OLDPWD=/x", "BASH_FUNC_f%%=() { :; }", "HOROVOD_SECRET_KEY=old",
		"HVD_SECRET_KEY=stale", "HOROVOD_RANK=9", "KEEP=1", "OVER=env"}
	extra := []KV{{"OVER", "x"}}
	job := JobEnv(&Options{}, "127.0.0.1", 5)
	slot := sl("localhost", 4, 3, 1, 2, 1, 2)
	got := LocalEnv(environ, extra, job, slot, "abcd")
	for _, want := range []string{"PATH=/bin", "KEEP=1", "OVER=x", "HOROVOD_RANK=3", "HOROVOD_SIZE=4",
		"HOROVOD_LOCAL_RANK=1", "HOROVOD_LOCAL_SIZE=2", "HOROVOD_CROSS_RANK=1", "HOROVOD_CROSS_SIZE=2",
		"HOROVOD_HOSTNAME=localhost", "HOROVOD_GLOO_RENDEZVOUS_PORT=5", "HVD_SECRET_KEY=abcd"} {
		if !slices.Contains(got, want) {
			t.Errorf("LocalEnv lacks %s: %v", want, got)
		}
	}
	keys := map[string]int{}
	for _, e := range got {
		k, _, _ := strings.Cut(e, "=")
		keys[k]++
		if keys[k] > 1 {
			t.Errorf("LocalEnv repeats %s", k)
		}
	}
	for _, k := range []string{"OLDPWD", "BASH_FUNC_f%%", "HOROVOD_SECRET_KEY"} {
		if keys[k] != 0 {
			t.Errorf("LocalEnv exports %s", k)
		}
	}
}

func TestRemoteEnv(t *testing.T) {
	got := RemoteEnv([]KV{{"A", "1"}, {"HOROVOD_RANK", "99"}}, []KV{{"HOROVOD_CONTROLLER", "gloo"}}, sl("b", 2, 1, 0, 1, 1, 2))
	want := []KV{{"A", "1"}, {"HOROVOD_RANK", "1"}, {"HOROVOD_CONTROLLER", "gloo"}, {"HOROVOD_HOSTNAME", "b"},
		{"HOROVOD_SIZE", "2"}, {"HOROVOD_LOCAL_RANK", "0"}, {"HOROVOD_LOCAL_SIZE", "1"},
		{"HOROVOD_CROSS_RANK", "1"}, {"HOROVOD_CROSS_SIZE", "2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RemoteEnv =\n %v\nwant\n %v", got, want)
	}
	for _, kv := range got {
		if kv.Key == SecretEnv {
			t.Errorf("RemoteEnv carries the secret")
		}
	}
}

func TestRemoteScript(t *testing.T) {
	got := RemoteScript("/home/u/my dir", []KV{{"A", "x y"}, {"B", "1"}}, []string{"python", "-c", "print('hi')"})
	want := `cd '/home/u/my dir' >/dev/null 2>&1; read -r HVD_SECRET_KEY || exit 1; export HVD_SECRET_KEY; ` +
		`exec env 'A=x y' B=1 python -c 'print('\''hi'\'')' </dev/null`
	if got != want {
		t.Errorf("RemoteScript =\n %s\nwant\n %s", got, want)
	}
}
