# compile-error: torch runs the program; babytriton refuses it
# reshape() rejected its arguments: Reshape expects the new shape to be convertible from the old shape. However, the old shape is (3, 0), with product 0, while the new shape is (3), with product 3 (called as reshape(x=<float32 tensor (3, 0)>, shape=[0]); expected reshape(x, shape))
# Fixed: a 0 in a reshape is a size 0 as in torch (Relax copies the input's size there); -1 and the element count follow torch's rules
# babytriton fuzz program, seed 7006021078
import torch
import babytriton as bt


@bt.jit(cache=False)
def f(x0: bt.Tensor((3, 0), 'int32'), k: bt.constexpr):
    v0 = bt.cos((not (x0 >= (-1))).astype('float32'))
    v1a, v1b = bt.tanh((subtract(x0, k)).astype('float32')), x0 ** 1
    v2a, v2b = leakyrelu((permute_dims(v1a, (0, 1))).reshape(0), 0.25), x0 | (v1b + k)
    v3 = (erf(v1b.astype('float32'))) / (abs(k) + 1)
    v4 = squeeze(v0)
    return v4, v3, v0


ARGS = [('tensor', (3, 0), 'int32'), ('constexpr', 3)]
SEED = 7006021078
TOLERANCES = [(9.5367531640625e-07, 0.0), (4.529954002929688e-06, 0.0), (9.5367531640625e-07, 0.0)]
