import numpy as np
import mindspore as ms
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)
np.random.seed(0)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.div = ops.Div()
        self.head = nn.Dense(3, 2)
    def construct(self, x, scale):
        x = self.fc(x)
        x = self.div(x, scale)
        x = self.head(x)
        return x

class WithLoss(nn.Cell):
    def __init__(self, net, loss_fn):
        super().__init__(auto_prefix=False)
        self._backbone = net
        self._loss_fn = loss_fn
    def construct(self, x, scale, label):
        return self._loss_fn(self._backbone(x, scale), label)

net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
model = nn.TrainOneStepCell(WithLoss(net, loss_fn), opt)
model.set_train()
for step in range(3):
    x = ms.Tensor(np.random.randn(2, 4).astype(np.float32))
    scale = np.ones((2, 3), np.float32)
    if step == 1:
        scale[1] = 0.0  # the second sample's scale is zero at step 1: x / 0 is +-Inf
    y = ms.Tensor(np.random.randint(0, 2, (2,)).astype(np.int32))
    print(step, model(x, ms.Tensor(scale), y))
