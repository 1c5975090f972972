import numpy as np
import mindspore as ms
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)
np.random.seed(0)

class Gate(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3)
        self.relu = nn.ReLU()
    def construct(self, x):
        h = self.fc(x)
        if h.mean() > 0:
            h = self.relu(h) * 2
        else:
            h = h - 1
        return h

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 3)
        self.sqrt = ops.Sqrt()
        self.gate = Gate()
        self.head = nn.Dense(3, 2)
    def construct(self, x):
        x = self.fc1(x)
        if x.sum() > 0:
            x = x * 0.5
        else:
            x = x + 0.1
        x = self.sqrt(x)
        i = ms.Tensor(0, ms.int32)
        while i < 2:
            x = x + self.gate(x)
            i = i + 1
        for _ in range(2):
            x = self.gate(x) * 0.5
        return self.head(x)

net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
model = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
model.set_train()
for step in range(2):
    x = ms.Tensor(np.random.randn(2, 4).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 2, (2,)).astype(np.int32))
    print(step, model(x, y))
