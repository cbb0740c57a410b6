# cuda-build (fixed): InnerReduction vectorised the element-wise intermediates of a whole-tensor layer norm
# kernel through registers before making them local, which left them as global buffers inside the
# kernel ("Cannot allocate global memory when targeting CUDA"); scopes are now set first.
# babytriton fuzz program, seed 2828008618
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((4,), 'float32'), x1: bt.Tensor((1,), 'float16'), x2: bt.Tensor((1,), 'float16')):
    v0a, v0b = False < x0, (layer_norm(x0, ones((4,), 'float32'), zeros((4,), 'float32'), -1)) + (cumsum(x2, axis=-1))
    v1 = (torch.hypot(v0a.astype('float64'), x1 + v0b)) - (ceil(bt.argmin(v0a, dim=-1)))
    return v1, v0a


ARGS = [('tensor', (4,), 'float32'), ('tensor', (1,), 'float16'), ('tensor', (1,), 'float16', {'view': 'step'})]
SEED = 2828008618
TOLERANCES = [(0.0001878738413586766, 0.0), (0.0, 0.0)]
CUDA = True
