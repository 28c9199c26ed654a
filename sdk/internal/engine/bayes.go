// bayes.go: the Bayesian optimisation behind the autotuner (autotune.go):
// a Gaussian process over the unit box, refitted after every sample, and
// the next point chosen by expected improvement.
//
// Kept small on purpose: two or three dimensions and a few dozen samples,
// so the process is solved exactly (Cholesky), its length scale picked by
// the marginal likelihood over a short grid, and expected improvement
// maximised over a seeded random design refined around its best points.

package engine

import (
	"math"
	"math/rand/v2"
)

// bayesOpt proposes points of the unit box [0,1]^d that maximise an
// unknown, noisy score.
type bayesOpt struct {
	dim   int
	noise float64 // added to the kernel's diagonal, on scores scaled to unit variance
	xs    [][]float64
	ys    []float64
	rng   *rand.Rand
}

func newBayesOpt(dim int, noise float64, seed uint64) *bayesOpt {
	return &bayesOpt{dim: dim, noise: max(noise, 1e-6), rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
}

func (b *bayesOpt) add(x []float64, y float64) {
	b.xs = append(b.xs, append([]float64(nil), x...))
	b.ys = append(b.ys, y)
}

// gp is a Gaussian process fitted to the samples.
type gp struct {
	xs    [][]float64
	scale float64     // RBF length scale
	chol  [][]float64 // lower Cholesky factor of K + noise·I
	alpha []float64   // (K + noise·I)⁻¹ y
	best  float64     // the best scaled sample
}

func rbf(a, b []float64, l float64) float64 {
	d := 0.0
	for i := range a {
		t := a[i] - b[i]
		d += t * t
	}
	return math.Exp(-d / (2 * l * l))
}

// cholesky factors a symmetric positive definite matrix (false: not).
func cholesky(a [][]float64) ([][]float64, bool) {
	n := len(a)
	l := make([][]float64, n)
	for i := range l {
		l[i] = make([]float64, n)
	}
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			s := a[i][j]
			for k := 0; k < j; k++ {
				s -= l[i][k] * l[j][k]
			}
			if i == j {
				if s <= 0 {
					return nil, false
				}
				l[i][i] = math.Sqrt(s)
			} else {
				l[i][j] = s / l[j][j]
			}
		}
	}
	return l, true
}

// solveLower solves L·x = y; solveUpper solves Lᵀ·x = y.
func solveLower(l [][]float64, y []float64) []float64 {
	x := make([]float64, len(y))
	for i := range y {
		s := y[i]
		for k := 0; k < i; k++ {
			s -= l[i][k] * x[k]
		}
		x[i] = s / l[i][i]
	}
	return x
}

func solveUpper(l [][]float64, y []float64) []float64 {
	n := len(y)
	x := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		s := y[i]
		for k := i + 1; k < n; k++ {
			s -= l[k][i] * x[k]
		}
		x[i] = s / l[i][i]
	}
	return x
}

// fit scales the scores to zero mean and unit variance and picks the
// length scale with the highest log marginal likelihood.
func (b *bayesOpt) fit() *gp {
	n := len(b.ys)
	mean, sd := 0.0, 0.0
	for _, y := range b.ys {
		mean += y
	}
	mean /= float64(n)
	for _, y := range b.ys {
		sd += (y - mean) * (y - mean)
	}
	sd = math.Sqrt(sd / float64(n))
	if sd == 0 {
		sd = 1
	}
	ys := make([]float64, n)
	best := math.Inf(-1)
	for i, y := range b.ys {
		ys[i] = (y - mean) / sd
		best = max(best, ys[i])
	}
	var out *gp
	bestLL := math.Inf(-1)
	for _, l := range []float64{0.08, 0.15, 0.25, 0.4, 0.7, 1.2} {
		k := make([][]float64, n)
		for i := range k {
			k[i] = make([]float64, n)
			for j := range k[i] {
				k[i][j] = rbf(b.xs[i], b.xs[j], l)
			}
			k[i][i] += b.noise
		}
		chol, ok := cholesky(k)
		if !ok {
			continue
		}
		alpha := solveUpper(chol, solveLower(chol, ys))
		ll := 0.0
		for i := range ys {
			ll -= 0.5*ys[i]*alpha[i] + math.Log(chol[i][i])
		}
		if ll > bestLL {
			bestLL = ll
			out = &gp{xs: b.xs, scale: l, chol: chol, alpha: alpha, best: best}
		}
	}
	return out
}

// predict returns the mean and standard deviation of the scaled score at x.
func (g *gp) predict(x []float64) (float64, float64) {
	ks := make([]float64, len(g.xs))
	mu := 0.0
	for i, xi := range g.xs {
		ks[i] = rbf(x, xi, g.scale)
		mu += ks[i] * g.alpha[i]
	}
	v := solveLower(g.chol, ks)
	variance := 1.0
	for _, t := range v {
		variance -= t * t
	}
	return mu, math.Sqrt(max(variance, 1e-12))
}

// expectedImprovement over the best sample, with exploration margin xi.
func (g *gp) expectedImprovement(x []float64, xi float64) float64 {
	mu, sigma := g.predict(x)
	d := mu - g.best - xi
	z := d / sigma
	cdf := 0.5 * math.Erfc(-z/math.Sqrt2)
	pdf := math.Exp(-z*z/2) / math.Sqrt(2*math.Pi)
	return d*cdf + sigma*pdf
}

// next proposes the point to try next: the maximum of expected improvement
// over 2000 random points, each of the best 5 then refined by 40 local
// perturbations. Before any sample it proposes the box's centre.
func (b *bayesOpt) next() []float64 {
	if len(b.ys) == 0 {
		x := make([]float64, b.dim)
		for i := range x {
			x[i] = 0.5
		}
		return x
	}
	g := b.fit()
	if g == nil { // never with noise > 0; be safe: explore at random
		return b.random()
	}
	type cand struct {
		x  []float64
		ei float64
	}
	top := make([]cand, 0, 6)
	push := func(x []float64) {
		c := cand{x, g.expectedImprovement(x, 0.01)}
		i := len(top)
		for i > 0 && top[i-1].ei < c.ei {
			i--
		}
		if i < 5 {
			top = append(top, cand{})
			copy(top[i+1:], top[i:])
			top[i] = c
			if len(top) > 5 {
				top = top[:5]
			}
		}
	}
	for range 2000 {
		push(b.random())
	}
	for _, c := range append([]cand(nil), top...) {
		for range 40 {
			x := make([]float64, b.dim)
			for i := range x {
				x[i] = min(1, max(0, c.x[i]+0.05*b.rng.NormFloat64()))
			}
			push(x)
		}
	}
	return top[0].x
}

func (b *bayesOpt) random() []float64 {
	x := make([]float64, b.dim)
	for i := range x {
		x[i] = b.rng.Float64()
	}
	return x
}
