"""KernelBench-like evaluation tasks for the synth tests, embedded (CI has no ../shared/kernelbench):
three written like the benchmark's, and renamed / resized copies of them written differently."""

CONV_RELU_BIAS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Conv2d, ReLU, then a bias added per channel."""
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        x = x + self.bias
        return x

batch_size = 128
in_channels = 3
out_channels = 16
height, width = 32, 32
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''

GEMM_SCALE_SOFTMAX = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Linear, scaling, softmax over features, then a sum."""
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        x = self.gemm(x)
        x = x * self.scale
        x = torch.softmax(x, dim=1)
        return torch.sum(x * x, dim=1)

batch_size = 128
in_features = 1024
out_features = 512
scale = 2.0

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, scale]
'''

LAYERNORM_GELU = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """LayerNorm over the last dimension, then GELU and tanh."""
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return torch.tanh(F.gelu(self.ln(x)))

batch_size = 16
features = 64
dim = 256

def get_inputs():
    return [torch.randn(batch_size, features, dim)]

def get_init_inputs():
    return [(dim,)]
'''

EVAL_TASKS = {"level2/1_Conv2D_ReLU_BiasAdd.py": CONV_RELU_BIAS,
              "level2/9_Gemm_Scale_Softmax_Sum.py": GEMM_SCALE_SOFTMAX,
              "level1/40_LayerNorm_GELU_Tanh.py": LAYERNORM_GELU}

# The same computations under other names, other sizes and other spelling.
RENAMED_RESIZED = {
    "level2/1_Conv2D_ReLU_BiasAdd.py": '''
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C_IN, C_OUT, SIDE = 8, 4, 32, 24

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Conv2d(C_IN, C_OUT, 5)
        self.offset = nn.Parameter(torch.randn(C_OUT, 1, 1))

    def forward(self, image):
        return F.relu(self.features(image)) + self.offset

def get_inputs():
    return [torch.randn(N, C_IN, SIDE, SIDE)]

def get_init_inputs():
    return []
''',
    "level2/9_Gemm_Scale_Softmax_Sum.py": '''
import torch
import torch.nn as nn

ROWS, IN, OUT = 32, 96, 48

class Model(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.proj = nn.Linear(IN, OUT)
        self.factor = factor

    def forward(self, inputs):
        probs = (self.proj(inputs) * self.factor).softmax(dim=-1)
        return (probs * probs).sum(dim=-1)

def get_inputs():
    return [torch.randn(ROWS, IN)]

def get_init_inputs():
    return [0.5]
''',
    "level1/40_LayerNorm_GELU_Tanh.py": LAYERNORM_GELU.replace("batch_size = 16", "batch_size = 3")
                                                   .replace("dim = 256", "dim = 48").replace("self.ln", "self.norm"),
}

# A genuinely different computation: attention-like scores with an RMS norm, nothing like the three above.
DIFFERENT = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(64))

    def forward(self, q, k):
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores = torch.cumsum(scores, dim=-1)
        normed = scores * torch.rsqrt(scores.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return torch.amax(normed, dim=-1)

def get_inputs():
    return [torch.randn(4, 64, 32), torch.randn(4, 64, 32)]

def get_init_inputs():
    return []
'''


def write_tasks(folder, tasks: dict) -> None:
    for name, source in tasks.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
