import numpy as np
import mindspore as ms
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)
np.random.seed(0)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 3)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(3, 2)
    def construct(self, x):
        x = self.fc1(x)
        x = self.relu(x)
        x = self.fc2(x)
        return x

net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
model = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
model.set_train()
for step in range(5):
    x = ms.Tensor(np.random.randn(2, 4).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 2, (2,)).astype(np.int32))
    print(step, model(x, y))
