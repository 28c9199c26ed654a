package launch

import (
	"github.com/hvdorg/hvd/internal/elasticproto"
	"math/rand/v2"
	"strconv"
	"time"
)

// Defaults of an elastic job.
const (
	DefaultElasticTimeout    = 600 * time.Second
	DefaultDiscoveryInterval = time.Second
	DefaultDiscoveryTimeout  = 10 * time.Second
)

// ElasticStore is the rendezvous store of an elastic job: the driver writes
// the scope "elastic" into it (Set, like an authenticated PUT) and declares
// each new world's plan scopes (AddPlan, which keeps every key), and reads
// the workers' failure reports (Prefixed: a copy of every key of scope
// starting with prefix, with its value). *rendezvous.Server has all three.
type ElasticStore interface {
	StoreServer
	Set(scope, key string, value []byte)
	AddPlan(plan map[string]int)
	Prefixed(scope, prefix string) map[string][]byte
}

// ElasticStoreFactory starts an ElasticStore, as StoreFactory.
type ElasticStoreFactory func(addr string, secret []byte) (ElasticStore, error)

// ElasticPlan is what NewJob decides for an elastic job. Tests may shorten
// the intervals before Run.
type ElasticPlan struct {
	NP, MinNP, MaxNP int    // start with NP; never below MinNP; MaxNP 0 = no cap
	Script           string // --host-discovery-script ("" = Fixed)
	Fixed            []Host // -H/--hostfile hosts when there is no script
	SlotsPerHost     int
	ResetLimit       int // -1: no limit
	CooldownMin      time.Duration
	CooldownMax      time.Duration // 0: a blacklisted host is out for good
	Timeout          time.Duration // --elastic-timeout
	// DiscoveryInterval is the pause between discovery runs (1 s);
	// DiscoveryTimeout kills a run that takes longer
	// (HVD_DISCOVERY_TIMEOUT_SECONDS, 10 s).
	DiscoveryInterval time.Duration
	DiscoveryTimeout  time.Duration
	Rand              func() float64 // blacklist jitter, [0, 1)
}

// newElasticPlan checks what needs the environment or the host list:
// HOROVOD_ELASTIC_TIMEOUT, HVD_DISCOVERY_TIMEOUT_SECONDS, and that fixed
// hosts are at least two (horovodrun: fault tolerance needs another host to
// go on with) with at least -np slots. Errors wrap ErrConfig.
func newElasticPlan(o *Options, hosts []Host, environ []string) (*ElasticPlan, error) {
	e := o.Elastic
	p := &ElasticPlan{
		NP: o.NumProc, MinNP: e.MinNP, MaxNP: e.MaxNP, Script: e.DiscoveryScript,
		SlotsPerHost: max(e.SlotsPerHost, 1), ResetLimit: -1,
		CooldownMin: time.Duration(e.CooldownMin) * time.Second, CooldownMax: time.Duration(e.CooldownMax) * time.Second,
		Timeout: e.Timeout, DiscoveryInterval: DefaultDiscoveryInterval, DiscoveryTimeout: DefaultDiscoveryTimeout,
		Rand: rand.Float64,
	}
	if e.ResetLimit != nil {
		p.ResetLimit = *e.ResetLimit
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultElasticTimeout
		if v, ok := lookupEnv(environ, "HOROVOD_ELASTIC_TIMEOUT"); ok && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return nil, configErrorf("HOROVOD_ELASTIC_TIMEOUT=%q: want a positive number of seconds", v)
			}
			p.Timeout = time.Duration(n) * time.Second
		}
	}
	if v, ok := lookupEnv(environ, "HVD_DISCOVERY_TIMEOUT_SECONDS"); ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1e6 {
			return nil, configErrorf("HVD_DISCOVERY_TIMEOUT_SECONDS=%q: want a positive number of seconds", v)
		}
		p.DiscoveryTimeout = time.Duration(f * float64(time.Second))
	}
	if p.Script == "" {
		p.Fixed = hosts
		if len(hosts) < 2 {
			return nil, configErrorf("an elastic job on fixed hosts needs at least 2 hosts to go on when one fails, got %s (as horovodrun; use --host-discovery-script to scale)", formatHosts(hosts))
		}
		total := 0
		for _, h := range hosts {
			total += h.Slots
		}
		if total < p.NP {
			return nil, configErrorf("-np %d: the fixed hosts have only %d slots (%s)", p.NP, total, formatHosts(hosts))
		}
	}
	return p, nil
}

// WorkerEnv is what an elastic worker gets on top of a static rank's
// environment (docs/elastic.md).
func (p *ElasticPlan) WorkerEnv(id string, epoch int) []KV {
	return []KV{
		{"HOROVOD_ELASTIC", "1"},
		{"HOROVOD_ELASTIC_TIMEOUT", strconv.Itoa(int(p.Timeout / time.Second))},
		{elasticproto.EnvWorkerID, id},
		{elasticproto.EnvEpoch, strconv.Itoa(epoch)},
	}
}
