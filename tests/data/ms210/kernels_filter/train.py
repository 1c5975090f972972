import numpy as np
import mindspore as ms
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)
np.random.seed(0)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(4 * 4 * 4, 3)
    def construct(self, x):
        x = self.conv1(x)
        x = self.relu(x)
        x = self.flatten(x)
        x = self.fc(x)
        return x

net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
model = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
model.set_train()
for step in range(2):
    x = ms.Tensor(np.random.randn(2, 3, 4, 4).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 3, (2,)).astype(np.int32))
    print(step, model(x, y))
