"""hvd.tensorflow.optimizer: the Keras DistributedOptimizer that
hvd.tensorflow.DistributedOptimizer and hvd.tensorflow.keras.DistributedOptimizer
return, with Horovod's gradient aggregation (backward_passes_per_step > 1)
and worker-local variables (register_local_var, PartialDistributedOptimizer).

Where the gradients are reduced, as Horovod's: in _compute_gradients (what
Keras 2's legacy optimizers' minimize and model.fit call) and get_gradients;
apply_gradients reduces only gradients that did not come through those (a
custom loop's tape.gradient: hvd's addition, Horovod leaves them alone in
TF 2.4+).

Aggregation: every call sums the gradients into per-position accumulators
(tf.Variables) and counts it (_agg_helper.counter); on the Nth the sums are
reduced (divided by N when average_aggregated_gradients), the accumulators
and the counter reset, and apply_gradients applies them; in between
apply_gradients only advances optimizer.iterations. An inf or nan summed in
one cycle is cleared with the accumulators and does not reach the next.

Local variables: their gradients are not reduced; with
scale_local_gradients (the default) they are divided by the process set's
size, as Horovod divides them."""
import tensorflow as tf

from hvd.tensorflow.collectives import reduce_gradients

DISTRIBUTED = '_hvd_distributed'  # the attribute that marks a distributed Keras optimizer class


def local_layer_weights(local_layers, what):
    """The trainable weights of local_layers (None, a Keras layer or a list
    of them), for what's register_local_var / register_local_source."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    weights = []
    for layer in local_layers:
        if not isinstance(layer, tf.keras.layers.Layer):
            raise ValueError('%s: local_layers must hold Keras layers, not %s' % (what, type(layer).__name__))
        weights.extend(layer.trainable_weights)
    return weights


def _divide(grad, n):
    """grad / n, for a tf.IndexedSlices too (an embedding's gradient)."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / n, grad.indices, dense_shape=grad.dense_shape)
    return grad / n


class Reducer:
    """Reduces gradients matched to their variables (or tape sources),
    leaving local ones out (the optimizers here and DistributedGradientTape)."""

    def __init__(self, prefix, reduction, local_scale):
        self.prefix = prefix
        self.reduction = reduction  # reduce_gradients' keyword arguments
        self.local_scale = local_scale
        self.local = set()  # var.ref() of worker-local variables

    def __call__(self, grads, variables):
        grads = list(grads)
        idx = [i for i, v in enumerate(variables) if v is None or v.ref() not in self.local]
        reduced = reduce_gradients([grads[i] for i in idx], [variables[i] for i in idx],
                                   prefix=self.prefix, **self.reduction) if idx else []
        out = list(grads)
        for i, g in zip(idx, reduced):
            out[i] = g
        if self.local_scale > 1:
            for i, v in enumerate(variables):
                if v is not None and v.ref() in self.local and out[i] is not None:
                    out[i] = _divide(out[i], self.local_scale)
        return out


class LocalGradientAggregationHelper:
    """Sums gradients over backward_passes_per_step calls and reduces the
    sums on the last (see the module's docstring)."""

    def __init__(self, backward_passes_per_step, reducer, sparse_as_dense, average_aggregated_gradients):
        if backward_passes_per_step <= 0:
            raise ValueError('backward_passes_per_step must be > 0, not %r' % backward_passes_per_step)
        self.backward_passes_per_step = backward_passes_per_step
        self.reducer = reducer
        self.sparse_as_dense = sparse_as_dense
        self.average_aggregated_gradients = average_aggregated_gradients
        self.counter = tf.Variable(0, trainable=False, dtype=tf.int32, name='hvd_aggregation_counter')
        self.sums = {}  # gradient position -> accumulator

    def compute_gradients(self, grads, variables):
        summed = []
        for i, g in enumerate(grads):
            if isinstance(g, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError('IndexedSlices gradients are not supported with backward_passes_per_step > 1 '
                                     'unless sparse_as_dense=True')
                g = tf.convert_to_tensor(g)
            if g is None:
                summed.append(None)
                continue
            if i not in self.sums:
                self.sums[i] = tf.Variable(tf.zeros_like(g), trainable=False, dtype=g.dtype)
            self.sums[i].assign_add(g)
            summed.append(self.sums[i].read_value())
        self.counter.assign_add(1)

        def reduce_and_clear():
            out = self.reducer(summed, variables)
            if self.average_aggregated_gradients:
                out = [None if g is None else g / self.backward_passes_per_step for g in out]
            self.counter.assign(0)
            for acc in self.sums.values():
                acc.assign(tf.zeros_like(acc))
            return out

        return tf.cond(tf.equal(self.counter, self.backward_passes_per_step), reduce_and_clear, lambda: summed)

    def apply_gradients(self, apply, optimizer):
        """Runs apply() when a cycle has just been reduced (the counter is
        back at 0), else only advances optimizer.iterations."""
        def applied():
            apply()
            return tf.constant(True)

        def skipped():
            optimizer.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(tf.equal(self.counter, 0), applied, skipped)


def keras_optimizer(optimizer, prefix, reduction, backward_passes_per_step=1, average_aggregated_gradients=False,
                    scale_local_gradients=True):
    """A copy of the Keras optimizer (same class name and config) that
    reduces its gradients over reduction['process_set'] (reduction:
    reduce_gradients' keyword arguments), aggregating backward_passes_per_step
    passes locally first."""
    if getattr(optimizer, DISTRIBUTED, False):
        raise ValueError('hvd.tensorflow.keras.DistributedOptimizer: the optimizer is already distributed')
    base = optimizer.__class__
    local_scale = reduction['process_set'].size() if scale_local_gradients else 1

    def setup(self):
        """The reduction state of an instance (from_config makes instances too)."""
        if '_hvd_reducer' not in self.__dict__:
            reducer = Reducer(prefix, reduction, local_scale)
            self._hvd_reducer = reducer
            self._hvd_reduced = False
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step, reducer, reduction['sparse_as_dense'],
                average_aggregated_gradients) if backward_passes_per_step > 1 else None
        return self._hvd_reducer

    def allreduce(self, grads, variables):
        reducer = setup(self)
        if self._agg_helper is not None:
            return self._agg_helper.compute_gradients(tuple(grads), tuple(variables))
        return reducer(grads, list(variables))

    def register_local_var(self, var):
        """Marks a variable worker-local: its gradient is not reduced (but
        divided by the set's size unless scale_local_gradients=False)."""
        setup(self).local.add(var.ref())

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        tape = tf.GradientTape() if tape is None else tape
        pairs = base._compute_gradients(self, loss, var_list, grad_loss, tape=tape)
        grads, variables = zip(*pairs) if pairs else ((), ())
        out = allreduce(self, grads, variables)
        self._hvd_reduced = True  # the apply_gradients that follows gets reduced gradients
        return list(zip(out, variables))

    def get_gradients(self, loss, params):
        grads = base.get_gradients(self, loss, params)
        self._hvd_reduced = True
        return allreduce(self, grads, params)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        setup(self)
        pairs = list(grads_and_vars)
        if not self._hvd_reduced:
            variables = [v for _, v in pairs]
            pairs = list(zip(allreduce(self, [g for g, _ in pairs], variables), variables))
        self._hvd_reduced = False
        if self._agg_helper is None:
            return base.apply_gradients(self, pairs, *args, **kwargs)
        return self._agg_helper.apply_gradients(lambda: base.apply_gradients(self, pairs, *args, **kwargs), self)

    methods = {'apply_gradients': apply_gradients, 'register_local_var': register_local_var,
               DISTRIBUTED: True, '__module__': base.__module__}
    if hasattr(base, '_compute_gradients'):  # Keras 2's legacy optimizers (minimize, model.fit)
        methods['_compute_gradients'] = _compute_gradients
    if hasattr(base, 'get_gradients'):
        methods['get_gradients'] = get_gradients
    cls = type(base.__name__, (base,), methods)
    opt = cls.from_config(optimizer.get_config())
    setup(opt)
    return opt
