class Parameter:
    def __init__(self, data, grad):
        self._d, self._g, self.grad_req = data, grad, 'write'

    def list_data(self):
        return [self._d]

    def list_grad(self):
        return [self._g]


class Trainer:
    def __init__(self, params, optimizer, optimizer_params=None, kvstore=None):
        self._params = list(params.values()) if hasattr(params, 'values') else list(params)
        self._optimizer = optimizer
        self._scale = 1.0

    def step(self, batch_size):
        self._allreduce_grads()
        for p in self._params:
            d, g = p.list_data()[0], p.list_grad()[0]
            d[:] = d.asnumpy() - self._scale / batch_size * g.asnumpy()
