package launch

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// SecretEnv is the variable that carries the job's secret key (hex) to the
// workers. For remote workers it travels on ssh's stdin, never on a command
// line.
const SecretEnv = "HVD_SECRET_KEY"

// KV is one environment variable.
type KV struct{ Key, Value string }

// String returns "KEY=VALUE".
func (kv KV) String() string { return kv.Key + "=" + kv.Value }

// Exportable reports whether an inherited variable may be passed on to
// workers. Like horovodrun, hvdrun never exports shell functions
// (BASH_FUNC_*), OLDPWD or Horovod's own launcher secret; it also drops an
// inherited HVD_SECRET_KEY, which is replaced by this job's key.
func Exportable(key string) bool {
	switch {
	case strings.HasPrefix(key, "BASH_FUNC_"),
		key == "OLDPWD", key == "HOROVOD_SECRET_KEY", key == "_HOROVOD_SECRET_KEY",
		key == SecretEnv:
		return false
	}
	return true
}

// lookupEnv finds key in an environ-style list (last one wins, as in getenv).
func lookupEnv(environ []string, key string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// lookupKV finds key in kvs (last one wins).
func lookupKV(kvs []KV, key string) (string, bool) {
	for i := len(kvs) - 1; i >= 0; i-- {
		if kvs[i].Key == key {
			return kvs[i].Value, true
		}
	}
	return "", false
}

// ExtraEnv resolves the -x arguments against hvdrun's environment: "VAR=v"
// gives v, "VAR" gives hvdrun's value of VAR. A bare VAR that hvdrun does not
// have is an error (ErrConfig), since a silently missing variable on a remote
// host is hard to debug. Later entries override earlier ones.
func ExtraEnv(xs []string, environ []string) ([]KV, error) {
	var out []KV
	for _, x := range xs {
		k, v, hasVal := strings.Cut(x, "=")
		if !hasVal {
			var ok bool
			if v, ok = lookupEnv(environ, k); !ok {
				return nil, configErrorf("-x %s: %s is not set in hvdrun's environment (use -x %s=VALUE)", k, k, k)
			}
		}
		if !Exportable(k) {
			return nil, configErrorf("-x %s: %s is never exported to workers", k, k)
		}
		out = append(out, KV{k, v})
	}
	return dedup(out), nil
}

// JobEnv returns the variables every rank of the job gets, besides the
// per-rank ones from RankEnv and the secret: the rendezvous endpoint, the
// Gloo controller settings and the tuning knobs that were given as flags.
// The result is sorted by key.
func JobEnv(o *Options, rdzvAddr string, rdzvPort int) []KV {
	env := []KV{
		{"HOROVOD_GLOO_RENDEZVOUS_ADDR", rdzvAddr},
		{"HOROVOD_GLOO_RENDEZVOUS_PORT", strconv.Itoa(rdzvPort)},
		{"HOROVOD_CONTROLLER", "gloo"},
		{"HOROVOD_CPU_OPERATIONS", "gloo"},
		{"PYTHONUNBUFFERED", "1"},
	}
	if len(o.NetworkInterfaces) > 0 {
		env = append(env,
			KV{"HOROVOD_GLOO_IFACE", o.NetworkInterfaces[0]},
			KV{"NCCL_SOCKET_IFNAME", strings.Join(o.NetworkInterfaces, ",")})
	}
	if o.GlooTimeout != nil {
		env = append(env, KV{"HOROVOD_GLOO_TIMEOUT_SECONDS", strconv.Itoa(*o.GlooTimeout)})
	}
	if o.FusionThresholdMB != nil {
		env = append(env, KV{"HOROVOD_FUSION_THRESHOLD", strconv.FormatInt(int64(*o.FusionThresholdMB*1024*1024), 10)})
	}
	if o.CycleTimeMS != nil {
		env = append(env, KV{"HOROVOD_CYCLE_TIME", strconv.FormatFloat(*o.CycleTimeMS, 'g', -1, 64)})
	}
	if o.CacheCapacity != nil {
		env = append(env, KV{"HOROVOD_CACHE_CAPACITY", strconv.Itoa(*o.CacheCapacity)})
	}
	if o.MetricsPort != 0 {
		env = append(env, KV{"HVD_METRICS_PUBLISH", "1"}) // hvdrun serves (cmd/hvdrun/metrics.go)
	}
	for _, h := range []struct {
		key string
		v   *bool
	}{{"HOROVOD_HIERARCHICAL_ALLREDUCE", o.HierAllreduce}, {"HOROVOD_HIERARCHICAL_ALLGATHER", o.HierAllgather}} {
		if h.v != nil {
			env = append(env, KV{h.key, map[bool]string{true: "1", false: "0"}[*h.v]})
		}
	}
	if a := o.Autotune; a.On {
		env = append(env, KV{"HOROVOD_AUTOTUNE", "1"})
		if a.LogFile != "" {
			env = append(env, KV{"HOROVOD_AUTOTUNE_LOG", a.LogFile})
		}
		for _, n := range []struct {
			key string
			v   *int
		}{{"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", a.WarmupSamples}, {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", a.StepsPerSample},
			{"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", a.MaxSamples}} {
			if n.v != nil {
				env = append(env, KV{n.key, strconv.Itoa(*n.v)})
			}
		}
		if a.Noise != nil {
			env = append(env, KV{"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", strconv.FormatFloat(*a.Noise, 'g', -1, 64)})
		}
	}
	// --bind-to: core, auto (also hvdrun's default, unless HVD_BIND_TO is
	// in its environment, which the workers then inherit), or none.
	switch bind := o.BindTo; {
	case bind == "" && os.Getenv("HVD_BIND_TO") == "":
		env = append(env, KV{"HVD_BIND_TO", "auto"})
	case bind != "":
		env = append(env, KV{"HVD_BIND_TO", bind})
	}
	if o.Encrypt != "" {
		env = append(env, KV{"HVD_ENCRYPT", o.Encrypt})
	}
	if o.TimelineFilename != "" {
		env = append(env, KV{"HOROVOD_TIMELINE", o.TimelineFilename})
	}
	if o.LogLevel != "" {
		env = append(env, KV{"HOROVOD_LOG_LEVEL", o.LogLevel})
	}
	if o.StartTimeout > 0 {
		env = append(env, KV{"HOROVOD_START_TIMEOUT", strconv.Itoa(int(o.StartTimeout.Seconds()))})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Key < env[j].Key })
	return env
}

// RankEnv returns the per-rank topology variables horovodrun --gloo sets.
func RankEnv(s Slot) []KV {
	return []KV{
		{"HOROVOD_HOSTNAME", s.Hostname},
		{"HOROVOD_RANK", strconv.Itoa(s.Rank)},
		{"HOROVOD_SIZE", strconv.Itoa(s.Size)},
		{"HOROVOD_LOCAL_RANK", strconv.Itoa(s.LocalRank)},
		{"HOROVOD_LOCAL_SIZE", strconv.Itoa(s.LocalSize)},
		{"HOROVOD_CROSS_RANK", strconv.Itoa(s.CrossRank)},
		{"HOROVOD_CROSS_SIZE", strconv.Itoa(s.CrossSize)},
	}
}

// LocalEnv is the complete environment of a rank started on this machine:
// hvdrun's own exportable environment, then the -x variables, then the job
// and rank variables and the secret; a later layer overrides an earlier one.
func LocalEnv(environ []string, extra, job []KV, s Slot, secretHex string) []string {
	var kvs []KV
	for _, e := range environ {
		k, v, ok := strings.Cut(e, "=")
		if ok && k != "" && Exportable(k) {
			kvs = append(kvs, KV{k, v})
		}
	}
	kvs = append(kvs, extra...)
	kvs = append(kvs, job...)
	kvs = append(kvs, RankEnv(s)...)
	kvs = append(kvs, KV{SecretEnv, secretHex})
	kvs = dedup(kvs)
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = kv.String()
	}
	return out
}

// RemoteEnv is what a remote rank's `env` command sets (besides the secret,
// which arrives on stdin): the -x variables, then the job and rank ones.
// Remote ranks otherwise keep the environment of their login shell.
func RemoteEnv(extra, job []KV, s Slot) []KV {
	kvs := append(append(append([]KV(nil), extra...), job...), RankEnv(s)...)
	return dedup(kvs)
}

// dedup keeps the last value of every key, at the position of its first
// occurrence.
func dedup(kvs []KV) []KV {
	idx := make(map[string]int, len(kvs))
	var out []KV
	for _, kv := range kvs {
		if i, ok := idx[kv.Key]; ok {
			out[i].Value = kv.Value
			continue
		}
		idx[kv.Key] = len(out)
		out = append(out, kv)
	}
	return out
}

// redacted returns kv formatted for --verbose, hiding secrets.
func redacted(kv KV) string {
	if kv.Key == SecretEnv {
		return fmt.Sprintf("%s=<redacted>", kv.Key)
	}
	return kv.String()
}
