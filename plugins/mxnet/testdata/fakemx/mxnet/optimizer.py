class Optimizer:
    def __init__(self, rescale_grad=1.0):
        self.rescale_grad = rescale_grad


class SGD(Optimizer):
    def __init__(self, learning_rate=0.1, rescale_grad=1.0):
        super().__init__(rescale_grad)
        self.lr = learning_rate

    def create_state_multi_precision(self, index, weight):
        return None

    def update(self, index, weight, grad, state):
        weight[:] = weight.asnumpy() - self.lr * self.rescale_grad * grad.asnumpy()
