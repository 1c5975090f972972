import numpy as np
import mindspore as ms
from mindspore import nn, ops
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)
np.random.seed(0)

class InnermostProjectionBlockWithAnExtremelyLongDescriptiveClassName(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense_projection_layer_with_a_very_very_long_attribute_name = nn.Dense(4, 3)
    def construct(self, x):
        return self.dense_projection_layer_with_a_very_very_long_attribute_name(x)

class IntermediateEncoderStageContainerWithAVeryVerboseClassName(nn.Cell):
    def __init__(self):
        super().__init__()
        self.innermost_projection_block_attribute_with_a_rather_long_descriptive_name = InnermostProjectionBlockWithAnExtremelyLongDescriptiveClassName()
    def construct(self, x):
        return self.innermost_projection_block_attribute_with_a_rather_long_descriptive_name(x)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.intermediate_encoder_stage_with_a_long_attribute_name = IntermediateEncoderStageContainerWithAVeryVerboseClassName()
        self.relu = nn.ReLU()
        self.fc = nn.Dense(3, 2)
    def construct(self, x):
        x = self.intermediate_encoder_stage_with_a_long_attribute_name(x)
        x = self.relu(x)
        x = self.fc(x)
        return x

net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
model = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
model.set_train()
for step in range(2):
    x = ms.Tensor(np.random.randn(2, 4).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 2, (2,)).astype(np.int32))
    print(step, model(x, y))
