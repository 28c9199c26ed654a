"""Why eight rows of Horovod's test_tensorflow.py fail at np 3 under every
implementation (issue 24; docs/compat.md, "deliberate differences"), checked
under hvdrun -np 3 on the values those tests draw (eagerly, after
tf.random.set_seed(1234), as their random_uniform does; the rows fail if
either their graph or their eager run fails, so the eager values suffice):

1. Average of three equal tensors (grouped_allreduce_average_cpu and the
   dense half of grouped_allreduce_mixed_indexed_slices_average_cpu expect
   exactly x; allreduce_average_cpu expects (x*3)/3 rounded twice, in the
   same dtype, on the same x). For float16 and float32 the two differ on
   some of these x, so no Average can pass both rows; hvd gives the second
   (in allreduce and grouped_allreduce alike). Horovod's own CPU arithmetic
   (the sum times float32(1/3), its ScaleBuffer) matches neither: it fails
   both rows at np 3.
2. Product of three float16 tensors in (-100, 100) (allreduce_product_cpu,
   grouped_allreduce_product_cpu): the reference tf.reduce_prod overflows
   to -inf and +inf; tf.reduce_max propagates NaN, and r - (-inf) is +inf
   or NaN for every r, so max(result - reference) > 0 or NaN whatever the
   result; the grouped row takes abs, so any inf in the reference fails it.
3. Prescale/postscale in graph mode (allreduce_cpu_prescale/postscale,
   reducescatter_cpu_prescale, grouped_reducescatter_cpu_prescale):
   TensorFlow's graph optimizer (grappler's constant folding) rewrites the
   reference (f*x)*3 into x*(3f), which rounds differently; eagerly (and
   with constant folding off) the reference is (f*x)*3, which is what an
   allreduce that scales each rank's contribution and then sums computes -
   hvd, eagerly and in graphs (Horovod's ScaleBuffer too)."""
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

import hvd.tensorflow as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N == 3, 'run at np 3: the references only break there'


def drawn(shape, dtype):
    """The tensor Horovod's tests draw eagerly (random_uniform resets the seed)."""
    tf.random.set_seed(1234)
    return tf.cast(tf.random.uniform(shape, -100, 100), dtype)


# 1. Average: the two rows' references on the same x.
for dtype in (tf.float16, tf.float32):
    x = drawn([17], dtype)
    twice_rounded = tf.cast((x * N) / N, dtype).numpy()  # allreduce_average_cpu's reference
    avg = hvd.allreduce(x, op=hvd.Average).numpy()
    grouped = [t.numpy() for t in hvd.grouped_allreduce([x, x], op=hvd.Average)]
    assert np.array_equal(avg, twice_rounded), (dtype, avg, twice_rounded)
    for g in grouped:
        assert np.array_equal(g, avg), (dtype, 'grouped and single Average differ')
    differ = np.flatnonzero(twice_rounded != x.numpy())
    assert differ.size > 0, (dtype, 'the two references agree: the grouped row should pass')
    # Horovod's CPU arithmetic: the dtype's sum of three x, times float32(1/3) in float32.
    npdt = x.numpy().dtype
    s = (x.numpy() + x.numpy()).astype(npdt) + x.numpy()
    horovod = (s.astype(np.float32) * np.float32(1 / 3)).astype(npdt)
    if dtype == tf.float32:
        assert np.any(horovod != twice_rounded) and np.any(horovod != x.numpy()), dtype
    if R == 0:
        i = differ[0]
        print('1. %s: x[%d] = %r, (x*3)/3 = %r (%d of 17 differ); hvd Average = %r; Horovod\'s = %r'
              % (dtype.name, i, x.numpy()[i], twice_rounded[i], differ.size, avg[i], horovod[i]), flush=True)

# 2. Product of float16: no result passes.
assert np.isnan(tf.reduce_max(tf.constant([1.0, np.nan, -1.0], tf.float16)).numpy())
full = drawn([N, 17], tf.float16)
ref = tf.math.reduce_prod(full, axis=0)
assert np.any(ref.numpy() == -np.inf) and np.any(np.isinf(ref.numpy())), ref
result = hvd.allreduce(full[R], op=hvd.Product)
exact = tf.cast(tf.math.reduce_prod(tf.cast(full, tf.float64), axis=0), tf.float16)
for r in (result, ref, exact, tf.fill([17], tf.constant(np.inf, tf.float16)),
          tf.fill([17], tf.constant(-np.inf, tf.float16)), tf.zeros([17], tf.float16)):
    single = tf.reduce_max(r - ref).numpy()  # allreduce_product_cpu's max_difference
    grouped = tf.reduce_max(tf.abs(r - ref)).numpy()  # grouped_allreduce_product_cpu's
    assert not single <= 0 and not grouped <= 0, (single, grouped)
if R == 0:
    print('2. float16 product of 3 x 17 values: the reference has %d -inf and %d +inf; '
          'max(result - reference) for hvd\'s result: %r' % (np.sum(ref.numpy() == -np.inf),
                                                            np.sum(ref.numpy() == np.inf),
                                                            tf.reduce_max(result - ref).numpy()), flush=True)

# 3. Prescale: the reference in a graph with and without constant folding,
# and hvd's prescaled sum eagerly and in a graph.
np.random.seed(1234)
factor = np.random.uniform()  # allreduce_cpu_prescale's factor
x = drawn([17, 17], tf.float32).numpy()
f32 = np.float32(factor)
scaled_then_summed = (f32 * x).astype(np.float32) * np.float32(N)  # (f*x)*3, each product rounded
rewritten = x * (f32 * np.float32(N))  # x*(3f)
assert np.any(scaled_then_summed != rewritten)


def in_graph(build, folding=True):
    g = tf.Graph()
    with g.as_default():
        ph = tf.compat.v1.placeholder(tf.float32, x.shape)
        out = build(ph)
        config = tf.compat.v1.ConfigProto()
        if not folding:
            config.graph_options.rewrite_options.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
        with tf.compat.v1.Session(graph=g, config=config) as sess:
            return sess.run(out, {ph: x})


def reference(t):  # allreduce_cpu_prescale's expected value for float32
    return tf.cast(tf.convert_to_tensor(factor, tf.float32) * t, tf.float32) * N


assert np.array_equal(reference(tf.constant(x)).numpy(), scaled_then_summed)  # eagerly
assert np.array_equal(in_graph(reference), rewritten)  # grappler: x*(3f)
assert np.array_equal(in_graph(reference, folding=False), scaled_then_summed)
eager = hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=factor).numpy()
graph = in_graph(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=factor, name='np3.prescale'))
assert np.array_equal(eager, scaled_then_summed) and np.array_equal(graph, scaled_then_summed)


def post_reference(t):  # allreduce_cpu_postscale's expected value for float32
    return tf.cast(tf.convert_to_tensor(factor, tf.float32) * (t * N), tf.float32)


summed_then_scaled = f32 * (x * np.float32(N))  # f*(3x), each product rounded
assert np.array_equal(post_reference(tf.constant(x)).numpy(), summed_then_scaled)
assert np.array_equal(in_graph(post_reference), rewritten)
assert np.array_equal(in_graph(post_reference, folding=False), summed_then_scaled)
eager = hvd.allreduce(tf.constant(x), op=hvd.Sum, postscale_factor=factor).numpy()
graph = in_graph(lambda t: hvd.allreduce(t, op=hvd.Sum, postscale_factor=factor, name='np3.postscale'))
assert np.array_equal(eager, summed_then_scaled) and np.array_equal(graph, summed_then_scaled)
if R == 0:
    print('3. prescale, float32 17x17: the graph reference x*(3f) differs from (f*x)*3 at %d of 289; '
          'hvd\'s sum is (f*x)*3 eagerly and in a graph; postscale: x*(3f) against f*(3x) at %d'
          % (np.sum(scaled_then_summed != rewritten), np.sum(summed_then_scaled != rewritten)), flush=True)

hvd.shutdown()
print('hvd.tensorflow np3 references ok')
